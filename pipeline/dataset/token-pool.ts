/**
 * The worker processes of token export: rows go out to `threads` workers (token-worker.ts)
 * and come back as JSON lines; the caller awaits them in its own order, so the output's order
 * is the input's whatever worker finishes first.
 *
 * A chat template is code from outside, so each row is bounded (limits.ts, docs/export.md):
 * - time: a row that a worker has been on for `rowTimeoutMs` fails; the worker is killed and
 *   replaced, and the rows that were queued behind it go to another;
 * - memory: each worker's heap is capped at `workerHeapMb`; a template that allocates past it
 *   ends that worker, not the command, and its row fails the same way;
 * - size: a rendering longer than `renderMaxChars` fails its row (token-rows.ts).
 * A failed row is an `UnexportableRow`: the export names its file and line, or skips it under
 * `--on-bad-row skip`. The workers are killed when the export ends (`close`), and leave by
 * themselves when the command's process dies (their message channel closes).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { builtFile } from '../paths.js';
import { TrajforgeError, type ErrorCode } from '../errors.js';
import { TOKEN_LIMITS, type TokenLimits } from '../core/tokens/limits.js';
import type { TrainingView } from './training-view.js';
import { UnexportableRow } from './unexportable-row.js';
import type { TokensOptions } from './token-rows.js';
import type { FamilyMetadata } from './export.js';
import type { TemplateMessage } from '../core/tokens/chat-template.js';
import type { JobMessage, WorkerReply, WorkerSetup } from './token-worker.js';

export interface TokenPoolOptions {
  readonly tokenizerPath: string;
  readonly chatTemplate: string | undefined;
  readonly options: TokensOptions;
  readonly limits?: Partial<TokenLimits> | undefined;
  /** How large the input is, when known (a file, not stdin): a large one starts several workers at once (`workersAtStart`). */
  readonly inputBytes?: number | undefined;
}

/** A row rendered and tokenised: its JSON lines (one per part) and each line's token count. */
export interface TokenJobResult {
  readonly lines: string[];
  readonly tokens: number[];
}

interface Job {
  readonly message: JobMessage;
  /** A row job's TokenJobResult, or a render job's text. */
  readonly resolve: (r: TokenJobResult | string) => void;
  readonly reject: (e: Error) => void;
}

/**
 * Rows a worker holds at once: the one it works on and three more, so it does not wait while the
 * command's process, sharing the cores with it, has not yet answered its last row with another.
 * Two (one and the next) made the 107 MB export 5% slower; eight or sixteen gained less than four
 * (bench/BENCHMARKS.md, token export, fifth round).
 */
const DEPTH = 4;

/**
 * Rows done by one worker before a second starts, when rows are waiting: a worker costs its
 * start (about half a second of CPU, most of it Qwen3's vocabulary), which a short export would
 * not win back.
 */
const MORE_WORKERS_AFTER = 64;

/**
 * Input per worker started at once. A worker's start (about 0.5 s of CPU, most of it Qwen3's
 * vocabulary) is what it takes to tokenise about 15 MB; on a larger input the first workers
 * load side by side while the command's process waits for them, instead of the later ones
 * loading while the first already has rows to do.
 */
const BYTES_PER_WORKER_AT_START = 16 * 1024 * 1024;

/** Workers to start before any row: one, and one more per `BYTES_PER_WORKER_AT_START` of input, up to `threads`. */
export function workersAtStart(threads: number, inputBytes: number | undefined): number {
  return Math.max(1, Math.min(threads, 1 + Math.floor((inputBytes ?? 0) / BYTES_PER_WORKER_AT_START)));
}

/** The last of a worker's stderr kept, to say why it died (V8 prints its fatal errors there). */
const STDERR_KEEP = 4096;

class Slot {
  readonly worker: ChildProcess;
  /** Jobs sent, in the order sent (and answered). */
  readonly jobs: Job[] = [];
  ready = false;
  timer: NodeJS.Timeout | undefined;
  stderr = '';

  constructor(worker: ChildProcess) {
    this.worker = worker;
  }
}

export class TokenPool {
  readonly #setup: WorkerSetup;
  readonly #limits: TokenLimits;
  readonly #slots = new Set<Slot>();
  readonly #waiting: Job[] = [];
  #seq = 0;
  /** Rows answered (done or failed) so far. */
  #answered = 0;
  #closed = false;
  /** A worker that could not load: every job from then on fails with it. */
  #broken: Error | undefined;
  /** Settled when the first worker has loaded the tokenizer and the template, or could not. */
  readonly #loaded: Promise<void>;
  #onLoaded!: (err?: Error) => void;

  constructor(opts: TokenPoolOptions) {
    this.#limits = { ...TOKEN_LIMITS, ...opts.limits };
    this.#setup = { tokenizerPath: opts.tokenizerPath, chatTemplate: opts.chatTemplate, renderMaxChars: this.#limits.renderMaxChars, options: opts.options };
    this.#loaded = new Promise<void>((resolve, reject) => {
      this.#onLoaded = (err) => (err === undefined ? resolve() : reject(err));
    });
    // Nobody need ask: a load that failed also fails every job.
    this.#loaded.catch(() => {});
    // Workers to start with (one for a small input); more as rows wait (#dispatch).
    for (let n = workersAtStart(this.#limits.threads, opts.inputBytes); n > 0; n--) this.#spawn();
  }

  /** Resolves once a worker has loaded the tokenizer and the chat template; rejects with why none could (a BAD_USAGE error naming the flag). */
  ready(): Promise<void> {
    return this.#loaded;
  }

  /** Renders and tokenises one row; rejects with `UnexportableRow` when the row fails (its template raised, or a bound was passed). */
  run(id: string, view: TrainingView, metadata: FamilyMetadata | undefined): Promise<TokenJobResult> {
    return this.#queue({ seq: this.#seq++, id, view, metadata }) as Promise<TokenJobResult>;
  }

  /** Renders a whole conversation through the chat template, under the same bounds as a row (`messages` rows: export-split.ts). */
  render(messages: readonly TemplateMessage[], tools: readonly unknown[] | undefined): Promise<string> {
    return this.#queue({ seq: this.#seq++, render: { messages, tools } }) as Promise<string>;
  }

  #queue(message: JobMessage): Promise<TokenJobResult | string> {
    if (this.#broken) return Promise.reject(this.#broken);
    return new Promise((resolve, reject) => {
      this.#waiting.push({ message, resolve, reject });
      this.#dispatch();
    });
  }

  /** Ends every worker; jobs not answered yet fail. */
  async close(): Promise<void> {
    this.#closed = true;
    const ending = [...this.#slots].map((s) => this.#retire(s));
    for (const j of this.#waiting.splice(0)) j.reject(new Error('token export: the worker pool was closed'));
    await Promise.all(ending);
  }

  #spawn(): void {
    const worker = fork(builtFile('pipeline/dataset/token-worker.js'), [JSON.stringify(this.#setup)], {
      execArgv: [`--max-old-space-size=${this.#limits.workerHeapMb}`],
      // Its stdout is never the command's (that may be the export itself); its stderr says why it died.
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      serialization: 'advanced',
    });
    const slot = new Slot(worker);
    this.#slots.add(slot);
    worker.stderr!.setEncoding('utf8');
    worker.stderr!.on('data', (d: string) => {
      slot.stderr = (slot.stderr + d).slice(-STDERR_KEEP);
    });
    worker.on('message', (reply: WorkerReply) => this.#onReply(slot, reply));
    worker.on('error', (err) => this.#onDeath(slot, err.message));
    // 'close', not 'exit': by then its stderr is read to the end, and says why it died.
    worker.on('close', (code, signal) => this.#onDeath(slot, signal === null ? `exit code ${code}` : `signal ${signal}`));
  }

  #onReply(slot: Slot, reply: WorkerReply): void {
    if (reply.type === 'ready') {
      slot.ready = true;
      this.#onLoaded();
      this.#dispatch();
      return;
    }
    if (reply.type === 'load-failed') {
      this.#breakWith(slot, new TrajforgeError(reply.code as ErrorCode, reply.message, { field: reply.field, file: reply.file }));
      return;
    }
    const job = slot.jobs.shift();
    clearTimeout(slot.timer);
    slot.timer = undefined;
    if (job === undefined || job.message.seq !== reply.seq) throw new Error(`token export: worker answered job ${reply.seq} out of turn`);
    this.#answered++;
    if (reply.type === 'rows') job.resolve({ lines: reply.lines, tokens: reply.tokens });
    else if (reply.type === 'rendered') job.resolve(reply.text);
    else job.reject(new UnexportableRow(reply.message));
    this.#arm(slot);
    this.#dispatch();
  }

  /** A worker could not load the tokenizer or the template: every job fails with why. */
  #breakWith(slot: Slot, err: Error): void {
    this.#broken = err;
    this.#onLoaded(err);
    const jobs = [...this.#waiting.splice(0)];
    for (const s of this.#slots) jobs.push(...s.jobs.splice(0));
    void this.#retire(slot);
    for (const j of jobs) j.reject(err);
  }

  /** The row a worker is on has `rowTimeoutMs` from when the worker began it (or from when the one before it came back). */
  #arm(slot: Slot): void {
    if (slot.timer !== undefined || slot.jobs.length === 0) return;
    slot.timer = setTimeout(() => {
      const ms = this.#limits.rowTimeoutMs;
      this.#fail(slot, new UnexportableRow(`the chat template and tokenizer took longer than ${ms} ms on this row (--row-timeout-ms ${ms}); the rendering was stopped`));
    }, this.#limits.rowTimeoutMs);
    slot.timer.unref();
  }

  #onDeath(slot: Slot, how: string): void {
    if (!this.#slots.has(slot)) return;
    const said = slot.stderr.split('\n').find((l) => /FATAL ERROR|Error/.test(l))?.trim();
    if (!slot.ready) {
      // It died loading the tokenizer, before any row: another would too.
      this.#breakWith(slot, new TrajforgeError('BAD_USAGE', `--tokenizer ${this.#setup.tokenizerPath}: a token export worker could not load it (${how}${said ? `: ${said}` : ''})`, { field: 'tokenizer' }));
      return;
    }
    const why = /heap out of memory|Allocation failed/.test(slot.stderr)
      ? `the chat template and tokenizer needed more than ${this.#limits.workerHeapMb} MB on this row (--worker-heap-mb ${this.#limits.workerHeapMb}); the rendering was stopped`
      : `the worker process rendering this row ended (${how}${said ? `: ${said}` : ''})`;
    this.#fail(slot, new UnexportableRow(why));
  }

  /** Fails the row `slot` is on, ends its worker, and hands the rows queued behind it to a new one. */
  #fail(slot: Slot, err: Error): void {
    const [head, ...rest] = slot.jobs.splice(0);
    void this.#retire(slot);
    head?.reject(err);
    this.#waiting.unshift(...rest);
    if (!this.#closed && this.#broken === undefined) this.#spawn();
    this.#dispatch();
  }

  async #retire(slot: Slot): Promise<void> {
    clearTimeout(slot.timer);
    if (!this.#slots.delete(slot)) return;
    const w = slot.worker;
    if (w.exitCode !== null || w.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      w.once('exit', () => resolve());
      w.kill('SIGKILL');
    });
  }

  #dispatch(): void {
    const loading = [...this.#slots].some((s) => !s.ready);
    if (this.#waiting.length > 0 && !loading && !this.#closed && this.#broken === undefined && this.#slots.size < this.#limits.threads && this.#answered >= MORE_WORKERS_AFTER) this.#spawn();
    while (this.#waiting.length > 0) {
      let best: Slot | undefined;
      for (const s of this.#slots) if (s.ready && s.jobs.length < DEPTH && (best === undefined || s.jobs.length < best.jobs.length)) best = s;
      if (best === undefined) return;
      const job = this.#waiting.shift()!;
      best.jobs.push(job);
      best.worker.send(job.message);
      this.#arm(best);
    }
  }
}
