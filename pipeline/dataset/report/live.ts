/**
 * A run directory followed while it is written: the live figures of `report --serve`, kept up
 * to date from what is appended, and the rows a page has not seen yet.
 *
 * The figures are those of `trajforge stats` for a run (the latest state of each id: an
 * accepted id counts once, as accepted; an id with only failures, by its latest attempt), so
 * a served page and `stats --json` agree once the run stops. `stats` reads failures.jsonl
 * first to know which attempt is the last; a follower cannot wait for the end, so a row that
 * counts may later be superseded (a retry that was accepted, or failed again): it is then
 * taken out of the counts it was in. That needs, per id, only what it was counted under.
 *
 * Memory: the ids (accepted ones outside the heap in an IdSet, failed ones with their attempt,
 * offset, status and reason, as the run store itself keeps them), the counters, the last
 * finish times for the rate, and the few newest rows. No trajectory is kept: a page that needs
 * rows gets them read from the files by byte range (`rowsSince`), so what a page costs is what
 * it has not seen yet.
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { RunEndpointCounts, Trajectory } from '../../../schemas/index.js';
import { FAILURES, MANIFEST, TRAJECTORIES } from '../../core/run-dir/names.js';
import { IdSet } from '../../id-set.js';
import { endpointOf, sumEndpoints, WorkerManifests, type LiveEndpoint } from './live-endpoint.js';
import { rowLine, type RowOptions } from './rows.js';
import { FileTail, linesBetween, type TailLine } from './tail.js';
import { lineProblem, maxLineBytes } from '../../core/lines.js';
import { MAX_RECORD_DEPTH, nestsDeeperThan } from '../../json-depth.js';

export interface LiveOptions {
  /** The recent window of samples per minute, in milliseconds. */
  readonly rateWindowMs: number;
  /** Newest rows named in the figures. */
  readonly newest: number;
  /** Bytes read from the files per step. */
  readonly chunkBytes: number;
  /** US dollars per million prompt and completion tokens; spend in tokens only without. */
  readonly price?: { readonly prompt: number; readonly completion: number } | undefined;
  /** The longest line read (core/lines.ts); default `maxLineBytes()`. */
  readonly maxLineBytes?: number | undefined;
}

/** Lines that could not be read named in the figures, the first ones found. */
const UNREADABLE_SHOWN = 5;

/** What the manifest says, as far as the live panel needs it. */
export interface ManifestView {
  readonly run_id: string | null;
  readonly status: string | null;
  readonly model: string | null;
  /** Samples the run plans (`questions.total`): null when the questions came from stdin. */
  readonly planned: number | null;
  readonly updated_at: string | null;
  /** The latest session's start and end. */
  readonly session_started_at: string | null;
  readonly session_finished_at: string | null;
}

/** The page's place in the files: bytes of each it has, and the generation they belong to. */
export interface Cursor {
  /** Bumped whenever a file was replaced or rewritten: a page of another generation reloads. */
  readonly generation: number;
  readonly trajectories: number;
  readonly failures: number;
}

export interface LiveFigures {
  readonly cursor: Cursor;
  /** When these figures were made. */
  readonly at: string;
  readonly manifest: ManifestView | null;
  /** Why the manifest could not be read, when it could not (the last good one is kept). */
  readonly manifest_error: string | null;
  /** As `stats --json`: rows read, counted (latest per id), superseded, and lines that are not records. */
  readonly rows: { read: number; counted: number; superseded: number; bad: number };
  /** The first lines that could not be read at all (too long, not UTF-8), as `FILE:LINE: why`; counted in `rows.bad`. */
  readonly unreadable: string[];
  readonly status: Record<string, number>;
  readonly acceptance_rate: number | null;
  readonly reasons: Record<string, number>;
  /** Ids with a record (accepted, or failed in every attempt so far). */
  readonly done: number;
  /** Samples per minute: every attempt written counts. `over` says what span it was measured over. */
  readonly rate: { per_min: number | null; over: 'window' | 'last session'; window_s: number };
  /** Tokens of every attempt written, superseded ones too: what the run cost. */
  readonly tokens: { prompt: number; completion: number; total: number };
  /** `tokens` at the given prices; null when no price is set. */
  readonly spend_usd: number | null;
  readonly price: { prompt: number; completion: number } | null;
  /** The newest rows, newest first: [id, status, reason, finished_at]. */
  readonly newest: [string, string, string, string][];
  /**
   * Every attempt by the minute it finished (its `timing.finished_at`), the last SERIES_MINUTES
   * minutes that had one, oldest first: [minute start in ms since the epoch, attempts, accepted].
   */
  readonly series: [number, number, number][];
  /**
   * What the model endpoints answered (requests, 429s, retries, Retry-After waits), as the
   * manifest's last checkpoint recorded it; a queue run's directory adds up its workers'
   * (live-endpoint.ts). Null when no manifest records it.
   */
  readonly endpoint: LiveEndpoint | null;
}

/** Minutes of the time series the figures carry. */
export const SERIES_MINUTES = 60;
const MINUTE = 60_000;

type Counts = Map<string, number>;
const inc = (m: Counts, k: string, by = 1): void => {
  const n = (m.get(k) ?? 0) + by;
  if (n === 0) m.delete(k);
  else m.set(k, n);
};

/** Largest first, then by name: the order `stats` prints. */
function sorted(m: Counts): Record<string, number> {
  return Object.fromEntries([...m].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)));
}

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0);

/** What a counted row is counted under; `stats` counts a status, and a reason (or `(none)` for a failed row without one). */
interface Counted {
  readonly status: string;
  readonly reason: string | undefined;
}

function countedAs(t: Partial<Trajectory>): Counted {
  const status = typeof t.status === 'string' ? t.status : 'unknown';
  const reason = typeof t.reason === 'string' ? t.reason : status === 'failed' ? '(none)' : undefined;
  return { status, reason };
}

/** Finish times kept for the rate: enough for any window at thousands of samples a minute. */
const RING = 10_000;

/** The figures of what has been read so far; made anew when a file starts over. */
class Tally {
  read = 0;
  counted = 0;
  superseded = 0;
  bad = 0;
  readonly unreadable: string[] = [];
  readonly status: Counts = new Map();
  readonly reasons: Counts = new Map();
  readonly accepted = new IdSet();
  /** The counted failed attempt of each id with no accepted record. */
  readonly failed = new Map<string, Counted & { attempt: number; offset: number }>();
  prompt = 0;
  completion = 0;
  total = 0;
  readonly finished = new Float64Array(RING);
  finishedCount = 0;
  newest: { id: string; status: string; reason: string; finished: number; at: string }[] = [];
  /** Attempts and accepted ones by the minute they finished: a few numbers per minute of the run. */
  readonly perMinute = new Map<number, [number, number]>();

  #count(c: Counted, by: number): void {
    inc(this.status, c.status, by);
    if (c.reason !== undefined) inc(this.reasons, c.reason, by);
  }

  /** Every attempt: tokens, the rate, the newest list. */
  #seen(t: Partial<Trajectory>, newest: number): void {
    this.read++;
    const u = t.usage as Partial<Trajectory['usage']> | undefined;
    this.prompt += count(u?.prompt_tokens);
    this.completion += count(u?.completion_tokens);
    this.total += count(u?.total_tokens);
    const at = str(t.timing?.finished_at) ?? '';
    const parsed = Date.parse(at);
    const finished = Number.isFinite(parsed) ? parsed : Date.now();
    this.finished[this.finishedCount++ % RING] = finished;
    const minute = Math.floor(finished / MINUTE) * MINUTE;
    const bucket = this.perMinute.get(minute) ?? this.perMinute.set(minute, [0, 0]).get(minute)!;
    bucket[0]++;
    if (t.status === 'ok') bucket[1]++;
    const list = this.newest;
    if (list.length < newest || finished >= list[list.length - 1]!.finished) {
      const c = countedAs(t);
      const entry = { id: typeof t.id === 'string' ? t.id : '', status: c.status, reason: c.reason ?? '', finished, at };
      let i = list.length;
      while (i > 0 && list[i - 1]!.finished < finished) i--;
      list.splice(i, 0, entry);
      if (list.length > newest) list.pop();
    }
  }

  /** Notes a row read; its id when it is still to be counted (undefined: counted alone, without an id, or superseded by the id's accepted row). */
  #admit(t: Partial<Trajectory>, newest: number): string | undefined {
    this.#seen(t, newest);
    const id = t.id;
    if (typeof id !== 'string') {
      this.#countAlone(t);
      return undefined;
    }
    if (this.accepted.has(id)) {
      this.superseded++;
      return undefined;
    }
    return id;
  }

  accept(t: Partial<Trajectory>, newest: number): void {
    const id = this.#admit(t, newest);
    if (id === undefined) return;
    this.accepted.add(id);
    this.counted++;
    this.#count(countedAs(t), 1);
    const before = this.failed.get(id);
    if (before) {
      // The failed attempts of an id that is accepted do not count.
      this.failed.delete(id);
      this.#count(before, -1);
      this.counted--;
      this.superseded++;
    }
  }

  fail(t: Partial<Trajectory>, offset: number, newest: number): void {
    const id = this.#admit(t, newest);
    if (id === undefined) return;
    const attempt = typeof t.attempt === 'number' && t.attempt >= 0 ? Math.floor(t.attempt) : 0;
    const before = this.failed.get(id);
    // As `stats`: the highest attempt wins, and of equal ones the later line, which this one is.
    if (before && attempt < before.attempt) {
      this.superseded++;
      return;
    }
    const now = { ...countedAs(t), attempt, offset };
    if (before) {
      this.#count(before, -1);
      this.superseded++;
    } else {
      this.counted++;
    }
    this.failed.set(id, now);
    this.#count(now, 1);
  }

  /** A row without an id cannot be superseded: it counts as it is. */
  #countAlone(t: Partial<Trajectory>): void {
    this.counted++;
    this.#count(countedAs(t), 1);
  }

  /** Finish times within `[from, to]`. */
  finishedBetween(from: number, to: number): { n: number; oldest: number } {
    let n = 0;
    let oldest = Number.POSITIVE_INFINITY;
    const kept = Math.min(this.finishedCount, RING);
    for (let i = 0; i < kept; i++) {
      const t = this.finished[i]!;
      if (t >= from && t <= to) {
        n++;
        if (t < oldest) oldest = t;
      }
    }
    return { n, oldest };
  }
}

/** A row of a run file as the follower reads it: a trajforge record, or undefined when the line is not one. */
function parseRow(text: string): Partial<Trajectory> | undefined {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v) || nestsDeeperThan(v, MAX_RECORD_DEPTH)) return undefined;
  const t = v as Partial<Trajectory>;
  // What the readers require of a trajforge row: the page lists the same rows as the figures count.
  if (typeof t.id !== 'string' || typeof t.interleaved_text !== 'string') return undefined;
  return t;
}

function manifestView(v: unknown): ManifestView {
  const m = (typeof v === 'object' && v !== null ? v : {}) as Record<string, unknown>;
  const questions = (m.questions ?? {}) as Record<string, unknown>;
  const sessions = Array.isArray(m.sessions) ? m.sessions : [];
  const last = (sessions.at(-1) ?? {}) as Record<string, unknown>;
  const planned = questions.total;
  return {
    run_id: str(m.run_id),
    status: str(m.status),
    model: str(m.model),
    planned: typeof planned === 'number' && Number.isInteger(planned) && planned >= 0 ? planned : null,
    updated_at: str(m.updated_at),
    session_started_at: str(last.started_at),
    session_finished_at: str(last.finished_at),
  };
}

export class LiveRun {
  readonly dir: string;
  readonly #opts: LiveOptions;
  readonly #traj: FileTail;
  readonly #fail: FileTail;
  readonly #maxLine: number;
  #tally = new Tally();
  #generation = 0;
  #manifest: ManifestView | null = null;
  #manifestError: string | null = null;
  /** The run manifest's endpoint counts, when it records them. */
  #endpoint: RunEndpointCounts | undefined;
  /** A queue run's directory: its workers' manifests. */
  readonly #workers: WorkerManifests;
  /** Identity of the manifest file last read: a rename puts a new one in place. */
  #manifestKey = '';
  /** Bumped by every change a page would see. */
  #version = 0;

  constructor(dir: string, opts: LiveOptions) {
    this.dir = dir;
    this.#opts = opts;
    this.#maxLine = opts.maxLineBytes ?? maxLineBytes();
    this.#traj = new FileTail(join(dir, TRAJECTORIES), { maxLineBytes: this.#maxLine });
    this.#fail = new FileTail(join(dir, FAILURES), { maxLineBytes: this.#maxLine });
    this.#workers = new WorkerManifests(dir);
  }

  /** Changes with every change to the figures or the files' rows. */
  get version(): number {
    return this.#version;
  }

  get cursor(): Cursor {
    return { generation: this.#generation, trajectories: this.#traj.offset, failures: this.#fail.offset };
  }

  /** The files' paths, as the readers name them. */
  get files(): { trajectories: string; failures: string } {
    return { trajectories: this.#traj.path, failures: this.#fail.path };
  }

  /**
   * One look at the run: the manifest if it was replaced, then what was appended to each file, in
   * steps of `chunkBytes` (a page can be served between two steps of a long catch-up). Returns
   * whether anything changed.
   */
  async poll(): Promise<boolean> {
    const before = this.#version;
    await this.#readManifest();
    if (await this.#workers.look()) this.#version++;
    for (;;) {
      const t = await this.#traj.read(this.#opts.chunkBytes);
      const f = await this.#fail.read(this.#opts.chunkBytes);
      if (t.reset || f.reset) {
        // Counts cannot be taken back line by line from a file that is gone: everything is read anew.
        this.#startOver();
        continue;
      }
      for (const line of t.lines) this.#take(line, true, this.#traj.path);
      for (const line of f.lines) this.#take(line, false, this.#fail.path);
      if (t.lines.length === 0 && f.lines.length === 0) break;
      this.#version++;
    }
    return this.#version !== before;
  }

  #startOver(): void {
    this.#tally = new Tally();
    this.#generation++;
    this.#version++;
    // Both files are read again from byte 0 (one of them may not have changed).
    this.#traj.restart();
    this.#fail.restart();
  }

  #take(line: TailLine, accepted: boolean, path: string): void {
    // A line no reader can take (too long for a string, not UTF-8) is said on the page, not only counted.
    const problem = lineProblem(line, this.#maxLine);
    if (problem !== undefined) {
      this.#tally.bad++;
      if (this.#tally.unreadable.length < UNREADABLE_SHOWN) this.#tally.unreadable.push(`${path}:${line.line}: ${problem}`);
      return;
    }
    const t = parseRow(line.text);
    if (!t) {
      this.#tally.bad++;
      return;
    }
    if (accepted) this.#tally.accept(t, this.#opts.newest);
    else this.#tally.fail(t, line.offset, this.#opts.newest);
  }

  async #readManifest(): Promise<void> {
    const path = join(this.dir, MANIFEST);
    let key: string;
    try {
      const st = await stat(path);
      key = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
    } catch {
      return; // not written yet: the run has not started
    }
    if (key === this.#manifestKey) return;
    this.#manifestKey = key;
    this.#version++;
    try {
      const parsed: unknown = JSON.parse(await readFile(path, 'utf8'));
      this.#manifest = manifestView(parsed);
      this.#endpoint = endpointOf(parsed);
      this.#manifestError = null;
    } catch (err) {
      // The store replaces it whole, so this is a hand or another tool: keep the last good one and say so.
      this.#manifestError = `${path}: ${err instanceof SyntaxError ? `not valid JSON (${err.message})` : (err as Error).message}`;
    }
  }

  figures(now = Date.now()): LiveFigures {
    const t = this.#tally;
    const m = this.#manifest;
    const running = m === null || m.status === null || m.status === 'running';
    const window = this.#opts.rateWindowMs;
    const sessionStart = Date.parse(m?.session_started_at ?? '');
    // A run that stopped is measured over the end of its last session, not over the idle time since.
    const endAt = running ? now : Date.parse(m?.session_finished_at ?? m?.updated_at ?? '');
    const end = Number.isFinite(endAt) ? endAt : now;
    const from = Number.isFinite(sessionStart) ? Math.max(end - window, sessionStart) : end - window;
    const { n, oldest } = t.finishedBetween(from, end);
    // When the ring holds only part of the window, the rate is over the part it holds.
    const span = n >= RING ? end - oldest : end - from;
    const perMin = span > 0 ? (n * 60_000) / span : null;
    const price = this.#opts.price ?? null;
    const ok = t.status.get('ok') ?? 0;
    return {
      cursor: this.cursor,
      at: new Date(now).toISOString(),
      manifest: m,
      manifest_error: this.#manifestError,
      rows: { read: t.read, counted: t.counted, superseded: t.superseded, bad: t.bad },
      unreadable: [...t.unreadable],
      status: sorted(t.status),
      acceptance_rate: t.counted ? ok / t.counted : null,
      reasons: sorted(t.reasons),
      done: t.accepted.size + t.failed.size,
      rate: { per_min: perMin, over: running ? 'window' : 'last session', window_s: Math.round(window / 1000) },
      tokens: { prompt: t.prompt, completion: t.completion, total: t.total },
      spend_usd: price ? (t.prompt * price.prompt + t.completion * price.completion) / 1e6 : null,
      price,
      newest: t.newest.map((x) => [x.id, x.status, x.reason, x.at]),
      series: [...t.perMinute].sort((a, b) => a[0] - b[0]).slice(-SERIES_MINUTES).map(([m, [n, ok]]) => [m, n, ok]),
      endpoint: sumEndpoints([...(this.#endpoint ? [this.#endpoint] : []), ...this.#workers.counts]),
    };
  }

  /**
   * The rows a page with `cursor` has not seen, up to where the figures are, as the page's row
   * lines, oldest finish first; at most about `chunkBytes` of the files read (`more` says there is
   * more to fetch). A failed attempt is sent only while it is its id's latest state; an accepted
   * row always (the page keeps the first per id). `reload`: the cursor belongs to files that were
   * since replaced, or is not a place in them; the page should load anew.
   */
  async rowsSince(cursor: Cursor, rowOpts: RowOptions): Promise<{ reload: true } | { reload: false; cursor: Cursor; rows: string[]; more: boolean }> {
    const to = this.cursor;
    const valid = (n: number, max: number): boolean => Number.isSafeInteger(n) && n >= 0 && n <= max;
    if (cursor.generation !== to.generation || !valid(cursor.trajectories, to.trajectories) || !valid(cursor.failures, to.failures)) return { reload: true };
    let budget = this.#opts.chunkBytes;
    const t = await linesBetween(this.#traj.path, cursor.trajectories, to.trajectories, budget, this.#maxLine);
    if (t) budget = Math.max(1, budget - (t.end - cursor.trajectories));
    // The failures wait until the accepted rows are all sent, so the page never holds a failure whose acceptance it skipped.
    const f = t && t.end === to.trajectories ? await linesBetween(this.#fail.path, cursor.failures, to.failures, budget, this.#maxLine) : { lines: [], end: cursor.failures };
    if (!t || !f || this.#generation !== to.generation) return { reload: true };
    const rows: { finished: number; line: string }[] = [];
    const tally = this.#tally;
    const add = (row: Partial<Trajectory>): void => {
      const finished = Date.parse(str(row.timing?.finished_at) ?? '');
      rows.push({ finished: Number.isFinite(finished) ? finished : 0, line: rowLine(row, rowOpts) });
    };
    // Lines the figures counted as unreadable are not rows here either.
    const readable = (l: TailLine): Partial<Trajectory> | undefined => (lineProblem(l, this.#maxLine) === undefined ? parseRow(l.text) : undefined);
    for (const line of t.lines) {
      const row = readable(line);
      if (row) add(row);
    }
    for (const line of f.lines) {
      const row = readable(line);
      if (!row) continue;
      const id = row.id!;
      if (!tally.accepted.has(id) && tally.failed.get(id)?.offset === line.offset) add(row);
    }
    rows.sort((a, b) => a.finished - b.finished);
    const next: Cursor = { generation: to.generation, trajectories: t.end, failures: f.end };
    return { reload: false, cursor: next, rows: rows.map((r) => r.line), more: next.trajectories < to.trajectories || next.failures < to.failures };
  }
}
