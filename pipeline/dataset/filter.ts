/**
 * `trajforge filter`: each row to `--out` or `--rejects` by an expression (filter-expr.ts,
 * compiled by filter-compile.ts over the fields of filter-fields.ts).
 *
 * Families (records of a run with agents): by default a sub-agent session is kept only when it
 * matches and the session that called it is kept, so a filtered set never holds a child without
 * its parent (`FamilyMode`). Children come before their root in a run's files, so a child
 * waits for its parent's decision: held in memory until it comes (one family at a time in a
 * run's own order), written right after it.
 */
import type { DatasetRow } from './readers.js';
import type { JsonlWriter } from '../core/jsonl.js';
import type { RowPredicate } from './filter-compile.js';
import { familyOf, parentKeyOf, sessionKeyOf } from './families.js';

/**
 * How a filter treats families. `parent` (the default): a sub-agent session is kept when it
 * matches and its parent is kept, so a dropped root drops its family. `root`: the root's
 * match decides for its whole family, whatever the others'. `none`: every row on its own
 * (a child can be kept without its parent).
 */
export type FamilyMode = 'parent' | 'root' | 'none';
export const FAMILY_MODES: readonly FamilyMode[] = ['parent', 'root', 'none'];

export interface FilterCounts {
  in: number;
  kept: number;
  rejected: number;
  /** Rows that matched but were dropped because the session that called them was (`parent` mode). */
  dropped_with_parent: number;
  /** Sub-agent sessions whose parent is not in the input: dropped, except with `none`. */
  orphans: number;
}

/**
 * Writes each row's trajectory to `out` when `keep` holds, else to `rejects` (when given);
 * a family's sessions as `families` says. Waits on each writer's backpressure. A reader of
 * stdout that goes away ends it with the writer's `OutputClosedError` (cli/output.ts).
 */
export async function filterRows(rows: AsyncIterable<DatasetRow>, keep: RowPredicate, out: JsonlWriter, rejects?: JsonlWriter, families: FamilyMode = 'parent'): Promise<FilterCounts> {
  const counts: FilterCounts = { in: 0, kept: 0, rejected: 0, dropped_with_parent: 0, orphans: 0 };
  const write = async (row: DatasetRow, kept: boolean): Promise<void> => {
    const w = kept ? out : rejects;
    if (kept) counts.kept++;
    else counts.rejected++;
    const p = row.raw === undefined ? w?.write(row.trajectory) : w?.writeLine(row.raw);
    if (p) await p;
  };
  // Session key → kept, for every family session decided; children waiting for their parent's decision, by its key.
  const decided = new Map<string, boolean>();
  const waiting = new Map<string, DatasetRow[]>();
  const decide = async (row: DatasetRow, parentKept: boolean | undefined): Promise<void> => {
    const matches = keep(row);
    let kept = matches;
    if (parentKept !== undefined) {
      kept = families === 'root' ? parentKept : matches && parentKept;
      if (matches && !parentKept && families === 'parent') counts.dropped_with_parent++;
    }
    const self = sessionKeyOf(row.trajectory);
    if (self !== undefined) decided.set(self, kept);
    await write(row, kept);
    const children = self === undefined ? undefined : waiting.get(self);
    if (children !== undefined) {
      waiting.delete(self!);
      for (const c of children) await decide(c, kept);
    }
  };
  for await (const row of rows) {
    counts.in++;
    const t = row.trajectory;
    if (families === 'none' || familyOf(t) === undefined) {
      await write(row, keep(row));
      continue;
    }
    const parent = parentKeyOf(t);
    if (parent === undefined) await decide(row, undefined);
    else if (decided.has(parent)) await decide(row, decided.get(parent));
    else {
      const list = waiting.get(parent);
      if (list === undefined) waiting.set(parent, [row]);
      else list.push(row);
    }
  }
  // Never came: their parent is not in the input.
  for (const held of waiting.values()) {
    for (const row of held) {
      counts.orphans++;
      await write(row, false);
    }
  }
  return counts;
}
