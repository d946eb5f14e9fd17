/**
 * The two roles of a hierarchical agent (#15), played in any dialect: a main agent that plans,
 * hands subtasks to a browsing sub-agent and answers from its reports, and the browsing
 * sub-agent that searches, reads documents whole and, asked for its summary, reports what
 * they say. A request is told apart by the prompts trajforge's agents send (prompts/):
 *
 * - a sub-agent session: its system prompt holds the browsing objective, its first user
 *   message ends with the subtask line, or its last user message is the browsing summary prompt;
 * - a main agent that can delegate: a tool on offer whose input schema requires exactly
 *   `subtask` (MiroThinker's `browsing-agent` / `search_and_browse`).
 *
 * A request with neither is the plain policy's (policy.ts), untouched. Plans come out as
 * TurnPlans, so every misbehaviour applies to both roles as it does to the plain policy. A
 * session's own choices (how many subtasks, how many documents to read) are drawn from the
 * session's first user message, so every turn of one session agrees on them.
 */
import { loadPrompt } from '../pipeline/prompts.js';
import {
  callsIn,
  declaredTools,
  messageText,
  requiredParams,
  systemText,
  toolChoice,
} from './dialects.js';
import {
  bestEvidence,
  contentWords,
  parseSnippets,
  queryFor,
  sentenceScores,
  splitSnippet,
  words,
} from './policy.js';
import { byDocument, findPattern, pageSnippets } from './browser-pages.js';
import { releaseAgeTask } from './python-calls.js';
import { failureSummary } from './summary.js';
import type { CallSpec, ChatMessage, Conversation, Evidence, Rng, SimDialect, Snippet, ToolChoice, TurnPlan } from './types.js';

export type Role =
  | {
      readonly kind: 'main';
      readonly delegate: ToolChoice;
      /** A Python tool (`run_python_code`, else one that requires exactly `code_block`), for the small computations. */
      readonly python: ToolChoice | null;
    }
  | {
      readonly kind: 'browsing';
      /** The search tool: `pubmed_search`, else the first tool whose name says search, else the first that is not the reader. */
      readonly search: ToolChoice | null;
      /** The document reader: `read_document`, else a tool that requires exactly `id` (the corpus server's `open`). */
      readonly read: ToolChoice | null;
      /** Find in a page: `find`, else a tool that requires exactly `id` and `pattern`. */
      readonly find: ToolChoice | null;
      /** The last user message is the browsing summary prompt. */
      readonly summary: boolean;
    };

/** The text of a prompt file a role is told apart by: the part before `{placeholder}`, or after it, trimmed. */
function promptPart(name: string, placeholder: string | null, part: 'before' | 'after' | 'whole'): string {
  const text = loadPrompt(name);
  if (placeholder === null || part === 'whole') return text.trim();
  const at = text.indexOf(`{${placeholder}}`);
  return (part === 'before' ? text.slice(0, at) : text.slice(at + placeholder.length + 2)).trim();
}

/** Read once: the files do not change while the sim runs. */
let markers: { objective: string; subtaskLine: string; summary: string } | undefined;
function roleMarkers(): { objective: string; subtaskLine: string; summary: string } {
  markers ??= {
    objective: promptPart('browsing-agent-objective', null, 'whole'),
    subtaskLine: promptPart('subtask', 'subtask', 'after'),
    summary: promptPart('browsing-agent-summary', 'task', 'before'),
  };
  return markers;
}

function firstUserText(messages: readonly ChatMessage[]): string {
  const first = messages.find((m) => m.role === 'user');
  return first === undefined ? '' : messageText(first.content);
}

function lastUserText(messages: readonly ChatMessage[]): { text: string; isFirst: boolean } {
  const first = messages.find((m) => m.role === 'user');
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role === 'user') return { text: messageText(m.content), isFirst: m === first };
  }
  return { text: '', isFirst: true };
}

/** The role a request plays, or null for a plain agent. */
export function detectRole(messages: readonly ChatMessage[], tools: unknown, dialect: SimDialect): Role | null {
  const { objective, subtaskLine, summary } = roleMarkers();
  const system = systemText(messages);
  const last = lastUserText(messages);
  const asksSummary = !last.isFirst && last.text.includes(summary);
  const declared = declaredTools(dialect, system, tools);
  if (system.includes(objective) || firstUserText(messages).trimEnd().endsWith(subtaskLine) || asksSummary) {
    const read = declared.find((t) => t.name === 'read_document') ?? declared.find((t) => sameNames(requiredParams(t.schema), ['id']));
    const find = declared.find((t) => t.name === 'find') ?? declared.find((t) => sameNames(requiredParams(t.schema), ['id', 'pattern']));
    const rest = declared.filter((t) => t !== read && t !== find);
    const search = rest.find((t) => t.name === 'pubmed_search') ?? rest.find((t) => /search/i.test(t.name)) ?? rest[0];
    return {
      kind: 'browsing',
      search: search === undefined ? null : toolChoice(search, declared),
      read: read === undefined ? null : toolChoice(read, declared),
      find: find === undefined ? null : toolChoice(find, declared),
      summary: asksSummary,
    };
  }
  const delegate = declared.find((t) => sameNames(requiredParams(t.schema), ['subtask']));
  if (delegate === undefined) return null;
  const python = declared.find((t) => t.name === 'run_python_code') ?? declared.find((t) => sameNames(requiredParams(t.schema), ['code_block']));
  return { kind: 'main', delegate: toolChoice(delegate, declared), python: python === undefined ? null : toolChoice(python, declared) };
}

function sameNames(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && [...a].sort().every((x, i) => x === [...b].sort()[i]);
}

// ---------------------------------------------------------------------------------------
// What the session did: each call paired with the result it got

interface Step {
  readonly tool: string;
  readonly query: string;
  /** The result's text as the client sent it (tags, if any, included); null when none came back. */
  result: string | null;
}

/**
 * The calls in the history, each with the result that answered it: the next `tool` message
 * (native) or user message (tulu, mcp-xml, tagged or bare) after the call's turn. A user
 * message that answers no call (the question, a nudge, a prompt) is skipped.
 */
function steps(dialect: SimDialect, messages: readonly ChatMessage[]): Step[] {
  const all: Step[] = [];
  let pending: Step[] = [];
  for (const m of messages) {
    if (m.role === 'assistant') {
      pending = callsIn(dialect, m).map((c) => ({ ...c, result: null }));
      all.push(...pending);
    } else if (m.role === 'tool' || (m.role === 'user' && dialect !== 'native')) {
      const step = pending.shift();
      if (step !== undefined) step.result = messageText(m.content);
    }
  }
  return all;
}

/** A result's body: without a `<tool_output>` wrapper, if it has one. */
function unwrap(text: string): string {
  const t = text.trim();
  if (!t.startsWith('<tool_output')) return t;
  const open = t.indexOf('>');
  const close = t.lastIndexOf('</tool_output>');
  return t.slice(open + 1, close === -1 ? t.length : close).trim();
}

// ---------------------------------------------------------------------------------------
// The main agent

/** Words that say what to do, not what about: left out of a sub-agent's searches. */
const TASK_WORDS = new Set(
  'find answer question document documents source sources states state stated quote quotes report check confirm correct second independent against subtask provide detailed supporting information given'.split(' '),
);

/** The subtasks for a question: the question itself, then (for two) a check against a second document. */
export function subtasksFor(question: string, count: number): string[] {
  const q = question.trim();
  const out = [`Find the answer to this question and the document that states it: ${q}`];
  if (count > 1) out.push(`Check the answer against a second, independent document, and quote it: ${q}`);
  return out;
}

/**
 * A report as the main agent reads it: its quoted lines as the sentences, under the snippet id
 * it was shown with ('' when it came as bare text: nothing to cite).
 */
function reportSnippet(result: string): Snippet | null {
  let id = '';
  let body = unwrap(result);
  // tulu and native show a text result as one snippet; its id is what an answer cites.
  const open = /^<snippet\b[^>]*>/.exec(body);
  if (open !== null) {
    id = parseSnippets(body)[0]?.id ?? id;
    const close = body.indexOf('</snippet>');
    body = body.slice(open[0].length, close === -1 ? body.length : close);
  }
  // A failed sub-agent, or one that reported nothing (shown as the renderer's "No results found.").
  if (body.trim() === '' || body.trim() === 'No results found.' || /^error\b/i.test(body.trim())) return null;
  const lines = body
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '');
  const quoted = lines.filter((l) => l.startsWith('>')).map((l) => l.replace(/^>\s*/, '').replace(/^"(.*)"$/, '$1'));
  const sentences = quoted.length > 0 ? quoted : splitSnippet(body).sentences;
  // No title: a report's heading restates the subtask, so it would match every sentence alike.
  return sentences.length === 0 ? null : { id, title: null, sentences };
}

function planMain(role: Extract<Role, { kind: 'main' }>, conv: Conversation, messages: readonly ChatMessage[], rng: Rng, session: Rng): TurnPlan {
  const { delegate } = role;
  const keywords = contentWords(conv.question);
  const thinks = rng() < 0.6;
  const subtasks = subtasksFor(conv.question, 1 + Math.floor(session() * 2));
  const calls = steps(conv.dialect, messages).filter((s) => s.tool === delegate.name);
  const reports = calls.flatMap((s) => {
    const r = s.result === null ? null : reportSnippet(s.result);
    return r === null ? [] : [r];
  });
  const evidence = bestEvidence(conv.question, reports);
  const extraQueries = [...subtasks.slice(calls.length + 1), `Verify this answer with another source: ${conv.question.trim()}`];
  const base = { evidence, summary: '', extraQueries, keywords };

  if (conv.failure !== null) return { ...base, kind: 'summary', reasoning: null, call: null, summary: failureSummary(conv, evidence) };
  const next = subtasks[calls.length];
  if (!conv.forceAnswer && next !== undefined) {
    const lead =
      calls.length === 0
        ? `To answer this, I will follow these steps:\n\n${subtasks.map((t, i) => `${i + 1}. ${t}`).join('\n')}\n${subtasks.length + 1}. Answer from what the reports establish.`
        : evidence === null
          ? 'The report did not settle it. Next:'
          : `The report says: ${evidence.sentence} Next, I will check it.`;
    const reasoning = `${calls.length === 0 ? 'I will hand the search to the browsing agent.' : `I have ${reports.length} report${reports.length === 1 ? '' : 's'} so far.`} Subtask ${calls.length + 1} of ${subtasks.length}: ${next}`;
    return { ...base, kind: 'call', reasoning: thinks ? reasoning : null, call: { tool: delegate, query: next }, lead };
  }
  const computed = pythonStep(role, conv, messages, evidence);
  if (computed.call !== null) return { ...base, kind: 'call', reasoning: thinks ? computed.call.why : null, call: computed.call.spec, extraQueries: [computed.call.spec.query] };
  const reason = evidence === null ? 'No report answers the question.' : `The report${evidence.snippet.id === '' ? '' : ` ${evidence.snippet.id}`} says: ${evidence.sentence}`;
  // A forced answer (the summary prompt) is the box alone, as MiroThinker restates it.
  const lead = conv.forceAnswer
    ? ''
    : evidence === null
      ? 'The reports do not answer the question.'
      : `The browsing agent's report states: ${evidence.sentence}${computed.said === null ? '' : ` Python says: ${computed.said}.`}`;
  return { ...base, kind: 'answer', reasoning: thinks ? reason : null, call: null, lead };
}

/**
 * The main agent's Python step, once the reports are in: the call to make (the evidence's
 * release, how long ago; python-calls.ts), or, once made, what its answer printed.
 */
function pythonStep(
  role: Extract<Role, { kind: 'main' }>,
  conv: Conversation,
  messages: readonly ChatMessage[],
  evidence: Evidence | null,
): { call: { spec: CallSpec; why: string } | null; said: string | null } {
  const python = role.python;
  if (python === null || evidence === null) return { call: null, said: null };
  const ran = steps(conv.dialect, messages).filter((s) => s.tool === python.name);
  if (ran.length > 0) {
    const printed = /stdout: \['([^'\\]*)/.exec(ran[0]!.result ?? '')?.[1];
    return { call: null, said: printed === undefined ? null : printed.trim() };
  }
  if (conv.forceAnswer) return { call: null, said: null };
  const task = releaseAgeTask(evidence.sentence, systemText(messages));
  return { call: task === null ? null : { spec: { tool: python, query: task.code }, why: task.why }, said: null };
}

// ---------------------------------------------------------------------------------------
// The browsing sub-agent

/** The subtask: the first user message without the subtask line. */
function subtaskOf(messages: readonly ChatMessage[]): string {
  const text = firstUserText(messages);
  const line = roleMarkers().subtaskLine;
  const at = text.lastIndexOf(line);
  return (at === -1 ? text : text.slice(0, at)).trim();
}

/** The subtask's topic: its words without the ones that only say what to do. */
function focusOf(subtask: string): string {
  return (subtask.match(/[\p{L}\p{N}]+(?:[-_.+][\p{L}\p{N}]+)*/gu) ?? []).filter((w) => !TASK_WORDS.has(w.toLowerCase())).join(' ');
}

/** Snippets ranked by their best sentence against the focus, best first (ties keep their order). */
function ranked(focus: string, snippets: readonly Snippet[]): Snippet[] {
  const q = new Set(words(focus));
  const best = (s: Snippet): number => Math.max(-Infinity, ...sentenceScores(q, s));
  return snippets
    .map((s, i) => ({ s, i, score: best(s) }))
    .sort((a, b) => b.score - a.score || a.i - b.i)
    .map((x) => x.s);
}

/** The first snippet of each id. */
function distinct(snippets: readonly Snippet[]): Snippet[] {
  const seen = new Set<string>();
  return snippets.filter((s) => !seen.has(s.id) && seen.add(s.id));
}

/** Searches the sub-agent makes: one, and a second when the first showed nothing. */
const MAX_SEARCHES = 2;

function planBrowsing(role: Extract<Role, { kind: 'browsing' }>, conv: Conversation, messages: readonly ChatMessage[], rng: Rng, session: Rng): TurnPlan {
  const subtask = subtaskOf(messages);
  const focus = focusOf(subtask) || subtask;
  const keywords = contentWords(focus);
  const thinks = rng() < 0.6;
  const variant = Math.floor(rng() * 1000);
  const toRead = 1 + Math.floor(session() * 2);
  const done = steps(conv.dialect, messages);
  const searches = done.filter((s) => s.tool === role.search?.name);
  const reads = done.filter((s) => s.tool === role.read?.name);
  const finds = done.filter((s) => s.tool === role.find?.name);
  const found = distinct(searches.flatMap((s) => (s.result === null ? [] : parseSnippets(s.result))));
  // Pages opened and passages found, one snippet per document.
  const read = byDocument([...reads, ...finds].flatMap((s) => (s.result === null ? [] : pageSnippets(s.result))));
  const readIds = new Set(reads.map((s) => s.query.trim()));
  const candidates = ranked(focus, found).filter((s) => !readIds.has(s.id));
  const evidence = bestEvidence(focus, read) ?? bestEvidence(focus, found);
  const searchQuery = (i: number): string => queryFor(keywords, focus, i, variant);
  const base = { evidence, summary: '', keywords, extraQueries: [1, 2, 3].map((k) => searchQuery(searches.length + k)) };

  if (conv.failure !== null) return { ...base, kind: 'summary', reasoning: null, call: null, summary: failureSummary(conv, evidence) };
  if (role.summary) {
    const ids = read.map((s) => s.id);
    const reason = ids.length === 0 ? 'I could not read any document; I will report what the searches showed.' : `I read ${ids.join(', ')}; I will report what they say.`;
    return { ...base, kind: 'report', reasoning: thinks ? reason : null, call: null, report: writeReport(subtask, focus, read, found, searches) };
  }
  if (!conv.forceAnswer && role.search !== null && (searches.length === 0 || (found.length === 0 && searches.length < MAX_SEARCHES))) {
    const query = searchQuery(searches.length);
    const reason = searches.length === 0 ? `The subtask: ${subtask} I will search for "${query}".` : `The search showed nothing; I will try "${query}".`;
    return { ...base, kind: 'call', reasoning: thinks ? reason : null, call: { tool: role.search, query } };
  }
  // A page opened and not yet searched: find the word of the subtask its title does not match.
  const foundIn = new Set(finds.map((s) => s.query.trim()));
  const unsearched = role.find === null ? [] : read.filter((d) => readIds.has(d.id) && !foundIn.has(d.id));
  for (const doc of conv.forceAnswer ? [] : unsearched) {
    const pattern = findPattern(focus, doc);
    if (pattern === null) continue;
    const reason = `I opened ${doc.id}; I will find "${pattern}" in it.`;
    return { ...base, kind: 'call', reasoning: thinks ? reason : null, call: { tool: role.find!, query: doc.id, args: { pattern } } };
  }
  const next = candidates[0];
  if (!conv.forceAnswer && role.read !== null && reads.length < toRead && next !== undefined) {
    const reason = `Result ${next.id}${next.title === null ? '' : ` ("${next.title}")`} looks most relevant; I will read it whole.`;
    return { ...base, kind: 'call', reasoning: thinks ? reason : null, call: { tool: role.read, query: next.id }, extraQueries: candidates.slice(1, 4).map((s) => s.id) };
  }
  const reason = evidence === null ? 'Nothing I found answers the subtask.' : `Document ${evidence.snippet.id} says: ${evidence.sentence}`;
  const lead = evidence === null ? 'Nothing I found answers the subtask.' : `Document ${evidence.snippet.id}${evidence.snippet.title === null ? '' : ` (${evidence.snippet.title})`} states: ${evidence.sentence}`;
  return { ...base, kind: 'answer', reasoning: thinks ? reason : null, call: null, lead };
}

/** Sentences a report quotes from each document read. */
const QUOTES_PER_DOCUMENT = 2;

/**
 * The report, in the shape MiroThinker's browsing agent writes (headings, the answer, the
 * supporting quotes with their documents): from the documents read alone; the search results
 * appear only when nothing could be read, marked as such.
 */
function writeReport(subtask: string, focus: string, read: readonly Snippet[], found: readonly Snippet[], searches: readonly Step[]): string {
  const q = new Set(words(focus));
  const heading = `### Final Response: ${(subtask.split('\n')[0] ?? subtask).trim().slice(0, 200)}`;
  const answer = bestEvidence(focus, read);
  const parts = [heading, '', answer === null ? (read.length === 0 ? 'No document could be read for this subtask.' : 'The documents read do not state this.') : answer.sentence, '', '---', ''];
  if (read.length > 0) {
    parts.push('### Supporting Information', '');
    read.forEach((doc, i) => {
      const scores = sentenceScores(q, doc);
      const picked = doc.sentences
        .map((sentence, k) => ({ sentence, k, score: scores[k]! }))
        .sort((a, b) => b.score - a.score || a.k - b.k)
        .slice(0, QUOTES_PER_DOCUMENT)
        .sort((a, b) => a.k - b.k);
      parts.push(`${i + 1}. **${doc.title ?? doc.id}** (document ${doc.id})`, ...picked.map((p) => `> ${p.sentence}`), '');
    });
  } else {
    parts.push('### Search Results (not read)', '');
    if (searches.length === 0) parts.push('No search was made.');
    for (const s of searches) parts.push(`- Searched for "${s.query}"`);
    for (const doc of found.slice(0, 5)) parts.push(`- ${doc.title ?? doc.id} (document ${doc.id})`);
    parts.push('');
  }
  parts.push('---', '', '### Conclusion');
  parts.push(answer === null ? 'This subtask could not be answered from the documents available; the findings above are partial.' : `${answer.sentence} This is stated in document ${answer.snippet.id}.`);
  return parts.join('\n');
}

// ---------------------------------------------------------------------------------------

/** The next turn of a role. `session` draws the session's own choices (the same on every turn). */
export function planRoleTurn(role: Role, conv: Conversation, messages: readonly ChatMessage[], rng: Rng, session: Rng): TurnPlan {
  return role.kind === 'main' ? planMain(role, conv, messages, rng, session) : planBrowsing(role, conv, messages, rng, session);
}

/** The label a session's own draws are seeded from: its first user message, which no later turn changes. */
export function sessionLabel(messages: readonly ChatMessage[]): string {
  return firstUserText(messages);
}
