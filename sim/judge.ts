/**
 * The sim as a judge: a request whose last user message is one of trajforge's grading prompts
 * (prompts/judge-simpleqa.txt, prompts/judge-rubric.txt) gets a grading instead of a turn of the
 * policy. This role reads nothing but that message (and, to echo it, the key it was sent) and
 * shares nothing with the policy.
 *
 * - A verdict: NOT_ATTEMPTED when the answer is empty or says it found nothing; CORRECT when
 *   one of the gold answers (the first, and those after "also accepted:") appears in it as a
 *   run of words (case, punctuation and the answer's tags ignored); INCORRECT otherwise. In the
 *   form the prompt asks for: `Verdict: …` on the first line, `Rationale: …` on the second.
 * - Rubric scores: for each criterion, the share of its content words (4 letters or more) that
 *   the answer holds, as 0, 0.5 or 1; one JSON object, starting the reply.
 *
 * Misbehaviour, asked for by name: `judge_unreadable` answers prose with no verdict and no
 * scores; `judge_quotes` quotes the answer as it was before trajforge escaped it, in its
 * reasoning (before the verdict) and in its rationale (after it), the worst case for a reader
 * of verdicts: an answer that holds "Verdict: CORRECT" or closes the reasoning block; and
 * `judge_echo_key` writes the key it was sent into its rationale. A judge that is down is the
 * transport faults every request can get (server_error, drop, stall, rate_limit), or a sim that
 * is not running.
 */
import { messageText } from './dialects.js';
import type { MisbehaviourKind } from './misbehave.js';
import type { ChatMessage } from './policy.js';

export type JudgeRequest =
  | { readonly kind: 'verdict'; readonly question: string; readonly golds: readonly string[]; readonly answer: string }
  | { readonly kind: 'rubric'; readonly question: string; readonly answer: string; readonly criteria: readonly string[] };

/**
 * A data block's text as it was before trajforge escaped it (pipeline/core/judge/prompt.ts
 * puts a backslash into runs of `<<<`/`>>>` and into think tags): near enough for a sim.
 */
const unescaped = (s: string): string => s.replace(/(?<=[<>])\\(?=[<>/tT])/g, '');

/** The text between `Label:\n<<<\n` and `\n>>>`, as the grading prompts set each part off. */
export function section(text: string, label: string): string | undefined {
  const open = `${label}:\n<<<\n`;
  const at = text.indexOf(open);
  if (at < 0) return undefined;
  const start = at + open.length;
  const end = text.indexOf('\n>>>', start);
  return end < 0 ? undefined : unescaped(text.slice(start, end));
}

/** What a grading request asks, or null when the request is not one (the policy answers it). */
export function readJudgeRequest(messages: readonly ChatMessage[]): JudgeRequest | null {
  const last = [...messages].reverse().find((m) => m.role === 'user');
  if (last === undefined) return null;
  const text = messageText(last.content);
  const question = section(text, 'Question');
  if (question === undefined) return null;
  const gold = section(text, 'Gold answer');
  const predicted = section(text, 'Predicted answer');
  if (gold !== undefined && predicted !== undefined) {
    const also = /^(.*?) \(also accepted: (.*)\)$/s.exec(gold);
    const golds = also ? [also[1]!, ...also[2]!.split('; ')] : [gold];
    return { kind: 'verdict', question, golds, answer: predicted };
  }
  const answer = section(text, 'Answer');
  const listed = section(text, 'Rubric criteria (JSON, numbered from 1)');
  if (answer === undefined || listed === undefined) return null;
  try {
    const criteria = (JSON.parse(listed) as { description?: unknown }[]).map((c) => String(c.description ?? ''));
    return { kind: 'rubric', question, answer, criteria };
  } catch {
    return null;
  }
}

const words = (s: string): string[] => s.replace(/<[^<>]*>/g, ' ').toLowerCase().match(/[\p{L}\p{N}]+(?:\.\d+)?/gu) ?? [];

function holdsRun(haystack: readonly string[], needle: readonly string[]): boolean {
  if (needle.length === 0) return false;
  outer: for (let i = 0; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
    return true;
  }
  return false;
}

const GAVE_UP = /\b(could not find|couldn't find|cannot find|can't find|do not know|don't know|unable to (?:find|determine)|no (?:information|answer))\b/i;

/** The verdict and its rationale, as `Verdict:` and `Rationale:` lines. */
function verdictLines(req: Extract<JudgeRequest, { kind: 'verdict' }>, quote: string): string {
  const said = words(req.answer);
  if (said.length === 0 || GAVE_UP.test(req.answer)) return `Verdict: NOT_ATTEMPTED\nRationale: the answer does not commit to an answer.${quote}`;
  const hit = req.golds.find((g) => holdsRun(said, words(g)));
  return hit !== undefined
    ? `Verdict: CORRECT\nRationale: the answer states the gold answer "${hit}".${quote}`
    : `Verdict: INCORRECT\nRationale: the answer does not state the gold answer "${req.golds[0]}".${quote}`;
}

function rubricScores(req: Extract<JudgeRequest, { kind: 'rubric' }>, quote: string): string {
  const said = new Set(words(req.answer));
  const scores = req.criteria.map((c, i) => {
    const content = [...new Set(words(c).filter((w) => w.length >= 4))];
    const share = content.length === 0 ? 0 : content.filter((w) => said.has(w)).length / content.length;
    const score = share >= 2 / 3 ? 1 : share >= 1 / 3 ? 0.5 : 0;
    return { criterion: i + 1, score, reason: `the answer holds ${Math.round(share * 100)}% of the criterion's words${quote}` };
  });
  return JSON.stringify({ scores });
}

export interface JudgeReply {
  /** Sent in the reasoning field, as a reasoning model's judge sends its thinking. */
  readonly reasoning: string;
  readonly content: string;
  readonly applied: MisbehaviourKind[];
}

/** The grading for a request, with the misbehaviours drawn for it; `key`: the bearer key it was sent. */
export function judgeReply(req: JudgeRequest, drawn: ReadonlySet<MisbehaviourKind>, key = ''): JudgeReply {
  if (drawn.has('judge_unreadable')) return { reasoning: '', content: 'I looked at this answer carefully and it seems reasonable overall.', applied: ['judge_unreadable'] };
  const applied: MisbehaviourKind[] = [];
  let quote = '';
  let reasoning = '';
  if (drawn.has('judge_quotes')) {
    applied.push('judge_quotes');
    quote = ` The answer reads: "${req.answer}".`;
    reasoning = `The answer to grade reads:\n${req.answer}\nI compare it with what is asked.`;
  }
  if (drawn.has('judge_echo_key') && key !== '') {
    applied.push('judge_echo_key');
    quote += ` (graded with key ${key})`;
  }
  return { reasoning, content: req.kind === 'verdict' ? verdictLines(req, quote) : rubricScores(req, quote), applied };
}
