/**
 * Where a run may be written: a new directory, an empty one, or one that holds a run (which is
 * then resumed). A directory of other files (a repository, a home folder, a dataset's folder)
 * is refused, so that a mistyped `--out` never scatters a run, its lock and its later repairs
 * among someone's files.
 */
import { readdirSync } from 'node:fs';
import { TrajforgeError } from '../../errors.js';
import { LOCK } from './lock.js';
import { FAILURES, MANIFEST, TRAJECTORIES } from './names.js';

/**
 * Names that show a run is there: a run killed before its manifest was written still holds its
 * lock or records, or the manifest's temporary name (generate/store.ts writes `manifest.json.tmp`
 * and renames it).
 */
const RUN_NAMES = new Set([MANIFEST, `${MANIFEST}.tmp`, TRAJECTORIES, FAILURES, LOCK]);

/** Names of what is in the way, shown in the message. */
const SHOWN = 5;

/** Why `dir` cannot take a run, or undefined when it can (nothing there, empty, or a run). */
export function notARunPlace(dir: string): string | undefined {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined; // not there yet, or not a directory: making it says what is wrong
  }
  if (names.length === 0 || names.some((n) => RUN_NAMES.has(n))) return undefined;
  const shown = names.sort().slice(0, SHOWN).join(', ');
  return `${dir} is not empty and holds no run (${shown}${names.length > SHOWN ? `, and ${names.length - SHOWN} more` : ''}); a run goes in a new or empty directory, or resumes the run in one`;
}

/** Refuses (exit 2) a directory that holds other files and no run. */
export function checkRunPlace(dir: string): void {
  const why = notARunPlace(dir);
  if (why !== undefined) throw new TrajforgeError('BAD_USAGE', `${why}: choose another --out (output.dir)`, { file: dir });
}
