/**
 * Throughput with agents: the MiroVerse config (data/configs/miroverse.yaml: an mcp-xml main
 * agent and its browsing sub-agent over the corpus server) against the sim, which plays both
 * roles, at concurrency C = 256. The sim answers every request after a fixed latency L, so with C
 * model requests in flight the endpoint's ceiling is C / L requests per second; a family takes R
 * model requests (the main agent's and every sub-agent session's, counted by the sim), so the
 * ideal is C / (R·L) families per second, and measured / ideal is the share of the endpoint's
 * capacity the run used: the same ratio counted in requests or in families.
 *
 * - The sim runs in a process of its own, as in the throughput bench: its CPU is not trajforge's.
 * - L is set so that the ideal request rate is the same modest figure on any machine
 *   (`TRAJFORGE_BENCH_AGENT_RATE` requests/s): the bench measures how well trajforge keeps C
 *   requests in flight while families wait on tools and sub-agents, not how fast the machine is.
 * - Wall time is from `generate()` called to returned: start-up and the last families' tail
 *   included.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../pipeline/core/config.js';
import { generate } from '../pipeline/generate/run.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { startSimProcess, writeQuestions } from './harness.js';

const C = Number(process.env.TRAJFORGE_BENCH_AGENT_C ?? '256');
/** Model requests per second the ideal allows: C / L. */
const RATE = Number(process.env.TRAJFORGE_BENCH_AGENT_RATE ?? '200');
const FAMILIES = Number(process.env.TRAJFORGE_BENCH_AGENT_FAMILIES ?? '4096');
export const AGENTS_CONFIG = join(PACKAGE_ROOT, 'data/configs/miroverse.yaml');

export interface AgentsMeasure {
  readonly concurrency: number;
  readonly latencyMs: number;
  readonly families: number;
  readonly accepted: number;
  readonly subSessions: number;
  /** Model requests the sim answered during the run. */
  readonly requests: number;
  readonly seconds: number;
  /** Requests per family (R). */
  readonly perFamily: number;
  readonly measuredRequests: number;
  readonly idealRequests: number;
  readonly cpuSeconds: number;
  readonly simCpuSeconds: number;
}

async function simRequests(url: string): Promise<number> {
  const res = await fetch(url.replace(/\/v1$/, '/sim/stats'));
  const stats = (await res.json()) as { responsesByStatus: Record<string, number> };
  return stats.responsesByStatus['200'] ?? 0;
}

export async function runAgentsBench(): Promise<AgentsMeasure> {
  const latencyMs = Math.round((C / RATE) * 1000);
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-agents-'));
  process.stderr.write(`  MiroVerse config, C=${C}, L=${latencyMs} ms, ${FAMILIES} families…\n`);
  const sim = await startSimProcess(latencyMs);
  try {
    mkdirSync(dir, { recursive: true });
    const questions = await writeQuestions(join(dir, 'questions.jsonl'), FAMILIES);
    const config = loadConfig(AGENTS_CONFIG, { baseUrl: sim.url, questions, limit: FAMILIES, concurrency: C, out: join(dir, 'run'), cacheDir: join(dir, 'cache') });
    // The sim answers within L; the endpoint's own timeout must not be what ends a request.
    config.endpoint.timeout_ms = latencyMs * 10 + 60_000;
    const requests0 = await simRequests(sim.url);
    const simCpu0 = sim.cpuSeconds();
    const cpu0 = process.cpuUsage();
    const started = performance.now();
    const summary = await generate({ config });
    const seconds = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const requests = (await simRequests(sim.url)) - requests0;
    const families = summary.invocation.accepted + summary.invocation.failed;
    return {
      concurrency: C,
      latencyMs,
      families,
      accepted: summary.invocation.accepted,
      subSessions: summary.invocation.subAgents.accepted + summary.invocation.subAgents.failed,
      requests,
      seconds,
      perFamily: requests / Math.max(1, families),
      measuredRequests: requests / seconds,
      idealRequests: C / (latencyMs / 1000),
      cpuSeconds: (cpu.user + cpu.system) / 1e6,
      simCpuSeconds: sim.cpuSeconds() - simCpu0,
    };
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export function agentsMarkdown(m: AgentsMeasure): string {
  const ratio = m.measuredRequests / m.idealRequests;
  const familyRate = m.families / m.seconds;
  const idealFamilies = m.idealRequests / m.perFamily;
  return [
    '## Agents: the MiroVerse config against the sim',
    '',
    `\`data/configs/miroverse.yaml\` (an mcp-xml main agent that hands subtasks to a browsing sub-agent, which searches and reads the bundled corpus) against the sim in a process of its own, playing both roles with a fixed latency L per request; the corpus server; ${m.families} families (questions) at concurrency C = ${m.concurrency} model requests in flight (${4 * m.concurrency} families admitted, the default of \`samples_in_flight\`). The ideal counts every model request of a family, the main agent's and its sub-agents' (summary prompts included): C / L requests per second, or C / (R·L) families per second with R the requests per family. L is set so that C / L = ${RATE} requests/s: ${cpus().length} shared cores run the sim, the corpus server and trajforge, so the ideal is kept well under what the machine can compute. Wall time from \`generate()\` called to returned, start-up and the last families' tail included. \`TRAJFORGE_BENCH_AGENT_FAMILIES\`, \`TRAJFORGE_BENCH_AGENT_RATE\` and \`TRAJFORGE_BENCH_AGENT_C\` change the workload.`,
    '',
    '```sh',
    'npm run bench -- --write agents',
    '```',
    '',
    '| C | L | families | sessions (main + sub-agent) | model requests (R per family) | wall time | measured | ideal | measured / ideal | CPU: trajforge · sim (% of one core) |',
    '|---|---|---|---|---|---|---|---|---|---|',
    `| ${m.concurrency} | ${m.latencyMs} ms | ${m.families} (${m.accepted} accepted) | ${m.families} + ${m.subSessions} | ${m.requests} (${m.perFamily.toFixed(2)}) | ${m.seconds.toFixed(1)} s | ${m.measuredRequests.toFixed(1)} req/s · ${familyRate.toFixed(2)} families/s | ${m.idealRequests.toFixed(1)} req/s · ${idealFamilies.toFixed(2)} families/s | **${ratio.toFixed(3)}** | ${((m.cpuSeconds / m.seconds) * 100).toFixed(0)}% · ${((m.simCpuSeconds / m.seconds) * 100).toFixed(0)}% |`,
    '',
    `Target: measured/ideal ≥ 0.95 at C = 256 — ${ratio >= 0.95 ? 'met' : 'not met'} (${ratio.toFixed(3)}).`,
    '',
  ].join('\n');
}

export async function benchAgents(): Promise<string> {
  return agentsMarkdown(await runAgentsBench());
}
