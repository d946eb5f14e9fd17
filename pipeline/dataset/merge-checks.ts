/**
 * What `merge` makes sure of before it reads a record: the runs are runs, each given once, made
 * with one config (beyond the shard), and `--out` names a new run directory; and afterwards,
 * whether the runs hold every sample they planned. Queue mode adds which line of each sample
 * Redis accepted.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join, resolve } from 'node:path';
import { RunManifest } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import { fsError, statPath } from '../files.js';
import type { IdSet } from '../id-set.js';
import { FAILURES, MANIFEST, TRAJECTORIES } from '../core/run-dir/names.js';
import type { RunLine } from '../core/run-dir/run-lines.js';
import { lineSha, type AcceptedMark } from '../core/run-dir/accepted.js';
import { familyRootOf, isChild } from './families.js';

/** Queue mode: the run's planned ids and accepted marks, read from Redis by the caller. */
export interface QueueLedger {
  readonly run: string;
  readonly planned: ReadonlySet<string>;
  readonly accepted: ReadonlyMap<string, AcceptedMark>;
}

/** Shards of one job differ in their shard and nothing else that shapes a trajectory. */
export function comparable(fields: Record<string, unknown>): Record<string, unknown> {
  const sel = fields['questions.selection'];
  if (sel === null || typeof sel !== 'object') return fields;
  return { ...fields, 'questions.selection': { ...(sel as Record<string, unknown>), shard: null } };
}

/**
 * Queue mode: a worker's directory that holds no run, as a worker killed in its first moments
 * leaves it (the directory made, its record files perhaps opened, no manifest and no record
 * written yet). Nothing in it can be a record Redis accepted, so `merge --queue` leaves it out and
 * says so; a directory without a manifest that holds any record is still refused.
 */
export function unstartedWorker(dir: string): boolean {
  if (statSync(dir, { throwIfNoEntry: false })?.isDirectory() !== true || existsSync(join(dir, MANIFEST))) return false;
  return [TRAJECTORIES, FAILURES].every((f) => {
    const st = statSync(join(dir, f), { throwIfNoEntry: false });
    return st === undefined || (st.isFile() && st.size === 0);
  });
}

export function readManifest(dir: string): RunManifest {
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
 * Each run once: one directory named twice (as it is, through a symbolic link, or as `a/../a`)
 * would make every one of its accepted ids a conflict with itself.
 */
export function checkDistinct(runs: readonly string[]): void {
  const seen = new Map<string, string>();
  for (const dir of runs) {
    let key: string;
    try {
      const st = statSync(dir);
      key = `${st.dev}:${st.ino}`;
    } catch {
      key = resolve(dir); // readManifest says what is wrong with it
    }
    const first = seen.get(key);
    if (first !== undefined) {
      const how = first === dir ? '' : ` (${first} and ${dir} are one directory)`;
      throw new TrajforgeError('BAD_USAGE', `merge: ${dir} is given twice${how}; name each run once`, { file: dir });
    }
    seen.set(key, dir);
  }
}

/** `--out` must name a new run directory: nothing there, or an empty directory. */
export function checkOut(out: string): void {
  const st = statPath(out, `merge: --out ${out}`);
  if (st && !st.isDirectory()) throw new TrajforgeError('BAD_USAGE', `${out}: exists and is a file; merge writes a new run directory`, { file: out });
  if (st && readdirSync(out).length > 0) throw new TrajforgeError('BAD_USAGE', `${out}: exists and is not empty; merge writes a new run`, { file: out });
  const parent = dirname(resolve(out));
  const up = statPath(parent, `merge: --out ${out}`);
  if (up && !up.isDirectory()) throw new TrajforgeError('BAD_USAGE', `${out}: ${parent} is a file, not a directory`, { file: out });
}

/** The temporary directory a merge into `out` builds before renaming it: `.<out>.merge-<pid>-<hex>.tmp` beside it. */
export function tempDirFor(out: string): { path: string; pattern: RegExp } {
  const name = basename(resolve(out));
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return {
    path: join(dirname(resolve(out)), `.${name}.merge-${process.pid}-${randomBytes(4).toString('hex')}.tmp`),
    pattern: new RegExp(`^\\.${escaped}\\.merge-(\\d+)-[0-9a-f]+\\.tmp$`),
  };
}

/**
 * Without a queue, what is missing: shards of an `n`-way split that were not given, and runs
 * holding fewer samples than their manifest planned (`questions.total`). Not checked: a run
 * still being written (merged as it was, and said), one read from stdin (no total), and one
 * with `--until-correct` (samples not needed are not records).
 */
export function shortRuns(runs: readonly string[], manifests: readonly RunManifest[], held: readonly IdSet[], live: ReadonlySet<string>): string[] {
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

/** Whether a line of run `run` is kept (queue mode's filter). */
export type KeepLine = (run: number, rec: RunLine, text: string) => boolean;

/**
 * Queue mode: whether a line is the accepted copy. A root line is, when Redis accepted its
 * sample from this run's worker with this line's sha256; a sub-agent session's line is, when
 * its family's root was accepted from this worker at the same attempt.
 */
export function queueFilter(q: QueueLedger | undefined, runs: readonly string[], manifests: readonly RunManifest[]): KeepLine | undefined {
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
