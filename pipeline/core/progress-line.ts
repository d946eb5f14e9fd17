/**
 * The progress of a long dataset command (export, filter, dedup, decontaminate, validate,
 * merge, report, stats) on a terminal: one line redrawn in place, rows and megabytes read per
 * second, and with the input's size known an ETA from the bytes still to read. Erased when the
 * command ends, so the summary line stands alone.
 *
 * Shown only when both stdout and stderr are terminals: a command whose output goes to a pipe
 * or a file, or run by a script or CI, prints nothing more than it did. `TRAJFORGE_PROGRESS=1`
 * shows it anyway (a test under no terminal), `=0` never.
 */

/** How often the line is redrawn. */
export const PROGRESS_EVERY_MS = 250;

export interface ProgressCounts {
  readonly rows: number;
  readonly bytes: number;
}

/** Whether a progress line is wanted here: both streams terminals, unless TRAJFORGE_PROGRESS says. */
export function progressWanted(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.TRAJFORGE_PROGRESS === '1') return true;
  if (env.TRAJFORGE_PROGRESS === '0') return false;
  return process.stdout.isTTY === true && process.stderr.isTTY === true;
}

const MB = 1024 * 1024;

/** `42s`, `3m07s`, `2h05m`; `?` for a time not known. The run's progress line says times this way too. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '?';
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

export class ProgressLine {
  readonly #label: string;
  readonly #totalBytes: number | undefined;
  readonly #counts: () => ProgressCounts;
  readonly #write: (text: string) => void;
  #started = 0;
  #timer: NodeJS.Timeout | undefined;
  #drawn = false;

  /** `totalBytes`: the input's size (undefined for stdin: no ETA); `counts`: rows and bytes read so far. */
  constructor(label: string, totalBytes: number | undefined, counts: () => ProgressCounts, write: (text: string) => void = (t) => void process.stderr.write(t)) {
    this.#label = label;
    this.#totalBytes = totalBytes;
    this.#counts = counts;
    this.#write = write;
  }

  start(): this {
    this.#started = performance.now();
    // Drawn at once: the line says the command is at work before the first interval ends.
    this.#draw();
    this.#timer = setInterval(() => this.#draw(), PROGRESS_EVERY_MS);
    this.#timer.unref();
    return this;
  }

  /** `export: 1200 rows · 12.0 of 40.0 MB (30%) · 2400 rows/s · 24.0 MB/s · ETA 1s`. */
  line(): string {
    const { rows, bytes } = this.#counts();
    const s = Math.max((performance.now() - this.#started) / 1000, 1e-3);
    const size = this.#totalBytes === undefined ? `${(bytes / MB).toFixed(1)} MB` : `${(bytes / MB).toFixed(1)} of ${(this.#totalBytes / MB).toFixed(1)} MB (${this.#totalBytes ? Math.floor((100 * Math.min(bytes, this.#totalBytes)) / this.#totalBytes) : 100}%)`;
    const rate = bytes / s;
    const left = this.#totalBytes === undefined ? '' : ` · ETA ${duration(rate > 0 ? ((this.#totalBytes - bytes) / rate) * 1000 : Number.NaN)}`;
    return `${this.#label}: ${rows} rows · ${size} · ${Math.round(rows / s)} rows/s · ${(rate / MB).toFixed(1)} MB/s${left}`;
  }

  #draw(): void {
    this.#drawn = true;
    this.#write(`\r\x1b[2K${this.line()}`);
  }

  /** Stops, and erases the line if one was drawn. */
  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    if (this.#drawn) this.#write('\r\x1b[2K');
    this.#drawn = false;
  }
}
