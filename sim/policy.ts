/**
 * The scripted "model" behind the sim: it reads the conversation it is given and plans the
 * next turn — search with words from the question until it has done enough searches, then
 * answer with the snippet sentence that best matches the question, citing the snippet's id.
 * It never sees anything but the request, so a client that drops, reorders or forges tool
 * output gets an answer that shows it. How the plan is written down depends on the request's
 * dialect (dialects.ts).
 */
import { jsonSnippets } from './json-results.js';
import { callsMade, detectDialect, findTool, messageText, systemText } from './dialects.js';
import { failureReason, failureSummary, isFailureSummaryRequest } from './summary.js';
import type { ChatMessage, Conversation, Evidence, Rng, SimDialect, Snippet, TurnPlan } from './types.js';

// The judge role (judge.ts) takes its message type from here.
export type { ChatMessage } from './types.js';

export interface PolicyOptions {
  /** Searches before answering. */
  readonly callsPerSample: number;
}

// Question words that say nothing about the topic. "first", "version" and "supported" are
// here because every document of the compatibility corpus contains them: searching for
// them ranks nothing, and matching them must not outweigh the browser or feature name.
const STOPWORDS = new Set(
  (
    'a an the of in on at to for from by with without and or nor but is are was were be been being ' +
    'do does did done which what when where who whom whose why how that this these those it its ' +
    'as into onto than then there their they them has have had first version versions supported ' +
    'support supports between about any all can could would should will shall may might must not ' +
    'no yes i you we me my our your please tell find give if so such also much many more most some ' +
    'per over under after before since during via vs versus among compare compared comparison one s'
  ).split(' '),
);

const REFINEMENTS = ['browser compatibility', 'support history', 'release notes', 'compatibility data'];

/** Lower-cased words, for matching. */
export function words(text: string): string[] {
  return text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];
}

export function isStopword(word: string): boolean {
  return STOPWORDS.has(word.toLowerCase());
}

/** Content words of the question as written (case kept, hyphenated names whole), deduplicated. */
export function contentWords(question: string): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const token of question.match(/[\p{L}\p{N}]+(?:[-_.+][\p{L}\p{N}]+)*/gu) ?? []) {
    const lower = token.toLowerCase();
    if (STOPWORDS.has(lower) || seen.has(lower)) continue;
    seen.add(lower);
    out.push(token);
  }
  return out;
}

/** Counts `<tool_output` openings; cheap enough to run on every message of every request. */
export function countToolOutputs(text: string): number {
  let n = 0;
  for (let at = text.indexOf('<tool_output'); at !== -1; at = text.indexOf('<tool_output', at + 12)) n++;
  return n;
}

export function readConversation(
  messages: readonly ChatMessage[],
  tools?: unknown,
  dialect: SimDialect = detectDialect(messages, tools),
): Conversation {
  const firstUser = messages.find((m) => m.role === 'user');
  const question = extractQuestion(firstUser === undefined ? '' : messageText(firstUser.content));

  let toolOutputs = 0;
  const snippets: Snippet[] = [];
  const seenIds = new Set<string>();
  let afterCall = false;
  for (const m of messages) {
    // MiroThinker's form sends a result as a bare user turn right after the call (mcp-xml `tool_results: plain`).
    const answersCall = afterCall;
    afterCall = m.role === 'assistant' && dialect === 'mcp-xml' && messageText(m.content).includes('<use_mcp_tool');
    // The question's own message may quote the format, examples included; it holds no results.
    if ((m.role !== 'user' && m.role !== 'tool') || m === firstUser) continue;
    const text = messageText(m.content);
    // A tool result is a message that is a <tool_output> block; a nudge that merely names the tag is not.
    const blocks = m.role === 'user' && !text.trimStart().startsWith('<tool_output') ? [] : toolOutputBlocks(text);
    // A native `tool` message is a tool result whether or not it carries the tags.
    if (m.role === 'tool' && blocks.length === 0) blocks.push(text);
    // A bare result counts once it shows snippets: a placeholder for a dropped result shows none.
    if (answersCall && m.role === 'user' && blocks.length === 0 && (text.includes('<snippet') || parseSnippets(text).length > 0)) blocks.push(text);
    toolOutputs += blocks.length;
    for (const block of blocks) {
      for (const s of parseSnippets(block)) {
        if (seenIds.has(s.id)) continue;
        seenIds.add(s.id);
        snippets.push(s);
      }
    }
  }

  let lastUser: ChatMessage | undefined;
  for (let i = messages.length - 1; i >= 0 && lastUser === undefined; i--) {
    if (messages[i]?.role === 'user') lastUser = messages[i];
  }
  const lastText = lastUser === undefined ? '' : messageText(lastUser.content);
  const forceAnswer = lastUser !== firstUser && /final answer/i.test(lastText);
  const failure = isFailureSummaryRequest(lastText) ? { reason: failureReason(lastText) } : null;
  const queries = callsMade(dialect, messages);

  return {
    dialect,
    question,
    tool: findTool(dialect, systemText(messages), tools),
    toolOutputs,
    queries,
    searches: Math.max(queries.length, toolOutputs),
    snippets,
    forceAnswer,
    failure,
  };
}

function extractQuestion(text: string): string {
  const cut = text.indexOf('<tool_output');
  const head = cut === -1 ? text : text.slice(0, cut);
  const labelled = /^[ \t]*(?:question|q)[ \t]*:[ \t]*(\S.*)$/im.exec(head);
  if (labelled?.[1] !== undefined) return labelled[1].trim();
  const lines = head
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
  if (lines.length <= 1) return lines[0] ?? '';
  // A template wraps the question in instructions; the question is the line that asks.
  const asking = lines.filter((l) => l.endsWith('?'));
  return asking[asking.length - 1] ?? lines.join(' ');
}

/** Bodies of `<tool_output>` blocks; an unclosed block runs to the end of the message. */
function toolOutputBlocks(text: string): string[] {
  const out: string[] = [];
  let at = text.indexOf('<tool_output');
  while (at !== -1) {
    const open = text.indexOf('>', at);
    if (open === -1) break;
    const close = text.indexOf('</tool_output>', open);
    out.push(text.slice(open + 1, close === -1 ? text.length : close));
    if (close === -1) break;
    at = text.indexOf('<tool_output', close);
  }
  return out;
}

/** `<snippet id="x">`, `<snippet id='x'>` and `<snippet id=x>`; an unclosed one ends at the next snippet. */
export function parseSnippets(block: string): Snippet[] {
  const out: Snippet[] = [];
  let at = block.indexOf('<snippet');
  // MiroThinker's form: the tool's own JSON, documents and all.
  if (at === -1) return jsonSnippets(block, splitSnippet);
  while (at !== -1) {
    const tagEnd = block.indexOf('>', at);
    if (tagEnd === -1) break;
    const tag = block.slice(at, tagEnd);
    const next = block.indexOf('<snippet', tagEnd);
    const close = block.indexOf('</snippet>', tagEnd);
    const end = close !== -1 && (next === -1 || close < next) ? close : next === -1 ? block.length : next;
    const id = /\bid\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))/.exec(tag);
    const idText = (id?.[1] ?? id?.[2] ?? id?.[3] ?? '').trim();
    if (idText !== '') out.push({ id: idText, ...splitSnippet(block.slice(tagEnd + 1, end)) });
    at = next;
  }
  return out;
}

export function splitSnippet(text: string): { title: string | null; sentences: string[] } {
  const lines = text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '');
  let title: string | null = null;
  const first = lines[0];
  if (first !== undefined && /^title\s*:/i.test(first)) {
    title = first.replace(/^title\s*:\s*/i, '');
    lines.shift();
  } else if (first !== undefined && lines.length > 1 && !/[.!?]$/.test(first)) {
    title = first;
    lines.shift();
  }
  const sentences: string[] = [];
  for (const line of lines) {
    // Bibliographic lines and section headings are not claims a model would quote.
    if (/^(authors?|year|journal|doi|pmid|url|source|date)\s*:/i.test(line) || line.includes(' | ')) continue;
    if (/^[\p{Lu}\s]{3,30}$/u.test(line)) continue;
    const body = line.replace(/^(abstract|text|content|summary|description)\s*:\s*/i, '');
    for (const s of body.split(/(?<=[.!?])\s+(?=[\p{Lu}\p{N}"'(\[])/u)) {
      const t = s.trim();
      if (t !== '') sentences.push(t);
    }
  }
  return { title, sentences };
}

/**
 * The snippet sentence with the highest word overlap with the question. Words the snippet's
 * title shares with the question say which document is relevant, not which sentence answers,
 * so they score the document once and are not counted again in its sentences; content words
 * count three times as much as stopwords. Ties go to the sentence shown first.
 */
export function bestEvidence(question: string, snippets: readonly Snippet[]): Evidence | null {
  const questionWords = new Set(words(question));
  let best: { score: number; evidence: Evidence } | null = null;
  for (const snippet of snippets) {
    const scores = sentenceScores(questionWords, snippet);
    for (let i = 0; i < snippet.sentences.length; i++) {
      const score = scores[i]!;
      if (best === null || score > best.score) best = { score, evidence: { snippet, sentence: snippet.sentences[i]! } };
    }
  }
  return best?.evidence ?? null;
}

/** The score of each sentence of a snippet against the question's words, as bestEvidence weighs them. */
export function sentenceScores(questionWords: ReadonlySet<string>, snippet: Snippet): number[] {
  const titleWords = new Set(snippet.title === null ? [] : words(snippet.title));
  let docScore = 0;
  for (const w of titleWords) {
    if (questionWords.has(w)) docScore += isStopword(w) ? 0 : 1;
    else if (!isStopword(w)) docScore -= 0.25;
  }
  return snippet.sentences.map((sentence) => {
    let score = docScore;
    for (const w of new Set(words(sentence))) {
      if (questionWords.has(w) && !titleWords.has(w)) score += isStopword(w) ? 1 : 3;
    }
    return score;
  });
}

/** The query of search number `index`; later searches add a refinement, a different one each. */
export function queryFor(keywords: readonly string[], question: string, index: number, variant: number): string {
  const base = keywords.length > 0 ? keywords.slice(0, 10).join(' ') : question.trim().slice(0, 100);
  if (index === 0) return base;
  return `${base} ${REFINEMENTS[(variant + index - 1) % REFINEMENTS.length]}`;
}

export function planTurn(conv: Conversation, options: PolicyOptions, rng: Rng): TurnPlan {
  const keywords = contentWords(conv.question);
  const evidence = bestEvidence(conv.question, conv.snippets);
  const thinks = rng() < 0.6;
  const variant = Math.floor(rng() * 1000);
  const extraQueries = [1, 2, 3].map((k) => queryFor(keywords, conv.question, conv.searches + k, variant));
  const base = { evidence, summary: '', extraQueries, keywords };

  if (conv.failure !== null) {
    return { ...base, kind: 'summary', reasoning: null, call: null, summary: failureSummary(conv, evidence) };
  }
  if (!conv.forceAnswer && conv.tool !== null && conv.searches < options.callsPerSample) {
    const query = queryFor(keywords, conv.question, conv.searches, variant);
    const reason =
      conv.searches === 0
        ? `I need to find out: ${conv.question.trim()} I will search for "${query}".`
        : `The results so far do not settle it; I will refine the search to "${query}".`;
    return { ...base, kind: 'call', reasoning: thinks ? reason : null, call: { tool: conv.tool, query } };
  }
  const reason =
    evidence === null
      ? 'Nothing I was shown answers the question.'
      : `Snippet ${evidence.snippet.id} says: ${evidence.sentence}`;
  return { ...base, kind: 'answer', reasoning: thinks ? reason : null, call: null };
}

/**
 * A tool output the model makes up. A text-dialect model (tulu, mcp-xml) that is not stopped
 * after its call goes on to write one, so every such call turn carries one past the stop string.
 */
export function inventToolOutput(plan: TurnPlan, rng: Rng): string {
  const topic = plan.keywords.slice(0, 4).join(' ') || 'the question';
  const version = 2 + Math.floor(rng() * 90);
  const year = 2000 + Math.floor(rng() * 24);
  return (
    `<tool_output>\n<snippet id="fake-1">Title: ${topic}\n` +
    `According to this source, ${topic} was first available in version ${version}, released ${year}.</snippet>\n</tool_output>`
  );
}
