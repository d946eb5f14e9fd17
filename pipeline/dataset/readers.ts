/**
 * Readers: any trajectory dataset → a stream of Trajectory records, one per row.
 *
 * Row shapes, detected per file from its first non-empty row (or forced with `format`):
 * - `trajforge`: our own records (trajectories.jsonl, failures.jsonl), passed through;
 * - `drtulu`: rows of DR Tulu's trajectory generator (`{sample_id, question, trajectory: {interleaved_text, tool_calls…}}`);
 * - `chat`: `{messages: [...]}` rows (MiroVerse / MiroThinker style), tool results as user turns.
 *
 * An input is a JSONL file, `-` for stdin, or a run directory (its trajectories.jsonl then
 * failures.jsonl). Streams: one row in memory at a time, plus the set of ids of the
 * external rows read so far (ids must stay unique within a read).
 *
 * Speed: `validate` and `stats` stream gigabytes through here, so lines are split on Buffers
 * (readline's string splitting and per-line events cost more than JSON.parse itself) and
 * rows get cheap structural checks only; zod would dominate the cost and the validator
 * checks what matters anyway.
 *
 * How external rows become trajectories (decisions the sources leave open):
 * - Ids: the source's id, or for a chat row without one the sampler's stable hash of the
 *   question. Sources repeat ids (the DR Tulu fixture has two different questions under one
 *   `sample_id`), so a repeated id gets `#2`, `#3`… in order of reading and
 *   `meta.source_id` always holds the id as the source wrote it. `question_id` is the
 *   unique id too: a repeated source id does not mean the same question.
 * - DR Tulu rows: the generator's tool records are matched to the `<tool_output>` blocks of
 *   the text by position (record i ↔ block i), as the generator wrote them; where the model
 *   invented blocks this pairs records with invented ones, and the validator flags the
 *   count. `final_answer` is the generator's own field (it can differ from the `<answer>`
 *   in the text); cited ids are read from it. `messages` stays empty: the generator kept no
 *   transcript and a reconstruction would be a guess.
 * - Chat rows: the system prompt and the first user message (the question) stay out of the
 *   interleaved text; assistant turns go in as written; a user (or `tool`) turn right after
 *   an assistant turn that made a call is that call's result and goes in as the dialect's
 *   `<tool_output>` (tool text escaped; a tulu result that already is one rendered output
 *   block is kept as is), except a summary prompt, which is an instruction, not a result. Other user turns (summary prompts, nudges) stay out of the training view;
 *   `messages` keeps the whole transcript as given.
 * - The answer of a MiroVerse trace: a main agent answers in `\boxed{}` (the last box; the
 *   fixture restates it after the summary prompt). A browsing sub-agent is told to write a
 *   final report ("This is a direct instruction to you…") and never boxes it. Rule: when the
 *   last assistant turn makes no call, follows a user turn that is not a tool result, holds
 *   no box, and that prompt does not ask for `\boxed{}`, the turn is a report and is the
 *   answer; it enters the interleaved text wrapped in `<answer>…</answer>` (mcp-xml's
 *   parser takes that as the answer) and `final_answer` is the report as written. Boxes are
 *   never invented. `meta.answer_source` says which rule applied.
 * - Which agent wrote a MiroVerse trace: MiroVerse holds main-agent traces and browsing
 *   sub-agent traces side by side, unlinked. MiroThinker gives each its own objective at the
 *   end of the system prompt (the fixture row: "You are a task-solving agent…"; its browsing
 *   agent: "You are an agent that performs the task of searching and browsing…"), sends a
 *   sub-agent its subtask ending "Please provide the answer and detailed supporting
 *   information of the subtask given to you." and ends it with "This is a direct instruction
 *   to you…", while the main agent ends with "Summarize the above conversation…" and is
 *   offered `browsing-agent`. The sub-agent's signs are looked for first (its copy of the
 *   general prompt can mention tools a main agent has); a row that shows none of either is
 *   left without `agent`. The row gets `agent` (`main` or `browsing`, the names a run with
 *   data/configs/miroverse.yaml writes) and `meta.agent_from` (the sign); never `parent_id`:
 *   MiroVerse does not say which main trace called which sub-agent.
 */
import { createReadStream, existsSync } from 'node:fs';
import { join } from 'node:path';
import { SCHEMA_VERSION, type ChatMessage, type DialectName, type ToolCallRecord, type Trajectory } from '../../schemas/index.js';
import { extractBoxed, mcpXml } from '../dialects/mcp-xml.js';
import { tulu } from '../dialects/tulu.js';
import type { Dialect, Segment } from '../dialects/types.js';
import { inputError, TrajforgeError } from '../errors.js';
import { statPath } from '../files.js';
import { questionIdFor } from '../core/ids.js';
import { lineProblem, maxLineBytes, readLineBatches } from '../core/lines.js';
import { deeperThan, MAX_JSON_DEPTH } from '../core/json-depth.js';
import { printable } from '../printable.js';
import { FAILURES, TRAJECTORIES } from '../core/run-dir/names.js';

export type RowFormat = 'trajforge' | 'drtulu' | 'chat';

export const ROW_FORMATS: readonly RowFormat[] = ['trajforge', 'drtulu', 'chat'];

export interface ReadOptions {
  readonly format?: RowFormat | 'auto' | undefined;
  /** `skip`: a bad row is counted in the report instead of stopping the read. */
  readonly onBadRow?: 'error' | 'skip' | undefined;
  readonly stdin?: NodeJS.ReadableStream | undefined;
  /**
   * Bytes of a file to read, by the path as `inputFiles` names it: the rest is not read. A run
   * that is still being written is read up to the end of its last whole line this way, the same
   * bytes in every pass (`report --serve`).
   */
  readonly until?: ReadonlyMap<string, number> | undefined;
  /** The longest line read, in bytes (core/lines.ts); default `maxLineBytes()`. A longer line is a bad row. */
  readonly maxLineBytes?: number | undefined;
  /** Levels of nesting a row may have (core/json-depth.ts); default `MAX_JSON_DEPTH`. A deeper row is a bad row. */
  readonly maxDepth?: number | undefined;
}

export interface DatasetRow {
  /** The file as named in the input (`-` for stdin; messages say `<stdin>`). */
  readonly file: string;
  /** 1-based line in `file`. */
  readonly line: number;
  readonly format: RowFormat;
  readonly trajectory: Trajectory;
  /** The line as read, for a trajforge row: written back as is, it needs no re-serialising. */
  readonly raw?: string | undefined;
}

export interface ReadReport {
  /** Non-empty lines read, bad ones included. */
  rows: number;
  bad: { file: string; line: number; message: string }[];
  /** Good rows per row shape. */
  formats: Partial<Record<RowFormat, number>>;
  /** Good rows per dialect. */
  dialects: Partial<Record<DialectName, number>>;
  /** External rows whose source id was already taken and got a `#n` suffix. */
  renamed: number;
}

/** The files an input names: a run directory holds two. */
export function inputFiles(input: string): string[] {
  if (input === '-') return ['-'];
  const st = statPath(input);
  if (!st) throw new TrajforgeError('BAD_INPUT', `${input}: no such file or run directory`, { file: input });
  if (st.isDirectory()) {
    const files = [TRAJECTORIES, FAILURES].map((f) => join(input, f)).filter((f) => existsSync(f));
    if (files.length === 0) throw new TrajforgeError('BAD_INPUT', `${input}: a directory with neither ${TRAJECTORIES} nor ${FAILURES}`, { file: input });
    return files;
  }
  return [input];
}

// ---------------------------------------------------------------------------------------
// Shapes

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** What the first row of a file says the file holds. */
export function detectRowFormat(v: unknown): RowFormat | undefined {
  if (!isObj(v)) return undefined;
  if ('schema_version' in v && typeof v.interleaved_text === 'string' && Array.isArray(v.tool_calls)) return 'trajforge';
  if (isObj(v.trajectory) && typeof v.trajectory.interleaved_text === 'string') return 'drtulu';
  if (Array.isArray(v.messages)) return 'chat';
  return undefined;
}

const SHAPE: Record<RowFormat, string> = {
  trajforge: 'a trajforge record: id and interleaved_text strings',
  drtulu: 'a DR Tulu generator row: a trajectory object with interleaved_text',
  chat: 'a chat row: a messages array',
};

/** The light check a row of a file of `format` must pass. */
function fits(v: unknown, format: RowFormat): boolean {
  if (!isObj(v)) return false;
  switch (format) {
    case 'trajforge':
      return typeof v.id === 'string' && typeof v.interleaved_text === 'string';
    case 'drtulu':
      return isObj(v.trajectory) && typeof v.trajectory.interleaved_text === 'string';
    case 'chat':
      return Array.isArray(v.messages);
  }
}

function describe(v: unknown): string {
  const seen = detectRowFormat(v);
  if (seen !== undefined) return `this row looks like a ${seen} row`;
  if (Array.isArray(v)) return 'got a JSON array';
  if (!isObj(v)) return `got ${v === null ? 'null' : `a JSON ${typeof v}`}`;
  const keys = Object.keys(v);
  return keys.length === 0 ? 'got an empty object' : `got an object with ${keys.slice(0, 8).join(', ')}${keys.length > 8 ? ', …' : ''}`;
}

/** A row that cannot be read; `field` is the path of the culprit when there is one. */
class BadRow extends Error {
  constructor(
    readonly field: string | undefined,
    message: string,
  ) {
    super(message);
  }
}

function bad(field: string | undefined, message: string): never {
  throw new BadRow(field, message);
}

// ---------------------------------------------------------------------------------------
// Converters

interface ReadContext {
  /** Ids handed out to external rows, with the last suffix used for each source id. */
  readonly ids: Map<string, number>;
  renamed: number;
}

function uniqueId(source: string, ctx: ReadContext): string {
  let n = ctx.ids.get(source);
  if (n === undefined) {
    ctx.ids.set(source, 1);
    return source;
  }
  let id: string;
  do {
    n++;
    id = `${source}#${n}`;
  } while (ctx.ids.has(id));
  ctx.ids.set(source, n);
  ctx.ids.set(id, 1);
  ctx.renamed++;
  return id;
}

function idOf(v: unknown): string | undefined {
  if (typeof v === 'string' && v.trim() !== '') return v;
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  return undefined;
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

/** A fresh object per row: the validator's callers fill it in place. */
function pendingValidation(): Trajectory['validation'] {
  return { passed: true, issues: [] };
}

/** Extra source fields for `meta`; fromEntries, not assignment, so a `__proto__` key stays data. */
function metaFrom(entries: Iterable<[string, unknown]>, extra: Obj): Obj {
  return Object.fromEntries([...entries, ...Object.entries(extra)]);
}

function externalUsage(): Trajectory['usage'] {
  return { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: 0, estimated: true };
}

function timingAt(when: string | undefined): Trajectory['timing'] {
  return { started_at: when ?? '', finished_at: when ?? '', duration_ms: 0, llm_ms: 0, tool_ms: 0 };
}

function outputsOf(segments: readonly Segment[]): Extract<Segment, { kind: 'output' }>[] {
  const out: Extract<Segment, { kind: 'output' }>[] = [];
  for (const s of segments) if (s.kind === 'output') out.push(s);
  return out;
}

function firstAnswer(segments: readonly Segment[]): Extract<Segment, { kind: 'answer' }> | undefined {
  for (const s of segments) if (s.kind === 'answer') return s;
  return undefined;
}

function unresolved(cited: readonly string[], outputs: readonly { snippetIds: readonly string[] }[]): string[] {
  if (cited.length === 0) return [];
  const shown = new Set<string>();
  for (const o of outputs) for (const id of o.snippetIds) shown.add(id);
  return cited.filter((id) => !shown.has(id));
}

function toolsUsed(records: readonly ToolCallRecord[]): string[] {
  return [...new Set(records.map((r) => r.tool_name))];
}

const DRTULU_MAPPED = new Set(['question', 'interleaved_text', 'tool_calls', 'final_answer', 'total_tool_calls', 'tools_used']);

function fromDrTulu(row: Obj, ctx: ReadContext): Trajectory {
  const traj = row.trajectory as Obj;
  const text = traj.interleaved_text as string;
  const sourceId = idOf(row.sample_id) ?? bad('sample_id', 'missing: expected a string or a number');
  const question = str(row.question) ?? str(traj.question) ?? bad('question', 'missing: expected a string');
  const rawCalls = traj.tool_calls ?? [];
  if (!Array.isArray(rawCalls)) bad('trajectory.tool_calls', 'expected an array');
  // Checked before the id is taken: a bad row must not push the next row's id to `#2`.
  rawCalls.forEach((c: unknown, i: number) => {
    if (!isObj(c)) bad(`trajectory.tool_calls[${i}]`, 'expected an object');
    if (typeof c.tool_name !== 'string') bad(`trajectory.tool_calls[${i}].tool_name`, 'expected a string');
  });
  const id = uniqueId(sourceId, ctx);

  const top = Object.entries(row).filter(([k]) => k !== 'sample_id' && k !== 'question' && k !== 'trajectory');
  const taken = new Set(top.map(([k]) => k));
  const inner = Object.entries(traj).filter(([k]) => !DRTULU_MAPPED.has(k) && !taken.has(k));
  const meta = metaFrom([...top, ...inner], { source_format: 'drtulu', source_id: sourceId });
  const metadata = isObj(row.metadata) ? row.metadata : {};

  const parsed = tulu.parseTrajectory(text);
  const outputs = outputsOf(parsed.segments);
  const records: ToolCallRecord[] = (rawCalls as Obj[]).map((c, i): ToolCallRecord => {
    const toolName = c.tool_name as string;
    const result = c.result ?? null;
    const err = isObj(result) ? result.error : undefined;
    const out = outputs[i];
    const record: ToolCallRecord = {
      schema_version: SCHEMA_VERSION,
      call_id: `${id}-${i}`,
      turn: i,
      tool_name: toolName,
      server: null,
      mcp_tool: null,
      parameters: isObj(c.parameters) ? c.parameters : {},
      query: typeof c.query === 'string' ? c.query : c.query === undefined || c.query === null ? '' : JSON.stringify(c.query),
      arguments: {},
      result,
      truncated: isObj(result) && result.truncated === true,
      output_text: out?.text ?? '',
      snippet_ids: out ? [...out.snippetIds] : [],
      skipped: false,
      cached: false,
      duration_ms: 0,
      timestamp: str(c.timestamp) ?? '',
    };
    if (err !== undefined && err !== null && err !== '') record.error = typeof err === 'string' ? err : JSON.stringify(err);
    return record;
  });

  const answer = firstAnswer(parsed.segments);
  const finalAnswer = str(traj.final_answer) ?? answer?.answer ?? '';
  const cited = finalAnswer !== '' ? tulu.citedIds(finalAnswer) : answer ? tulu.citedIds(answer.text) : [];
  const gold = str(row.gold_answer) ?? str(row.answer);
  return {
    schema_version: SCHEMA_VERSION,
    id,
    question_id: id,
    question,
    ...(gold !== undefined ? { gold_answer: gold } : {}),
    meta,
    dialect: 'tulu',
    model: str(metadata.model) ?? str(metadata.api_model) ?? str(row.model) ?? 'unknown',
    status: 'ok',
    final_answer: finalAnswer,
    interleaved_text: text,
    messages: [],
    tool_calls: records,
    total_tool_calls: records.length,
    tools_used: toolsUsed(records),
    cited_ids: cited,
    unresolved_cited_ids: unresolved(cited, outputs),
    turns: records.length + 1,
    repairs: [],
    rollbacks: [],
    validation: pendingValidation(),
    usage: externalUsage(),
    timing: timingAt(str(metadata.generation_time)),
    attempt: 0,
    run_id: 'external',
  };
}

const ROLES = new Set<ChatMessage['role']>(['system', 'user', 'assistant', 'tool']);

/** OpenAI content parts (`[{type: 'text', text}]`) are joined; null content is empty. */
function contentText(v: unknown, field: string): string {
  if (typeof v === 'string') return v;
  if (v === null || v === undefined) return '';
  if (Array.isArray(v)) {
    let out = '';
    for (const part of v) {
      if (typeof part === 'string') out += part;
      else if (isObj(part) && typeof part.text === 'string') out += part.text;
    }
    return out;
  }
  return bad(field, 'expected a string or a list of content parts');
}

// What MiroThinker's agents send when they end a session; such a turn is an instruction even
// when the turn before it made a call that was never run (turn limit reached).
const SUMMARY_PROMPTS = ['This is a direct instruction to you', 'Summarize the above conversation'];

function isSummaryPrompt(text: string): boolean {
  const t = text.trimStart();
  return SUMMARY_PROMPTS.some((p) => t.startsWith(p));
}

function hasCall(dialect: Dialect, text: string): boolean {
  return dialect.parseTrajectory(text).segments.some((s) => s.kind === 'call');
}

/** The dialect of a chat row: its assistant turns' calls, else what its system prompt teaches. */
function chatDialect(messages: readonly ChatMessage[]): Dialect | undefined {
  let system = '';
  for (const m of messages) {
    if (m.role === 'assistant') {
      if (m.content.includes('<use_mcp_tool')) return mcpXml;
      if (/<call_tool\b/i.test(m.content)) return tulu;
    } else if (m.role === 'system') system += m.content;
  }
  if (system.includes('<use_mcp_tool')) return mcpXml;
  if (/<call_tool\b/i.test(system)) return tulu;
  return undefined;
}

/**
 * Which turns of a chat transcript are tool results: a `tool` turn, or a user turn right after
 * an assistant turn that made a call, unless it is a summary prompt (an instruction). The
 * reader and the export's training view classify a transcript by this one rule.
 */
export function classifyChat(
  messages: readonly ChatMessage[],
  dialect: Dialect,
  questionIndex: number,
): { called: boolean[]; isResult: boolean[]; lastAssistant: number } {
  const n = messages.length;
  const called = new Array<boolean>(n).fill(false);
  const isResult = new Array<boolean>(n).fill(false);
  let lastAssistant = -1;
  for (let i = 0; i < n; i++) {
    const m = messages[i]!;
    if (m.role === 'assistant') {
      called[i] = hasCall(dialect, m.content);
      lastAssistant = i;
    } else if ((m.role === 'user' || m.role === 'tool') && i > questionIndex) {
      const prev = messages[i - 1]!;
      isResult[i] = (m.role === 'tool' || (prev.role === 'assistant' && called[i - 1]!)) && !isSummaryPrompt(m.content);
    }
  }
  return { called, isResult, lastAssistant };
}

/** Escapes `<answer`/`</answer` in a report so the wrapper around it stays the only one. */
function escapeAnswerTags(s: string): string {
  return s.replace(/<(\/?answer)/gi, '&lt;$1');
}

/**
 * A tulu tool result that is already one rendered `<tool_output>` block (DR Tulu's own
 * transcripts) is kept as the model saw it: wrapping and escaping it again would hide its
 * snippets and leave every citation unresolved. Anything else is tool text, wrapped.
 */
function renderedOutput(dialect: Dialect, content: string): string | undefined {
  if (dialect !== tulu) return undefined;
  const t = content.trim();
  if (!t.startsWith('<tool_output')) return undefined;
  const segments = tulu.parseTrajectory(t).segments;
  const only = segments.length === 1 ? segments[0] : undefined;
  return only !== undefined && only.kind === 'output' && only.closed ? t : undefined;
}

const BROWSING_OBJECTIVE = 'You are an agent that performs the task of searching and browsing';
const MAIN_OBJECTIVE = 'You are a task-solving agent that uses tools step-by-step';
const SUBTASK_LINE = 'Please provide the answer and detailed supporting information of the subtask given to you.';
const BROWSING_SUMMARY = 'This is a direct instruction to you';
const MAIN_SUMMARY = 'Summarize the above conversation';

/** Which of MiroThinker's agents wrote a chat transcript, and by which sign (see the header); undefined when none shows. */
export function chatAgent(messages: readonly ChatMessage[], questionIndex: number): { agent: 'main' | 'browsing'; from: string } | undefined {
  let system = '';
  for (const m of messages) if (m.role === 'system') system += m.content;
  const users = messages.filter((m, i) => m.role === 'user' && i > questionIndex);
  const question = messages[questionIndex]?.content.trimEnd() ?? '';
  if (system.includes(BROWSING_OBJECTIVE)) return { agent: 'browsing', from: 'system_prompt' };
  if (question.endsWith(SUBTASK_LINE)) return { agent: 'browsing', from: 'subtask_prompt' };
  if (users.some((m) => m.content.trimStart().startsWith(BROWSING_SUMMARY))) return { agent: 'browsing', from: 'summary_prompt' };
  if (system.includes(MAIN_OBJECTIVE)) return { agent: 'main', from: 'system_prompt' };
  if (users.some((m) => m.content.trimStart().startsWith(MAIN_SUMMARY))) return { agent: 'main', from: 'summary_prompt' };
  if (system.includes('## Server name: browsing-agent') || messages.some((m) => m.role === 'assistant' && m.content.includes('<server_name>browsing-agent</server_name>'))) {
    return { agent: 'main', from: 'tools' };
  }
  return undefined;
}

function innerOutput(text: string): string {
  const open = text.indexOf('>');
  const close = text.toLowerCase().lastIndexOf('</tool_output');
  return text.slice(open + 1, close > open ? close : text.length).trim();
}

function fromChat(row: Obj, ctx: ReadContext): Trajectory {
  const raw = row.messages as unknown[];
  const messages: ChatMessage[] = raw.map((m, i): ChatMessage => {
    if (!isObj(m)) bad(`messages[${i}]`, 'expected an object');
    let role = m.role;
    if (role === 'developer') role = 'system';
    else if (role === 'function') role = 'tool';
    if (typeof role !== 'string' || !ROLES.has(role as ChatMessage['role'])) bad(`messages[${i}].role`, `expected system, user, assistant or tool, got ${JSON.stringify(m.role)}`);
    return { role: role as ChatMessage['role'], content: contentText(m.content, `messages[${i}].content`) };
  });
  const qIdx = messages.findIndex((m) => m.role === 'user');
  if (qIdx < 0) bad('messages', 'no user message, so no question');
  const question = messages[qIdx]!.content;
  const dialect = chatDialect(messages) ?? bad('messages', 'no <use_mcp_tool> or <call_tool> in any assistant turn or the system prompt: cannot tell the dialect');
  const sourceId = idOf(row.id) ?? idOf(row.sample_id) ?? questionIdFor(question);
  const id = uniqueId(sourceId, ctx);

  // Classify the turns first: whether the last assistant turn is a report decides how it is written.
  const n = messages.length;
  const { called, isResult, lastAssistant: lastA } = classifyChat(messages, dialect, qIdx);
  let answerSource: 'boxed' | 'report' | 'answer_tag' | 'none' = 'none';
  if (dialect === mcpXml && lastA > qIdx + 1 && !called[lastA]) {
    const prompt = messages[lastA - 1]!;
    const last = messages[lastA]!.content;
    if (prompt.role === 'user' && !isResult[lastA - 1] && !prompt.content.includes('\\boxed') && extractBoxed(last) === undefined && last.trim() !== '') {
      answerSource = 'report';
    }
  }

  let text = '';
  const results = new Map<number, string>();
  const turnStarts: number[] = [];
  const append = (part: string): number => {
    if (text !== '') text += '\n';
    const at = text.length;
    text += part;
    return at;
  };
  for (let i = qIdx + 1; i < n; i++) {
    const m = messages[i]!;
    if (m.role === 'assistant') {
      if (i === lastA && answerSource === 'report') turnStarts.push(append(`<answer>\n${escapeAnswerTags(m.content.trim())}\n</answer>`));
      else if (m.content !== '') turnStarts.push(append(m.content));
      else turnStarts.push(text.length); // an empty turn is still a turn; nothing to train on
    } else if (isResult[i]) {
      results.set(append(renderedOutput(dialect, m.content) ?? dialect.renderToolOutput({ text: m.content }).text), m.content);
    }
  }

  const parsed = dialect.parseTrajectory(text);
  const records: ToolCallRecord[] = [];
  let pending: Extract<Segment, { kind: 'call' }> | undefined;
  let turn = 0;
  for (const seg of parsed.segments) {
    if (seg.kind === 'call') pending = seg;
    else if (seg.kind === 'output' && pending !== undefined) {
      const call = pending.call;
      // The turn is the assistant turn the call was written in (0-based, after the question).
      while (turn + 1 < turnStarts.length && turnStarts[turn + 1]! <= pending.offset) turn++;
      pending = undefined;
      let args: Obj = {};
      if (dialect === mcpXml) {
        try {
          const v: unknown = JSON.parse(call.query);
          if (isObj(v)) args = v;
        } catch {
          // Kept as written in `query`; the validator and stats see the raw text.
        }
      }
      const result = results.get(seg.offset) ?? innerOutput(seg.text);
      records.push({
        schema_version: SCHEMA_VERSION,
        call_id: `${id}-${records.length}`,
        turn,
        tool_name: call.toolName,
        server: dialect === mcpXml ? (call.attributes.server_name ?? null) : null,
        mcp_tool: dialect === mcpXml ? call.toolName : null,
        parameters: dialect === mcpXml ? args : { ...call.attributes },
        query: call.query,
        arguments: args,
        result,
        truncated: false,
        output_text: seg.text,
        snippet_ids: [...seg.snippetIds],
        skipped: false,
        cached: false,
        duration_ms: 0,
        timestamp: '',
      });
    }
  }

  const answer = firstAnswer(parsed.segments);
  let finalAnswer = '';
  if (answerSource === 'report') finalAnswer = messages[lastA]!.content.trim();
  else if (answer !== undefined) {
    finalAnswer = answer.answer;
    answerSource = answer.text.startsWith('<') ? 'answer_tag' : 'boxed';
  }
  const cited = answer !== undefined ? dialect.citedIds(answer.text) : [];
  const role = dialect === mcpXml ? chatAgent(messages, qIdx) : undefined;
  const meta = metaFrom(
    Object.entries(row).filter(([k]) => k !== 'messages' && k !== 'id'),
    { source_format: 'chat', source_id: sourceId, answer_source: answerSource, ...(role ? { agent_from: role.from } : {}) },
  );
  const gold = str(row.gold_answer) ?? str(row.answer);
  return {
    schema_version: SCHEMA_VERSION,
    id,
    question_id: id,
    question,
    ...(gold !== undefined ? { gold_answer: gold } : {}),
    meta,
    ...(role ? { agent: role.agent } : {}),
    dialect: dialect.name,
    model: str(row.model) ?? 'unknown',
    status: 'ok',
    final_answer: finalAnswer,
    interleaved_text: text,
    messages,
    tool_calls: records,
    total_tool_calls: records.length,
    tools_used: toolsUsed(records),
    cited_ids: cited,
    unresolved_cited_ids: unresolved(cited, outputsOf(parsed.segments)),
    turns: turnStarts.length,
    repairs: [],
    rollbacks: [],
    validation: pendingValidation(),
    usage: externalUsage(),
    timing: timingAt(undefined),
    attempt: 0,
    run_id: 'external',
  };
}

function convert(v: Obj, format: RowFormat, ctx: ReadContext): Trajectory {
  switch (format) {
    case 'trajforge':
      // Our own records pass through unchecked beyond `fits`: the validator reads them.
      return v as unknown as Trajectory;
    case 'drtulu':
      return fromDrTulu(v, ctx);
    case 'chat':
      return fromChat(v, ctx);
  }
}

// ---------------------------------------------------------------------------------------
// The reader

function checkFormat(format: unknown): RowFormat | 'auto' {
  if (format === undefined || format === 'auto') return 'auto';
  if (typeof format === 'string' && (ROW_FORMATS as readonly string[]).includes(format)) return format as RowFormat;
  throw new TrajforgeError('BAD_USAGE', `--format: expected auto, ${ROW_FORMATS.join(', ')}; got ${JSON.stringify(format)}`, { field: 'format' });
}

async function* nothing(): AsyncGenerator<Buffer> {}

export function readDataset(input: string, opts: ReadOptions = {}): { rows: AsyncIterable<DatasetRow>; report: ReadReport } {
  const report: ReadReport = { rows: 0, bad: [], formats: {}, dialects: {}, renamed: 0 };
  const forced = checkFormat(opts.format);
  const files = inputFiles(input);
  const ctx: ReadContext = { ids: new Map(), renamed: 0 };
  const maxLine = opts.maxLineBytes ?? maxLineBytes();
  const maxDepth = opts.maxDepth ?? MAX_JSON_DEPTH;
  async function* rows(): AsyncGenerator<DatasetRow> {
    for (const file of files) {
      const label = file === '-' ? '<stdin>' : file;
      const until = opts.until?.get(file);
      const stream: AsyncIterable<Buffer | string> =
        file === '-'
          ? ((opts.stdin ?? process.stdin) as AsyncIterable<Buffer | string>)
          : until === 0
            ? nothing()
            : createReadStream(file, { highWaterMark: 1 << 20, ...(until === undefined ? {} : { end: until - 1 }) });
      let format: RowFormat | undefined = forced === 'auto' ? undefined : forced;
      for await (const batch of readLineBatches(stream, { maxLineBytes: maxLine })) for (const l of batch) {
        const { line, text } = l;
        report.rows++;
        let row: DatasetRow;
        try {
          // A line too long to be a string; or not UTF-8, which `generate` refuses in a questions file
          // too: a lenient decoding would carry U+FFFD into the data unseen.
          const problem = lineProblem(l, maxLine);
          if (problem !== undefined) bad(undefined, problem);
          let value: unknown;
          try {
            value = JSON.parse(text);
          } catch (err) {
            bad(undefined, `not valid JSON (${(err as Error).message})`);
          }
          if (deeperThan(value, maxDepth)) bad(undefined, `nested deeper than ${maxDepth} levels: not a record any command can walk`);
          if (format === undefined) {
            format =
              detectRowFormat(value) ??
              bad(undefined, `unknown row shape: expected ${SHAPE.trajforge} (with schema_version and tool_calls), ${SHAPE.drtulu}, or ${SHAPE.chat}; ${describe(value)}`);
          } else if (!fits(value, format)) {
            bad(undefined, `expected a ${format} row (${SHAPE[format]}); ${describe(value)}`);
          }
          row = { file, line, format, trajectory: convert(value as Obj, format, ctx), ...(format === 'trajforge' ? { raw: text } : {}) };
        } catch (err) {
          if (!(err instanceof BadRow)) throw err;
          // The message quotes the line (JSON.parse's excerpt, a key): it is printed, so no control character of the file goes with it.
          const e = inputError(printable(label, { oneLine: true }), line, err.field === undefined ? undefined : printable(err.field, { oneLine: true }), printable(err.message, { oneLine: true }));
          if (opts.onBadRow !== 'skip') throw e;
          report.bad.push({ file, line, message: e.message });
          continue;
        }
        report.formats[row.format] = (report.formats[row.format] ?? 0) + 1;
        report.dialects[row.trajectory.dialect] = (report.dialects[row.trajectory.dialect] ?? 0) + 1;
        report.renamed = ctx.renamed;
        yield row;
      }
    }
  }
  return { rows: rows(), report };
}
