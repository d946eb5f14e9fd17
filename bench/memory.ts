/**
 * Peak RSS of `trajforge generate` over a large question file: the real CLI in its own
 * process (so nothing of the bench is counted), the sim in another with a tiny latency, RSS
 * read from /proc as the run goes and VmHWM at the end. The highest RSS in each quarter of the
 * run shows whether memory grows with the number of questions.
 *
 * Per quarter the highest reading, not one reading at the mark: RSS follows V8's old
 * generation, which swings by 50-90 MB between major GCs at this rate, so two single readings
 * can differ by more than the run's whole growth.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, mb, startSimProcess, writeQuestions, writeRunConfig } from './harness.js';

const QUESTIONS = Number(process.env.TRAJFORGE_BENCH_MEM_QUESTIONS ?? '100000');
const CONCURRENCY = 64;
const LATENCY_MS = 5;

function procStatus(pid: number): { rss: number; hwm: number } {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (name: string): number => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(text)?.[1] ?? Number.NaN) * 1024;
    return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
  } catch {
    return { rss: Number.NaN, hwm: Number.NaN };
  }
}

export interface MemoryResult {
  readonly questions: number;
  readonly done: number;
  readonly seconds: number;
  /** [samples done, highest RSS since the previous mark] at 25%, 50%, 75% and at the end. */
  readonly checkpoints: readonly (readonly [number, number])[];
  readonly peak: number;
  readonly exit: number | null;
}

/** A CLI run's RSS, as it goes: the highest reading per quarter of `total` (by its progress lines) and VmHWM. */
export interface RssWatch {
  /** What the progress lines counted last. */
  readonly done: number;
  /** [done, highest RSS since the previous mark] at 25%, 50%, 75% and at the end. */
  readonly checkpoints: readonly (readonly [number, number])[];
  readonly peak: number;
  readonly exit: number | null;
  readonly stderr: string;
}

/** Runs the CLI with `args` in its own process and reads its RSS every 500 ms (see the file comment). */
export async function watchRss(args: readonly string[], total: number): Promise<RssWatch> {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let done = 0;
  let peak = 0;
  const checkpoints: [number, number][] = [];
  const marks = [0.25, 0.5, 0.75].map((f) => Math.round(total * f));
  let stderr = '';
  let quarterPeak = 0;
  const readRss = (): void => {
    const s = procStatus(child.pid!);
    peak = Math.max(peak, s.hwm || 0);
    if (Number.isFinite(s.rss)) quarterPeak = Math.max(quarterPeak, s.rss);
  };
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (d: string) => {
    stderr = (stderr + d).slice(-4000);
    // Progress lines (not a TTY): "[hh:mm:ss] N/TOTAL (p%) · …"
    for (const m of d.matchAll(/\] (\d+)\/\d+ \(/g)) done = Number(m[1]);
    while (marks.length && done >= marks[0]!) {
      marks.shift();
      readRss();
      checkpoints.push([done, quarterPeak]);
      quarterPeak = 0;
      process.stderr.write(`  memory: ${done} done, highest RSS in the quarter ${mb(checkpoints.at(-1)![1])}\n`);
    }
  });
  const timer = setInterval(readRss, 500);
  const exit = await new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  clearInterval(timer);
  checkpoints.push([done, quarterPeak || Number.NaN]);
  return { done, checkpoints, peak, exit, stderr };
}

export async function measureMemory(questions = QUESTIONS): Promise<MemoryResult> {
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-mem-'));
  const sim = await startSimProcess(LATENCY_MS);
  try {
    const file = await writeQuestions(join(dir, 'questions.jsonl'), questions);
    const config = writeRunConfig(join(dir, 'config.yaml'), {
      url: sim.url,
      questions: file,
      concurrency: CONCURRENCY,
      out: join(dir, 'run'),
      cacheDir: join(dir, 'cache'),
      latencyMs: LATENCY_MS,
    });
    const started = performance.now();
    const w = await watchRss(['generate', '--config', config], questions);
    if (w.exit !== 0) process.stderr.write(`memory bench: generate exited ${w.exit}: ${w.stderr}\n`);
    const counts = (JSON.parse(readFileSync(join(dir, 'run', 'manifest.json'), 'utf8')) as { counts: { accepted: number; failed: number } }).counts;
    const total = counts.accepted + counts.failed;
    return { questions, done: total, seconds: (performance.now() - started) / 1000, checkpoints: w.checkpoints, peak: w.peak, exit: w.exit };
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchMemory(): Promise<string> {
  const r = await measureMemory();
  const rows = r.checkpoints
    .filter(([, rss]) => Number.isFinite(rss))
    .map(([n, rss]) => `| ${n.toLocaleString('en-US')} | ${mb(rss)} |`);
  const target = r.peak <= 400 * 1024 * 1024;
  const first = r.checkpoints[0];
  const last = r.checkpoints.at(-1);
  const growth =
    first && last && last[0] > first[0] && Number.isFinite(first[1]) && Number.isFinite(last[1])
      ? `The highest RSS of a quarter grew ${mb(last[1] - first[1])} from the first quarter (${first[0].toLocaleString('en-US')} samples) to the last (${last[0].toLocaleString('en-US')}), ${Math.round((last[1] - first[1]) / (last[0] - first[0]))} bytes per sample.`
      : '';
  return [
    '## Memory: peak RSS over a large question file',
    '',
    `\`trajforge generate\` as its own process over ${r.questions.toLocaleString('en-US')} questions (JSONL, streamed), concurrency ${CONCURRENCY}, the sim in another process at ${LATENCY_MS} ms latency, the corpus server; ${r.done.toLocaleString('en-US')} trajectories written in ${r.seconds.toFixed(0)} s. RSS read from /proc/PID/status every 500 ms; each row is the highest reading in the quarter of the run that ends there (RSS swings with V8's old generation between major GCs, so one reading at the mark says little); peak is VmHWM. \`TRAJFORGE_BENCH_MEM_QUESTIONS\` changes the size.`,
    '',
    '| samples done | highest RSS in the quarter |',
    '|---|---|',
    ...rows,
    `| **peak (VmHWM)** | **${mb(r.peak)}** |`,
    '',
    `Target: peak RSS ≤ 400 MB at 100,000 questions — ${target ? 'met' : 'not met'} (${mb(r.peak)}). ${growth}`,
    '',
  ].join('\n');
}
