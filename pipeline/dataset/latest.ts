/**
 * The latest state of each id of a run directory, which `stats`, `report` and `export --all`
 * count: an accepted id once (its first acceptance), an id that only failed by its latest
 * attempt. A failed attempt is read before it is known whether it is the last, so a first pass
 * over failures.jsonl keeps id → (attempt, line) of the winner, ids only, and the second pass
 * keeps the rows that won.
 */
import { basename } from 'node:path';
import type { Trajectory } from '../../schemas/index.js';
import { statPath } from '../files.js';
import { FAILURES } from '../core/run-dir/names.js';
import { inputFiles, readDataset, type DatasetRow, type ReadOptions } from './readers.js';

/**
 * Which failed attempt of each id counts: id → attempt·2^32 + line of the winner, so the
 * highest attempt wins and, among equal attempts, the later line.
 */
export interface LatestIndex {
  /** The failures file, as `DatasetRow.file` names it. */
  readonly failuresFile: string;
  readonly winners: Map<string, number>;
}

const LINE_SPAN = 2 ** 32;

/** The first pass over a run's failures.jsonl: ids only, never records. */
export async function indexLatestFailures(rows: AsyncIterable<DatasetRow>, failuresFile: string): Promise<LatestIndex> {
  const winners = new Map<string, number>();
  for await (const row of rows) {
    const t = row.trajectory as Partial<Trajectory>;
    if (typeof t.id !== 'string') continue;
    const attempt = typeof t.attempt === 'number' && t.attempt >= 0 ? Math.floor(t.attempt) : 0;
    const key = attempt * LINE_SPAN + row.line;
    const prev = winners.get(t.id);
    if (prev === undefined || key > prev) winners.set(t.id, key);
  }
  return { failuresFile, winners };
}

/**
 * A predicate that keeps a run directory's latest state per id, as `computeStats` does with
 * the same index: an accepted id once (the first acceptance), an id that only failed by its
 * winning attempt (`LatestIndex` keys are attempt·2^32 + line). Rows must come in the
 * reader's order: trajectories.jsonl before failures.jsonl.
 */
export function latestFilter(latest: LatestIndex): (row: DatasetRow) => boolean {
  const accepted = new Set<string>();
  return (row) => {
    const id = (row.trajectory as Partial<Trajectory>).id;
    if (typeof id !== 'string') return true;
    if (row.file === latest.failuresFile) {
      const key = latest.winners.get(id);
      return !accepted.has(id) && key !== undefined && key % LINE_SPAN === row.line;
    }
    if (accepted.has(id)) return false;
    accepted.add(id);
    return true;
  };
}

/** The index for `latestFilter` when `input` is a run directory; undefined for a file or stdin. */
export async function latestIndexFor(input: string, opts: ReadOptions): Promise<LatestIndex | undefined> {
  if (input === '-' || statPath(input)?.isDirectory() !== true) return undefined;
  const failures = inputFiles(input).find((f) => basename(f) === FAILURES);
  if (failures === undefined) return { failuresFile: '', winners: new Map() };
  return indexLatestFailures(readDataset(failures, opts).rows, failures);
}
