/**
 * Progress of a run: on a terminal, one line redrawn in place; elsewhere (CI, a log file,
 * a Slurm job), a plain line every few seconds. While the model client waits (a Retry-After, a
 * back-off; core/llm/waits.ts) the line says for how long and why.
 */
import { dollars } from '../core/cost.js';
import { duration } from '../core/progress-line.js';
import { longestWait } from '../core/llm/waits.js';

/** A wait shorter than this is not worth a word: retries after a blip come and go within it. */
const WAIT_SHOWN_FROM_MS = 1000;

export interface ProgressSink {
  readonly isTTY: boolean;
  write(text: string): void;
  /** Plain-line interval when not a TTY. Default 5000 ms. */
  readonly intervalMs?: number | undefined;
}

export function stderrSink(): ProgressSink {
  return { isTTY: process.stderr.isTTY === true, write: (t) => process.stderr.write(t) };
}

function compact(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)}G`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}

export class Progress {
  readonly #sink: ProgressSink | undefined;
  #total: number | null;
  readonly #before: number;
  #accepted = 0;
  #failed = 0;
  #tokens = 0;
  #started = 0;
  #timer: NodeJS.Timeout | undefined;
  #cache: (() => { hits: number; misses: number }) | undefined;
  #cost: (() => { run: number | null; invocation: number | null }) | undefined;

  readonly #labels: { readonly ok: string; readonly failed: string };

  /** `before`: samples already done by earlier invocations of the run; `labels`: what the two outcomes are called (synthesize: kept, rejected). */
  constructor(sink: ProgressSink | undefined, total: number | null, before: number, labels = { ok: 'accepted', failed: 'failed' }) {
    this.#sink = sink;
    this.#total = total;
    this.#before = before;
    this.#labels = labels;
  }

  start(): void {
    this.#started = performance.now();
    if (!this.#sink) return;
    const every = this.#sink.isTTY ? 250 : (this.#sink.intervalMs ?? 5000);
    this.#timer = setInterval(() => this.#draw(), every);
    this.#timer.unref();
  }

  /** Adds `cache H/M` (tool-result cache hits / misses so far) to the line. */
  showCache(counts: () => { hits: number; misses: number }): void {
    this.#cache = counts;
  }

  /**
   * Adds `$S spent` (the run's, all invocations) and, with a total, `~$P projected` (what the rest
   * would cost at this invocation's dollars per sample) to the line; nothing while a model has no price.
   */
  showCost(dollars: () => { run: number | null; invocation: number | null }): void {
    this.#cost = dollars;
  }

  /** Samples of the total that will not run (`--until-correct`: their question was answered correctly). */
  notNeeded(n: number): void {
    if (this.#total !== null) this.#total = Math.max(0, this.#total - n);
  }

  done(accepted: boolean, tokens: number): void {
    if (accepted) this.#accepted++;
    else this.#failed++;
    this.#tokens += tokens;
  }

  line(): string {
    const doneNow = this.#accepted + this.#failed;
    const done = this.#before + doneNow;
    const elapsed = performance.now() - this.#started;
    const rate = doneNow / Math.max(elapsed / 1000, 1e-3);
    const counts = `${this.#accepted} ${this.#labels.ok} · ${this.#failed} ${this.#labels.failed} · ${rate.toFixed(2)}/s`;
    const c = this.#cache?.();
    const cache = c ? ` · cache ${compact(c.hits)}/${compact(c.misses)}` : '';
    const spend = this.#spendText(doneNow, done);
    const wait = longestWait();
    const waiting = wait !== undefined && wait.ms >= WAIT_SHOWN_FROM_MS ? ` · waiting ${duration(wait.ms)}: ${wait.why}` : '';
    if (this.#total === null) return `${done} done · ${counts} · ${compact(this.#tokens)} tokens${spend}${cache}${waiting}`;
    const eta = rate > 0 ? ((this.#total - done) / rate) * 1000 : Number.NaN;
    const pct = this.#total ? Math.floor((done / this.#total) * 100) : 100;
    return `${done}/${this.#total} (${pct}%) · ${counts} · ETA ${duration(eta)} · ${compact(this.#tokens)} tokens${spend}${cache}${waiting}`;
  }

  /** ` · $1.20 spent, ~$4.80 projected`: the projection once a sample of this invocation is done. */
  #spendText(doneNow: number, done: number): string {
    const c = this.#cost?.();
    if (c === undefined || c.run === null) return '';
    const spent = ` · ${dollars(c.run)} spent`;
    if (this.#total === null || doneNow === 0 || c.invocation === null) return spent;
    const projected = c.run + (c.invocation / doneNow) * Math.max(0, this.#total - done);
    return `${spent}, ~${dollars(projected)} projected`;
  }

  #bar(width = 24): string {
    if (!this.#total) return '';
    const filled = Math.min(width, Math.round(((this.#before + this.#accepted + this.#failed) / this.#total) * width));
    return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] `;
  }

  #draw(): void {
    if (!this.#sink) return;
    if (this.#sink.isTTY) this.#sink.write(`\r\x1b[2K${this.#bar()}${this.line()}`);
    else this.#sink.write(`[${new Date().toISOString().slice(11, 19)}] ${this.line()}\n`);
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    if (!this.#sink) return;
    if (this.#sink.isTTY) this.#sink.write(`\r\x1b[2K${this.#bar()}${this.line()}\n`);
    else this.#draw();
  }
}
