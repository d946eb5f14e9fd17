/**
 * `trajforge synthesize` against the sim, as its own process (the sim in another):
 *
 * 1. Rate: kept questions per model request and per second at concurrency 64, every check on,
 *    the solvability rollouts included (k = 4, band 0.25–0.75; the sim answers wrong 30% of the
 *    time, so pass rates spread), over the bundled corpus. Requests are the sim's own count.
 * 2. Memory: RSS over 100,000 seeds, read per quarter of the run as the memory bench reads it
 *    (memory.ts `watchRss`), over a corpus of 100,000 generated documents; every check but the
 *    rollouts, which are generate's own path (see "Memory"). `TRAJFORGE_BENCH_SYNTH_SEEDS` and
 *    `TRAJFORGE_BENCH_SYNTH_RATE_SEEDS` change the sizes.
 */
import { createWriteStream, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { mb, startSimProcess } from './harness.js';
import { watchRss } from './memory.js';

const SEEDS = Number(process.env.TRAJFORGE_BENCH_SYNTH_SEEDS ?? '100000');
const RATE_SEEDS = Number(process.env.TRAJFORGE_BENCH_SYNTH_RATE_SEEDS ?? '1000');
const CONCURRENCY = 64;
const LATENCY_MS = 5;
const CORPUS = join(PACKAGE_ROOT, 'data', 'corpus.jsonl');
const CORPUS_SERVER = join(PACKAGE_ROOT, 'dist/tools/corpus/server.js');

function writeConfig(dir: string, url: string, synthesis: Record<string, unknown>): string {
  const file = join(dir, 'config.yaml');
  writeFileSync(
    file,
    stringify({
      endpoint: { base_url: url, model: 'trajforge-sim', api_key_env: 'none', timeout_ms: 120_000 },
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, '--corpus', CORPUS] } },
      tools: { aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' } } },
      validation: { judge: { base_url: url, model: 'trajforge-sim', api_key_env: 'none', concurrency: CONCURRENCY } },
      executor: { cache_dir: join(dir, 'cache') },
      concurrency: CONCURRENCY,
      output: { dir: join(dir, 'run') },
      synthesis,
    }),
  );
  return file;
}

async function simRequests(url: string): Promise<number> {
  const res = await fetch(url.replace(/\/v1$/, '/sim/stats'));
  return ((await res.json()) as { chatRequests: number }).chatRequests;
}

interface Counts {
  readonly accepted: number;
  readonly failed: number;
}

const counts = (dir: string): Counts => (JSON.parse(readFileSync(join(dir, 'run', 'manifest.json'), 'utf8')) as { counts: Counts }).counts;

/** Kept questions per request and per second, everything on. */
async function measureRate(): Promise<{ seeds: number; kept: number; requests: number; seconds: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-synth-'));
  const sim = await startSimProcess(LATENCY_MS, ['--misbehave', 'wrong_answer=0.3']);
  try {
    const config = writeConfig(dir, sim.url, { source: { kind: 'documents', path: CORPUS }, seeds: RATE_SEEDS, checks: { solvable: { k: 4 } } });
    const started = performance.now();
    const w = await watchRss(['synthesize', '--config', config], RATE_SEEDS);
    const seconds = (performance.now() - started) / 1000;
    if (w.exit !== 0) throw new Error(`synthesize exited ${w.exit}: ${w.stderr}`);
    const c = counts(dir);
    return { seeds: c.accepted + c.failed, kept: c.accepted, requests: await simRequests(sim.url), seconds };
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `n` documents in the bundled corpus's shape, each with browser sentences of its own: streamed, so the file costs no memory here. */
async function writeCorpus(file: string, n: number): Promise<void> {
  const out = createWriteStream(file);
  const browsers = ['Chrome', 'Edge', 'Firefox', 'Safari', 'Opera'];
  for (let i = 0; i < n; i++) {
    const facts = browsers.map((b, j) => {
      const v = 1 + ((i * (7 + j) + j * 13) % 140);
      const day = new Date(Date.UTC(2008, 0, 1) + ((i * 37 + j * 101) % 6000) * 86_400_000).toISOString().slice(0, 10);
      return `${b} first supported it in version ${v}, released ${day}.`;
    });
    const line = `${JSON.stringify({ id: `f${i}`, title: `Feature: f${i}`, text: `The feature f${i} is a standardized feature. ${facts.join(' ')}` })}\n`;
    if (!out.write(line)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
}

async function measureSeeds(): Promise<{ seeds: number; kept: number; seconds: number; checkpoints: readonly (readonly [number, number])[]; peak: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-synth-mem-'));
  const sim = await startSimProcess(LATENCY_MS);
  try {
    const corpus = join(dir, 'corpus.jsonl');
    await writeCorpus(corpus, SEEDS);
    const config = writeConfig(dir, sim.url, { source: { kind: 'documents', path: corpus }, seeds: SEEDS, checks: { solvable: false } });
    const started = performance.now();
    const w = await watchRss(['synthesize', '--config', config], SEEDS);
    if (w.exit !== 0) throw new Error(`synthesize exited ${w.exit}: ${w.stderr}`);
    const c = counts(dir);
    return { seeds: c.accepted + c.failed, kept: c.accepted, seconds: (performance.now() - started) / 1000, checkpoints: w.checkpoints, peak: w.peak };
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchSynthesize(): Promise<string> {
  const r = await measureRate();
  const m = await measureSeeds();
  const n = (x: number): string => x.toLocaleString('en-US');
  const rows = m.checkpoints.filter(([, rss]) => Number.isFinite(rss)).map(([done, rss]) => `| ${n(done)} | ${mb(rss)} |`);
  const first = m.checkpoints[0];
  const last = m.checkpoints.at(-1);
  const growth =
    first && last && last[0] > first[0] && Number.isFinite(first[1]) && Number.isFinite(last[1])
      ? `The highest RSS of a quarter grew ${mb(last[1] - first[1])} from the first quarter (${n(first[0])} seeds) to the last (${n(last[0])}), ${Math.round((last[1] - first[1]) / (last[0] - first[0]))} bytes per seed.`
      : '';
  return [
    '## Synthesize',
    '',
    'Kept questions per model request and per second; memory over a run of many seeds.',
    '',
    `\`trajforge synthesize\` as its own process, the sim in another at ${LATENCY_MS} ms latency, concurrency ${CONCURRENCY}.`,
    '',
    `**Rate.** ${n(r.seeds)} seeds of the bundled corpus, every check on, k = 4 rollouts with the corpus server, the sim answering wrong 30% of the time: ${n(r.kept)} kept in ${r.seconds.toFixed(0)} s with ${n(r.requests)} model requests (the sim's count: stages, judge, rollouts).`,
    '',
    '| kept per request | requests per kept | kept per second |',
    '|---|---|---|',
    `| ${(r.kept / r.requests).toFixed(4)} | ${(r.requests / r.kept).toFixed(1)} | ${(r.kept / r.seconds).toFixed(2)} |`,
    '',
    `**Memory.** ${n(m.seeds)} seeds (one generated document each, five browser facts), every check but the rollouts: ${n(m.kept)} kept in ${m.seconds.toFixed(0)} s. RSS per quarter of the run, as in "Memory"; peak is VmHWM.`,
    '',
    '| seeds done | highest RSS in the quarter |',
    '|---|---|',
    ...rows,
    `| **peak (VmHWM)** | **${mb(m.peak)}** |`,
    '',
    growth,
    '',
    'Command: `npm run bench -- synthesize` (sizes: `TRAJFORGE_BENCH_SYNTH_RATE_SEEDS`, `TRAJFORGE_BENCH_SYNTH_SEEDS`).',
    '',
  ].join('\n');
}
