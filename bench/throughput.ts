/**
 * How close a run gets to the endpoint's limit. The sim answers every request after a fixed
 * latency L; a sample takes T model turns (searches, then the answer), so with C samples in
 * flight the ideal is C / (T·L) samples per second. Reports measured / ideal at several C,
 * the same workload run the way the Python PubMed generator runs it (5 samples at a time),
 * and trajforge's own CPU per turn.
 *
 * - The sim runs in a process of its own (a real endpoint is another machine): its CPU is not
 *   trajforge's, and its work does not sit on trajforge's event loop.
 * - L is chosen per C so that the ideal rate, and so the CPU the sim, the corpus server and
 *   trajforge need, is the same at every C, and low enough that the machine is not what
 *   limits the run.
 * - The sample count is a multiple of every C, so every wave of C samples is full and the
 *   ideal wall time is exactly samples·T·L / C; the measured time includes start-up (tool
 *   servers, counting the questions) and the last wave's tail.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus } from 'node:os';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { percentile, startSimProcess, SEARCHES, TURNS } from './harness.js';
import { measureRun, type RunMeasure } from './measure.js';

/** Samples per second the ideal allows at every C. */
const IDEAL_RATE = Number(process.env.TRAJFORGE_BENCH_RATE ?? '20');
const SAMPLES = Number(process.env.TRAJFORGE_BENCH_SAMPLES ?? '5120');
const PY_SAMPLES = Number(process.env.TRAJFORGE_BENCH_PY_SAMPLES ?? '50');
const CONCURRENCIES = [64, 256, 1024] as const;
/** CPU per turn is read over windows of this many seconds: long enough to hold several waves of turns. */
export const CPU_WINDOW_S = 5;

export async function runThroughput(): Promise<{ rows: RunMeasure[]; py: RunMeasure }> {
  const rows: RunMeasure[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-tp-'));
  try {
    const at = async (c: number, latency: number, samples: number): Promise<RunMeasure> => {
      process.stderr.write(`  C=${c}, L=${latency} ms, ${samples} samples…\n`);
      const sim = await startSimProcess(latency);
      try {
        return await measureRun({ sim, dir: join(dir, `c${c}`), concurrency: c, latencyMs: latency, samples, cpuWindowS: CPU_WINDOW_S });
      } finally {
        await sim.close();
      }
    };
    for (const c of CONCURRENCIES) rows.push(await at(c, Math.round((c / (TURNS * IDEAL_RATE)) * 1000), SAMPLES));
    // The Python generator's way: 5 samples at a time, the same per-request latency as C=256.
    const py = await at(5, rows[1]!.latencyMs, PY_SAMPLES);
    return { rows, py };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const f3 = (n: number): string => n.toFixed(3);

export function throughputMarkdown({ rows, py }: { rows: readonly RunMeasure[]; py: RunMeasure }): string {
  const ratio = (r: RunMeasure): number => r.rate / r.ideal;
  const fmt = (r: RunMeasure): string =>
    `| ${r.concurrency} | ${r.latencyMs} ms | ${r.samples} | ${r.seconds.toFixed(1)} s | ${r.rate.toFixed(2)}/s | ${r.ideal.toFixed(2)}/s | **${f3(ratio(r))}** | ${((r.cpuSeconds / r.seconds) * 100).toFixed(0)}% · ${((r.simCpuSeconds / r.seconds) * 100).toFixed(0)}% · ${((r.toolCpuSeconds / r.seconds) * 100).toFixed(0)}% |`;
  const r256 = ratio(rows[1]!);
  const r1024 = ratio(rows[2]!);
  return [
    '## Throughput: measured against ideal',
    '',
    `Sim with a fixed latency L per request, in a process of its own; the corpus server; ${TURNS} model turns per sample (${SEARCHES} searches, then the answer). Ideal at concurrency C: C / (${TURNS}·L). L is set per C so that the ideal is ${IDEAL_RATE} samples/s everywhere: the sim, the corpus server and trajforge share ${cpus().length} cores with each other (and with whatever else runs), so the ideal is kept well under what the machine can compute. ${SAMPLES} samples per run (a multiple of every C, so every wave is full); wall time from \`generate()\` called to returned, start-up included. \`TRAJFORGE_BENCH_SAMPLES\`, \`TRAJFORGE_BENCH_RATE\` and \`TRAJFORGE_BENCH_PY_SAMPLES\` change the workload.`,
    '',
    '| C | L | samples | wall time | measured | ideal | measured / ideal | CPU: trajforge · sim · corpus server (% of one core) |',
    '|---|---|---|---|---|---|---|---|',
    ...rows.map(fmt),
    fmt(py),
    '',
    `The last row runs the workload as the Python PubMed generator does (5 samples at a time, L as at C=256): at the same latency trajforge at C=256 is **${(rows[1]!.rate / py.rate).toFixed(0)}×** its throughput (${rows[1]!.rate.toFixed(2)} vs ${py.rate.toFixed(2)} samples/s).`,
    '',
    `Targets: measured/ideal ≥ 0.95 at C=256 — ${r256 >= 0.95 ? 'met' : 'not met'} (${f3(r256)}); ≥ 0.9 at C=1024 — ${r1024 >= 0.9 ? 'met' : 'not met'} (${f3(r1024)}).`,
    '',
    '### Where a sample\'s time goes',
    '',
    `Means over each run's trajectories (their own \`timing\`): a sample's wall time against its ideal ${TURNS}·L; a model call's time beyond L (the sim's queue and the HTTP round trip); a tool call's time (the MCP round trip and the corpus server's queue); and what is left, trajforge's own work between calls. With a fixed L every sample of a wave sends its request at the same moment, so the sim and the single corpus server each receive C requests at once and the last of them waits for the other C−1 to be served: on a shared 2-core machine that queue, not trajforge, is most of the gap to the ideal.`,
    '',
    '| C | per sample | ideal | model call beyond L | tool call | trajforge between calls, per sample |',
    '|---|---|---|---|---|---|',
    ...[...rows, py].map(
      (r) =>
        `| ${r.concurrency} | ${r.timing.perSampleMs.toFixed(0)} ms | ${TURNS * r.latencyMs} ms | ${r.timing.llmBeyondLatencyMs.toFixed(1)} ms | ${r.timing.toolCallMs.toFixed(1)} ms | ${r.timing.ownMsPerSample.toFixed(1)} ms |`,
    ),
    '',
    '### trajforge CPU per turn, in these runs',
    '',
    `trajforge's own CPU (process.cpuUsage of the generating process: the rollout loop, the OpenAI SDK and its HTTP, the MCP client, repair, validation, the tool-result cache, the run store; not the sim, not the corpus server) divided by the model turns the sim answered. A turn is one model request and, for a search turn, its tool call. The distribution is in the \`cpu\` section.`,
    '',
    '| C | turns | trajforge CPU | per turn |',
    '|---|---|---|---|',
    ...rows.map((r) => `| ${r.concurrency} | ${r.turns} | ${r.cpuSeconds.toFixed(1)} s | ${((r.cpuSeconds * 1000) / Math.max(1, r.turns)).toFixed(2)} ms |`),
    '',
  ].join('\n');
}

export async function benchThroughput(): Promise<string> {
  return throughputMarkdown(await runThroughput());
}

/**
 * CPU per turn as a distribution: a run where turns flow without pause (L small against the
 * time a turn takes to process, so the waves of the fixed-latency runs above dissolve), read
 * over one-second windows.
 */
const CPU_SAMPLES = Number(process.env.TRAJFORGE_BENCH_CPU_SAMPLES ?? '3000');
const CPU_C = 64;
const CPU_L = 20;

export async function benchCpu(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-cpu-'));
  const sim = await startSimProcess(CPU_L);
  let r: RunMeasure;
  try {
    process.stderr.write(`  C=${CPU_C}, L=${CPU_L} ms, ${CPU_SAMPLES} samples…\n`);
    r = await measureRun({ sim, dir, concurrency: CPU_C, latencyMs: CPU_L, samples: CPU_SAMPLES, cpuWindowS: 1 });
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
  // The first and last seconds hold start-up and the tail.
  const w = r.cpuPerTurnWindows.slice(2, -2);
  const p50 = percentile(w, 50);
  const mean = (r.cpuSeconds * 1000) / Math.max(1, r.turns);
  return [
    '## trajforge CPU per turn',
    '',
    `trajforge's own CPU per model turn (process.cpuUsage of the generating process, which holds the rollout loop, the OpenAI SDK and its HTTP, the MCP client, repair, validation, the tool-result cache and the run store; the sim and the corpus server are other processes), with turns flowing without pause: C=${CPU_C}, L=${CPU_L} ms, ${r.samples} samples, ${r.turns} turns in ${r.seconds.toFixed(1)} s (${(r.turns / r.seconds).toFixed(0)} turns/s; trajforge used ${((r.cpuSeconds / r.seconds) * 100).toFixed(0)}% of a core, the sim ${((r.simCpuSeconds / r.seconds) * 100).toFixed(0)}%, the corpus server ${((r.toolCpuSeconds / r.seconds) * 100).toFixed(0)}%). Samples interleave on one event loop, so CPU is read per one-second window (CPU ÷ turns answered in it), first and last two seconds left out; \`TRAJFORGE_BENCH_CPU_SAMPLES\` changes the count.`,
    '',
    '| windows | mean per turn (whole run) | median window | p99 window |',
    '|---|---|---|---|',
    `| ${w.length} | ${mean.toFixed(2)} ms | ${p50.toFixed(2)} ms | ${percentile(w, 99).toFixed(2)} ms |`,
    '',
    `Target: ≤ 1 ms median — ${p50 <= 1 ? 'met' : 'not met'} (${p50.toFixed(2)} ms).`,
    '',
  ].join('\n');
}
