/**
 * The figures of a report's overview: `stats` (the same numbers as `trajforge stats`), and what
 * only the report draws, the rubric scores in ten bins (`stats` keeps their mean). One pass over
 * the rows for both, shared by the page (build.ts) and a served page's redrawn charts
 * (serve-routes.ts), so the two never differ.
 */
import type { Trajectory } from '../../../schemas/index.js';
import type { DatasetRow } from '../readers.js';
import { computeStats, type Stats, type StatsOptions } from '../stats.js';

export const RUBRIC_BINS = 10;

export interface ReportFigures {
  readonly stats: Stats;
  /** Rows by rubric score, in RUBRIC_BINS bins over 0..1 (a score of 1 in the last). */
  readonly rubric: number[];
}

/** The figures of `rows`; `counts(row)` says whether a row is one `stats` counts (a run directory's latest state of its id). */
export async function reportFigures(rows: AsyncIterable<DatasetRow>, opts: StatsOptions, counts?: (row: DatasetRow) => boolean): Promise<ReportFigures> {
  const rubric = new Array<number>(RUBRIC_BINS).fill(0);
  async function* scored(): AsyncGenerator<DatasetRow> {
    for await (const row of rows) {
      const score = (row.trajectory as Partial<Trajectory>).judgement?.rubric_score;
      if (typeof score === 'number' && score >= 0 && score <= 1 && (counts === undefined || counts(row))) rubric[Math.min(RUBRIC_BINS - 1, Math.floor(score * RUBRIC_BINS))]!++;
      yield row;
    }
  }
  return { stats: await computeStats(scored(), opts), rubric };
}
