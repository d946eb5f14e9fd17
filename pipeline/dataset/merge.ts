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
import { mkdir, open, rm, type FileHandle } from 'node:fs/promises';
import { renameSync, rmSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { RunManifest, SCHEMA_VERSION } from '../../schemas/index.js';
import { compareFingerprints, fingerprint } from '../core/config.js';
import { TrajforgeError } from '../errors.js';
import { fsError, removeDeadTemps } from '../files.js';
import { IdSet } from '../id-set.js';
import { PACKAGE_VERSION } from '../paths.js';
import { lockHolder } from '../core/run-dir/lock.js';
import { parseRunLine } from '../core/run-dir/run-lines.js';
import { FAILURES, MANIFEST, TRAJECTORIES } from '../core/run-dir/names.js';
import { attemptOf, familyRootOf, isChild, sessionKey } from './families.js';
import { checkDistinct, checkOut, comparable, queueFilter, readManifest, shortRuns, tempDirFor, unstartedWorker, type KeepLine, type QueueLedger } from './merge-checks.js';
import { snapshot, snapshotLines, type Snapshot } from './run-snapshot.js';

export interface MergeOptions {
  readonly runs: readonly string[];
  readonly out: string;
  /** Merge runs whose configs differ (beyond the shard). Off by default: that is usually a mistake. */
  readonly allowMismatch?: boolean | undefined;
  /** Queue mode: the run's planned ids and accepted marks, read from Redis by the caller. */
  readonly queue?: QueueLedger | undefined;
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
  /** Runs merged. */
  readonly runs: number;
  /** Queue mode: workers' directories that hold no run (`unstartedWorker`), left out. */
  readonly unstarted: readonly string[];
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

const FILES = [TRAJECTORIES, FAILURES] as const;

/** What pass 1 found: the record each id keeps, the runs holding each family's sub-agent sessions, and what was read. */
interface Picked {
  readonly picks: Map<string, Pick>;
  /** Family (root id and attempt) → the runs that hold sub-agent sessions of it. */
  readonly childRuns: Map<string, number[]>;
  /** Lines read that `keep` let through or not: every record of the runs. */
  readonly read: number;
  /** Without a queue: the samples (roots) each run holds, to compare with the samples its manifest planned. */
  readonly held: IdSet[] | undefined;
}

/** What pass 2 wrote. */
interface Written {
  accepted: number;
  failed: number;
  subAccepted: number;
  subFailed: number;
  orphans: number;
  readonly byReason: Record<string, number>;
  readonly subReasons: Record<string, number>;
}

export async function merge(opts: MergeOptions): Promise<MergeReport> {
  const { out } = opts;
  if (opts.runs.length === 0) throw new TrajforgeError('BAD_USAGE', 'merge: no runs given');
  checkDistinct(opts.runs);
  const unstarted = opts.queue === undefined ? [] : opts.runs.filter(unstartedWorker);
  const runs = opts.runs.filter((dir) => !unstarted.includes(dir));
  if (runs.length === 0) throw new TrajforgeError('BAD_USAGE', `merge: none of the directories given holds a run (${unstarted.join(', ')}: no manifest, no record)`);
  checkOut(out);
  const temp = tempDirFor(out);
  // Left by a merge that was killed: never in the way, and not kept either.
  removeDeadTemps(dirname(temp.path), temp.pattern);
  const manifests = runs.map(readManifest);
  const unrecorded = compareConfigs(runs, manifests, opts.allowMismatch === true);
  const keep = queueFilter(opts.queue, runs, manifests);
  const live = runs.flatMap((dir) => {
    const holder = lockHolder(dir);
    return holder ? [{ dir, pid: holder.pid }] : [];
  });
  // Taken once, before either pass: what a run still being written adds later is not merged.
  const snaps = runs.map((dir) => FILES.map((f) => snapshot(join(dir, f))));
  const cut = snaps.flat().filter((s) => s.cut > 0).map((s) => ({ file: s.path, bytes: s.cut }));

  const picked = await pickRecords(snaps, keep, opts.queue === undefined);
  const missing = missingFromQueue(opts, picked.picks);
  const incomplete = picked.held ? shortRuns(runs, manifests, picked.held, new Set(live.map((l) => l.dir))) : [];
  if (incomplete.length > 0 && !opts.allowMissing) {
    throw new TrajforgeError('RUN_INCOMPLETE', `merge: the runs given miss samples: ${incomplete.join('; ')}. Finish them (the same generate command resumes a run), or pass --allow-missing to merge what is there`);
  }
  const conflicts: MergeConflict[] = [];
  for (const [id, p] of picked.picks) if (p.acceptedIn) conflicts.push({ id, runs: p.acceptedIn.map((r) => runs[r]!), kept: runs[p.run]! });

  const w = await writeMerged(snaps, keep, picked, temp.path, (counts) => mergedManifest(runs, manifests, counts));
  renameInto(temp.path, out);
  const subAgents = w.subAccepted + w.subFailed > 0 ? { accepted: w.subAccepted, failed: w.subFailed } : undefined;
  const superseded = picked.read - w.accepted - w.failed - w.subAccepted - w.subFailed - w.orphans;
  return { out, runs: runs.length, unstarted, accepted: w.accepted, failed: w.failed, superseded, sub_agents: subAgents, orphans: w.orphans, conflicts, live, cut, unrecorded, missing, incomplete };
}

/** Refuses runs made with another config than the first (unless `allowMismatch`); returns the fields some run does not record. */
function compareConfigs(runs: readonly string[], manifests: readonly RunManifest[], allowMismatch: boolean): string[] {
  const base = comparable(manifests[0]!.fingerprint_fields);
  const unrecorded = new Set<string>();
  for (let r = 1; r < runs.length; r++) {
    // A field one run does not record (an earlier trajforge wrote it) cannot be compared: said, not refused.
    const { changed, unknown } = compareFingerprints(base, comparable(manifests[r]!.fingerprint_fields));
    for (const k of unknown) unrecorded.add(k);
    if (changed.length && !allowMismatch) {
      throw new TrajforgeError('RUN_MISMATCH', `${runs[r]}: made with another config than ${runs[0]} (${changed.join(', ')} differ); pass --allow-mismatch to merge anyway`, {
        file: runs[r],
      });
    }
  }
  return [...unrecorded].sort();
}

/** Pass 1: which record each id keeps (ids in memory only, never records). */
async function pickRecords(snaps: readonly (readonly Snapshot[])[], keep: KeepLine | undefined, countHeld: boolean): Promise<Picked> {
  const picks = new Map<string, Pick>();
  const childRuns = new Map<string, number[]>();
  let read = 0;
  const held = countHeld ? snaps.map(() => new IdSet()) : undefined;
  for (let run = 0; run < snaps.length; run++) {
    for (let file = 0; file < FILES.length; file++) {
      const snap = snaps[run]![file]!;
      for await (const { line, text } of snapshotLines(snap)) {
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
  return { picks, childRuns, read, held };
}

/** Queue mode: the planned samples without a record here; an error unless `allowMissing`. */
function missingFromQueue(opts: MergeOptions, picks: ReadonlyMap<string, Pick>): MergeReport['missing'] {
  const q = opts.queue;
  if (!q) return { count: 0, first: [] };
  const ids = [...q.planned].filter((id) => !picks.has(id));
  const missing = { count: ids.length, first: ids.slice(0, MISSING_SHOWN) };
  if (ids.length > 0 && !opts.allowMissing) {
    const accepted = ids.filter((id) => q.accepted.has(id)).length;
    throw new TrajforgeError(
      'RUN_INCOMPLETE',
      `merge: ${ids.length} of the ${q.planned.size} samples planned for run ${q.run} have no accepted record in the runs given (${missing.first.join(', ')}${ids.length > MISSING_SHOWN ? ', …' : ''}): ` +
        `${accepted} were accepted by a worker whose directory is not among them, ${ids.length - accepted} are not accepted yet (trajforge status). Pass --allow-missing to merge what is there`,
    );
  }
  return missing;
}

/**
 * Pass 2: the kept lines and the manifest, into the directory `temp` beside --out (renamed onto
 * it afterwards, so --out holds a whole run or nothing, a full disk included). Removed again
 * when anything fails.
 */
async function writeMerged(snaps: readonly (readonly Snapshot[])[], keep: KeepLine | undefined, picked: Picked, temp: string, manifestOf: (w: Written) => RunManifest): Promise<Written> {
  const w: Written = { accepted: 0, failed: 0, subAccepted: 0, subFailed: 0, orphans: 0, byReason: {}, subReasons: {} };
  // Ids and attempts of the sub-agent sessions written, so a run that holds one twice writes it once.
  const childrenWritten = new Set<string>();
  const handles: FileHandle[] = [];
  let writing = temp;
  try {
    await mkdir(dirname(temp), { recursive: true });
    await mkdir(temp);
    for (const f of FILES) {
      writing = join(temp, f);
      handles.push(await open(writing, 'wx'));
    }
    const put = async (ok: boolean, text: string): Promise<void> => {
      writing = join(temp, FILES[ok ? 0 : 1]);
      await handles[ok ? 0 : 1]!.appendFile(`${text}\n`);
    };
    for (let run = 0; run < snaps.length; run++) {
      for (let file = 0; file < FILES.length; file++) {
        const snap = snaps[run]![file]!;
        for await (const { line, text } of snapshotLines(snap)) {
          const rec = parseRunLine(text, snap.path, line);
          if (keep && !keep(run, rec, text)) continue;
          const ok = rec.status === 'ok';
          const reason = typeof rec.reason === 'string' ? rec.reason : 'unknown';
          if (isChild(rec)) {
            const root = picked.picks.get(familyRootOf(rec)!);
            if (root === undefined) {
              w.orphans++;
              continue;
            }
            // From the run of its root, or (a family split across runs) the first run that holds its sessions.
            const holders = picked.childRuns.get(sessionKey(familyRootOf(rec)!, attemptOf(rec))) ?? [];
            const from = holders.includes(root.run) ? root.run : holders[0];
            const key = sessionKey(rec.id, attemptOf(rec));
            if (from !== run || root.attempt !== attemptOf(rec) || childrenWritten.has(key)) continue;
            childrenWritten.add(key);
            await put(ok, text);
            if (ok) w.subAccepted++;
            else {
              w.subFailed++;
              w.subReasons[reason] = (w.subReasons[reason] ?? 0) + 1;
            }
            continue;
          }
          const pick = picked.picks.get(rec.id);
          if (!pick) throw new TrajforgeError('BAD_INPUT', `${snap.path}:${line}: changed while merge read it (a run's files only grow)`, { file: snap.path, line });
          if (pick.run !== run || pick.file !== file || pick.line !== line) continue;
          await put(pick.ok, text);
          if (pick.ok) w.accepted++;
          else {
            w.failed++;
            w.byReason[reason] = (w.byReason[reason] ?? 0) + 1;
          }
        }
      }
    }
    for (const h of handles) await h.sync();
    writing = join(temp, MANIFEST);
    const mh = await open(writing, 'wx');
    handles.push(mh);
    await mh.writeFile(`${JSON.stringify(manifestOf(w), null, 2)}\n`);
    await mh.sync();
    await Promise.all(handles.splice(0).map((h) => h.close()));
    return w;
  } catch (err) {
    await Promise.all(handles.map((h) => h.close().catch(() => {})));
    await rm(temp, { recursive: true, force: true });
    if (err instanceof TrajforgeError) throw err;
    throw fsError(writing, err, 'merge: cannot write');
  }
}

/** The merged run's manifest: the first run's, with the counts of what was written and where it came from. */
function mergedManifest(runs: readonly string[], manifests: readonly RunManifest[], w: Written): RunManifest {
  const first = manifests[0]!;
  const now = new Date().toISOString();
  const fields = comparable(first.fingerprint_fields);
  const sub = w.subAccepted + w.subFailed > 0 ? { sub_agents: { accepted: w.subAccepted, failed: w.subFailed, by_reason: w.subReasons } } : {};
  return {
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
    counts: { accepted: w.accepted, failed: w.failed, by_reason: w.byReason, ...sub },
    sessions: [],
    merged_from: runs.map((dir, i) => ({ dir, run_id: manifests[i]!.run_id, counts: manifests[i]!.counts })),
  };
}

/** The finished temporary directory becomes --out; removed when the rename fails. */
function renameInto(temp: string, out: string): void {
  try {
    renameSync(temp, out);
  } catch (err) {
    rmSync(temp, { recursive: true, force: true });
    throw fsError(out, err, 'merge: cannot write');
  }
}
