/**
 * What a queue worker costs against `generate` on the same workload, as ratios measured in one
 * run (#28 items 3 and 6): `node dist/bench/queue-ratio.js PAIRS N L [BASE_DIR]`. Each pair runs
 * `generate` over N samples and one `trajforge worker` pulling the same N samples from a run of
 * its own on one Redis (and, given BASE_DIR, a built checkout of another commit, that
 * checkout's worker too), in an order that turns by one each pair, so a machine that gets
 * busier during the run weighs on each the same. The sim answers at latency L ms, concurrency
 * 32; each process's CPU is read from /proc. Prints every run, its Redis calls per sample
 * (INFO commandstats before and after) and the medians of the pairs' ratios.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from '@redis/client';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { startSimProcess, writeQuestions, writeRunConfig } from './harness.js';
import { cli } from './queue.js';
import { startRedisServer } from './redis-server.js';

const CONCURRENCY = 32;

/** Calls per Redis command so far (INFO commandstats). */
async function commandCalls(url: string): Promise<Map<string, number>> {
  const c = createClient({ url });
  await c.connect();
  try {
    const info = String(await c.sendCommand(['INFO', 'commandstats']));
    return new Map([...info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)].map((m) => [m[1]!, Number(m[2])]));
  } finally {
    await c.close();
  }
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

const [pairsArg, nArg, lArg, base] = process.argv.slice(2);
const [pairs, n, latencyMs] = [Number(pairsArg), Number(nArg), Number(lArg)];
if (!(pairs >= 1) || !(n >= 1) || !(latencyMs >= 1)) {
  process.stderr.write('usage: node dist/bench/queue-ratio.js PAIRS N L [BASE_DIR]\n');
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'tf-queue-ratio-'));
const sim = await startSimProcess(latencyMs);
const redis = await startRedisServer({ dir, appendfsync: 'everysec' });
try {
  const questions = await writeQuestions(join(dir, 'q.jsonl'), n);
  // The endpoint limit shared through Redis, as a worker runs by default: it is part of what is measured.
  const spec = { url: sim.url, concurrency: CONCURRENCY, latencyMs, questions, extra: { shared_limits: { endpoint_concurrency: CONCURRENCY } } };
  const kinds = [
    { label: 'generate', checkout: PACKAGE_ROOT, worker: false },
    { label: 'worker', checkout: PACKAGE_ROOT, worker: true },
    ...(base ? [{ label: 'base-worker', checkout: base, worker: true }] : []),
  ];
  const ms: Record<string, number[]> = Object.fromEntries(kinds.map((k) => [k.label, []]));
  for (let i = 0; i < pairs; i++) {
    const order = kinds.map((_, j) => kinds[(i + j) % kinds.length]!);
    for (const k of order) {
      const name = `${k.label}-${i}`;
      const config = writeRunConfig(join(dir, `${name}.yaml`), { ...spec, out: join(dir, name), cacheDir: join(dir, `cache-${name}`) });
      const queue = ['--queue', redis.url, '--run', name];
      if (k.worker) {
        // Enqueued by the same checkout: the run's stored config is its own.
        const e = await cli(['enqueue', '--config', config, ...queue], k.checkout).done;
        if (e.code !== 0) throw new Error(`enqueue in ${k.checkout} exited ${e.code}: ${e.stderr}`);
      }
      const before = await commandCalls(redis.url);
      const load = loadavg()[0]!.toFixed(1);
      const r = await cli(k.worker ? ['worker', '--config', config, ...queue, '--out', join(dir, `out-${name}`)] : ['generate', '--config', config], k.checkout).done;
      if (r.code !== 0) throw new Error(`${k.label} in ${k.checkout} exited ${r.code}: ${r.stderr}`);
      const after = await commandCalls(redis.url);
      const calls = [...after].map(([cmd, c]) => [cmd, c - (before.get(cmd) ?? 0)] as const).filter(([cmd, c]) => c > 0 && !['info', 'hello', 'client'].includes(cmd));
      const evals = calls.filter(([cmd]) => cmd === 'eval' || cmd === 'evalsha').reduce((s, [, c]) => s + c, 0);
      ms[k.label]!.push((r.cpu / n) * 1000);
      const shown = k.worker ? `, ${(evals / n).toFixed(2)} scripts/sample (${calls.map(([cmd, c]) => `${cmd} ${(c / n).toFixed(2)}`).join(', ')})` : '';
      process.stdout.write(`pair ${i + 1} ${k.label}: load ${load}, CPU ${((r.cpu / n) * 1000).toFixed(2)} ms/sample${shown}\n`);
    }
  }
  const ratio = (a: string, b: string): string => median(ms[a]!.map((x, i) => x / ms[b]![i]!)).toFixed(3);
  process.stdout.write(`median of ${pairs} pairs: worker / generate ${ratio('worker', 'generate')}${base ? `, base-worker / generate ${ratio('base-worker', 'generate')}, worker / base-worker ${ratio('worker', 'base-worker')}` : ''}\n`);
} finally {
  await redis.stop();
  await sim.close();
  rmSync(dir, { recursive: true, force: true });
}
