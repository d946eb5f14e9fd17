/**
 * The program a sandbox process runs: Pyodide (CPython compiled to WebAssembly) behind the
 * doors sandbox-process.ts starts it with. Never imported: its compiled text is handed to
 * `node -e`, because the process may read no file but Pyodide's own.
 *
 * Python reaches JavaScript through Pyodide's FFI, so everything JavaScript can reach here is
 * in reach of the code a model writes. What closes each door:
 *
 * - files and subprocesses: Node's permission model (flags set by the parent): reads of
 *   Pyodide's package directory only, no writes, no child processes; and `os.system` answers
 *   ENOSYS here instead of asking Node for a shell (which the permission model would refuse
 *   fatally);
 * - code from strings: `--disallow-code-generation-from-strings`, so `eval`, `Function(…)`
 *   and Pyodide's `run_js` throw: Python can call only functions that already exist;
 * - modules: import-lock.ts swaps the WebSocket package for one that throws, then refuses every
 *   `import()` once Pyodide is up;
 * - the host process and the network: the `js` module is an empty object, and `process`,
 *   `fetch`, `WebSocket`, `require` and the other Node globals are deleted before the first
 *   cell runs (the parent may also start this process in a network namespace of its own);
 * - memory: the WebAssembly heap may not grow past the cap (Python sees MemoryError), and the
 *   parent's watchdog ends the process if it grows past its budget anyway.
 *
 * Messages (over the IPC channel; the parent is the only party): `init` → `ready` (or
 * `snapshot`, when asked to build one), then `run` → `result` and `put` → `put-done`.
 */
import { constants as fsConstants } from 'node:fs';
import { register } from 'node:module';
import { MessageChannel } from 'node:worker_threads';
import type { PyodideAPI } from 'pyodide';

interface Init {
  readonly type: 'init';
  /** file: URL of pyodide.mjs. */
  readonly pyodideUrl: string;
  /** The compiled text of import-lock.ts. */
  readonly hooks: string;
  /** Start from this memory snapshot; without it, build one, send it and exit. */
  readonly snapshot?: Uint8Array;
  readonly memoryBytes: number;
  readonly maxOutputBytes: number;
  readonly driver: string;
}
type Request = { type: 'run'; id: number; code: string } | { type: 'put'; id: number; dir: string; name: string; bytes: Uint8Array };

// Kept before the globals go: nothing Python can reach holds these.
const send = process.send!.bind(process) as (message: unknown) => boolean;
const exit = process.exit.bind(process);
const processOn = process.on.bind(process);
const onMessage = (listener: (message: unknown) => void): void => void processOn('message', listener);
process.on('disconnect', () => exit(0));

const WASM_PAGE = 65_536;
/** Globals Node adds that reach the process, the file system or the network. */
const NODE_DOORS = [
  'process', 'global', 'require', 'module', 'exports', 'Buffer', 'fetch', 'Request', 'Response', 'Headers', 'FormData', 'WebSocket',
  'EventSource', 'navigator', 'Navigator', 'BroadcastChannel', 'MessageChannel', 'MessagePort', 'MessageEvent', 'Worker',
] as const;

type Imports = Record<string, Record<string, unknown>>;
interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
// The lib this project compiles against has no WebAssembly types; these are the parts used here.
const wasm = (globalThis as unknown as { WebAssembly: { Memory: { prototype: WasmMemory }; instantiate: (source: unknown, imports?: Imports) => Promise<unknown> } })
  .WebAssembly;

/** Python's heap may not grow past `cap`: both ways it grows (the runtime's import, and Memory.grow) refuse. */
function capMemory(cap: number): void {
  const grow = wasm.Memory.prototype.grow;
  wasm.Memory.prototype.grow = function (this: WasmMemory, pages: number): number {
    if (this.buffer.byteLength + pages * WASM_PAGE > cap) throw new RangeError(`this sandbox's memory is capped at ${cap} bytes`);
    return grow.call(this, pages);
  };
  const instantiate = wasm.instantiate;
  wasm.instantiate = function (source: unknown, imports?: Imports) {
    const env = imports?.env;
    if (env && typeof env.emscripten_resize_heap === 'function') {
      const resize = env.emscripten_resize_heap as (size: number) => number;
      env.emscripten_resize_heap = (size: number) => ((size >>> 0) > cap ? 0 : resize(size));
      // system(): -ENOSYS, as a platform without processes answers.
      env._emscripten_system = () => -52;
    }
    return instantiate.call(wasm, source, imports);
  };
}

/** One stream's bytes for one call: the first `cap` kept, the rest counted. */
class Capture {
  #chunks: Uint8Array[] = [];
  #kept = 0;
  #total = 0;
  constructor(private readonly cap: number) {}
  readonly write = (buffer: Uint8Array): number => {
    this.#total += buffer.length;
    const room = this.cap - this.#kept;
    if (room > 0) {
      const part = buffer.slice(0, Math.min(room, buffer.length));
      this.#chunks.push(part);
      this.#kept += part.length;
    }
    return buffer.length;
  };
  take(): { text: string; keptBytes: number; totalBytes: number } {
    const all = new Uint8Array(this.#kept);
    let at = 0;
    for (const c of this.#chunks) {
      all.set(c, at);
      at += c.length;
    }
    const out = { text: new TextDecoder().decode(all), keptBytes: this.#kept, totalBytes: this.#total };
    this.#chunks = [];
    this.#kept = this.#total = 0;
    return out;
  }
}

async function start(init: Init): Promise<void> {
  const { port1, port2 } = new MessageChannel();
  register(`data:text/javascript,${encodeURIComponent(init.hooks)}`, { data: { port: port2 }, transferList: [port2] });
  // Pyodide's file-system layer reads open-flag constants through process.binding, which the
  // permission model refuses; these are the same numbers.
  (process as unknown as { binding: (name: string) => unknown }).binding = (name) => {
    if (name === 'constants') return { fs: fsConstants };
    throw new Error(`process.binding(${name}) is not available in this sandbox`);
  };
  capMemory(init.memoryBytes);
  const { loadPyodide } = (await import(init.pyodideUrl)) as typeof import('pyodide');
  const jsglobals = Object.create(null) as object;
  if (init.snapshot === undefined) {
    const py = await loadPyodide({ _makeSnapshot: true, jsglobals });
    send({ type: 'snapshot', bytes: py.makeMemorySnapshot() });
    return;
  }
  // A copy: a snapshot must start on an aligned offset, which a message buffer need not.
  const py = await loadPyodide({ _loadSnapshot: new Uint8Array(init.snapshot), jsglobals, env: {} });
  await new Promise((res) => {
    port1.once('message', res);
    port1.postMessage('lock');
  });
  const out = new Capture(init.maxOutputBytes);
  const err = new Capture(init.maxOutputBytes);
  py.setStdout({ write: out.write, isatty: false });
  py.setStderr({ write: err.write, isatty: false });
  py.setStdin({ stdin: () => undefined });
  await py.runPythonAsync(init.driver);
  closeDoors();
  const runCell = py.globals.get('_tf_run') as (code: string, maxChars: number) => Promise<string>;
  onMessage((m) => void handle(m as Request, py, runCell, out, err, init.maxOutputBytes));
  send({ type: 'ready' });
}

function closeDoors(): void {
  const g = globalThis as Record<string, unknown>;
  for (const name of NODE_DOORS) {
    try {
      delete g[name];
    } catch {
      g[name] = undefined;
    }
  }
  const quiet = (): void => {};
  g.console = Object.freeze({ log: quiet, info: quiet, warn: quiet, error: quiet, debug: quiet, trace: quiet, dir: quiet, table: quiet });
}

async function handle(m: Request, py: PyodideAPI, runCell: (code: string, maxChars: number) => Promise<string>, out: Capture, err: Capture, maxChars: number): Promise<void> {
  if (m.type === 'put') {
    try {
      py.FS.mkdirTree(m.dir);
      const path = `${m.dir.replace(/\/+$/, '')}/${m.name}`;
      py.FS.writeFile(path, new Uint8Array(m.bytes));
      send({ type: 'put-done', id: m.id, path });
    } catch (e) {
      send({ type: 'put-failed', id: m.id, message: describe(e) });
    }
    return;
  }
  let answer: { value: string | null; error: { name: string; value: string; traceback: string } | null };
  let fatal = false;
  try {
    answer = JSON.parse(await runCell(m.code, maxChars));
  } catch (e) {
    // The interpreter itself failed (Pyodide calls such errors fatal): this process is done.
    fatal = true;
    answer = { value: null, error: { name: 'SandboxError', value: `the interpreter failed: ${describe(e)}`, traceback: '' } };
  }
  send({ type: 'result', id: m.id, stdout: out.take(), stderr: err.take(), ...answer, fatal });
  if (fatal) setTimeout(() => exit(70), 50);
}

const describe = (e: unknown): string => (e instanceof Error ? e.message : String(e)).split('\n').filter(Boolean).slice(-1)[0] ?? 'unknown error';

onMessage(function first(m) {
  const init = m as Init;
  if (init.type !== 'init') return;
  process.off('message', first);
  start(init).catch((e: unknown) => {
    send({ type: 'failed', message: e instanceof Error ? (e.stack ?? e.message) : String(e) });
    setTimeout(() => exit(1), 50);
  });
});
