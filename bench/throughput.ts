/**
 * How close a run gets to the endpoint's limit. The sim answers every request after a fixed
 * latency L; a sample takes T model turns (searches, then the answer), so with C samples in
 * flight the ideal is C / (T·L) samples per second. Reports measured / ideal at several C,
 * and the same workload run the way the Python PubMed generator runs it (5 samples at a time).
 *
 * L is chosen per C so that the ideal rate, and so the CPU the sim itself needs, stays the
 * same at every C: on a 2-core machine the sim shares the CPU with trajforge.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { loadConfig } from '../pipeline/config.js';
import { generate } from '../pipeline/generate.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { startSim } from '../sim/server.js';

const SEARCHES = 2;
const TURNS = SEARCHES + 1;
/** Samples per second the ideal allows at every C. */
const IDEAL_RATE = Number(process.env.TRAJFORGE_BENCH_RATE ?? '50');
const SAMPLES = Number(process.env.TRAJFORGE_BENCH_SAMPLES ?? '5000');

/** A question file of `n` distinct questions made from the bundled ones, so ids never repeat. */
function questions(dir: string, n: number): string {
  const file = join(dir, 'questions.jsonl');
  const lines: string[] = [];
  for (let i = 0; i < n; i++) lines.push(JSON.stringify({ id: `tp-${i}`, question: `In which version of Chrome was the CSS property grid first supported? (${i})` }));
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

interface Result {
  concurrency: number;
  latencyMs: number;
  samples: number;
  seconds: number;
  rate: number;
  ideal: number;
}

async function runAt(dir: string, concurrency: number, latencyMs: number, samples: number): Promise<Result> {
  const sim = await startSim({ port: 0, seed: 1, latencyMs, callsPerSample: SEARCHES });
  try {
    const file = join(dir, `c${concurrency}.yaml`);
    writeFileSync(
      file,
      stringify({
        endpoint: { base_url: sim.url, model: 'trajforge-sim', api_key_env: 'none', timeout_ms: latencyMs * 10 + 60_000 },
        mcpServers: { corpus: { command: process.execPath, args: [join(PACKAGE_ROOT, 'dist/tools/corpus/server.js')] } },
        tools: { aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' } } },
        questions: { path: questions(dir, samples) },
        validation: { gold_match: 'off' },
        concurrency,
        // A cache of its own per run: results cached by an earlier run would make this one faster than it is.
        executor: { cache_dir: join(dir, `cache-c${concurrency}`) },
        output: { dir: join(dir, `run-c${concurrency}`) },
      }),
    );
    const started = performance.now();
    const summary = await generate({ config: loadConfig(file) });
    const seconds = (performance.now() - started) / 1000;
    const done = summary.session.accepted + summary.session.failed;
    return { concurrency, latencyMs, samples: done, seconds, rate: done / seconds, ideal: concurrency / ((TURNS * latencyMs) / 1000) };
  } finally {
    await sim.close();
  }
}

export async function benchThroughput(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-tp-'));
  try {
    const rows: Result[] = [];
    for (const c of [64, 256, 1024]) {
      const latency = Math.round((c / (TURNS * IDEAL_RATE)) * 1000);
      process.stderr.write(`  C=${c}, L=${latency} ms, ${SAMPLES} samples…\n`);
      rows.push(await runAt(dir, c, latency, SAMPLES));
    }
    // The Python generator's way: 5 samples at a time, the same per-request latency as C=256.
    const l256 = rows[1]!.latencyMs;
    const pySamples = Math.max(50, Math.round(SAMPLES / 50));
    process.stderr.write(`  C=5, L=${l256} ms, ${pySamples} samples…\n`);
    const py = await runAt(dir, 5, l256, pySamples);
    const fmt = (r: Result): string =>
      `| ${r.concurrency} | ${r.latencyMs} ms | ${r.samples} | ${r.seconds.toFixed(1)} s | ${r.rate.toFixed(1)}/s | ${r.ideal.toFixed(1)}/s | **${(r.rate / r.ideal).toFixed(3)}** |`;
    return [
      '## Throughput: measured against ideal',
      '',
      `Sim with a fixed latency L per request, the corpus server, ${TURNS} model turns per sample (${SEARCHES} searches, then the answer). Ideal at concurrency C: C / (${TURNS}·L). L is set per C so that the ideal is ${IDEAL_RATE} samples/s everywhere (the sim shares the machine). \`TRAJFORGE_BENCH_SAMPLES\` and \`TRAJFORGE_BENCH_RATE\` change the workload.`,
      '',
      '| C | L | samples | wall time | measured | ideal | measured / ideal |',
      '|---|---|---|---|---|---|---|',
      ...rows.map(fmt),
      fmt(py),
      '',
      `The last row runs the workload as the Python PubMed generator does (5 samples at a time, L as at C=256): at the same latency trajforge at C=256 is **${(rows[1]!.rate / py.rate).toFixed(0)}×** its throughput.`,
      '',
      'Targets: measured/ideal ≥ 0.95 at C=256 and ≥ 0.9 at C=1024.',
      '',
    ].join('\n');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
