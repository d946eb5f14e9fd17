/**
 * The checks the judge decides (pipeline/core/judge/, one judge with a kind per question):
 * entailment (do the quotes, or the walk's triples, entail the answer?), unique (is it the only
 * answer the question admits?), and the closed-book check (the endpoint answers the question
 * with no tools, prompts/synth-closed-book.txt, and the judge grades that answer as it grades a
 * rollout's). An unreadable reply makes the check's verdict `error` (the seed is rejected); a
 * judge that cannot be reached leaves the seed unfinished.
 */
import type { CheckResult } from '../../schemas/index.js';
import { ENTAILMENT, UNIQUE, type QuestionKind } from '../core/judge/kinds.js';
import type { Judge } from '../core/judge/judge.js';
import type { LabelReading } from '../core/judge/reply.js';
import { askStage, promptTag, type AskDeps } from './ask.js';
import type { Draft } from './draft.js';
import { evidenceBlock, seedBlock } from './render.js';
import type { Seed } from './seed.js';
import { Unfinished } from './unfinished.js';

async function askJudge<L extends string>(judge: Judge, kind: QuestionKind<LabelReading<L>>, yes: L, material: Record<string, string>, deps: AskDeps): Promise<CheckResult> {
  deps.prompts.add(promptTag(kind.prompt));
  const asked = await judge.ask(kind, material, deps.signal, deps.meter);
  if ('error' in asked) {
    if (asked.raw === undefined) throw new Unfinished(`${kind.name}: ${asked.error}`);
    return { verdict: 'error', reason: `${asked.error}: "${asked.raw}"` };
  }
  const why = asked.value.rationale === '' ? asked.value.label : `${asked.value.label}: ${asked.value.rationale}`;
  return { verdict: asked.value.label === yes ? 'pass' : 'fail', reason: `the judge says ${why}` };
}

export function entailmentCheck(judge: Judge, seed: Seed, question: string, d: Draft, deps: AskDeps): Promise<CheckResult> {
  return askJudge(judge, ENTAILMENT, 'SUPPORTED', { question, answer: d.answer, evidence: evidenceBlock(seed, d.quotes) }, deps);
}

export function uniqueCheck(judge: Judge, seed: Seed, question: string, d: Draft, deps: AskDeps): Promise<CheckResult> {
  return askJudge(judge, UNIQUE, 'UNIQUE', { question, answer: d.answer, evidence: seedBlock(seed) }, deps);
}

/** The reply's first line of its own words (after any reasoning), without an `Answer:` label. */
function firstLine(reply: string): string | undefined {
  const own = reply.replace(/^\s*<think>[\s\S]*?<\/think>/i, '');
  const line = own.split('\n').find((l) => l.trim() !== '');
  const answer = line?.replace(/^\s*(?:\*\*)?(?:final )?answer(?:\*\*)?\s*[:：]\s*/i, '').trim();
  return answer === undefined || answer === '' ? undefined : answer;
}

export interface ClosedBook {
  readonly result: CheckResult;
  /** Whether the solver's answer was judged correct (undefined when it could not be judged). */
  readonly correct: boolean | undefined;
}

/** The endpoint answers with no tools; answered correctly, the question is too easy: `fail` (drop) or `marked` (mark). */
export async function closedBookCheck(judge: Judge, question: string, d: Draft, mode: 'drop' | 'mark', deps: AskDeps): Promise<ClosedBook> {
  const asked = await askStage(deps, 'synth-closed-book', { question }, firstLine, 'answer');
  if ('unreadable' in asked) return { result: { verdict: 'error', reason: asked.unreadable }, correct: undefined };
  const j = await judge.grade({ question, gold: [d.answer, ...d.aliases], answer: asked.value }, deps.signal, deps.meter);
  if (j.prompt !== undefined) deps.prompts.add(j.prompt);
  if (j.verdict === 'unjudged') {
    if (j.raw === undefined) throw new Unfinished(`closed_book: ${j.error ?? 'the judge could not grade'}`);
    return { result: { verdict: 'error', reason: `the judge's grading was unreadable: ${j.error}` }, correct: undefined };
  }
  const said = `the closed-book solver answered "${asked.value.slice(0, 120)}"`;
  if (j.verdict !== 'correct') return { result: { verdict: 'pass', reason: `${said}; the judge: ${j.verdict} (${j.step})` }, correct: false };
  return { result: { verdict: mode === 'mark' ? 'marked' : 'fail', reason: `${said}, judged correct (${j.step}): answerable without searching` }, correct: true };
}
