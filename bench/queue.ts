/**
 * Queue mode on one machine: 1, 2 and 4 `trajforge worker` processes pulling from one Redis
 * against one sim process, each at the same concurrency, and what the queue adds: a
 * `generate` process over the same number of samples as one worker, for the CPU per sample
 * the queue costs the worker (claim, renew, fsync, accept) and Redis.
 *
 * The sim's latency L keeps it far from saturated, so N workers should reach N times one
 * worker's throughput (the target is 0.9·N).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CPU_AT_EXIT_PRELOAD, cpuAtExit } from './cpu-at-exit.js';
import { CLI, procCpuSeconds, startSimProcess, writeQuestions, writeRunConfig } from './harness.js';
import { startRedisServer } from './redis-server.js';

const CONCURRENCY = 32;
const LATENCY_MS = Number(process.env.TRAJFORGE_BENCH_QUEUE_LATENCY_MS ?? '2000');
/** Samples per worker: ten full waves of C. */
const PER_WORKER = Number(process.env.TRAJFORGE_BENCH_QUEUE_SAMPLES ?? String(CONCURRENCY * 10));
const WORKERS = [1, 2, 4] as const;

/**
 * A CLI process (of the built checkout at `checkout`, by default this one), its exit, and the
 * CPU it used: as the process tells it at exit (cpu-at-exit.ts), or else (killed) the last
 * reading from /proc while it ran.
 */
export function cli(args: readonly string[], checkout?: string): { child: ChildProcess; done: Promise<{ code: number | null; stderr: string; cpu: number }> } {
  const bin = checkout === undefined ? CLI : join(checkout, 'dist/pipeline/cli/bin.js');
  const child = spawn(process.execPath, ['--import', CPU_AT_EXIT_PRELOAD, bin, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  let cpu = 0;
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-4000)));
  const poll = setInterval(() => {
    const c = procCpuSeconds(child.pid!);
    if (Number.isFinite(c)) cpu = c;
  }, 100);
  // 'close', not 'exit': the exit line is the last thing on stderr.
  const done = new Promise<{ code: number | null; stderr: string; cpu: number }>((resolve) =>
    child.once('close', (code) => {
      clearInterval(poll);
      const told = cpuAtExit(stderr);
      resolve({ code, stderr: told?.stderr ?? stderr, cpu: told?.cpu ?? cpu });
    }),
  );
  return { child, done };
}

interface Row {
  readonly workers: number;
  readonly samples: number;
  readonly seconds: number;
  readonly workerCpu: number;
  readonly redisCpu: number;
}

export interface QueueBenchResult {
  readonly rows: readonly Row[];
  readonly generate: { readonly samples: number; readonly seconds: number; readonly cpu: number };
}

export async function runQueueBench(): Promise<QueueBenchResult> {
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-queue-'));
  const sim = await startSimProcess(LATENCY_MS);
  // AOF with `appendfsync everysec`, the setting docs/scale-out.md suggests for speed.
  const redis = await startRedisServer({ dir, appendfsync: 'everysec' });
  try {
    const spec = { url: sim.url, concurrency: CONCURRENCY, latencyMs: LATENCY_MS };
    const oneQuestions = await writeQuestions(join(dir, 'one.jsonl'), PER_WORKER);
    const oneConfig = writeRunConfig(join(dir, 'one.yaml'), { ...spec, questions: oneQuestions, out: join(dir, 'generate'), cacheDir: join(dir, 'cache-generate') });
    process.stderr.write(`  generate, C=${CONCURRENCY}, L=${LATENCY_MS} ms, ${PER_WORKER} samples…\n`);
    let started = performance.now();
    const g = await cli(['generate', '--config', oneConfig]).done;
    if (g.code !== 0) throw new Error(`generate exited ${g.code}: ${g.stderr}`);
    const generate = { samples: PER_WORKER, seconds: (performance.now() - started) / 1000, cpu: g.cpu };

    const rows: Row[] = [];
    for (const n of WORKERS) {
      const questions = await writeQuestions(join(dir, `q${n}.jsonl`), PER_WORKER * n);
      // A tool cache of its own per row: an earlier row's cached results would make this one faster than it is.
      // The workers share the endpoint's limit through Redis (its gate is part of what is measured): N × C, what N independent processes would send.
      const extra = { shared_limits: { endpoint_concurrency: n * CONCURRENCY } };
      const config = writeRunConfig(join(dir, `w${n}.yaml`), { ...spec, questions, out: join(dir, `unused-${n}`), cacheDir: join(dir, `cache-${n}`), extra });
      const run = `bench-${n}`;
      const e = await cli(['enqueue', '--config', config, '--queue', redis.url, '--run', run]).done;
      if (e.code !== 0) throw new Error(`enqueue exited ${e.code}: ${e.stderr}`);
      process.stderr.write(`  ${n} worker${n > 1 ? 's' : ''}, C=${CONCURRENCY} each, ${PER_WORKER * n} samples…\n`);
      const redisBefore = procCpuSeconds(redis.pid);
      started = performance.now();
      const ws = await Promise.all(Array.from({ length: n }, () => cli(['worker', '--config', config, '--queue', redis.url, '--run', run, '--out', join(dir, `workers-${n}`)]).done));
      const seconds = (performance.now() - started) / 1000;
      for (const w of ws) if (w.code !== 0) throw new Error(`worker exited ${w.code}: ${w.stderr}`);
      rows.push({ workers: n, samples: PER_WORKER * n, seconds, workerCpu: ws.reduce((s, w) => s + w.cpu, 0), redisCpu: procCpuSeconds(redis.pid) - redisBefore });
    }
    return { rows, generate };
  } finally {
    await redis.stop();
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export function queueMarkdown(r: QueueBenchResult): string {
  const one = r.rows[0]!;
  const oneRate = one.samples / one.seconds;
  const ms = (s: number, n: number): string => ((s / n) * 1000).toFixed(2);
  const genCpu = r.generate.cpu / r.generate.samples;
  const workerCpu = one.workerCpu / one.samples;
  return [
    '## Queue mode: workers on Redis against one endpoint',
    '',
    `One sim process at L = ${LATENCY_MS} ms, one \`redis-server\` (AOF, \`appendfsync everysec\`); each \`trajforge worker\` (its own corpus server) at concurrency ${CONCURRENCY} over ${PER_WORKER} samples per worker, enqueued first, started together; wall time from the first start to the last exit (each worker exits when every sample is accepted), start-up included. Target: N workers ≥ 0.9 × N × one worker. See docs/scale-out.md.`,
    '',
    '| workers | samples | wall time | throughput | vs one worker | target | worker CPU / sample | Redis CPU / sample |',
    '|---|---|---|---|---|---|---|---|',
    ...r.rows.map((row) => {
      const rate = row.samples / row.seconds;
      return `| ${row.workers} | ${row.samples} | ${row.seconds.toFixed(1)} s | ${rate.toFixed(2)}/s | **${(rate / oneRate).toFixed(2)}×** | ${(0.9 * row.workers).toFixed(1)}× | ${ms(row.workerCpu, row.samples)} ms | ${ms(row.redisCpu, row.samples)} ms |`;
    }),
    '',
    `The queue's added CPU per sample: a worker used ${ms(one.workerCpu, one.samples)} ms per sample, \`generate\` over the same ${r.generate.samples} samples ${(genCpu * 1000).toFixed(2)} ms (${r.generate.seconds.toFixed(1)} s wall): ${((workerCpu - genCpu) * 1000).toFixed(2)} ms per sample in the worker (start-up: the Redis client, bundled, loads in about 0.07 s of CPU; claim, lease renewals, fdatasync and the accept; and the shared limits: a model request asks Redis for its slot only when no slot of the worker's finished within \`release_delay_ms\` of Redis's last grant, the last slot handed back with it), plus Redis's own in the last column (read from /proc; each trajforge process tells its own CPU at its exit, bench/cpu-at-exit.ts). This is one run, not alternated: the worker's CPU against generate's in alternated pairs is bench/queue-ratio.ts (the hand-written section on the queue worker's CPU per sample, above).`,
    '',
  ].join('\n');
}

export async function benchQueue(): Promise<string> {
  return queueMarkdown(await runQueueBench());
}
