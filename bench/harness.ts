/**
 * What the throughput, memory and shard benchmarks share: the sim in a process of its own,
 * question files, run configs, and CPU / memory readings from /proc.
 *
 * The sim runs in its own process so that its CPU is not charged to trajforge and its work
 * does not sit on trajforge's event loop: a real endpoint is another machine.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { stringify } from 'yaml';
import { PACKAGE_ROOT } from '../pipeline/paths.js';

export const CLI = join(PACKAGE_ROOT, 'dist/pipeline/cli/bin.js');
const SIM_MAIN = join(PACKAGE_ROOT, 'dist/sim/cli-main.js');
const CORPUS_SERVER = join(PACKAGE_ROOT, 'dist/tools/corpus/server.js');

/** Searches the sim's policy makes before it answers; a sample takes SEARCHES + 1 model turns. */
export const SEARCHES = 2;
export const TURNS = SEARCHES + 1;

export interface SimProcess {
  readonly url: string;
  readonly pid: number;
  /** CPU seconds the sim process has used so far (user + system). */
  cpuSeconds(): number;
  close(): Promise<void>;
}

/** `trajforge sim` as a child process; resolves once it prints its URL. */
export async function startSimProcess(latencyMs: number, extra: readonly string[] = []): Promise<SimProcess> {
  const child = spawn(process.execPath, [SIM_MAIN, '--port', '0', '--seed', '1', '--latency-ms', String(latencyMs), '--calls-per-sample', String(SEARCHES), ...extra], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString('utf8')).slice(-4000);
  });
  const url = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    rl.once('line', (line) => {
      const m = /listening on (\S+)/.exec(line);
      if (m) resolve(m[1]!);
      else reject(new Error(`sim: unexpected first line: ${line}`));
    });
    child.once('exit', (code) => reject(new Error(`sim exited with ${code}: ${stderr}`)));
  });
  const pid = child.pid!;
  return {
    url,
    pid,
    cpuSeconds: () => procCpuSeconds(pid),
    close: () => stopChild(child),
  };
}

export function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/** user + system CPU seconds of a live process, from /proc/PID/stat. */
export function procCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return ticks / 100;
  } catch {
    return Number.NaN;
  }
}

/** VmHWM (peak RSS) of a live process, in bytes. */
export function procPeakRss(pid: number | 'self'): number {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** A JSONL file of `n` distinct questions, written as a stream so 100,000 of them cost no memory. */
export async function writeQuestions(file: string, n: number): Promise<string> {
  const out = createWriteStream(file);
  for (let i = 0; i < n; i++) {
    const line = `${JSON.stringify({ id: `tp-${i}`, question: `In which version of Chrome was the CSS property grid first supported? (${i})` })}\n`;
    if (!out.write(line)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  return file;
}

export interface RunConfigSpec {
  readonly url: string;
  readonly questions: string;
  readonly concurrency: number;
  readonly out: string;
  readonly cacheDir: string;
  readonly latencyMs: number;
  /** Merged over the endpoint section (`{ stream: false }`). */
  readonly endpoint?: Record<string, unknown> | undefined;
  /** Merged over the executor section (`{ cache: false }`). */
  readonly executor?: Record<string, unknown> | undefined;
  /** More top-level sections (`{ shared_limits: … }`). */
  readonly extra?: Record<string, unknown> | undefined;
}

/** The benchmark's run config: the sim, the corpus server, no gold check. Returns the file's path. */
export function writeRunConfig(file: string, spec: RunConfigSpec): string {
  writeFileSync(
    file,
    stringify({
      endpoint: { base_url: spec.url, model: 'trajforge-sim', api_key_env: 'none', timeout_ms: spec.latencyMs * 10 + 60_000, ...spec.endpoint },
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER] } },
      tools: { aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' } } },
      questions: { path: spec.questions },
      validation: { gold_match: 'off' },
      concurrency: spec.concurrency,
      // A cache of its own per run: results cached by an earlier run would make this one faster than it is.
      executor: { cache_dir: spec.cacheDir, ...spec.executor },
      output: { dir: spec.out },
      ...spec.extra,
    }),
  );
  return file;
}

/** Median and a percentile of a list of numbers. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export function mb(bytes: number): string {
  return `${Math.round(bytes / (1024 * 1024))} MB`;
}
