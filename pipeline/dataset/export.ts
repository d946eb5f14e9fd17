/**
 * `trajforge export`: trajectories → rows a trainer reads, with what to train on marked.
 *
 * Every format but `text` is written from the training view (training-view.ts): the
 * conversation as the model saw it (`--view sent`) or with every tool result in full
 * (`--view full`), tool outputs in `tool` or `user` turns (`--tool-role`). The string formats
 * (`messages`, `sharegpt`, `text`) are export-formats.ts; `tokens` renders the view through
 * the trainee's chat template and tokenises it with the trainee's tokenizer (token-rows.ts).
 *
 * Rows trajforge did not write (DR Tulu, chat) are validated first (foreign.ts), so a row
 * that breaks the rules is a failed row here too: left out unless `--all`.
 *
 * Runs with agents: every session is a row of its own (MiroVerse holds its main-agent and
 * browsing sub-agent traces side by side), and a row of a session that names its agent or
 * its family carries `metadata` with its links (`familyMetadata`), in every format, so a
 * trainer can weigh or regroup them.
 */
import { basename } from 'node:path';
import { statSync } from 'node:fs';
import type { Trajectory } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import type { JsonlWriter } from '../core/jsonl.js';
import { statPath } from '../files.js';
import { inputFiles, readDataset, type DatasetRow, type ReadOptions, type ReadReport } from './readers.js';
import { FAILURES } from '../core/run-dir/names.js';
import { O200K, type TokenCounter } from '../core/tokens/count.js';
import { loadHfTokenizer } from '../core/tokens/tokenizer.js';
import { Counter, toMessages, toShareGpt, toText, type MessagesRow, type ShareGptRow, type TextRow } from './export-formats.js';
import { TokenRows, type MaskStrategy, type TokensRow } from './token-rows.js';
import { trainingView, UnexportableRow, type ToolRole, type ViewMode } from './training-view.js';
import { ForeignCheck } from './foreign.js';
import { anyRemoved, cleanJson, noneRemoved } from '../text.js';
import { childIdsOf, inFamily } from './families.js';

export type ExportFormat = 'messages' | 'sharegpt' | 'text' | 'tokens';
export const EXPORT_FORMATS: readonly ExportFormat[] = ['messages', 'sharegpt', 'text', 'tokens'];

export type ExportRow = (MessagesRow | ShareGptRow | TextRow | TokensRow) & { metadata?: FamilyMetadata };

/** A session's place in its family, as an exported row carries it. */
export interface FamilyMetadata {
  agent?: string;
  /** The session that called this one, and the index of its call this one answers. */
  parent_id?: string;
  parent_call?: number;
  depth?: number;
  family_id?: string;
  /** The sessions this one's calls started, in call order (their rows are in the export when they were accepted). */
  child_ids?: string[];
}

/** The links of a record, or undefined for one that names no agent and no family (a run without agents). */
export function familyMetadata(t: Trajectory): FamilyMetadata | undefined {
  if (typeof t.agent !== 'string' && !inFamily(t)) return undefined;
  const m: FamilyMetadata = {};
  if (typeof t.agent === 'string') m.agent = t.agent;
  if (typeof t.parent_id === 'string') m.parent_id = t.parent_id;
  if (typeof t.parent_call === 'number') m.parent_call = t.parent_call;
  if (typeof t.depth === 'number') m.depth = t.depth;
  if (typeof t.family_id === 'string') m.family_id = t.family_id;
  const children = childIdsOf(t);
  if (children.length > 0 || inFamily(t)) m.child_ids = children;
  return m;
}

// ---------------------------------------------------------------------------------------
// The stream

export interface ExportOptions {
  readonly format: ExportFormat;
  /** What counts `tokens` (and `--max-tokens`); default o200k_base. */
  readonly counter?: TokenCounter | undefined;
  /** The trainee's Hugging Face tokenizer (a folder or tokenizer.json): required by `tokens`. */
  readonly tokenizerPath?: string | undefined;
  /** A Jinja file to use instead of the tokenizer's own chat template. */
  readonly chatTemplate?: string | undefined;
  readonly view?: ViewMode | undefined;
  readonly toolRole?: ToolRole | undefined;
  readonly strategy?: MaskStrategy | undefined;
  readonly emptyThink?: boolean | undefined;
  readonly maxTokens?: number | undefined;
  /** Include failed rows too (default: only `status == ok`). */
  readonly all?: boolean | undefined;
  /** `skip`: a row that cannot be exported is counted, not fatal. */
  readonly onBadRow?: 'error' | 'skip' | undefined;
}

export interface ExportCounts {
  /** Rows read (bad rows not included). */
  in: number;
  written: number;
  droppedOverMax: number;
  skippedFailed: number;
  /** Earlier attempts of a run directory's ids, left out (with `--all`). */
  superseded: number;
  /** Rows left out by `--keep`, `--drop` or `--agent`. */
  unselected: number;
  /** Rows the format could not express (skipped with `--on-bad-row skip`). */
  unexportable: number;
  /**
   * Rows whose text held control characters or lone surrogates (data trajforge did not write,
   * or wrote before it cleaned text), exported with them removed (pipeline/text.ts).
   */
  cleaned: number;
}

/** Builds the rows of one trajectory in the asked format: one row, or for `tokens` one per part (possibly none). */
export class Exporter {
  readonly #opts: ExportOptions;
  readonly #count: Counter;
  readonly #tokens: TokenRows | undefined;

  constructor(opts: ExportOptions) {
    this.#opts = opts;
    this.#count = new Counter(opts.counter ?? O200K);
    if (opts.format === 'tokens') {
      if (opts.tokenizerPath === undefined) throw new TrajforgeError('BAD_USAGE', 'export --format tokens needs --tokenizer PATH: the trainee\'s Hugging Face tokenizer (a folder with tokenizer.json and tokenizer_config.json)', { field: 'tokenizer' });
      this.#tokens = new TokenRows(loadHfTokenizer(opts.tokenizerPath, '--tokenizer'), opts.chatTemplate);
    }
  }

  rows(t: Trajectory): ExportRow[] {
    const rows = this.#build(t);
    const metadata = familyMetadata(t);
    if (metadata !== undefined) for (const r of rows) r.metadata = metadata;
    return rows;
  }

  #build(t: Trajectory): ExportRow[] {
    const choice = { view: this.#opts.view, toolRole: this.#opts.toolRole };
    switch (this.#opts.format) {
      case 'messages':
        return [toMessages(t, this.#count, choice)];
      case 'sharegpt':
        return [toShareGpt(t, this.#count, choice)];
      case 'text':
        return [toText(t, this.#count)];
      case 'tokens':
        return this.#tokens!.rows(t.id, trainingView(t, choice), { strategy: this.#opts.strategy, emptyThink: this.#opts.emptyThink });
    }
  }
}

/** The length `--max-tokens` compares. */
function rowTokens(row: ExportRow): number {
  return 'num_tokens' in row ? row.num_tokens : row.tokens;
}

/** `exporter`: one built from `opts` already (the CLI builds it first, so a bad tokenizer fails before anything is read). */
export async function exportRows(
  rows: AsyncIterable<DatasetRow>,
  out: JsonlWriter,
  opts: ExportOptions,
  keep?: (row: DatasetRow) => boolean,
  exporter = new Exporter(opts),
  select?: (row: DatasetRow) => boolean,
): Promise<ExportCounts> {
  const foreign = new ForeignCheck({ counter: opts.counter });
  const counts: ExportCounts = { in: 0, written: 0, droppedOverMax: 0, skippedFailed: 0, superseded: 0, unselected: 0, unexportable: 0, cleaned: 0 };
  for await (const row of rows) {
    counts.in++;
    const t = row.trajectory;
    if (keep && !keep(row)) {
      counts.superseded++;
      continue;
    }
    foreign.check(row);
    // After the foreign check: an expression may test the verdict it makes.
    if (select && !select(row)) {
      counts.unselected++;
      continue;
    }
    if (!opts.all && t.status !== 'ok') {
      counts.skippedFailed++;
      continue;
    }
    // Cleaned before the row is built, so that mask spans and token counts are those of the text written.
    const removed = noneRemoved();
    const clean = cleanJson(t, removed);
    if (anyRemoved(removed)) counts.cleaned++;
    let exported: ExportRow[];
    try {
      exported = exporter.rows(clean);
    } catch (err) {
      if (!(err instanceof UnexportableRow || (err instanceof TrajforgeError && err.code === 'BAD_CONFIG'))) throw err;
      const place = `${row.file === '-' ? '<stdin>' : row.file}:${row.line}`;
      if (opts.onBadRow !== 'skip') throw new TrajforgeError('BAD_INPUT', `${place}: cannot export as ${opts.format}: ${err.message}`, { file: row.file, line: row.line });
      counts.unexportable++;
      continue;
    }
    for (const r of exported) {
      if (opts.maxTokens !== undefined && rowTokens(r) > opts.maxTokens) {
        counts.droppedOverMax++;
        continue;
      }
      const p = out.write(r);
      counts.written++;
      if (p) await p;
    }
  }
  return counts;
}

/** The line the command prints to stderr. */
export function formatExportCounts(c: ExportCounts, report: ReadReport, opts: ExportOptions): string {
  const parts = [`${c.in} rows in`, `${c.written} written`];
  const tok = (opts.counter ?? O200K).name;
  parts.push(opts.maxTokens === undefined ? `0 dropped over max tokens` : `${c.droppedOverMax} dropped over ${opts.maxTokens} tokens (${tok})`);
  parts.push(opts.all ? '0 failed skipped (--all)' : `${c.skippedFailed} failed skipped`);
  if (c.superseded) parts.push(`${c.superseded} earlier attempts superseded`);
  if (c.unselected) parts.push(`${c.unselected} not selected`);
  if (c.unexportable) parts.push(`${c.unexportable} not exportable as ${opts.format}`);
  if (c.cleaned) parts.push(`${c.cleaned} with control characters or lone surrogates removed`);
  if (report.bad.length) parts.push(`${report.bad.length} bad rows skipped`);
  return `export: ${parts.join(', ')}\n`;
}
