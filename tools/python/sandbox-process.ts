/**
 * One sandbox process, seen from the server: how it is started (the flags that make Node's
 * permission model the wall between Python and the machine), the message exchange with
 * child.ts, and the limits enforced from outside, where the code inside cannot reach them: the
 * per-call time limit (the process is killed) and the resident-size watchdog.
 *
 * A process does one thing at a time; pool.ts queues calls per sandbox and replaces a process
 * that was killed or died.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { delimiter, dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { builtFile } from '../../pipeline/paths.js';
import { DRIVER_PY } from './driver.js';
import type { CellError, StreamText } from './execution-text.js';
import { RSS_POLL_MS, RUNTIME_RSS_MB, SANDBOX_JS_HEAP_MB } from './limits.js';

/** How sandbox processes are started; the same for every sandbox of a server. */
export interface LaunchSpec {
  /** Pyodide's package directory: the only place a sandbox may read. */
  readonly pyodideDir: string;
  readonly childSource: string;
  readonly hooksSource: string;
  /** Run `unshare --net --map-root-user` first, for a network namespace with no interfaces up. */
  readonly unshare: string | undefined;
  readonly memoryMb: number;
  readonly maxOutputBytes: number;
  readonly startTimeoutMs: number;
}

/** What a run came to, as far as the process is concerned. */
export type RunResult =
  | { readonly kind: 'done'; readonly stdout: StreamText; readonly stderr: StreamText; readonly value: string | null; readonly error: CellError | null; readonly fatal: boolean }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'died'; readonly why: string };

export type NetworkIsolation = 'auto' | 'on' | 'off';

/**
 * The launch spec from the installed packages: Pyodide's directory, and our compiled child and
 * hooks (from dist/ by name: this module may run from source or from a bundle's chunk).
 */
export function launchSpec(opts: { memoryMb: number; maxOutputBytes: number; startTimeoutMs: number; network: NetworkIsolation }): LaunchSpec {
  const pyodideDir = realpathSync(dirname(createRequire(import.meta.url).resolve('pyodide/package.json')));
  const unshare = opts.network === 'off' ? undefined : findUnshare();
  if (opts.network === 'on' && unshare === undefined) throw new Error('--network-namespace on: `unshare --net --map-root-user` does not work on this machine');
  return {
    pyodideDir,
    childSource: readFileSync(builtFile('tools/python/child.js'), 'utf8'),
    hooksSource: readFileSync(builtFile('tools/python/import-lock.js'), 'utf8'),
    unshare,
    memoryMb: opts.memoryMb,
    maxOutputBytes: opts.maxOutputBytes,
    startTimeoutMs: opts.startTimeoutMs,
  };
}

/** `unshare`'s path when it can make a user and network namespace here (it cannot in many containers). */
function findUnshare(): string | undefined {
  const path = (process.env.PATH ?? '/usr/bin:/bin').split(delimiter).map((d) => join(d, 'unshare')).find((p) => existsSync(p));
  if (path === undefined) return undefined;
  const probe = spawnSync(path, ['--net', '--map-root-user', process.execPath, '-e', ''], { stdio: 'ignore', timeout: 10_000 });
  return probe.status === 0 ? path : undefined;
}

function spawnChild(spec: LaunchSpec): ChildProcess {
  const node = [
    '--no-warnings',
    '--experimental-permission',
    `--allow-fs-read=${spec.pyodideDir}`,
    // The module-loader hooks run on a worker thread; the import lock keeps any other away.
    '--allow-worker',
    '--disallow-code-generation-from-strings',
    `--max-old-space-size=${SANDBOX_JS_HEAP_MB}`,
    '--input-type=module',
    '-e',
    spec.childSource,
  ];
  const [command, args] = spec.unshare ? [spec.unshare, ['--net', '--map-root-user', process.execPath, ...node]] : [process.execPath, node];
  // An empty environment: nothing of the server's (keys included) is in reach of Python.
  return spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe', 'ipc'], serialization: 'advanced', env: {}, cwd: spec.pyodideDir });
}

/** Starts a process that builds Pyodide's memory snapshot, and answers it. */
export async function buildSnapshot(spec: LaunchSpec): Promise<Uint8Array> {
  const p = new SandboxProcess(spec);
  try {
    const m = await p.start(undefined);
    if (!(m.bytes instanceof Uint8Array)) throw new Error('the snapshot process answered no snapshot');
    return m.bytes;
  } finally {
    p.kill();
  }
}

export class SandboxProcess {
  readonly #spec: LaunchSpec;
  readonly #child: ChildProcess;
  #stderrTail = '';
  #exited: string | undefined;
  readonly #waiters = new Map<number, (m: Record<string, unknown>) => void>();
  readonly #onExit: Array<(why: string) => void> = [];
  #nextId = 1;
  #watchdog: NodeJS.Timeout | undefined;

  constructor(spec: LaunchSpec) {
    this.#spec = spec;
    this.#child = spawnChild(spec);
    this.#child.stderr!.on('data', (chunk: Buffer) => (this.#stderrTail = (this.#stderrTail + chunk.toString()).slice(-2_000)));
    this.#child.on('message', (m: Record<string, unknown>) => this.#waiters.get(typeof m.id === 'number' ? m.id : 0)?.(m));
    this.#child.on('error', (err) => this.#ended(`could not start: ${err.message}`));
    this.#child.on('exit', (code, signal) => this.#ended(signal ? `killed by ${signal}` : `exited with code ${code}`));
  }

  get alive(): boolean {
    return this.#exited === undefined;
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** Sends `init` and waits for `ready` (or the snapshot, when none is given). */
  async start(snapshot: Uint8Array | undefined): Promise<Record<string, unknown>> {
    const init = {
      type: 'init',
      pyodideUrl: pathToFileURL(join(this.#spec.pyodideDir, 'pyodide.mjs')).href,
      hooks: this.#spec.hooksSource,
      snapshot,
      memoryBytes: this.#spec.memoryMb * 1_048_576,
      maxOutputBytes: this.#spec.maxOutputBytes,
      driver: DRIVER_PY,
    };
    const answer = await this.#exchange(0, init, this.#spec.startTimeoutMs);
    if (answer.type === 'failed') throw new Error(`the sandbox failed to start: ${String(answer.message)}`);
    if (answer.type === 'timeout') throw new Error(`the sandbox did not start within ${this.#spec.startTimeoutMs / 1000} s`);
    if (answer.type === 'died') throw new Error(`the sandbox process ${String(answer.why)} while starting${this.#tail()}`);
    this.#watch();
    return answer;
  }

  async run(code: string, timeoutMs: number): Promise<RunResult> {
    const id = this.#nextId++;
    const m = await this.#exchange(id, { type: 'run', id, code }, timeoutMs);
    if (m.type === 'timeout') return { kind: 'timeout' };
    if (m.type === 'died') return { kind: 'died', why: String(m.why) };
    return {
      kind: 'done',
      stdout: m.stdout as StreamText,
      stderr: m.stderr as StreamText,
      value: (m.value as string | null) ?? null,
      error: (m.error as CellError | null) ?? null,
      fatal: m.fatal === true,
    };
  }

  /** Writes a file into the sandbox's file system; answers its path there. */
  async put(dir: string, name: string, bytes: Uint8Array, timeoutMs: number): Promise<string> {
    const id = this.#nextId++;
    const m = await this.#exchange(id, { type: 'put', id, dir, name, bytes }, timeoutMs);
    if (m.type === 'put-done') return String(m.path);
    throw new Error(m.type === 'put-failed' ? String(m.message) : m.type === 'died' ? `the sandbox process ${String(m.why)}` : 'the sandbox did not answer');
  }

  kill(): void {
    if (this.alive) this.#child.kill('SIGKILL');
  }

  onExit(listener: (why: string) => void): void {
    if (this.#exited !== undefined) listener(this.#exited);
    else this.#onExit.push(listener);
  }

  /** One request and its answer; a timeout kills the process, and its exit answers every waiter. */
  #exchange(id: number, message: object, timeoutMs: number): Promise<Record<string, unknown>> {
    if (this.#exited !== undefined) return Promise.resolve({ type: 'died', why: this.#exited });
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#waiters.delete(id);
        this.kill();
        resolve({ type: 'timeout' });
      }, timeoutMs);
      this.#waiters.set(id, (m) => {
        clearTimeout(timer);
        this.#waiters.delete(id);
        resolve(m);
      });
      this.#child.send(message, (err) => err && this.#ended(`could not be written to: ${err.message}`));
    });
  }

  /** Ends the process when its resident size passes Python's cap plus the runtime's own share. */
  #watch(): void {
    const limit = (this.#spec.memoryMb + RUNTIME_RSS_MB) * 1_048_576;
    const statm = `/proc/${this.#child.pid}/statm`;
    if (!existsSync(statm)) return;
    this.#watchdog = setInterval(() => {
      let resident = 0;
      try {
        resident = Number(readFileSync(statm, 'utf8').split(' ')[1]) * 4096;
      } catch {
        return;
      }
      if (resident > limit) {
        this.#stderrTail += `\nresident size ${Math.round(resident / 1_048_576)} MB passed the sandbox's ${Math.round(limit / 1_048_576)} MB`;
        this.kill();
      }
    }, RSS_POLL_MS);
    this.#watchdog.unref();
  }

  #ended(why: string): void {
    if (this.#exited !== undefined) return;
    this.#exited = why + this.#tail();
    clearInterval(this.#watchdog);
    for (const answer of [...this.#waiters.values()]) answer({ type: 'died', why: this.#exited });
    for (const listener of this.#onExit.splice(0)) listener(this.#exited);
  }

  #tail(): string {
    const last = this.#stderrTail.trim().split('\n').slice(-1)[0];
    return last ? ` (${last.slice(0, 300)})` : '';
  }
}
