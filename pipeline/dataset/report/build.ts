/**
 * `trajforge report`: one self-contained HTML file from a run or a dataset, in one streaming
 * pass (two for a run directory, whose failures.jsonl is indexed first, as `stats` does).
 *
 * Each row is written to the page as soon as it is read, and handed on to `computeStats`,
 * which makes every figure of the overview: the report and `trajforge stats` never disagree.
 * A run directory shows the latest state of each id, in the list and in the figures alike.
 * Memory holds one row, the figures' fixed-size sketches and, for a run directory, its ids.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { TrajforgeError } from '../../errors.js';
import { MANIFEST, SYNTH_SOLVE_DIR } from '../../core/run-dir/names.js';
import { isSynthesisRun, synthesisFigures, synthesisSection } from '../synthesis.js';
import { latestFilter, latestIndexFor, type LatestIndex } from '../latest.js';
import { isOutputClosed, JsonlWriter } from '../../core/jsonl.js';
import { PACKAGE_VERSION } from '../../paths.js';
import { readDataset, type DatasetRow, type ReadOptions, type ReadReport } from '../readers.js';
import { ForeignCheck, validatedRows } from '../foreign.js';
import type { TokenCounter } from '../../core/tokens/count.js';
import { recordedPrices } from '../run-prices.js';
import type { Stats } from '../stats.js';
import { reportFigures } from './figures.js';
import { overview, pageHead, pageTail, ROWS_END } from './page.js';
import { readRunHeader, runHeaderHtml } from './run-header.js';
import { DEFAULT_ROW_OPTIONS, rowLine, type RowOptions } from './rows.js';

export interface ReportOptions extends Partial<RowOptions> {
  readonly read?: ReadOptions;
  readonly title?: string;
  /** Fixed for reproducible output in tests; default now. */
  readonly generatedAt?: string;
  /** Where `-` writes; default stdout. */
  readonly stdout?: NodeJS.WritableStream;
  /** Counts the tokens of rows from other systems; default o200k_base. */
  readonly counter?: TokenCounter | undefined;
  /** A served page's live panel (serve.ts): its HTML, after the overview, and its script, after the page's own. */
  readonly live?: { readonly html: string; readonly script: string } | undefined;
}

export interface ReportResult {
  /** Undefined only when the output closed early (`writeReport`). */
  readonly stats: Stats | undefined;
  /** Trajectories in the list. */
  readonly listed: number;
  /** Bytes of the page (UTF-8). */
  readonly bytes: number;
  /** The reader of stdout went away before the end. */
  readonly outputClosed: boolean;
}

/** The page of an input path, written whole to the file `out` (or `-`). */
export async function buildReport(input: string, out: string, opts: ReportOptions = {}): Promise<ReportResult> {
  checkRowOptions(opts);
  return writeReport(await reportData(input, opts.read ?? {}), out, opts);
}

/**
 * What the page of an input path is made of; a run directory's failures are indexed first (one
 * pass over them). A synthesis run: its funnel, difficulty and cost, above the overview and list
 * of its rollouts (`DIR/solve`), when it has any.
 */
export async function reportData(input: string, read: ReadOptions): Promise<ReportData> {
  if (isSynthesisRun(input)) {
    const before = synthesisSection(await synthesisFigures(input));
    const solve = join(input, SYNTH_SOLVE_DIR);
    if (!existsSync(join(solve, MANIFEST))) return { rows: (async function* () {})(), source: input, before };
    return { ...(await reportData(solve, read)), source: input, before };
  }
  const latest = await latestIndexFor(input, read);
  const { rows, report } = readDataset(input, read);
  const header = latest === undefined ? undefined : readRunHeader(input);
  return { rows, report, latest, source: input === '-' ? 'stdin' : input, header: header && runHeaderHtml(header) };
}

/** What a page is made of: the rows as read, what the reader counted, and a run directory's latest-state index. */
export interface ReportData {
  readonly rows: AsyncIterable<DatasetRow>;
  readonly report?: ReadReport | undefined;
  readonly latest?: LatestIndex | undefined;
  /** What the page says it shows. */
  readonly source: string;
  /** Markup above the overview (a synthesis run's funnel). */
  readonly before?: string | undefined;
  /** A run directory's header: model, endpoint, dialect, wall time, cost (run-header.ts). */
  readonly header?: string | undefined;
}

function checkRowOptions(opts: Partial<RowOptions>): RowOptions {
  const rowOpts: RowOptions = { outputChars: opts.outputChars ?? DEFAULT_ROW_OPTIONS.outputChars, textChars: opts.textChars ?? DEFAULT_ROW_OPTIONS.textChars };
  for (const [name, v] of Object.entries(rowOpts)) {
    if (!(Number.isInteger(v) && v > 0)) throw new TrajforgeError('BAD_USAGE', `report: ${name} must be a positive integer, got ${v}`);
  }
  return rowOpts;
}

/** The page of `data`, streamed to `out` and committed: `buildReport`, and what `serve.ts` sends for a run being written. */
export async function writeReport(data: ReportData, out: string, opts: ReportOptions = {}): Promise<ReportResult> {
  const writer = new JsonlWriter(out, opts.stdout ? { stdout: opts.stdout } : {});
  try {
    const result = await pageInto(data, writer, opts);
    await writer.commit();
    return result;
  } catch (err) {
    writer.abort();
    if (isOutputClosed(err)) return { stats: undefined, listed: 0, bytes: 0, outputClosed: true };
    throw err;
  }
}

/**
 * The page of `data`, written to `writer`, which the caller commits (cli/output.ts). A reader of
 * stdout that goes away ends it with the writer's OutputClosedError.
 */
export async function pageInto(data: ReportData, writer: JsonlWriter, opts: ReportOptions): Promise<ReportResult & { stats: Stats }> {
  const rowOpts = checkRowOptions(opts);
  const { latest, report, source } = data;
  // Rows from other systems get their verdict and token count here, as in `stats`.
  const foreign = new ForeignCheck({ counter: opts.counter, countTokens: true });
  const rows = validatedRows(data.rows, foreign);
  const listedRow = latest ? latestFilter(latest) : undefined;
  let bytes = 0;
  const put = (s: string): Promise<void> | undefined => {
    bytes += Buffer.byteLength(s, 'utf8') + 1;
    return writer.writeLine(s);
  };
  let listed = 0;
  await put(pageHead({ title: opts.title ?? `trajforge report: ${source}`, source, generatedAt: opts.generatedAt ?? new Date().toISOString().replace(/\.\d+Z$/, 'Z'), version: PACKAGE_VERSION, header: data.header }));
  // Whether the row just handed on is listed: the figures count the same rows (latestFilter keeps state, so it is asked once).
  let isListed = true;
  async function* tee(): AsyncGenerator<DatasetRow> {
    for await (const row of rows) {
      isListed = listedRow === undefined || listedRow(row);
      if (isListed) {
        listed++;
        const p = put(rowLine(row.trajectory, rowOpts));
        if (p) await p;
      }
      yield row;
    }
  }
  const { stats, rubric } = await reportFigures(tee(), { latest, report, prices: latest === undefined ? undefined : recordedPrices(source) }, () => isListed);
  stats.validation.validated_here = foreign.validated;
  await put(ROWS_END);
  if (data.before) await put(data.before);
  await put(overview(stats, listed, rowOpts, rubric));
  if (opts.live) await put(opts.live.html);
  await put(pageTail(opts.live?.script));
  return { stats, listed, bytes, outputClosed: false };
}
