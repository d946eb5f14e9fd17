/**
 * The run directory: append-only JSONL, one complete line per record, crash-safe and
 * resumable. Holds ids, never records, in memory.
 *
 *   manifest.json         config (redacted), fingerprint, counts, one `sessions` entry per invocation
 *   trajectories.jsonl    accepted trajectories, one per sample id
 *   failures.jsonl        every failed attempt
 *
 * With agents a sample is a family (a root session and the sub-agent sessions below it),
 * written as one unit: its sub-agent sessions first, the root last, each line to the file its
 * status names. Appends are chained, so a crash can leave only the last family's sub-agent
 * lines without their root, at the end of the files: opening the run moves those aside
 * (run-lines.ts `cutOrphans`) and the family is redone.
 */
import { createReadStream, existsSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { mkdir, open, readFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { RunManifest, type RunEndpointCounts, type Trajectory } from '../../schemas/index.js';
import { addCounts } from '../core/llm/counts.js';
import { compareFingerprints, fingerprint } from '../core/config.js';
import { TrajforgeError } from '../errors.js';
import { IdSet } from '../id-set.js';
import { PACKAGE_VERSION } from '../paths.js';
import { appendLine } from '../core/jsonl.js';
import { GroupFlush } from './group-flush.js';
import { Scrubber } from '../core/secrets.js';
import { SpendTally } from '../core/cost.js';
import { fsError } from '../files.js';
import { releaseLock, takeLock } from '../core/run-dir/lock.js';
import { FAILURES, MANIFEST, TRAJECTORIES } from '../core/run-dir/names.js';
import { checkRunPlace } from '../core/run-dir/place.js';
import { cutOrphans, describeTailRepair, parseRunLine, repairTail, type RunLine } from '../core/run-dir/run-lines.js';


/** A sub-agent session's line, not yet known to have its family's root on disk. */
interface PendingSub {
  readonly id: string;
  /** `family_id` and `attempt`: the root line it needs. */
  readonly root: string;
  /** Undefined when accepted. */
  readonly reason: string | undefined;
  readonly line: number;
  /** Where the line starts in its file, in bytes. */
  readonly offset: number;
}

/** A family's root line by what its sessions name it with: its id and attempt. */
const rootKey = (id: string, attempt: number): string => `${id}\u0000${attempt}`;

/**
 * Reads the ids of both files, without keeping the records, and finds the sub-agent lines
 * whose family root (same `family_id`, same attempt) has no line in either file. A family's
 * root is written after its sub-agent sessions, so only the lines after a file's last root line
 * can be such orphans; they are noted once their root is found, and the rest are returned.
 */
async function scanRun(files: readonly string[], note: (id: string, attempt: number, reason: string | undefined, sub: boolean, rec?: RunLine) => void, each: (rec: RunLine) => void): Promise<Map<string, PendingSub[]>> {
  const roots = new IdSet();
  const pending = new Map<string, PendingSub[]>();
  for (const file of files) {
    const ok = file.endsWith(TRAJECTORIES);
    const since: PendingSub[] = [];
    pending.set(file, since);
    if (!existsSync(file)) continue;
    const rl = createInterface({ input: createReadStream(file, { encoding: 'utf8' }), crlfDelay: Infinity });
    let line = 0;
    let offset = 0;
    for await (const text of rl) {
      line++;
      const at = offset;
      // The store writes its lines itself, in UTF-8 and ending in a lone newline; cutOrphans checks the place before it cuts.
      offset += Buffer.byteLength(text, 'utf8') + 1;
      if (text.trim() === '') continue;
      const rec = parseRunLine(text, file, line);
      each(rec);
      const attempt = typeof rec.attempt === 'number' ? rec.attempt : 0;
      const reason = ok ? undefined : typeof rec.reason === 'string' ? rec.reason : 'unknown';
      if (typeof rec.parent_id === 'string') {
        since.push({ id: rec.id, root: rootKey(typeof rec.family_id === 'string' ? rec.family_id : '', attempt), reason, line, offset: at });
        continue;
      }
      if (typeof rec.family_id === 'string') roots.add(rootKey(rec.id, attempt));
      // Everything before a root line in this file belongs to a family written before it, or to this one.
      for (const p of since.splice(0)) note(p.id, attempt, p.reason, true);
      note(rec.id, attempt, reason, false, rec);
    }
  }
  const orphans = new Map<string, PendingSub[]>();
  for (const [file, since] of pending) {
    const missing = since.filter((p) => !roots.has(p.root));
    if (missing.length > 0) {
      const first = since.indexOf(missing[0]!);
      // Only the last family can be cut short, and it is the end of each file: anything else was changed by hand.
      const after = since.slice(first).find((p) => roots.has(p.root));
      if (after !== undefined) {
        throw new TrajforgeError(
          'BAD_INPUT',
          `${file}:${missing[0]!.line}: sub-agent session ${missing[0]!.id} has no record of its family's root (${missing[0]!.root.replace('\u0000', ', attempt ')}), and line ${after.line} after it belongs to another family; the run directory was changed by hand?`,
          { file, line: missing[0]!.line },
        );
      }
      orphans.set(file, since.slice(first));
    }
    for (const p of since.slice(0, missing.length > 0 ? since.indexOf(missing[0]!) : since.length)) note(p.id, 0, p.reason, true);
  }
  return orphans;
}

export interface OpenRunOptions {
  readonly dir: string;
  /** The manifest to write when the directory holds no run yet. */
  readonly fresh: () => RunManifest;
  /** Resuming requires the same fingerprint; the message names the fields that differ. */
  readonly fingerprintFields: Record<string, unknown>;
  /** The run's secrets, scrubbed from every record and manifest written (the last line of defence). Default none. */
  readonly scrubber?: Scrubber | undefined;
  /** Resume even when fingerprint fields differ; the change is recorded in the new invocation's entry. */
  readonly allowConfigChange?: boolean | undefined;
  /** The config as it may be written (redacted): replaces the manifest's when a change is allowed. */
  readonly config?: Record<string, unknown> | undefined;
}

/** One invocation's entry in the manifest (the contract names the list `sessions`). */
type Invocation = RunManifest["sessions"][number];

/** Writes a manifest atomically (a temporary file renamed over it), scrubbed: a reader sees the old one or the new one, never half of one. */
export function writeManifestFile(path: string, manifest: RunManifest, scrubber: Scrubber): void {
  try {
    writeFileSync(`${path}.tmp`, `${JSON.stringify(scrubber.value(manifest), null, 2)}\n`);
    renameSync(`${path}.tmp`, path);
  } catch (err) {
    // The old manifest stays in place; a half-written temporary file does not.
    try {
      rmSync(`${path}.tmp`, { force: true });
    } catch {
      // not a file we can remove (a directory): the error below says what failed
    }
    throw new TrajforgeError('WRITE_FAILED', `${path}: cannot write the manifest: ${(err as Error).message}`, { file: path, cause: err });
  }
}

/** The manifest's invocations with the last one ended: when, and how (`exit`). */
export function endLastInvocation(sessions: RunManifest['sessions'], exit: string): RunManifest['sessions'] {
  const out = [...sessions];
  const last = out.pop();
  if (last) out.push({ ...last, finished_at: new Date().toISOString(), exit });
  return out;
}

/**
 * The manifest with `now` as its last invocation's endpoint counts, and the run's total made
 * anew from every invocation's: a resume adds its own to those on record, never counts twice.
 */
export function withEndpoint(manifest: RunManifest, now: RunEndpointCounts): RunManifest {
  const sessions = [...manifest.sessions];
  const last = sessions.pop();
  if (last === undefined) return manifest;
  sessions.push({ ...last, endpoint: now });
  let total: RunEndpointCounts | undefined;
  for (const s of sessions) {
    if (s.endpoint === undefined) continue;
    const judge = total?.judge && s.endpoint.judge ? addCounts(total.judge, s.endpoint.judge) : (s.endpoint.judge ?? total?.judge);
    total = { agents: total ? addCounts(total.agents, s.endpoint.agents) : s.endpoint.agents, ...(judge ? { judge } : {}) };
  }
  return { ...manifest, sessions, ...(total ? { endpoint: total } : {}) };
}

/** A run directory's manifest, or the error that says it is none. */
export async function readRunManifest(manifestPath: string): Promise<RunManifest> {
  const text = await readFile(manifestPath, 'utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new TrajforgeError('BAD_INPUT', `${manifestPath}: not valid JSON`, { file: manifestPath });
  }
  const m = RunManifest.safeParse(parsed);
  if (!m.success) throw new TrajforgeError('BAD_INPUT', `${manifestPath}: not a trajforge run manifest (${m.error.issues[0]?.message})`, { file: manifestPath });
  return m.data;
}

/**
 * Whether a resume may go on, and with what: the same fingerprint, or a changed one on
 * purpose (`allowConfigChange`). Returns the manifest to go on with, what the new invocation
 * records, and what to tell the person running it. (Also a synthesis run's: synthesize/store.ts.)
 */
export function resumeWith(manifest: RunManifest, opts: OpenRunOptions, file: string): { manifest: RunManifest; invocation: Partial<Invocation>; notices: string[] } {
  const before = manifest.fingerprint_fields;
  // The manifest holds them scrubbed: so are these, to compare like with like.
  const now = (opts.scrubber ?? Scrubber.none).value(opts.fingerprintFields);
  const { changed, unknown } = compareFingerprints(before, now);
  // Fields the manifest lacks were added to the fingerprint after the run began. (A field it has
  // that this version no longer records cannot be compared either; it is dropped.)
  const added = unknown.filter((k) => Object.hasOwn(now, k));
  if (changed.length && !opts.allowConfigChange) {
    throw new TrajforgeError(
      'RUN_MISMATCH',
      `${opts.dir}: this run was made with another config; these fields differ: ${changed.join(', ')}. Use another --out, restore the original values, or pass --allow-config-change to go on with the new ones (the change is recorded in the manifest).`,
      { file, field: changed[0] },
    );
  }
  const notices: string[] = [];
  const previous = manifest.sessions.at(-1)?.trajforge_version ?? manifest.trajforge_version;
  if (previous !== PACKAGE_VERSION) notices.push(`this run was last written by trajforge ${previous}; this is ${PACKAGE_VERSION}: its prompts, repairs and checks may differ, so samples made by the two may too`);
  if (added.length) notices.push(`this run's manifest does not record ${added.join(', ')} (an earlier trajforge wrote it): a change there since the run began cannot be told; recorded from now on`);
  if (changed.length) notices.push(`going on with a changed config (--allow-config-change): ${changed.join(', ')} differ from the run's; recorded in the manifest (sessions[].config_changes)`);
  const invocation: Partial<Invocation> = {
    ...(changed.length ? { config_changes: changed.map((field) => ({ field, before: before[field], after: now[field] })) } : {}),
    ...(added.length ? { fingerprint_fields_added: added } : {}),
  };
  return {
    manifest: {
      ...manifest,
      fingerprint_fields: now,
      config_fingerprint: fingerprint(now),
      ...(changed.length && opts.config ? { config: opts.config } : {}),
    },
    invocation,
    notices,
  };
}

export class RunStore {
  readonly dir: string;
  /** Accepted samples: root sessions (with agents, the sub-agent sessions are apart). */
  readonly accepted = new IdSet();
  /** Question ids with an accepted sample the judge found correct: `--until-correct` runs no more of their samples. */
  readonly answered = new IdSet();
  /** The latest failed attempt of each sample id that has no accepted record. */
  readonly failed = new Map<string, { attempt: number; reason: string }>();
  /** Sub-agent sessions: accepted ids, and the latest failure reason of the others. */
  readonly #subAccepted = new IdSet();
  readonly #subFailed = new Map<string, string>();
  readonly resumed: boolean;
  /** Tokens the records on disk spent, every invocation's (core/cost.ts): what `budgets.max_cost_usd` counts. */
  readonly spent = new SpendTally();
  /** What the spend costs, for the manifest; set by the run, which knows the prices. */
  #costOf: ((spent: SpendTally) => NonNullable<RunManifest['cost']>) | undefined;
  /** This invocation's endpoint counts, as its model clients have them now; set by the run, which holds the clients. */
  #endpointNow: (() => RunEndpointCounts) | undefined;
  /** What opening the run found and did that the person running it should hear of (a repaired tail…). */
  readonly notices: string[] = [];
  #manifest: RunManifest;
  #traj: FileHandle | undefined;
  #fail: FileHandle | undefined;
  /** Bytes of each file that hold complete lines: a failed append is cut back to this. */
  #trajBytes = 0;
  #failBytes = 0;
  /** Appends are chained so lines never interleave and a failed write stops all later ones. */
  #chain: Promise<void> = Promise.resolve();
  #writeError: Error | undefined;
  /** Queue mode's flushes before an accept, shared by the accepts waiting at once. */
  readonly #flush = new GroupFlush(() => [
    { handle: this.#traj, written: this.#trajBytes },
    { handle: this.#fail, written: this.#failBytes },
  ]);
  readonly #scrubber: Scrubber;
  /** Each written root record's line (scrubbed JSON, no newline), while the record lives: queue mode hashes it for the accept. */
  readonly #lines = new WeakMap<Trajectory, string>();

  /** Our entry in `.lock/`, released at close. */
  readonly #lock: string;

  private constructor(dir: string, manifest: RunManifest, resumed: boolean, lock: string, scrubber: Scrubber) {
    this.dir = dir;
    this.#lock = lock;
    this.#manifest = manifest;
    this.resumed = resumed;
    this.#scrubber = scrubber;
  }

  get manifest(): RunManifest {
    return this.#manifest;
  }

  static async open(opts: OpenRunOptions): Promise<RunStore> {
    const { dir } = opts;
    checkRunPlace(dir);
    try {
      await mkdir(dir, { recursive: true });
    } catch (err) {
      throw fsError(dir, err, 'cannot make the run directory');
    }
    // One process per run directory: two writers would break "accepted at most once".
    const lock = takeLock(dir);
    let opened: RunStore | undefined;
    try {
      const manifestPath = join(dir, MANIFEST);
      let manifest: RunManifest;
      let resumed = false;
      let invocation: Partial<Invocation> = {};
      const notices: string[] = [];
      if (existsSync(manifestPath)) {
        const resume = resumeWith(await readRunManifest(manifestPath), opts, manifestPath);
        manifest = resume.manifest;
        invocation = resume.invocation;
        notices.push(...resume.notices);
        resumed = true;
      } else {
        manifest = opts.fresh();
      }
      const store = new RunStore(dir, manifest, resumed, lock, opts.scrubber ?? Scrubber.none);
      opened = store;
      store.notices.push(...notices);
      const repairs = [repairTail(join(dir, TRAJECTORIES)), repairTail(join(dir, FAILURES))].filter((r) => r !== undefined);
      const orphans = await scanRun([join(dir, TRAJECTORIES), join(dir, FAILURES)], (id, attempt, reason, sub, rec) => {
        if (sub) store.#noteSub(id, reason);
        else if (reason === undefined) {
          store.accepted.add(id);
          if (rec !== undefined) store.#noteAnswered(rec);
        } else store.#noteFailure(id, attempt, reason);
      }, (rec) => store.spent.add(rec));
      // After the tails are whole: the sub-agent sessions of a family whose root a crash kept from being written.
      for (const [file, lines] of orphans) repairs.push(cutOrphans(file, lines[0]!.offset, lines.map((l) => l.id)));
      store.notices.push(...repairs.map(describeTailRepair));
      store.#traj = await open(join(dir, TRAJECTORIES), 'a');
      store.#fail = await open(join(dir, FAILURES), 'a');
      store.#trajBytes = statSync(join(dir, TRAJECTORIES)).size;
      store.#failBytes = statSync(join(dir, FAILURES)).size;
      const now = new Date().toISOString();
      store.#manifest = {
        ...manifest,
        status: 'running',
        updated_at: now,
        sessions: [...manifest.sessions, { started_at: now, trajforge_version: PACKAGE_VERSION, ...invocation, ...(repairs.length ? { tail_repairs: repairs } : {}) }],
      };
      store.writeManifest();
      return store;
    } catch (err) {
      // A store that could not open holds nothing: a caller that goes on (a library user, a test) keeps no file open.
      if (opened !== undefined) await Promise.all([opened.#traj?.close(), opened.#fail?.close()]).catch(() => undefined);
      releaseLock(lock);
      throw err;
    }
  }

  /** Whether the sampler should skip this sample: accepted, or failed (failures are retried only by `rerun`). */
  isDone(sampleId: string): boolean {
    return this.accepted.has(sampleId) || this.failed.has(sampleId);
  }

  /**
   * Appends a trajectory to the file its status names. An id already accepted is not
   * written again; returns whether the record was written.
   */
  append(traj: Trajectory): Promise<boolean> {
    return this.appendFamily([traj]);
  }

  /**
   * Appends a family as one unit: `records` post-order, the root last (generate/agents.ts
   * `Family.records`), each to the file its status names. Nothing of a family whose root the
   * run has already accepted is written again; returns whether the family was written. A write
   * that fails cuts both files back to where the family began, so no part of it stays.
   */
  appendFamily(records: readonly Trajectory[]): Promise<boolean> {
    const result = this.#chain.then(async () => {
      if (this.#writeError) throw this.#writeError;
      const root = records.at(-1)!;
      if (root.status === 'ok' && this.accepted.has(root.id)) return false;
      const start = { traj: this.#trajBytes, fail: this.#failBytes };
      try {
        for (const traj of records) {
          // One serialisation serves the scrub, the write and (queue mode) the accepted line's hash.
          const text = this.#scrubber.json(traj);
          const ok = traj.status === 'ok';
          const bytes = appendLine((ok ? this.#traj! : this.#fail!).fd, text);
          if (ok) this.#trajBytes += bytes;
          else this.#failBytes += bytes;
          if (traj === root) this.#lines.set(root, text);
        }
      } catch (err) {
        // A full disk can take part of a line: cut it off, and the family's earlier lines with it, so every line on disk stays whole and no family is half there.
        await this.#traj!.truncate(start.traj).catch(() => {});
        await this.#fail!.truncate(start.fail).catch(() => {});
        this.#trajBytes = start.traj;
        this.#failBytes = start.fail;
        this.#writeError = new TrajforgeError('WRITE_FAILED', `${this.dir}: cannot append a record: ${(err as Error).message}`, { file: this.dir, cause: err });
        throw this.#writeError;
      }
      for (const traj of records) {
        this.spent.add(traj);
        if (traj !== root) this.#noteSub(traj.id, traj.status === 'ok' ? undefined : (traj.reason ?? 'unknown'));
        else if (traj.status === 'ok') {
          this.accepted.add(traj.id);
          this.failed.delete(traj.id);
          this.#noteAnswered(traj);
        } else {
          this.#noteFailure(traj.id, traj.attempt, traj.reason ?? 'unknown');
        }
      }
      return true;
    });
    this.#chain = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }

  /** The line this store wrote for a family's root record (`appendFamily`), as on disk without its newline. */
  lineOf(root: Trajectory): string | undefined {
    return this.#lines.get(root);
  }

  #noteAnswered(rec: RunLine): void {
    const verdict = (rec.judgement as { verdict?: unknown } | null | undefined)?.verdict;
    if (verdict === 'correct' && typeof rec.question_id === 'string') this.answered.add(rec.question_id);
  }

  /** A sub-agent session's latest state: accepted (no reason), or failed with a reason. */
  #noteSub(id: string, reason: string | undefined): void {
    if (reason === undefined) {
      this.#subAccepted.add(id);
      this.#subFailed.delete(id);
    } else if (!this.#subAccepted.has(id)) {
      this.#subFailed.set(id, reason);
    }
  }

  #noteFailure(id: string, attempt: number, reason: string): void {
    if (this.accepted.has(id)) return;
    const prev = this.failed.get(id);
    if (!prev || attempt >= prev.attempt) this.failed.set(id, { attempt, reason });
  }

  /** The latest state per id: accepted ids, and ids whose attempts all failed, by the last reason; sub-agent sessions apart. */
  counts(): RunManifest['counts'] {
    const by_reason: Record<string, number> = {};
    for (const { reason } of this.failed.values()) by_reason[reason] = (by_reason[reason] ?? 0) + 1;
    const counts: RunManifest['counts'] = { accepted: this.accepted.size, failed: this.failed.size, by_reason };
    if (this.#subAccepted.size === 0 && this.#subFailed.size === 0) return counts;
    const sub: Record<string, number> = {};
    for (const reason of this.#subFailed.values()) sub[reason] = (sub[reason] ?? 0) + 1;
    return { ...counts, sub_agents: { accepted: this.#subAccepted.size, failed: this.#subFailed.size, by_reason: sub } };
  }

  /** From now on every manifest written carries the run's cost, as `costOf` prices the spend. */
  priceSpendWith(costOf: (spent: SpendTally) => NonNullable<RunManifest['cost']>): void {
    this.#costOf = costOf;
  }

  /** From now on every manifest written carries this invocation's endpoint counts (in its `sessions` entry) and the run's total. */
  countEndpointWith(now: () => RunEndpointCounts): void {
    this.#endpointNow = now;
  }

  /** Atomic: a reader sees the old manifest or the new one, never half of one. */
  writeManifest(patch: Partial<RunManifest> = {}): void {
    const cost = this.#costOf ? { cost: this.#costOf(this.spent) } : {};
    const manifest = { ...this.#manifest, counts: this.counts(), ...patch, ...cost, updated_at: new Date().toISOString() };
    this.#manifest = this.#endpointNow ? withEndpoint(manifest, this.#endpointNow()) : manifest;
    writeManifestFile(join(this.dir, MANIFEST), this.#manifest, this.#scrubber);
  }

  /**
   * Waits for the appends in flight and flushes what they wrote to the disk: queue mode calls it
   * before a record is accepted in Redis, so an accepted record survives the machine too.
   */
  async sync(): Promise<void> {
    await this.#chain;
    if (this.#writeError) throw this.#writeError;
    await this.#flush.flush();
  }

  /** fdatasync calls `sync` has made. */
  get datasyncs(): number {
    return this.#flush.datasyncs;
  }

  /** Flushes and closes; the manifest records how the invocation ended. */
  async close(status: RunManifest['status'], exit: string): Promise<void> {
    await this.#chain;
    for (const fh of [this.#traj, this.#fail]) {
      if (!fh) continue;
      await fh.sync().catch(() => {});
      await fh.close().catch(() => {});
    }
    this.#traj = this.#fail = undefined;
    try {
      this.writeManifest({ status, sessions: endLastInvocation(this.#manifest.sessions, exit) });
    } finally {
      releaseLock(this.#lock);
    }
  }
}
