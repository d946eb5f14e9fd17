/**
 * The server's sandboxes: ids, a bounded number alive, idle expiry, calls queued per sandbox
 * (one at a time in each, any number of sandboxes at once), warm spare processes, and the
 * memory snapshot every process starts from (built once per server by a process of its own, so
 * a new sandbox starts from a fresh interpreter's memory instead of re-running its start-up).
 *
 * A call that times out or kills its process gets its answer, and the sandbox gets a fresh
 * process under the same id: its variables and files are gone, which the answer says.
 */
import { randomBytes } from 'node:crypto';
import type { PythonLimits } from './limits.js';
import { buildSnapshot, SandboxProcess, type LaunchSpec, type RunResult } from './sandbox-process.js';
import { UserError } from '../../pipeline/errors.js';

/** What a run answers the server: the process's result, and whether the sandbox lost its state. */
export type PoolRun = RunResult & { readonly restarted: boolean };

/** A `sandbox_id` the server does not hold (expired, or never made). */
export class UnknownSandboxError extends UserError {}
/** Every sandbox is busy: the model is told to wait or reuse one. */
export class PoolFullError extends UserError {}

interface Sandbox {
  readonly id: string;
  process: SandboxProcess;
  /** The end of the queue of calls on this sandbox. */
  tail: Promise<unknown>;
  busy: number;
  lastUsed: number;
  idleTimer: NodeJS.Timeout | undefined;
}

type PoolLimits = Pick<PythonLimits, 'maxSandboxes' | 'idleS' | 'spares'>;

export class SandboxPool {
  readonly #spec: LaunchSpec;
  readonly #limits: PoolLimits;
  readonly #sandboxes = new Map<string, Sandbox>();
  #spares: Array<Promise<SandboxProcess>> = [];
  #snapshot: Promise<Uint8Array> | undefined;
  #closed = false;

  constructor(spec: LaunchSpec, limits: PoolLimits) {
    this.#spec = spec;
    this.#limits = limits;
  }

  get size(): number {
    return this.#sandboxes.size;
  }

  /** A new sandbox; answers its id. The least recently used idle sandbox makes room when the pool is full. */
  async create(): Promise<string> {
    this.#makeRoom();
    const id = `sbx-${randomBytes(8).toString('hex')}`;
    // Held before the process starts, so parallel creates count against the limit.
    const box: Sandbox = { id, process: undefined as unknown as SandboxProcess, tail: Promise.resolve(), busy: 1, lastUsed: Date.now(), idleTimer: undefined };
    this.#sandboxes.set(id, box);
    try {
      box.process = await this.#takeProcess();
    } catch (err) {
      this.#sandboxes.delete(id);
      throw err;
    } finally {
      box.busy--;
    }
    if (this.#closed) box.process.kill();
    this.#touch(box);
    return id;
  }

  /** Runs a cell in the sandbox `id`; calls on one sandbox run one after another. */
  async run(id: string, code: string, timeoutMs: number): Promise<PoolRun> {
    return this.#queued(this.#get(id), async (box) => {
      const result = await box.process.run(code, timeoutMs);
      const restarted = result.kind !== 'done' || result.fatal;
      if (restarted) await this.#restart(box);
      return { ...result, restarted };
    });
  }

  /** Runs a cell in a sandbox of its own, ended afterwards. */
  async runOnce(code: string, timeoutMs: number): Promise<PoolRun> {
    const id = await this.create();
    try {
      const result = await this.#queued(this.#get(id), (box) => box.process.run(code, timeoutMs));
      return { ...result, restarted: false };
    } finally {
      this.end(id);
    }
  }

  async put(id: string, dir: string, name: string, bytes: Uint8Array, timeoutMs: number): Promise<string> {
    return this.#queued(this.#get(id), (box) => box.process.put(dir, name, bytes, timeoutMs));
  }

  end(id: string): void {
    const box = this.#sandboxes.get(id);
    if (!box) return;
    this.#sandboxes.delete(id);
    clearTimeout(box.idleTimer);
    box.process?.kill();
  }

  close(): void {
    this.#closed = true;
    for (const id of [...this.#sandboxes.keys()]) this.end(id);
    for (const spare of this.#spares) void spare.then((p) => p.kill(), () => {});
    this.#spares = [];
  }

  #get(id: string): Sandbox {
    const box = this.#sandboxes.get(id);
    if (!box) throw new UnknownSandboxError(id);
    return box;
  }

  #queued<T>(box: Sandbox, work: (box: Sandbox) => Promise<T>): Promise<T> {
    box.busy++;
    clearTimeout(box.idleTimer);
    const done = box.tail.then(() => work(box));
    box.tail = done.catch(() => {});
    return done.finally(() => {
      box.busy--;
      this.#touch(box);
    });
  }

  /** Marks a use, and (re)arms the idle expiry once nothing is queued. */
  #touch(box: Sandbox): void {
    box.lastUsed = Date.now();
    clearTimeout(box.idleTimer);
    if (box.busy > 0 || !this.#sandboxes.has(box.id)) return;
    box.idleTimer = setTimeout(() => this.end(box.id), this.#limits.idleS * 1000);
    box.idleTimer.unref();
  }

  #makeRoom(): void {
    if (this.#sandboxes.size < this.#limits.maxSandboxes) return;
    const idle = [...this.#sandboxes.values()].filter((b) => b.busy === 0).sort((a, b) => a.lastUsed - b.lastUsed);
    if (idle[0] === undefined) throw new PoolFullError(`all ${this.#limits.maxSandboxes} sandboxes are busy`);
    this.end(idle[0].id);
  }

  async #restart(box: Sandbox): Promise<void> {
    box.process.kill();
    if (!this.#sandboxes.has(box.id)) return;
    box.process = await this.#takeProcess();
    if (!this.#sandboxes.has(box.id) || this.#closed) box.process.kill();
  }

  /** A started process: a spare when one is ready, else a new one; spares are topped up. */
  async #takeProcess(): Promise<SandboxProcess> {
    const snapshot = await this.#snapshotBytes();
    const spare = this.#spares.shift();
    this.#topUpSpares(snapshot);
    const p = spare ? await spare.catch(() => undefined) : undefined;
    return p?.alive ? p : this.#startProcess(snapshot);
  }

  #topUpSpares(snapshot: Uint8Array): void {
    while (!this.#closed && this.#spares.length < this.#limits.spares) {
      const p = this.#startProcess(snapshot);
      p.catch(() => {});
      this.#spares.push(p);
    }
  }

  async #startProcess(snapshot: Uint8Array): Promise<SandboxProcess> {
    const p = new SandboxProcess(this.#spec);
    try {
      await p.start(snapshot);
      return p;
    } catch (err) {
      p.kill();
      throw err;
    }
  }

  #snapshotBytes(): Promise<Uint8Array> {
    this.#snapshot ??= buildSnapshot(this.#spec);
    // A failed build is not kept: the next sandbox tries again.
    this.#snapshot.catch(() => (this.#snapshot = undefined));
    return this.#snapshot;
  }
}
