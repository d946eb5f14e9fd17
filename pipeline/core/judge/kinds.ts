/**
 * The questions the judge is asked, one prompt each.
 *
 * A kind names its template (`prompts/<prompt>.txt`, whose placeholders are the keys of the
 * material it is asked about, each filled as a data block: prompt.ts) and reads its answer
 * from the reply's fixed place (reply.ts). Today: `verdict` (an answer against gold answers,
 * SimpleQA's way), `rubric` (a score per criterion), and synthesis's two (pipeline/synthesize/):
 * `entailment` (do these quotes, or these triples, entail this answer?) and `unique` (is it the
 * only answer the question admits?). A new question is a template that asks for its answer on
 * the reply's first line or as a JSON object that starts it, and a kind here; `Judge.ask` gives
 * it what every kind has: the one client, the cache, the retries and limits.
 */
import type { CriterionScore } from '../../../schemas/index.js';
import { readLabel, readVerdict, type LabelReading, type VerdictReading } from './reply.js';
import { criteriaForPrompt, parseRubricReply, type Criterion } from './rubrics.js';

export interface QuestionKind<T> {
  /** In the cache key and in messages: `verdict`, `rubric`. */
  readonly name: string;
  /** The template: `prompts/<prompt>.txt`. */
  readonly prompt: string;
  /** What a reply must hold, for the message when none did: "no readable verdict in 2 replies". */
  readonly wants: string;
  /** The answer at the reply's fixed place, or undefined (unreadable: asked again). */
  read(reply: string): T | undefined;
}

/** SimpleQA grading: CORRECT, INCORRECT or NOT_ATTEMPTED, and why. Material: question, gold, answer. */
export const VERDICT: QuestionKind<VerdictReading> = { name: 'verdict', prompt: 'judge-simpleqa', wants: 'verdict', read: readVerdict };

/** The verdict's material: gold alternatives after the first as "(also accepted: …)", which the sim reads back. */
export function verdictMaterial(question: string, golds: readonly string[], answer: string): Record<string, string> {
  const gold = golds.length === 1 ? golds[0]! : `${golds[0]} (also accepted: ${golds.slice(1).join('; ')})`;
  return { question, gold, answer };
}

/** Rubric scoring: a score in 0..1 per criterion, in one request. Material: question, answer, criteria. */
export function rubricKind(criteria: readonly Criterion[]): QuestionKind<CriterionScore[]> {
  return { name: 'rubric', prompt: 'judge-rubric', wants: 'rubric scores', read: (reply) => parseRubricReply(reply, criteria) };
}

export function rubricMaterial(question: string, answer: string, criteria: readonly Criterion[]): Record<string, string> {
  return { question, answer, criteria: criteriaForPrompt(criteria) };
}

/** Do the quotes (or the triples) entail the answer? Material: question, answer, evidence. */
export const ENTAILMENT: QuestionKind<LabelReading<'SUPPORTED' | 'NOT_SUPPORTED'>> = {
  name: 'entailment',
  prompt: 'synth-entailment',
  wants: 'verdict (SUPPORTED or NOT_SUPPORTED)',
  read: (reply) => readLabel(reply, ['SUPPORTED', 'NOT_SUPPORTED'] as const),
};

/** Is the answer the only one the question admits, given the evidence? Material: question, answer, evidence. */
export const UNIQUE: QuestionKind<LabelReading<'UNIQUE' | 'NOT_UNIQUE'>> = {
  name: 'unique',
  prompt: 'synth-unique',
  wants: 'verdict (UNIQUE or NOT_UNIQUE)',
  read: (reply) => readLabel(reply, ['UNIQUE', 'NOT_UNIQUE'] as const),
};
