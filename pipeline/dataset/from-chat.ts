/**
 * A chat row (`{messages: [...]}`, MiroVerse / MiroThinker style, tool results as user turns)
 * as a trajectory.
 *
 * - The system prompt and the first user message (the question) stay out of the interleaved
 *   text; assistant turns go in as written; a user (or `tool`) turn right after an assistant
 *   turn that made a call is that call's result and goes in as the dialect's `<tool_output>`
 *   (tool text escaped; a tulu result that already is one rendered output block is kept as
 *   is), except a summary prompt, which is an instruction, not a result. Other user turns
 *   (summary prompts, nudges) stay out of the training view; `messages` keeps the whole
 *   transcript as given.
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
import { SCHEMA_VERSION, type ChatMessage, type ToolCallRecord, type Trajectory } from '../../schemas/index.js';
import { extractBoxed, mcpXml } from '../dialects/mcp-xml.js';
import { tulu } from '../dialects/tulu.js';
import type { Dialect, Segment } from '../dialects/types.js';
import { questionIdFor } from '../core/ids.js';
import { bad, isObj, type Obj } from './row-shapes.js';
import { externalHead, externalTail, firstAnswer, idOf, metaFrom, outputsOf, str, toolsUsed, unresolved, uniqueId, type ReadContext } from './external-rows.js';

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

/** The transcript as given, roles normalised (developer → system, function → tool), content parts joined. */
function chatMessages(row: Obj): ChatMessage[] {
  const raw = row.messages as unknown[];
  return raw.map((m, i): ChatMessage => {
    if (!isObj(m)) bad(`messages[${i}]`, 'expected an object');
    let role = m.role;
    if (role === 'developer') role = 'system';
    else if (role === 'function') role = 'tool';
    if (typeof role !== 'string' || !ROLES.has(role as ChatMessage['role'])) bad(`messages[${i}].role`, `expected system, user, assistant or tool, got ${JSON.stringify(m.role)}`);
    return { role: role as ChatMessage['role'], content: contentText(m.content, `messages[${i}].content`) };
  });
}

type AnswerSource = 'boxed' | 'report' | 'answer_tag' | 'none';

/** A transcript classified (`classifyChat`), with where its question is and its dialect. */
interface Classified {
  readonly messages: readonly ChatMessage[];
  readonly dialect: Dialect;
  /** The first user turn: the question. */
  readonly qIdx: number;
  readonly called: boolean[];
  readonly isResult: boolean[];
  readonly lastA: number;
}

/**
 * Whether the last assistant turn is a sub-agent's report (see the header): mcp-xml, it makes no
 * call, holds no box, and follows a prompt (not a tool result) that does not ask for `\boxed{}`.
 */
function isReport(c: Classified): boolean {
  const { messages, lastA } = c;
  if (c.dialect !== mcpXml || lastA <= c.qIdx + 1 || c.called[lastA]) return false;
  const prompt = messages[lastA - 1]!;
  const last = messages[lastA]!.content;
  return prompt.role === 'user' && !c.isResult[lastA - 1] && !prompt.content.includes('\\boxed') && extractBoxed(last) === undefined && last.trim() !== '';
}

/**
 * The interleaved text: the assistant turns as written (a report wrapped in `<answer>`), each
 * tool result as the dialect's `<tool_output>`. Also where each assistant turn starts in it,
 * and the raw result behind each output block, by the block's offset.
 */
function interleave(c: Classified, report: boolean): { text: string; results: Map<number, string>; turnStarts: number[] } {
  let text = '';
  const results = new Map<number, string>();
  const turnStarts: number[] = [];
  const append = (part: string): number => {
    if (text !== '') text += '\n';
    const at = text.length;
    text += part;
    return at;
  };
  for (let i = c.qIdx + 1; i < c.messages.length; i++) {
    const m = c.messages[i]!;
    if (m.role === 'assistant') {
      if (i === c.lastA && report) turnStarts.push(append(`<answer>\n${escapeAnswerTags(m.content.trim())}\n</answer>`));
      else if (m.content !== '') turnStarts.push(append(m.content));
      else turnStarts.push(text.length); // an empty turn is still a turn; nothing to train on
    } else if (c.isResult[i]) {
      results.set(append(renderedOutput(c.dialect, m.content) ?? c.dialect.renderToolOutput({ text: m.content }).text), m.content);
    }
  }
  return { text, results, turnStarts };
}

/** A tool record per call of the text that an output block follows, with the assistant turn it was written in. */
function callRecords(segments: readonly Segment[], dialect: Dialect, id: string, results: ReadonlyMap<number, string>, turnStarts: readonly number[]): ToolCallRecord[] {
  const records: ToolCallRecord[] = [];
  let pending: Extract<Segment, { kind: 'call' }> | undefined;
  let turn = 0;
  for (const seg of segments) {
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
        result: results.get(seg.offset) ?? innerOutput(seg.text),
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
  return records;
}

export function fromChat(row: Obj, ctx: ReadContext): Trajectory {
  const messages = chatMessages(row);
  const qIdx = messages.findIndex((m) => m.role === 'user');
  if (qIdx < 0) bad('messages', 'no user message, so no question');
  const question = messages[qIdx]!.content;
  const dialect = chatDialect(messages) ?? bad('messages', 'no <use_mcp_tool> or <call_tool> in any assistant turn or the system prompt: cannot tell the dialect');
  const sourceId = idOf(row.id) ?? idOf(row.sample_id) ?? questionIdFor(question);
  const id = uniqueId(sourceId, ctx);

  // Classify the turns first: whether the last assistant turn is a report decides how it is written.
  const { called, isResult, lastAssistant: lastA } = classifyChat(messages, dialect, qIdx);
  const classified: Classified = { messages, dialect, qIdx, called, isResult, lastA };
  const report = isReport(classified);
  const { text, results, turnStarts } = interleave(classified, report);
  const parsed = dialect.parseTrajectory(text);
  const records = callRecords(parsed.segments, dialect, id, results, turnStarts);

  const answer = firstAnswer(parsed.segments);
  let answerSource: AnswerSource = report ? 'report' : 'none';
  let finalAnswer = '';
  if (report) finalAnswer = messages[lastA]!.content.trim();
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
  return {
    ...externalHead(row, id, question, meta),
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
    ...externalTail(undefined),
  };
}
