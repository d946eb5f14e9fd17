/**
 * Scale-out on one machine: one `trajforge generate` process, then four `--shard i/4`
 * processes side by side, all against one sim process; then `trajforge merge` of the four.
 *
 * Each process runs at the same concurrency C, so four of them keep 4·C requests in flight and
 * should reach four times the throughput of one, as long as neither the sim nor the CPU is
 * what limits them. L is long enough that the four together need a small share of the
 * machine (each has its own corpus server), so what is measured is the sharding itself.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, startSimProcess, TURNS, writeQuestions, writeRunConfig } from './harness.js';

const SHARDS = 4;
const CONCURRENCY = 32;
const LATENCY_MS = Number(process.env.TRAJFORGE_BENCH_SHARD_LATENCY_MS ?? '2000');
/** Samples per process: ten full waves of C. */
const PER_PROCESS = Number(process.env.TRAJFORGE_BENCH_SHARD_SAMPLES ?? String(CONCURRENCY * 10));

interface ProcessRun {
  readonly samples: number;
  readonly seconds: number;
}

function counts(dir: string): number {
  const m = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as { counts: { accepted: number; failed: number } };
  return m.counts.accepted + m.counts.failed;
}

function runCli(args: readonly string[]): Promise<{ code: number | null; stderr: string; stdout: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    let stdout = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-4000)));
    child.once('exit', (code) => resolve({ code, stderr, stdout }));
  });
}

async function generateProcess(config: string, out: string, shard?: string): Promise<ProcessRun> {
  const started = performance.now();
  const r = await runCli(['generate', '--config', config, '--out', out, ...(shard ? ['--shard', shard] : [])]);
  const seconds = (performance.now() - started) / 1000;
  if (r.code !== 0) throw new Error(`generate ${shard ?? ''} exited ${r.code}: ${r.stderr}`);
  return { samples: counts(out), seconds };
}

export interface ShardResult {
  readonly one: ProcessRun;
  readonly shards: readonly ProcessRun[];
  /** Wall time of the four together, first started to last finished. */
  readonly wall: number;
  readonly merged: number;
  readonly simPeakConcurrent: number;
}

export async function runShards(): Promise<ShardResult> {
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-shards-'));
  const sim = await startSimProcess(LATENCY_MS);
  try {
    const spec = { url: sim.url, concurrency: CONCURRENCY, cacheDir: join(dir, 'cache'), latencyMs: LATENCY_MS };
    // Separate question files, so the single process does not warm the shared tool cache for the shards.
    const oneConfig = writeRunConfig(join(dir, 'one.yaml'), { ...spec, questions: await writeQuestions(join(dir, 'one.jsonl'), PER_PROCESS), out: join(dir, 'one') });
    process.stderr.write(`  1 process, C=${CONCURRENCY}, L=${LATENCY_MS} ms, ${PER_PROCESS} samples…\n`);
    const one = await generateProcess(oneConfig, join(dir, 'one'));

    const all = join(dir, 'all.jsonl');
    await writeQuestions(all, PER_PROCESS * SHARDS);
    // Another question text, so the shards' tool calls are not the single run's cached ones.
    const shardConfig = writeRunConfig(join(dir, 'shards.yaml'), { ...spec, questions: all, out: join(dir, 'shard-x'), cacheDir: join(dir, 'cache-shards') });
    process.stderr.write(`  ${SHARDS} processes (--shard i/${SHARDS}), C=${CONCURRENCY} each, ${PER_PROCESS * SHARDS} samples…\n`);
    const started = performance.now();
    const shards = await Promise.all(
      Array.from({ length: SHARDS }, (_, i) => generateProcess(shardConfig, join(dir, 'runs', `shard-${i}`), `${i}/${SHARDS}`)),
    );
    const wall = (performance.now() - started) / 1000;
    const merged = join(dir, 'runs', 'merged');
    const m = await runCli(['merge', ...shards.map((_, i) => join(dir, 'runs', `shard-${i}`)), '--out', merged]);
    if (m.code !== 0) throw new Error(`merge exited ${m.code}: ${m.stderr}`);
    const stats = (await (await fetch(sim.url.replace(/\/v1$/, '/sim/stats'))).json()) as { peakConcurrent: number };
    return { one, shards, wall, merged: counts(merged), simPeakConcurrent: stats.peakConcurrent };
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export function shardsMarkdown(r: ShardResult): string {
  const ideal = CONCURRENCY / ((TURNS * LATENCY_MS) / 1000);
  const oneRate = r.one.samples / r.one.seconds;
  const total = r.shards.reduce((n, s) => n + s.samples, 0);
  const together = total / r.wall;
  const sumOfRates = r.shards.reduce((n, s) => n + s.samples / s.seconds, 0);
  return [
    '## Scale-out: shard processes against one endpoint',
    '',
    `One sim process at L = ${LATENCY_MS} ms; each \`trajforge generate\` process (the CLI, with its own corpus server) runs at concurrency ${CONCURRENCY}, ideal ${ideal.toFixed(2)} samples/s per process. First one process over ${PER_PROCESS} questions, then ${SHARDS} processes \`--shard i/${SHARDS}\` over ${PER_PROCESS * SHARDS} questions (≈${PER_PROCESS} each, split by id hash), started together, each writing its own run directory; then \`trajforge merge\` of the ${SHARDS}. L keeps the sim far from saturated (it held at most ${r.simPeakConcurrent} requests at once, and the whole set-up needs a small share of the cores). Wall times include each process's start-up. See docs/scale-out.md for Slurm and Kubernetes.`,
    '',
    '| processes | samples | wall time | throughput | vs one process |',
    '|---|---|---|---|---|',
    `| 1 | ${r.one.samples} | ${r.one.seconds.toFixed(1)} s | ${oneRate.toFixed(2)}/s | 1.00× |`,
    `| ${SHARDS} (\`--shard i/${SHARDS}\`) | ${total} (${r.shards.map((s) => s.samples).join(' + ')}) | ${r.wall.toFixed(1)} s | ${together.toFixed(2)}/s | **${(together / oneRate).toFixed(2)}×** |`,
    '',
    `Per shard, samples ÷ its own wall time summed over the ${SHARDS}: ${sumOfRates.toFixed(2)}/s (${(sumOfRates / oneRate).toFixed(2)}×; the row above is lower when the id-hash split gives one shard more questions than another). \`merge\` produced one run of ${r.merged} records (${r.merged === total ? 'every sample, once' : `expected ${total}`}).`,
    '',
  ].join('\n');
}

export async function benchShards(): Promise<string> {
  return shardsMarkdown(await runShards());
}
