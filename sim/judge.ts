/**
 * The sim as a judge: a request whose last user message is one of trajforge's grading prompts
 * (prompts/judge-simpleqa.txt, prompts/judge-rubric.txt) gets a grading instead of a turn of the
 * policy. This role reads nothing but that message and shares nothing with the policy.
 *
 * - A verdict: NOT_ATTEMPTED when the answer is empty or says it found nothing; CORRECT when
 *   one of the gold answers (the first, and those after "also accepted:") appears in it as a
 *   run of words (case, punctuation and the answer's tags ignored); INCORRECT otherwise. As
 *   `Verdict: …` and `Rationale: …` lines, the shape the prompt asks for.
 * - Rubric scores: for each criterion, the share of its content words (4 letters or more) that
 *   the answer holds, as 0, 0.5 or 1; one JSON object.
 *
 * Misbehaviour, asked for by name: `judge_unreadable` answers prose with no verdict and no
 * scores. A judge that is down is the transport faults every request can get (server_error,
 * drop, stall, rate_limit), or a sim that is not running.
 */
import { messageText } from './dialects.js';
import type { ChatMessage } from './policy.js';

export type JudgeRequest =
  | { readonly kind: 'verdict'; readonly question: string; readonly golds: readonly string[]; readonly answer: string }
  | { readonly kind: 'rubric'; readonly question: string; readonly answer: string; readonly criteria: readonly string[] };

/** The text between `Label:\n<<<\n` and `\n>>>`, as the grading prompts set each part off. */
function section(text: string, label: string): string | undefined {
  const open = `${label}:\n<<<\n`;
  const at = text.indexOf(open);
  if (at < 0) return undefined;
  const start = at + open.length;
  const end = text.indexOf('\n>>>', start);
  return end < 0 ? undefined : text.slice(start, end);
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

/** The grading's text; `unreadable`: prose that names no verdict and no score. */
export function judgeReply(req: JudgeRequest, unreadable: boolean): string {
  if (unreadable) return 'I looked at this answer carefully and it seems reasonable overall.';
  if (req.kind === 'verdict') {
    const said = words(req.answer);
    if (said.length === 0 || GAVE_UP.test(req.answer)) return 'Verdict: NOT_ATTEMPTED\nRationale: the answer does not commit to an answer.';
    const hit = req.golds.find((g) => holdsRun(said, words(g)));
    return hit !== undefined
      ? `Verdict: CORRECT\nRationale: the answer states the gold answer "${hit}".`
      : `Verdict: INCORRECT\nRationale: the answer does not state the gold answer "${req.golds[0]}".`;
  }
  const said = new Set(words(req.answer));
  const scores = req.criteria.map((c, i) => {
    const content = [...new Set(words(c).filter((w) => w.length >= 4))];
    const share = content.length === 0 ? 0 : content.filter((w) => said.has(w)).length / content.length;
    const score = share >= 2 / 3 ? 1 : share >= 1 / 3 ? 0.5 : 0;
    return { criterion: i + 1, score, reason: `the answer holds ${Math.round(share * 100)}% of the criterion's words` };
  });
  return JSON.stringify({ scores });
}
