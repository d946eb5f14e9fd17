/**
 * `trajforge export`: trajectories → rows a trainer reads, with what to train on marked.
 *
 * Every format is written from the training view (training-view.ts; `text` of a row without a
 * transcript, DR Tulu's generator rows, from its `interleaved_text`): the
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
import { rowAccountLine } from './row-account.js';
import type { Trajectory } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import type { JsonlWriter } from '../core/jsonl.js';
import type { DatasetRow, ReadReport } from './readers.js';
import { O200K, type TokenCounter } from '../core/tokens/count.js';
import { Counter, toMessages, toShareGpt, toText, type MessagesRow, type ShareGptRow, type TextRow } from './export-formats.js';
import type { MaskStrategy, TokensRow } from './token-rows.js';
import { rowsAhead, TokenExport } from './token-export.js';
import { ThinkKeeper } from './export-split.js';
import { loadHfTokenizer } from '../core/tokens/tokenizer.js';
import { ChatTemplate } from '../core/tokens/chat-template.js';
import type { TokenJobResult } from './token-pool.js';
import type { TokenLimits } from '../core/tokens/limits.js';
import type { ToolRole, ReasoningNote, UnsentReasoning, UntrainedTurns, ViewMode } from './training-view.js';
import { UnexportableRow } from './unexportable-row.js';
import { ForeignCheck } from './foreign.js';
import { anyRemoved, cleanJson, noneRemoved } from '../text.js';
import { childIdsOf, inFamily } from './families.js';
import { toAdp, type AdpRow } from './formats/adp.js';
import { toAtif, type AtifRow } from './formats/atif.js';
import type { ShareGptCalls } from './formats/sharegpt.js';

export type ExportFormat = 'messages' | 'sharegpt' | 'text' | 'tokens' | 'adp' | 'atif';
export const EXPORT_FORMATS: readonly ExportFormat[] = ['messages', 'sharegpt', 'text', 'tokens', 'adp', 'atif'];
/** Formats that keep a session's links inside the row, in their own standard's place. */
const LINKED_INSIDE: ReadonlySet<ExportFormat> = new Set(['adp', 'atif']);

export type ExportRow = (MessagesRow | ShareGptRow | TextRow | TokensRow | AdpRow | AtifRow) & { metadata?: FamilyMetadata & { reasoning?: ReasoningNote } };

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
  /** Tool results in this role; default: the role they were sent in. */
  readonly toolRole?: ToolRole | undefined;
  /** Reasoning the endpoint was not sent back: left out (default, as sent) or kept. */
  readonly unsentReasoning?: UnsentReasoning | undefined;
  /** `messages`: untrained (nudged) turns left out (default) or kept. */
  readonly untrained?: UntrainedTurns | undefined;
  /** sharegpt: calls as LLaMA-Factory's function_call JSON (default) or as written. */
  readonly sharegptCalls?: ShareGptCalls | undefined;
  readonly strategy?: MaskStrategy | undefined;
  readonly emptyThink?: boolean | undefined;
  readonly maxTokens?: number | undefined;
  /** Include failed rows too (default: only `status == ok`). */
  readonly all?: boolean | undefined;
  /** `skip`: a row that cannot be exported is counted, not fatal. */
  readonly onBadRow?: 'error' | 'skip' | undefined;
  /** `tokens`: worker processes and the bounds on each row's rendering (core/tokens/limits.ts has the defaults). */
  readonly tokenLimits?: Partial<TokenLimits> | undefined;
  /** `tokens`, and `messages` with a tokenizer: how large the input is, when known (`inputBytes`): a large one starts several workers at once. */
  readonly inputBytes?: number | undefined;
}

/**
 * What became of every row read. They add up: `in` = `exported` + `droppedWhole` + `empty` +
 * `skippedFailed` + `superseded` + `unselected` + `unexportable` (`exportedCountsAddUp`); and
 * `written` = the rows those `exported` ones gave, a split row giving `splitInto` / `split` on average.
 */
export interface ExportCounts {
  /** Rows read (bad rows not included). */
  in: number;
  /** Rows read that gave at least one row written. */
  exported: number;
  /** Rows written (a split row gives several). */
  written: number;
  /** Rows built as several (tokens: split where the template drops content), and how many rows they made. */
  split: number;
  splitInto: number;
  /** Rows whose every part was over `--max-tokens`. */
  droppedWhole: number;
  /** Rows that gave no row at all (tokens: nothing to train on). */
  empty: number;
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

/** A trajectory's rows, as objects, or (`tokens`) as the JSON lines a worker wrote with their token counts. */
export type BuiltRows = ExportRow[] | TokenJobResult;

/** Builds the rows of one trajectory in the asked format: one row, or for `tokens` one per part (possibly none). */
export class Exporter {
  readonly #opts: ExportOptions;
  readonly #count: Counter;
  readonly #tokens: TokenExport | undefined;
  /** `messages` with the trainee's chat template: rows split so that each, rendered whole, keeps every trained think. */
  readonly #keeper: ThinkKeeper | undefined;

  constructor(opts: ExportOptions) {
    this.#opts = opts;
    this.#count = new Counter(opts.counter ?? O200K);
    if (opts.format === 'messages' && opts.tokenizerPath !== undefined) {
      const tokenizer = loadHfTokenizer(opts.tokenizerPath, '--tokenizer');
      // A tokenizer without a template (and none given) renders nothing: the rows are then not checked, and the summary says so.
      if (tokenizer.chatTemplate !== undefined || opts.chatTemplate !== undefined) {
        // Compiled here too, so that a template that does not parse fails before anything is read.
        new ChatTemplate(tokenizer, opts.chatTemplate);
        this.#keeper = new ThinkKeeper({ tokenizerPath: opts.tokenizerPath, chatTemplate: opts.chatTemplate, limits: opts.tokenLimits ?? {}, inputBytes: opts.inputBytes });
      }
    }
    if (opts.format === 'tokens') {
      if (opts.tokenizerPath === undefined) throw new TrajforgeError('BAD_USAGE', 'export --format tokens needs --tokenizer PATH: the trainee\'s Hugging Face tokenizer (a folder with tokenizer.json and tokenizer_config.json)', { field: 'tokenizer' });
      this.#tokens = new TokenExport({
        tokenizerPath: opts.tokenizerPath,
        chatTemplate: opts.chatTemplate,
        view: { view: opts.view, toolRole: opts.toolRole, unsentReasoning: opts.unsentReasoning },
        tokens: { strategy: opts.strategy, emptyThink: opts.emptyThink },
        limits: opts.tokenLimits ?? {},
        inputBytes: opts.inputBytes,
      });
    }
  }

  /** Resolves once `tokens`' first worker has loaded the tokenizer and the chat template; rejects with why it could not. */
  async ready(): Promise<void> {
    await this.#tokens?.ready();
  }

  /** `messages`: whether rows are split by the trainee's chat template (else the summary says thinks may be dropped). */
  get thinksChecked(): boolean {
    return this.#keeper !== undefined;
  }

  /** Rows built ahead of the one being written: `tokens` rows are built in worker processes, several at once. */
  get window(): number {
    if (this.#tokens !== undefined) return this.#tokens.window;
    return this.#keeper === undefined ? 1 : rowsAhead(this.#opts.tokenLimits ?? {});
  }

  /** The rows of `t`; `tokens` rows arrive later, from a worker (a failed row rejects with `UnexportableRow`). */
  rows(t: Trajectory): BuiltRows | Promise<BuiltRows> {
    const metadata = LINKED_INSIDE.has(this.#opts.format) ? undefined : familyMetadata(t);
    if (this.#tokens !== undefined) return this.#tokens.build(t, metadata);
    const withMetadata = (rows: ExportRow[]): ExportRow[] => {
      if (metadata !== undefined) for (const r of rows) r.metadata = { ...r.metadata, ...metadata };
      return rows;
    };
    const rows = this.#build(t);
    return Array.isArray(rows) ? withMetadata(rows) : rows.then(withMetadata);
  }

  /** Ends the worker processes of `tokens`, if any were started. */
  async close(): Promise<void> {
    await this.#tokens?.close();
    await this.#keeper?.close();
  }

  #build(t: Trajectory): ExportRow[] | Promise<ExportRow[]> {
    const choice = { view: this.#opts.view, toolRole: this.#opts.toolRole, unsentReasoning: this.#opts.unsentReasoning, untrained: this.#opts.untrained };
    switch (this.#opts.format) {
      case 'messages': {
        const row = toMessages(t, this.#count, choice);
        return this.#keeper === undefined ? [row] : this.#keeper.rows(row, this.#count);
      }
      case 'sharegpt':
        return [toShareGpt(t, this.#count, { ...choice, calls: this.#opts.sharegptCalls })];
      case 'text':
        return [toText(t, this.#count, choice)];
      case 'tokens':
        throw new Error('unreachable: tokens rows are built by TokenExport');
      case 'adp':
        return [toAdp(t, familyMetadata(t), choice)];
      case 'atif':
        return [toAtif(t, familyMetadata(t), choice)];
    }
  }
}

/** The length `--max-tokens` compares. */
function rowTokens(row: ExportRow): number {
  return 'num_tokens' in row ? row.num_tokens : 'tokens' in row ? row.tokens : 0;
}

/**
 * A row on its way out: what building it gave, or the error that stops the export there.
 * Rows are built ahead of the writer (`Exporter.window`: `tokens` rows in worker processes) and
 * written strictly in input order, each error at its own row, as if built one by one.
 */
type InFlight = { readonly row: DatasetRow; readonly built: Promise<BuiltRows | { readonly failed: unknown }> } | { readonly row: DatasetRow; readonly fatal: unknown };

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
  const counts: ExportCounts = { in: 0, exported: 0, written: 0, split: 0, splitInto: 0, droppedWhole: 0, empty: 0, droppedOverMax: 0, skippedFailed: 0, superseded: 0, unselected: 0, unexportable: 0, cleaned: 0 };
  const inFlight: InFlight[] = [];
  // The error of the row that stopped the export, told apart from one of the reader.
  let stopped: unknown;
  const writeOldest = async (): Promise<void> => {
    try {
      await writeBuilt(inFlight.shift()!, out, opts, counts);
    } catch (err) {
      stopped = err;
      throw err;
    }
  };
  try {
    try {
      for await (const row of rows) {
        counts.in++;
        let clean: Trajectory | undefined;
        try {
          clean = admitted(row, opts, counts, foreign, keep, select);
        } catch (err) {
          // It stops the export here: the rows before it are written (or fail) first.
          inFlight.push({ row, fatal: err });
          while (inFlight.length > 0) await writeOldest();
        }
        if (clean !== undefined) {
          let built: Promise<BuiltRows | { failed: unknown }>;
          try {
            built = Promise.resolve(exporter.rows(clean)).catch((failed: unknown) => ({ failed }));
          } catch (failed) {
            built = Promise.resolve({ failed });
          }
          inFlight.push({ row, built });
        }
        while (inFlight.length >= exporter.window) await writeOldest();
      }
    } catch (err) {
      // The reader failed after the rows in flight: they are written (or fail) first, as they would have been one by one.
      if (err !== stopped) while (inFlight.length > 0) await writeOldest();
      throw err;
    }
    while (inFlight.length > 0) await writeOldest();
  } finally {
    await exporter.close();
  }
  return counts;
}

/** The clean trajectory of `row` when it is to be exported; undefined (and counted) when it is left out. */
function admitted(
  row: DatasetRow,
  opts: ExportOptions,
  counts: ExportCounts,
  foreign: ForeignCheck,
  keep: ((row: DatasetRow) => boolean) | undefined,
  select: ((row: DatasetRow) => boolean) | undefined,
): Trajectory | undefined {
  const t = row.trajectory;
  if (keep && !keep(row)) {
    counts.superseded++;
    return undefined;
  }
  foreign.check(row);
  // After the foreign check: an expression may test the verdict it makes.
  if (select && !select(row)) {
    counts.unselected++;
    return undefined;
  }
  if (!opts.all && t.status !== 'ok') {
    counts.skippedFailed++;
    return undefined;
  }
  // Cleaned before the row is built, so that mask spans and token counts are those of the text written.
  const removed = noneRemoved();
  const clean = cleanJson(t, removed);
  if (anyRemoved(removed)) counts.cleaned++;
  return clean;
}

/** Writes one row's built rows (`--max-tokens` applied), or counts or throws why it has none. */
async function writeBuilt(entry: InFlight, out: JsonlWriter, opts: ExportOptions, counts: ExportCounts): Promise<void> {
  const { row } = entry;
  if ('fatal' in entry) throw entry.fatal;
  const built = await entry.built;
  if ('failed' in built) {
    const err = built.failed;
    if (!(err instanceof UnexportableRow || (err instanceof TrajforgeError && err.code === 'BAD_CONFIG'))) throw err;
    const place = `${row.file === '-' ? '<stdin>' : row.file}:${row.line}`;
    if (opts.onBadRow !== 'skip') throw new TrajforgeError('BAD_INPUT', `${place}: cannot export as ${opts.format}: ${err.message}`, { file: row.file, line: row.line });
    counts.unexportable++;
    return;
  }
  const lines = Array.isArray(built) ? built.map((r) => ({ line: undefined, row: r, tokens: rowTokens(r) })) : built.lines.map((line, i) => ({ line, row: undefined, tokens: built.tokens[i]! }));
  if (lines.length > 1) {
    counts.split++;
    counts.splitInto += lines.length;
  }
  let written = 0;
  for (const { line, row: r, tokens } of lines) {
    if (opts.maxTokens !== undefined && tokens > opts.maxTokens) {
      counts.droppedOverMax++;
      continue;
    }
    const p = line === undefined ? out.write(r) : out.writeLine(line);
    written++;
    if (p) await p;
  }
  counts.written += written;
  if (written > 0) counts.exported++;
  else if (lines.length === 0) counts.empty++;
  else counts.droppedWhole++;
}

/** Whether every row read is accounted for once (see `ExportCounts`). */
export function exportedCountsAddUp(c: ExportCounts): boolean {
  return c.in === c.exported + c.droppedWhole + c.empty + c.skippedFailed + c.superseded + c.unselected + c.unexportable;
}

/** Said of `messages` rows not checked against the trainee's chat template. */
export const THINKS_UNCHECKED = 'thinks not checked: without --tokenizer DIR (the trainee\'s, with its chat template) a trainer rendering a row whole through a template like Qwen3\'s drops the thinks of assistant turns before the last user turn: docs/export.md#messages-rows-a-trainer-renders-whole';

/** The line the command prints to stderr; `thinksChecked`: `messages` rows were split by the trainee's chat template. */
export function formatExportCounts(c: ExportCounts, report: ReadReport, opts: ExportOptions, thinksChecked = true): string {
  const parts: string[] = [];
  const tok = (opts.counter ?? O200K).name;
  parts.push(opts.maxTokens === undefined ? `0 dropped over max tokens` : `${c.droppedOverMax} dropped over ${opts.maxTokens} tokens (${tok})`);
  parts.push(opts.all ? '0 failed skipped (--all)' : `${c.skippedFailed} failed skipped`);
  // Rows in = rows exported + every reason a row was not; written = what the exported ones gave.
  parts.push(`${c.exported} exported`);
  if (c.droppedWhole) parts.push(`${c.droppedWhole} dropped whole over max tokens`);
  if (c.empty) parts.push(`${c.empty} with nothing to train on`);
  if (c.superseded) parts.push(`${c.superseded} earlier attempts superseded`);
  if (c.unselected) parts.push(`${c.unselected} not selected`);
  if (c.unexportable) parts.push(`${c.unexportable} not exportable as ${opts.format}`);
  if (c.cleaned) parts.push(`${c.cleaned} with control characters or lone surrogates removed`);
  if (report.bad.length) parts.push(`${report.bad.length} bad rows skipped`);
  if (opts.format === 'messages' && !thinksChecked) parts.push(THINKS_UNCHECKED);
  const why = 'one per stretch between the user turns whose reasoning the chat template drops: docs/export.md';
  return rowAccountLine('export', { in: c.in, written: c.written, outcomes: parts, split: { rows: c.split, into: c.splitInto, why } });
}
