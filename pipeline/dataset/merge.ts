/**
 * `merge`: shard runs → one run, one record per id. An accepted record beats a failed one,
 * a later attempt beats an earlier one; an id accepted in two runs is a conflict, reported
 * (the later run on the command line wins). Two passes over the files, ids in memory only.
 *
 * Runs with agents: a family (a root and its sub-agent sessions, one attempt) is the unit. The
 * root is picked as any record is; its sessions follow it: the same attempt, from the root's
 * run when that run holds them, else (a family split across runs) from the first run that
 * does; never from two runs (a child accepted in one and failed in the other would not match
 * its caller's call), never twice. A sub-agent session whose root is in no run is left out
 * and counted. The manifest
 * counts roots as samples and the sub-agent sessions apart, as a run does.
 *
 * Queue mode (`merge --queue`): the runs are workers' directories, and Redis says which
 * record of each sample was accepted (the worker and the sha256 of its line): exactly that
 * line is kept, with the sub-agent sessions of its family (same worker, same attempt), and
 * every other copy is left out. A planned sample without its accepted record is missing.
 */
import { closeSync, createReadStream, openSync, readdirSync, readFileSync, renameSync } from 'node:fs';
import { mkdir, open, rm, type FileHandle } from 'node:fs/promises';
import { randomBytes, randomUUID } from 'node:crypto';
import { basename, dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { RunManifest, SCHEMA_VERSION } from '../../schemas/index.js';
import { compareFingerprints, fingerprint } from '../core/config.js';
import { TrajforgeError } from '../errors.js';
import { fsError, removeDeadTemps, statPath } from '../files.js';
import { IdSet } from '../id-set.js';
import { PACKAGE_VERSION } from '../paths.js';
import { lockHolder } from '../core/run-dir/lock.js';
import { parseRunLine, tailOf } from '../core/run-dir/run-lines.js';
import { FAILURES, MANIFEST, TRAJECTORIES } from '../core/run-dir/names.js';
import { attemptOf, familyRootOf, isChild, sessionKey } from './families.js';
import { lineSha, type AcceptedMark } from '../core/run-dir/accepted.js';

export interface MergeOptions {
  readonly runs: readonly string[];
  readonly out: string;
  /** Merge runs whose configs differ (beyond the shard). Off by default: that is usually a mistake. */
  readonly allowMismatch?: boolean | undefined;
  /** Queue mode: the run's planned ids and accepted marks, read from Redis by the caller. */
  readonly queue?: { readonly run: string; readonly planned: ReadonlySet<string>; readonly accepted: ReadonlyMap<string, AcceptedMark> } | undefined;
  /**
   * Merge although planned samples have no record. Off by default: the set would be short.
   * With a queue, Redis says what was planned; without one, each run's manifest (the samples
   * in its question set) and the shards given (every `i` of `n`).
   */
  readonly allowMissing?: boolean | undefined;
}

/** How many missing ids the report names. */
const MISSING_SHOWN = 5;

export interface MergeConflict {
  readonly id: string;
  /** The runs that accepted the id. */
  readonly runs: readonly string[];
  readonly kept: string;
}

export interface MergeReport {
  readonly out: string;
  readonly accepted: number;
  readonly failed: number;
  /** Records read that the merge left out (earlier attempts, losing duplicates, the sessions of a family that lost). */
  readonly superseded: number;
  /** Runs with agents: sub-agent sessions written (not in `accepted`/`failed`, which count samples). */
  readonly sub_agents?: { readonly accepted: number; readonly failed: number } | undefined;
  /** Sub-agent sessions left out because their family's root is in none of the runs. */
  readonly orphans: number;
  readonly conflicts: readonly MergeConflict[];
  /** Runs that a live process was writing: merged as they were when merge started. */
  readonly live: readonly { readonly dir: string; readonly pid: number }[];
  /** Last lines left out because they were not whole (a write cut, or under way). */
  readonly cut: readonly { readonly file: string; readonly bytes: number }[];
  /** Fingerprint fields that some runs do not record (written by an earlier trajforge), so could not be compared. */
  readonly unrecorded: readonly string[];
  /** Planned samples without a record in the runs given (merged anyway with allowMissing): queue mode names the first ids. */
  readonly missing: { readonly count: number; readonly first: readonly string[] };
  /** Without a queue: what each run or the shards lack, one line each (merged anyway with allowMissing). */
  readonly incomplete: readonly string[];
}

interface Pick {
  run: number;
  file: number;
  line: number;
  ok: boolean;
  attempt: number;
  /** Runs that accepted this id, when more than one: a conflict. */
  acceptedIn?: number[];
}

/** Shards of one job differ in their shard and nothing else that shapes a trajectory. */
function comparable(fields: Record<string, unknown>): Record<string, unknown> {
  const sel = fields['questions.selection'];
  if (sel === null || typeof sel !== 'object') return fields;
  return { ...fields, 'questions.selection': { ...(sel as Record<string, unknown>), shard: null } };
}

function readManifest(dir: string): RunManifest {
  const file = join(dir, MANIFEST);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new TrajforgeError('BAD_INPUT', `${dir}: not a run directory (no ${MANIFEST})`, { file: dir });
    throw fsError(dir, err, 'not a run directory');
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new TrajforgeError('BAD_INPUT', `${file}: not valid JSON`, { file });
  }
  const parsed = RunManifest.safeParse(json);
  if (!parsed.success) throw new TrajforgeError('BAD_INPUT', `${file}: not a trajforge run manifest`, { file });
  return parsed.data;
}

/**
 * What merge reads of one file: the bytes it held when merge started. A run still being
 * written only grows, so both passes see the same lines. The last line without its newline
 * is read when it is whole and left out (and said) when a write was cut or is under way.
 */
interface Snapshot {
  readonly path: string;
  /** Bytes of whole lines ending in a newline. */
  readonly complete: number;
  /** A whole last line without its newline, read after the others. */
  readonly lastLine?: string | undefined;
  /** Bytes of a last line left out because it is not whole. */
  readonly cut: number;
}

function snapshot(path: string): Snapshot {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { path, complete: 0, cut: 0 };
    throw fsError(path, err, 'cannot read');
  }
  try {
    const tail = tailOf(fd);
    const text = tail.bytes.toString('utf8');
    if (tail.whole) return { path, complete: tail.complete, lastLine: text.trim() === '' ? undefined : text, cut: 0 };
    return { path, complete: tail.complete, cut: tail.bytes.length };
  } finally {
    closeSync(fd);
  }
}

async function* lines(snap: Snapshot): AsyncGenerator<{ line: number; text: string }> {
  let line = 0;
  if (snap.complete > 0) {
    const rl = createInterface({ input: createReadStream(snap.path, { encoding: 'utf8', end: snap.complete - 1 }), crlfDelay: Infinity });
    for await (const text of rl) {
      line++;
      if (text.trim() !== '') yield { line, text };
    }
  }
  if (snap.lastLine !== undefined) yield { line: line + 1, text: snap.lastLine };
}

const FILES = [TRAJECTORIES, FAILURES] as const;

/** The temporary directory a merge into `out` builds before renaming it: `.<out>.merge-<pid>-<hex>.tmp` beside it. */
function tempDirFor(out: string): { path: string; pattern: RegExp } {
  const name = basename(resolve(out));
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return {
    path: join(dirname(resolve(out)), `.${name}.merge-${process.pid}-${randomBytes(4).toString('hex')}.tmp`),
    pattern: new RegExp(`^\\.${escaped}\\.merge-(\\d+)-[0-9a-f]+\\.tmp$`),
  };
}

/** `--out` must name a new run directory: nothing there, or an empty directory. */
function checkOut(out: string): void {
  const st = statPath(out, `merge: --out ${out}`);
  if (st && !st.isDirectory()) throw new TrajforgeError('BAD_USAGE', `${out}: exists and is a file; merge writes a new run directory`, { file: out });
  if (st && readdirSync(out).length > 0) throw new TrajforgeError('BAD_USAGE', `${out}: exists and is not empty; merge writes a new run`, { file: out });
  const parent = dirname(resolve(out));
  const up = statPath(parent, `merge: --out ${out}`);
  if (up && !up.isDirectory()) throw new TrajforgeError('BAD_USAGE', `${out}: ${parent} is a file, not a directory`, { file: out });
}

export async function merge(opts: MergeOptions): Promise<MergeReport> {
  const { runs, out } = opts;
  if (runs.length === 0) throw new TrajforgeError('BAD_USAGE', 'merge: no runs given');
  checkOut(out);
  const temp = tempDirFor(out);
  // Left by a merge that was killed: never in the way, and not kept either.
  removeDeadTemps(dirname(temp.path), temp.pattern);
  const manifests = runs.map(readManifest);
  const base = comparable(manifests[0]!.fingerprint_fields);
  const unrecorded = new Set<string>();
  for (let r = 1; r < runs.length; r++) {
    // A field one run does not record (an earlier trajforge wrote it) cannot be compared: said, not refused.
    const { changed, unknown } = compareFingerprints(base, comparable(manifests[r]!.fingerprint_fields));
    for (const k of unknown) unrecorded.add(k);
    if (changed.length && !opts.allowMismatch) {
      throw new TrajforgeError('RUN_MISMATCH', `${runs[r]}: made with another config than ${runs[0]} (${changed.join(', ')} differ); pass --allow-mismatch to merge anyway`, {
        file: runs[r],
      });
    }
  }
  const keep = queueFilter(opts, runs, manifests);
  const live = runs.flatMap((dir) => {
    const holder = lockHolder(dir);
    return holder ? [{ dir, pid: holder.pid }] : [];
  });
  // Taken once, before either pass: what a run still being written adds later is not merged.
  const snaps = runs.map((dir) => FILES.map((f) => snapshot(join(dir, f))));
  const cut = snaps.flat().filter((s) => s.cut > 0).map((s) => ({ file: s.path, bytes: s.cut }));

  // Pass 1: which record each id keeps.
  const picks = new Map<string, Pick>();
  // Family (root id and attempt) → the runs that hold sub-agent sessions of it.
  const childRuns = new Map<string, number[]>();
  let read = 0;
  /** Without a queue: the samples (roots) each run holds, to compare with the samples its manifest planned. */
  const held = opts.queue ? undefined : runs.map(() => new IdSet());
  for (let run = 0; run < runs.length; run++) {
    for (let file = 0; file < FILES.length; file++) {
      const snap = snaps[run]![file]!;
      for await (const { line, text } of lines(snap)) {
        const rec = parseRunLine(text, snap.path, line);
        read++;
        if (keep && !keep(run, rec, text)) continue;
        if (held && !isChild(rec)) held[run]!.add(rec.id);
        // A sub-agent session follows its root's pick (pass 2); here only which runs hold the family.
        if (isChild(rec)) {
          const fam = sessionKey(familyRootOf(rec)!, attemptOf(rec));
          const holders = childRuns.get(fam);
          if (holders === undefined) childRuns.set(fam, [run]);
          else if (!holders.includes(run)) holders.push(run);
          continue;
        }
        const cand: Pick = { run, file, line, ok: rec.status === 'ok', attempt: typeof rec.attempt === 'number' ? rec.attempt : 0 };
        const prev = picks.get(rec.id);
        if (!prev) {
          picks.set(rec.id, cand);
          continue;
        }
        if (prev.ok && cand.ok && prev.run !== run) cand.acceptedIn = [...(prev.acceptedIn ?? [prev.run]), run];
        // Accepted beats failed; then the later attempt; then the later run and line.
        const better = cand.ok !== prev.ok ? cand.ok : cand.attempt !== prev.attempt ? cand.attempt > prev.attempt : true;
        if (better) picks.set(rec.id, { ...cand, acceptedIn: cand.acceptedIn ?? prev.acceptedIn });
        else if (cand.acceptedIn) prev.acceptedIn = cand.acceptedIn;
      }
    }
  }

  let missing: MergeReport['missing'] = { count: 0, first: [] };
  if (opts.queue) {
    const ids = [...opts.queue.planned].filter((id) => !picks.has(id));
    missing = { count: ids.length, first: ids.slice(0, MISSING_SHOWN) };
    if (ids.length > 0 && !opts.allowMissing) {
      const accepted = ids.filter((id) => opts.queue!.accepted.has(id)).length;
      throw new TrajforgeError(
        'RUN_INCOMPLETE',
        `merge: ${ids.length} of the ${opts.queue.planned.size} samples planned for run ${opts.queue.run} have no accepted record in the runs given (${missing.first.join(', ')}${ids.length > MISSING_SHOWN ? ', …' : ''}): ` +
          `${accepted} were accepted by a worker whose directory is not among them, ${ids.length - accepted} are not accepted yet (trajforge status). Pass --allow-missing to merge what is there`,
      );
    }
  }

  const incomplete = held ? shortRuns(runs, manifests, held, new Set(live.map((l) => l.dir))) : [];
  if (incomplete.length > 0 && !opts.allowMissing) {
    throw new TrajforgeError('RUN_INCOMPLETE', `merge: the runs given miss samples: ${incomplete.join('; ')}. Finish them (the same generate command resumes a run), or pass --allow-missing to merge what is there`);
  }

  const conflicts: MergeConflict[] = [];
  for (const [id, p] of picks) if (p.acceptedIn) conflicts.push({ id, runs: p.acceptedIn.map((r) => runs[r]!), kept: runs[p.run]! });

  // Pass 2: the kept lines and the manifest, into a directory beside --out that is renamed
  // onto it at the end, so --out holds a whole run or nothing (a full disk included).
  let accepted = 0;
  let failed = 0;
  let subAccepted = 0;
  let subFailed = 0;
  let orphans = 0;
  // Ids and attempts of the sub-agent sessions written, so a run that holds one twice writes it once.
  const childrenWritten = new Set<string>();
  const subReasons: Record<string, number> = {};
  const byReason: Record<string, number> = {};
  const handles: FileHandle[] = [];
  let writing = temp.path;
  try {
    await mkdir(dirname(temp.path), { recursive: true });
    await mkdir(temp.path);
    for (const f of FILES) {
      writing = join(temp.path, f);
      handles.push(await open(writing, 'wx'));
    }
    for (let run = 0; run < runs.length; run++) {
      for (let file = 0; file < FILES.length; file++) {
        const snap = snaps[run]![file]!;
        for await (const { line, text } of lines(snap)) {
          const rec = parseRunLine(text, snap.path, line);
          if (keep && !keep(run, rec, text)) continue;
          if (isChild(rec)) {
            const root = picks.get(familyRootOf(rec)!);
            if (root === undefined) {
              orphans++;
              continue;
            }
            // From the run of its root, or (a family split across runs) the first run that holds its sessions.
            const holders = childRuns.get(sessionKey(familyRootOf(rec)!, attemptOf(rec))) ?? [];
            const from = holders.includes(root.run) ? root.run : holders[0];
            const key = sessionKey(rec.id, attemptOf(rec));
            if (from !== run || root.attempt !== attemptOf(rec) || childrenWritten.has(key)) continue;
            childrenWritten.add(key);
            const ok = rec.status === 'ok';
            writing = join(temp.path, FILES[ok ? 0 : 1]);
            await handles[ok ? 0 : 1]!.appendFile(`${text}\n`);
            if (ok) subAccepted++;
            else {
              subFailed++;
              const reason = typeof rec.reason === 'string' ? rec.reason : 'unknown';
              subReasons[reason] = (subReasons[reason] ?? 0) + 1;
            }
            continue;
          }
          const pick = picks.get(rec.id);
          if (!pick) throw new TrajforgeError('BAD_INPUT', `${snap.path}:${line}: changed while merge read it (a run's files only grow)`, { file: snap.path, line });
          if (pick.run !== run || pick.file !== file || pick.line !== line) continue;
          writing = join(temp.path, FILES[pick.ok ? 0 : 1]);
          await handles[pick.ok ? 0 : 1]!.appendFile(`${text}\n`);
          if (pick.ok) accepted++;
          else {
            failed++;
            const reason = typeof rec.reason === 'string' ? rec.reason : 'unknown';
            byReason[reason] = (byReason[reason] ?? 0) + 1;
          }
        }
      }
    }
    for (const h of handles) await h.sync();

    const first = manifests[0]!;
    const now = new Date().toISOString();
    const fields = comparable(first.fingerprint_fields);
    const manifest: RunManifest = {
      ...first,
      schema_version: SCHEMA_VERSION,
      run_id: randomUUID(),
      created_at: now,
      updated_at: now,
      status: 'completed',
      trajforge_version: PACKAGE_VERSION,
      node_version: process.version,
      fingerprint_fields: fields,
      config_fingerprint: fingerprint(fields),
      questions: { path: first.questions.path, total: null },
      counts: { accepted, failed, by_reason: byReason, ...(subAccepted + subFailed > 0 ? { sub_agents: { accepted: subAccepted, failed: subFailed, by_reason: subReasons } } : {}) },
      sessions: [],
      merged_from: runs.map((dir, i) => ({ dir, run_id: manifests[i]!.run_id, counts: manifests[i]!.counts })),
    };
    writing = join(temp.path, MANIFEST);
    const mh = await open(writing, 'wx');
    handles.push(mh);
    await mh.writeFile(`${JSON.stringify(manifest, null, 2)}\n`);
    await mh.sync();
    await Promise.all(handles.splice(0).map((h) => h.close()));
    writing = out;
    renameSync(temp.path, out);
  } catch (err) {
    await Promise.all(handles.map((h) => h.close().catch(() => {})));
    await rm(temp.path, { recursive: true, force: true });
    if (err instanceof TrajforgeError) throw err;
    throw fsError(writing, err, 'merge: cannot write');
  }
  const subAgents = subAccepted + subFailed > 0 ? { accepted: subAccepted, failed: subFailed } : undefined;
  return { out, accepted, failed, superseded: read - accepted - failed - subAccepted - subFailed - orphans, sub_agents: subAgents, orphans, conflicts, live, cut, unrecorded: [...unrecorded].sort(), missing, incomplete };
}

/**
 * Without a queue, what is missing: shards of an `n`-way split that were not given, and runs
 * holding fewer samples than their manifest planned (`questions.total`). Not checked: a run
 * still being written (merged as it was, and said), one read from stdin (no total), and one
 * with `--until-correct` (samples not needed are not records).
 */
function shortRuns(runs: readonly string[], manifests: readonly RunManifest[], held: readonly IdSet[], live: ReadonlySet<string>): string[] {
  const out: string[] = [];
  const shards = new Map<number, Set<number>>();
  manifests.forEach((m, r) => {
    const sel = m.fingerprint_fields['questions.selection'] as { shard?: unknown; until_correct?: unknown } | undefined;
    const shard = typeof sel?.shard === 'string' ? /^\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(sel.shard) : null;
    if (shard) {
      const n = Number(shard[2]);
      shards.set(n, (shards.get(n) ?? new Set()).add(Number(shard[1])));
    }
    const total = m.questions.total;
    if (total === null || live.has(runs[r]!) || sel?.until_correct === true || m.merged_from !== undefined) return;
    const have = held[r]!.size;
    if (have < total) out.push(`${runs[r]} holds ${have} of the ${total} samples it planned (status ${m.status})`);
  });
  for (const [n, got] of shards) {
    const absent = Array.from({ length: n }, (_, i) => i).filter((i) => !got.has(i));
    if (absent.length > 0) out.push(`shards ${absent.map((i) => `${i}/${n}`).join(', ')} are not among them`);
  }
  return out;
}

/**
 * Queue mode: whether a line is the accepted copy. A root line is, when Redis accepted its
 * sample from this run's worker with this line's sha256; a sub-agent session's line is, when
 * its family's root was accepted from this worker at the same attempt.
 */
function queueFilter(opts: MergeOptions, runs: readonly string[], manifests: readonly RunManifest[]): ((run: number, rec: ReturnType<typeof parseRunLine>, text: string) => boolean) | undefined {
  const q = opts.queue;
  if (!q) return undefined;
  const workers = manifests.map((m, i) => {
    if (m.worker === undefined || m.worker.run !== q.run) {
      throw new TrajforgeError('BAD_USAGE', `${runs[i]}: not a worker directory of run ${q.run}${m.worker ? ` (its worker ran run ${m.worker.run})` : ''}; merge --queue takes the directories \`trajforge worker --run ${q.run}\` wrote`, { file: runs[i] });
    }
    return m.worker.name;
  });
  return (run, rec, text) => {
    if (isChild(rec)) {
      const mark = q.accepted.get(familyRootOf(rec)!);
      return mark !== undefined && mark.w === workers[run] && mark.attempt === (typeof rec.attempt === 'number' ? rec.attempt : 0);
    }
    const mark = q.accepted.get(rec.id);
    return mark !== undefined && mark.w === workers[run] && mark.sha === lineSha(text);
  };
}
