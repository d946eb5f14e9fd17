/**
 * Every limit of the Python tool, with its default, in one place: the server's flags
 * (server.ts), the pool (pool.ts) and the sandbox process (sandbox-process.ts) read them from
 * here, and docs/tools.md lists the same table.
 */

export interface PythonLimits {
  /** Seconds one `run_python_code` call may run when the call names no `timeout`. */
  readonly timeoutS: number;
  /** The most a call's own `timeout` may ask for; larger asks are cut to this. */
  readonly maxTimeoutS: number;
  /** Python's heap (the WebAssembly memory) may not grow past this; past it, MemoryError. */
  readonly memoryMb: number;
  /** Bytes of stdout and of stderr kept per call; the rest is counted and dropped. */
  readonly maxOutputBytes: number;
  /** Characters of the whole text result the model sees (MiroThinker's MAX_RESULT_LEN). */
  readonly maxResultChars: number;
  /** Sandboxes alive at once, one-shot runs included; the least recently used idle one makes room. */
  readonly maxSandboxes: number;
  /** A sandbox unused this many seconds is ended. */
  readonly idleS: number;
  /** Sandbox processes kept started and waiting, so a new sandbox does not pay the start. */
  readonly spares: number;
  /** Seconds a sandbox process may take to start (the first one also builds the snapshot). */
  readonly startTimeoutS: number;
  /** Largest file `upload_file_from_local_to_sandbox` copies in. */
  readonly maxUploadBytes: number;
}

export const DEFAULT_LIMITS: PythonLimits = {
  timeoutS: 30,
  maxTimeoutS: 300,
  memoryMb: 512,
  maxOutputBytes: 1_048_576,
  maxResultChars: 20_000,
  maxSandboxes: 8,
  idleS: 600,
  spares: 1,
  startTimeoutS: 180,
  maxUploadBytes: 52_428_800,
};

/**
 * What a sandbox process uses besides Python's heap (Node, V8, the compiled interpreter):
 * its resident size may reach `memoryMb` plus this before the watchdog ends it.
 */
export const RUNTIME_RSS_MB = 512;

/** V8's own heap in a sandbox process; Python's objects live in WebAssembly memory, not here. */
export const SANDBOX_JS_HEAP_MB = 256;

/** How often the watchdog reads a sandbox process's resident size. */
export const RSS_POLL_MS = 200;
