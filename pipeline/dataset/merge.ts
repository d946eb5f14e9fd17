/**
 * `merge`: shard runs → one run, one record per id. An accepted record beats a failed one,
 * a later attempt beats an earlier one; an id accepted in two runs is a conflict, reported
 * (the later run on the command line wins). Two passes over the files, ids in memory only.
 */
import { createReadStream, existsSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { mkdir, open, rm } from 'node:fs/promises';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { RunManifest, SCHEMA_VERSION } from '../../schemas/index.js';
import { fingerprint, fingerprintDiff } from '../config.js';
import { TrajforgeError } from '../errors.js';
import { PACKAGE_VERSION } from '../paths.js';
import { FAILURES, MANIFEST, TRAJECTORIES } from '../generate/store.js';

export interface MergeOptions {
  readonly runs: readonly string[];
  readonly out: string;
  /** Merge runs whose configs differ (beyond the shard). Off by default: that is usually a mistake. */
  readonly allowMismatch?: boolean | undefined;
}

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
  /** Records read that the merge left out (earlier attempts, losing duplicates). */
  readonly superseded: number;
  readonly conflicts: readonly MergeConflict[];
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
  if (!existsSync(file)) throw new TrajforgeError('BAD_INPUT', `${dir}: not a run directory (no ${MANIFEST})`, { file: dir });
  const parsed = RunManifest.safeParse(JSON.parse(readFileSync(file, 'utf8')));
  if (!parsed.success) throw new TrajforgeError('BAD_INPUT', `${file}: not a trajforge run manifest`, { file });
  return parsed.data;
}

async function* lines(file: string): AsyncGenerator<{ line: number; text: string }> {
  if (!existsSync(file)) return;
  const rl = createInterface({ input: createReadStream(file, { encoding: 'utf8' }), crlfDelay: Infinity });
  let line = 0;
  for await (const text of rl) {
    line++;
    if (text.trim() !== '') yield { line, text };
  }
}

const FILES = [TRAJECTORIES, FAILURES] as const;

export async function merge(opts: MergeOptions): Promise<MergeReport> {
  const { runs, out } = opts;
  if (runs.length === 0) throw new TrajforgeError('BAD_USAGE', 'merge: no runs given');
  if (existsSync(out) && readdirSync(out).length > 0) {
    throw new TrajforgeError('BAD_USAGE', `${out}: exists and is not empty; merge writes a new run`, { file: out });
  }
  const manifests = runs.map(readManifest);
  const base = comparable(manifests[0]!.fingerprint_fields);
  for (let r = 1; r < runs.length && !opts.allowMismatch; r++) {
    const diff = fingerprintDiff(base, comparable(manifests[r]!.fingerprint_fields));
    if (diff.length) {
      throw new TrajforgeError('RUN_MISMATCH', `${runs[r]}: made with another config than ${runs[0]} (${diff.join(', ')} differ); pass --allow-mismatch to merge anyway`, {
        file: runs[r],
      });
    }
  }

  // Pass 1: which record each id keeps.
  const picks = new Map<string, Pick>();
  let read = 0;
  for (let run = 0; run < runs.length; run++) {
    for (let file = 0; file < FILES.length; file++) {
      const path = join(runs[run]!, FILES[file]!);
      for await (const { line, text } of lines(path)) {
        let rec: { id?: unknown; attempt?: unknown; status?: unknown };
        try {
          rec = JSON.parse(text);
        } catch {
          throw new TrajforgeError('BAD_INPUT', `${path}:${line}: not valid JSON`, { file: path, line });
        }
        if (typeof rec.id !== 'string') throw new TrajforgeError('BAD_INPUT', `${path}:${line}: id: missing`, { file: path, line, field: 'id' });
        read++;
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

  // Pass 2: copy the kept lines, into temporary files renamed at the end.
  await mkdir(out, { recursive: true });
  const tmp = FILES.map((f) => join(out, `${f}.tmp`));
  const handles = await Promise.all(tmp.map((t) => open(t, 'w')));
  let accepted = 0;
  let failed = 0;
  const byReason: Record<string, number> = {};
  try {
    for (let run = 0; run < runs.length; run++) {
      for (let file = 0; file < FILES.length; file++) {
        const path = join(runs[run]!, FILES[file]!);
        for await (const { line, text } of lines(path)) {
          const rec = JSON.parse(text) as { id: string; reason?: string };
          const pick = picks.get(rec.id)!;
          if (pick.run !== run || pick.file !== file || pick.line !== line) continue;
          await handles[pick.ok ? 0 : 1]!.appendFile(`${text}\n`);
          if (pick.ok) accepted++;
          else {
            failed++;
            const reason = rec.reason ?? 'unknown';
            byReason[reason] = (byReason[reason] ?? 0) + 1;
          }
        }
      }
    }
    for (const h of handles) await h.sync();
  } catch (err) {
    await Promise.all(handles.map((h) => h.close()));
    await rm(out, { recursive: true, force: true });
    throw err;
  }
  await Promise.all(handles.map((h) => h.close()));
  tmp.forEach((t, i) => renameSync(t, join(out, FILES[i]!)));

  const conflicts: MergeConflict[] = [];
  for (const [id, p] of picks) if (p.acceptedIn) conflicts.push({ id, runs: p.acceptedIn.map((r) => runs[r]!), kept: runs[p.run]! });

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
    counts: { accepted, failed, by_reason: byReason },
    sessions: [],
    merged_from: runs.map((dir, i) => ({ dir, run_id: manifests[i]!.run_id, counts: manifests[i]!.counts })),
  };
  writeFileSync(join(out, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`);
  return { out, accepted, failed, superseded: read - accepted - failed, conflicts };
}
