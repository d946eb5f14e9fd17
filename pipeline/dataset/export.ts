/**
 * `trajforge export`: trajectories → rows a trainer reads, with what to train on marked.
 *
 * Every format is built from the training view, `interleaved_text`, split by the dialect's
 * whole-trajectory parser: a model turn is the text between two tool outputs (the rollout
 * joins turns and outputs with one `\n`, which is dropped at each side of an output), and an
 * output is an output segment, tags included. So an assistant message is exactly what the
 * model wrote (after repair) and a tool message exactly what trajforge showed it; nudges,
 * turns with no action and rolled-back turns are not in the view and not exported.
 *
 * Formats (one JSON object per line, each with `id`, `tokens` and `train_tokens`):
 * - `messages`: `{id, messages: [{role, content, train}], tools?}`. The system prompt when
 *   the row's transcript has one (train false), the question (user, false), then each model
 *   turn (assistant, true) and each tool output (false): a `user` turn for tulu and mcp-xml,
 *   as those models saw them; a `tool` turn for native rows, whose assistant turns carry
 *   `tool_calls` and whose row carries `tools`.
 * - `sharegpt`: `{id, system?, conversations: [{from, value}]}`: human (the question), gpt (a
 *   turn that does not end in a call: the answer), function_call (a turn whose last call or
 *   answer is a call), observation (a tool output). A turn with think + call is NOT split: it is one function_call entry
 *   holding the whole turn as written (think, then the call in the dialect's tags). ShareGPT
 *   readers (LLaMA-Factory) require model entries (gpt, function_call) to alternate with
 *   human/observation entries and drop a row where two model entries follow each other;
 *   and the think belongs to the call it led to.
 * - `text`: `{id, question, text, mask_spans}`: `text` is `interleaved_text` as is and
 *   `mask_spans` the `[start, end)` span of every tool output, tags included, end exclusive,
 *   counted in Unicode code points (so Python's `text[start:end]` is the output), as DR Tulu
 *   trains: loss on everything but the outputs.
 *
 * `tokens` is the sum of the token counts of the row's strings (system, question, turns,
 * outputs; a chat template's own tokens are not included) with the chosen tokenizer;
 * `train_tokens` the part with loss on. `--max-tokens` compares against `tokens`.
 */
import { createRequire } from 'node:module';
import { basename } from 'node:path';
import type { ChatMessage, ToolCallRecord, Trajectory } from '../../schemas/index.js';
import { getDialect } from '../dialects/index.js';
import type { Segment } from '../dialects/types.js';
import { TrajforgeError } from '../errors.js';
import { OutputClosedError, type JsonlWriter } from '../jsonl.js';
import { statPath } from '../files.js';
import { inputFiles, readDataset, type DatasetRow, type ReadOptions, type ReadReport } from './readers.js';
import { indexLatestFailures, type LatestIndex } from './stats.js';
import { FAILURES } from '../generate/store.js';
import { countTokens, TOKEN_ENCODING } from '../tokens.js';
import { anyRemoved, cleanJson, noneRemoved } from '../text.js';

export type ExportFormat = 'messages' | 'sharegpt' | 'text';
export const EXPORT_FORMATS: readonly ExportFormat[] = ['messages', 'sharegpt', 'text'];

// ---------------------------------------------------------------------------------------
// Tokenizers

/** The encodings `--tokenizer` takes; o200k_base is the one the rest of trajforge counts with. */
export const TOKENIZERS = ['o200k_base', 'cl100k_base'] as const;
export type TokenizerName = (typeof TOKENIZERS)[number];

type Encoding = typeof import('gpt-tokenizer/encoding/cl100k_base');
const AS_TEXT = { disallowedSpecial: new Set<string>() };
let cl100k: Encoding | undefined;

/** A counter for `name`; an unknown name is a usage error that lists the known ones. */
export function tokenCounter(name: string): (text: string) => number {
  if (name === TOKEN_ENCODING) return countTokens;
  if (name === 'cl100k_base') {
    // Loaded only when asked for: its merge table costs as much as o200k's.
    cl100k ??= createRequire(import.meta.url)('gpt-tokenizer/encoding/cl100k_base') as Encoding;
    const enc = cl100k;
    return (text) => enc.countTokens(text, AS_TEXT);
  }
  throw new TrajforgeError('BAD_USAGE', `--tokenizer: unknown tokenizer "${name}" (known: ${TOKENIZERS.join(', ')})`, { field: 'tokenizer' });
}

// ---------------------------------------------------------------------------------------
// The training view

/** One step of the training view, in order. */
export type Step =
  | {
      readonly kind: 'model';
      readonly text: string;
      /** Its last call or answer is a call: the turn hands over to a tool (sharegpt's function_call). */
      readonly endsWithCall: boolean;
    }
  | { readonly kind: 'output'; readonly text: string; /** [start, end) in `interleaved_text`, UTF-16 units. */ readonly start: number; readonly end: number };

/**
 * The model turns and tool outputs of a tulu or mcp-xml trajectory, from its parsed segments.
 * A region between outputs that is only whitespace is no turn (nothing to train on).
 */
export function stepsOf(text: string, segments: readonly Segment[]): Step[] {
  const steps: Step[] = [];
  let regionStart = 0;
  let regionEndsWithCall = false;
  let afterOutput = false;
  const closeRegion = (end: number, beforeOutput: boolean): void => {
    let from = regionStart;
    let to = end;
    if (afterOutput && from < to && text.charCodeAt(from) === 0x0a) from++;
    if (beforeOutput && to > from && text.charCodeAt(to - 1) === 0x0a) to--;
    const piece = text.slice(from, to);
    if (piece.trim() !== '') steps.push({ kind: 'model', text: piece, endsWithCall: regionEndsWithCall });
    regionEndsWithCall = false;
  };
  for (const s of segments) {
    if (s.kind === 'output') {
      closeRegion(s.offset, true);
      const end = s.offset + s.text.length;
      steps.push({ kind: 'output', text: s.text, start: s.offset, end });
      regionStart = end;
      afterOutput = true;
    } else if (s.kind === 'call' || s.kind === 'answer') regionEndsWithCall = s.kind === 'call';
  }
  closeRegion(text.length, false);
  return steps;
}

function systemPromptOf(t: Trajectory): string | undefined {
  const first = Array.isArray(t.messages) ? t.messages[0] : undefined;
  return first?.role === 'system' && typeof first.content === 'string' ? first.content : undefined;
}

/** A row that cannot be exported in the asked format; skipped and counted, like a bad row. */
export class UnexportableRow extends Error {}

function parsedSteps(t: Trajectory): Step[] {
  const dialect = getDialect(t.dialect);
  const text = t.interleaved_text;
  return stepsOf(text, dialect.parseTrajectory(text).segments);
}

// ---------------------------------------------------------------------------------------
// Native rows: the transcript with its tool records, as OpenAI messages

interface NativeCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

interface NativeTurn {
  readonly message: ChatMessage;
  readonly calls?: NativeCall[];
  readonly callId?: string;
}

/**
 * A native row keeps its calls in `tool_calls` records, not in the text: an assistant turn
 * followed by k `tool` turns made the next k records, in order. Nudges and forced-answer
 * prompts are user turns of the transcript and are kept (train false).
 */
function nativeTurns(t: Trajectory): NativeTurn[] {
  const msgs = Array.isArray(t.messages) ? t.messages : [];
  const records = Array.isArray(t.tool_calls) ? t.tool_calls : [];
  const out: NativeTurn[] = [];
  let next = 0;
  for (let i = 0; i < msgs.length; i++) {
    const m = msgs[i]!;
    if (m.role !== 'assistant') {
      // A tool turn that follows no assistant turn answers no known call: no id to give it.
      out.push({ message: m });
      continue;
    }
    let k = 0;
    while (msgs[i + 1 + k]?.role === 'tool') k++;
    const calls = records.slice(next, next + k).map(nativeCall);
    // Tool turns take their ids from the calls just attached, in order.
    out.push({ message: m, ...(calls.length ? { calls } : {}) });
    for (let j = 0; j < k; j++) {
      i++;
      out.push({ message: msgs[i]!, ...(calls[j] ? { callId: calls[j]!.id } : {}) });
    }
    next += k;
  }
  return out;
}

function nativeCall(r: ToolCallRecord): NativeCall {
  return { id: r.call_id, type: 'function', function: { name: r.tool_name, arguments: JSON.stringify(r.arguments ?? {}) } };
}

/** The `tools` of a native row: `meta.tools` when the source kept them, else names with an open schema. */
function nativeTools(t: Trajectory): unknown[] {
  const given = (t.meta as Record<string, unknown> | undefined)?.tools;
  if (Array.isArray(given)) return given;
  const names = [...new Set((t.tool_calls ?? []).map((r) => r.tool_name))];
  return names.map((name) => ({ type: 'function', function: { name, parameters: { type: 'object' } } }));
}

// ---------------------------------------------------------------------------------------
// Formats

export interface ExportedMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  train: boolean;
  tool_calls?: NativeCall[];
  tool_call_id?: string;
}

export interface MessagesRow {
  id: string;
  messages: ExportedMessage[];
  tools?: unknown[];
  tokens: number;
  train_tokens: number;
}

export interface ShareGptRow {
  id: string;
  system?: string;
  conversations: { from: 'human' | 'gpt' | 'function_call' | 'observation'; value: string }[];
  tokens: number;
  train_tokens: number;
}

export interface TextRow {
  id: string;
  question: string;
  text: string;
  /** `[start, end)` in code points. */
  mask_spans: [number, number][];
  tokens: number;
  train_tokens: number;
}

export type ExportRow = MessagesRow | ShareGptRow | TextRow;

/** A token counter; `system`, when present, counts system prompts (memoised: every row repeats one). */
export type Count = ((text: string) => number) & { system?: (text: string) => number };

/** `count`, with a memo for the system prompt, often the longest string of a row and the same in every row. */
function withSystemMemo(count: (text: string) => number): Count {
  let lastText: string | undefined;
  let lastCount = 0;
  const c: Count = (text) => count(text);
  c.system = (text) => {
    if (text !== lastText) {
      lastText = text;
      lastCount = count(text);
    }
    return lastCount;
  };
  return c;
}

export function toMessages(t: Trajectory, count: Count): MessagesRow {
  const messages: ExportedMessage[] = [];
  let tools: unknown[] | undefined;
  if (t.dialect === 'native') {
    for (const turn of nativeTurns(t)) {
      const m: ExportedMessage = { role: turn.message.role, content: turn.message.content, train: turn.message.role === 'assistant' };
      if (turn.calls) m.tool_calls = turn.calls;
      if (turn.callId !== undefined) m.tool_call_id = turn.callId;
      messages.push(m);
    }
    tools = nativeTools(t);
  } else {
    const system = systemPromptOf(t);
    if (system !== undefined) messages.push({ role: 'system', content: system, train: false });
    messages.push({ role: 'user', content: t.question, train: false });
    for (const s of parsedSteps(t)) messages.push({ role: s.kind === 'model' ? 'assistant' : 'user', content: s.text, train: s.kind === 'model' });
  }
  let tokens = 0;
  let train = 0;
  for (const m of messages) {
    const n = (m.role === 'system' ? (count.system ?? count) : count)(m.content) + (m.tool_calls ? count(JSON.stringify(m.tool_calls.map((c) => c.function))) : 0);
    tokens += n;
    if (m.train) train += n;
  }
  return { id: t.id, messages, ...(tools ? { tools } : {}), tokens, train_tokens: train };
}

export function toShareGpt(t: Trajectory, count: Count): ShareGptRow {
  const conversations: ShareGptRow['conversations'] = [];
  let system: string | undefined;
  if (t.dialect === 'native') {
    for (const turn of nativeTurns(t)) {
      const m = turn.message;
      if (m.role === 'system') system ??= m.content;
      else if (m.role === 'tool') conversations.push({ from: 'observation', value: m.content });
      else if (m.role === 'user') conversations.push({ from: 'human', value: m.content });
      else if (turn.calls) {
        // LLaMA-Factory's function_call value: {name, arguments}, a list for several calls.
        const calls = turn.calls.map((c) => ({ name: c.function.name, arguments: safeJson(c.function.arguments) }));
        const json = JSON.stringify(calls.length === 1 ? calls[0] : calls);
        conversations.push({ from: 'function_call', value: m.content.trim() === '' ? json : `${m.content}\n${json}` });
      } else conversations.push({ from: 'gpt', value: m.content });
    }
  } else {
    system = systemPromptOf(t);
    conversations.push({ from: 'human', value: t.question });
    for (const s of parsedSteps(t)) {
      conversations.push({ from: s.kind === 'output' ? 'observation' : s.endsWithCall ? 'function_call' : 'gpt', value: s.text });
    }
  }
  let tokens = system === undefined ? 0 : (count.system ?? count)(system);
  let train = 0;
  for (const c of conversations) {
    const n = count(c.value);
    tokens += n;
    if (c.from === 'gpt' || c.from === 'function_call') train += n;
  }
  return { id: t.id, ...(system === undefined ? {} : { system }), conversations, tokens, train_tokens: train };
}

function safeJson(s: string): unknown {
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
}

/** UTF-16 offsets → code point offsets, for the (sorted) offsets given. */
function toCodePoints(text: string, offsets: readonly number[]): number[] {
  // Text without surrogates (nearly all) needs no walk.
  if (!/[\uD800-\uDFFF]/.test(text)) return [...offsets];
  const out: number[] = [];
  let cp = 0;
  let unit = 0;
  for (const target of offsets) {
    while (unit < target) {
      const c = text.charCodeAt(unit);
      unit += c >= 0xd800 && c <= 0xdbff && unit + 1 < text.length && (text.charCodeAt(unit + 1) & 0xfc00) === 0xdc00 ? 2 : 1;
      cp++;
    }
    out.push(cp);
  }
  return out;
}

/** The `[start, end)` UTF-16 spans of the tool outputs of `t`. */
function outputSpans(t: Trajectory): [number, number][] {
  const text = t.interleaved_text;
  if (t.dialect !== 'native') {
    return parsedSteps(t).flatMap((s) => (s.kind === 'output' ? [[s.start, s.end] as [number, number]] : []));
  }
  // No parser for native text: each record's output, found in order.
  const spans: [number, number][] = [];
  let from = 0;
  for (const r of t.tool_calls ?? []) {
    if (!r.output_text) continue;
    const at = text.indexOf(r.output_text, from);
    if (at < 0) throw new UnexportableRow(`tool output of call ${r.call_id} is not in interleaved_text, so it cannot be masked`);
    spans.push([at, at + r.output_text.length]);
    from = at + r.output_text.length;
  }
  return spans;
}

export function toText(t: Trajectory, count: Count): TextRow {
  const text = t.interleaved_text;
  const spans = outputSpans(t);
  let train = 0;
  let pos = 0;
  for (const [s, e] of spans) {
    if (s > pos) train += count(text.slice(pos, s));
    pos = e;
  }
  if (pos < text.length) train += count(text.slice(pos));
  const cps = toCodePoints(text, spans.flat());
  const mask: [number, number][] = spans.map((_, i) => [cps[2 * i]!, cps[2 * i + 1]!]);
  return { id: t.id, question: t.question, text, mask_spans: mask, tokens: count(t.question) + count(text), train_tokens: train };
}

export function exportTrajectory(t: Trajectory, format: ExportFormat, count: Count): ExportRow {
  switch (format) {
    case 'messages':
      return toMessages(t, count);
    case 'sharegpt':
      return toShareGpt(t, count);
    case 'text':
      return toText(t, count);
  }
}

// ---------------------------------------------------------------------------------------
// Latest state per id of a run directory (what `stats` counts)

const LINE_SPAN = 2 ** 32;

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

// ---------------------------------------------------------------------------------------
// The stream

export interface ExportOptions {
  readonly format: ExportFormat;
  readonly tokenizer?: string | undefined;
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
  /** Rows the format could not express (skipped with `--on-bad-row skip`). */
  unexportable: number;
  /**
   * Rows whose text held control characters or lone surrogates (data trajforge did not write,
   * or wrote before it cleaned text), exported with them removed (pipeline/text.ts).
   */
  cleaned: number;
  /** The reader of stdout went away before the end. */
  outputClosed: boolean;
}

export async function exportRows(rows: AsyncIterable<DatasetRow>, out: JsonlWriter, opts: ExportOptions, keep?: (row: DatasetRow) => boolean): Promise<ExportCounts> {
  const count = withSystemMemo(tokenCounter(opts.tokenizer ?? TOKEN_ENCODING));
  const counts: ExportCounts = { in: 0, written: 0, droppedOverMax: 0, skippedFailed: 0, superseded: 0, unexportable: 0, cleaned: 0, outputClosed: false };
  try {
    for await (const row of rows) {
      counts.in++;
      const t = row.trajectory;
      if (keep && !keep(row)) {
        counts.superseded++;
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
      let exported: ExportRow;
      try {
        exported = exportTrajectory(clean, opts.format, count);
      } catch (err) {
        if (!(err instanceof UnexportableRow || (err instanceof TrajforgeError && err.code === 'BAD_CONFIG'))) throw err;
        const place = `${row.file === '-' ? '<stdin>' : row.file}:${row.line}`;
        if (opts.onBadRow !== 'skip') throw new TrajforgeError('BAD_INPUT', `${place}: cannot export as ${opts.format}: ${err.message}`, { file: row.file, line: row.line });
        counts.unexportable++;
        continue;
      }
      if (opts.maxTokens !== undefined && exported.tokens > opts.maxTokens) {
        counts.droppedOverMax++;
        continue;
      }
      const p = out.write(exported);
      counts.written++;
      if (p) await p;
    }
  } catch (err) {
    if (!(err instanceof OutputClosedError)) throw err;
    counts.outputClosed = true;
  }
  return counts;
}

/** The line the command prints to stderr. */
export function formatExportCounts(c: ExportCounts, report: ReadReport, opts: ExportOptions): string {
  const parts = [`${c.in} rows in`, `${c.written} written`];
  const tok = opts.tokenizer ?? TOKEN_ENCODING;
  parts.push(opts.maxTokens === undefined ? `0 dropped over max tokens` : `${c.droppedOverMax} dropped over ${opts.maxTokens} tokens (${tok})`);
  parts.push(opts.all ? '0 failed skipped (--all)' : `${c.skippedFailed} failed skipped`);
  if (c.superseded) parts.push(`${c.superseded} earlier attempts superseded`);
  if (c.unexportable) parts.push(`${c.unexportable} not exportable as ${opts.format}`);
  if (c.cleaned) parts.push(`${c.cleaned} with control characters or lone surrogates removed`);
  if (report.bad.length) parts.push(`${report.bad.length} bad rows skipped`);
  return `export: ${parts.join(', ')}\n`;
}
