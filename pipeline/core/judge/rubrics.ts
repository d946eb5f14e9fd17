/**
 * Rubrics: criteria with weights that a long answer is scored against, in DR Tulu's shape
 * (rl-research/dr-tulu, `ground_truth.rubrics`, from RaR): a list of
 * `{description, weight, title?}`; `criterion` is taken for `description` too. A question row
 * carries them as `rubrics` (or `rubric`, RaR's name); the sampler passes them through `meta`.
 *
 * The judge scores every criterion of one answer in one request (prompts/judge-rubric.txt),
 * each 0..1, and replies with a JSON object (read where it starts the reply: reply.ts). The
 * weighted score:
 *
 *   rubric_score = Σ score·weight / Σ (positive weights), clamped to 0..1
 *
 * A negative weight is a pitfall (RaR's "Pitfall Criteria"): meeting it lowers the score.
 * (DR Tulu divides by max(Σ positive weights, 1); with weights below 1 that would cap the
 * score under 1, so the plain sum is used.) A rubric of pitfalls alone scores
 * 1 − Σ score·|weight| / Σ |weight|.
 */
import type { CriterionScore } from '../../../schemas/index.js';
import { readJsonReply } from './reply.js';

export interface Criterion {
  readonly description: string;
  readonly weight: number;
  readonly title?: string | undefined;
}

/** Where a bad rubric is, and what is wrong with it: a bad question row. */
export interface RubricProblem {
  readonly field: string;
  readonly message: string;
}

const RUBRIC_KEYS = ['rubrics', 'rubric'] as const;

/**
 * The criteria a question's fields (or a trajectory's `meta`) carry: undefined when it has
 * none (no `rubrics`/`rubric` list), a problem when the list is there but not a rubric.
 */
export function readRubrics(fields: Readonly<Record<string, unknown>> | undefined): Criterion[] | RubricProblem | undefined {
  // A foreign row's `meta` may be anything.
  if (fields === undefined || fields === null || typeof fields !== 'object') return undefined;
  const key = RUBRIC_KEYS.find((k) => Object.hasOwn(fields, k) && Array.isArray(fields[k]));
  if (key === undefined) return undefined;
  const list = fields[key] as unknown[];
  if (list.length === 0) return { field: key, message: 'an empty list of criteria' };
  const out: Criterion[] = [];
  for (let i = 0; i < list.length; i++) {
    const item = list[i];
    const at = `${key}[${i}]`;
    if (typeof item === 'string' && item.trim() !== '') {
      out.push({ description: item.trim(), weight: 1 });
      continue;
    }
    if (item === null || typeof item !== 'object' || Array.isArray(item)) return { field: at, message: 'expected {description, weight} or a string' };
    const o = item as Record<string, unknown>;
    const text = typeof o.description === 'string' ? o.description : typeof o.criterion === 'string' ? o.criterion : undefined;
    if (text === undefined || text.trim() === '') return { field: `${at}.description`, message: 'a criterion needs a non-empty description (or criterion)' };
    const weight = o.weight === undefined ? 1 : o.weight;
    if (typeof weight !== 'number' || !Number.isFinite(weight)) return { field: `${at}.weight`, message: `expected a number, got ${JSON.stringify(weight)}` };
    out.push({ description: text.trim(), weight, ...(typeof o.title === 'string' && o.title.trim() !== '' ? { title: o.title.trim() } : {}) });
  }
  if (out.every((c) => c.weight === 0)) return { field: key, message: 'every weight is 0: nothing to score' };
  return out;
}

/** The criteria as the prompt lists them: numbered from 1, without weights (each is judged on its own). */
export function criteriaForPrompt(criteria: readonly Criterion[]): string {
  return JSON.stringify(
    criteria.map((c, i) => ({ criterion: i + 1, ...(c.title === undefined ? {} : { title: c.title }), description: c.description })),
    null,
    1,
  );
}

export function weightedScore(criteria: readonly Criterion[], scores: readonly number[]): number {
  let sum = 0;
  let positive = 0;
  let absolute = 0;
  for (let i = 0; i < criteria.length; i++) {
    const w = criteria[i]!.weight;
    sum += scores[i]! * w;
    if (w > 0) positive += w;
    absolute += Math.abs(w);
  }
  const raw = positive > 0 ? sum / positive : 1 + sum / absolute;
  return Math.min(1, Math.max(0, raw));
}

const num = (v: unknown): number | undefined => {
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : v;
  return typeof n === 'number' && Number.isFinite(n) ? n : undefined;
};

/**
 * The scores in a rubric reply, one per criterion in order, each 0..1, with its reason; or
 * undefined when the reply does not give exactly that (a missing criterion, a score outside
 * 0..1, no JSON object or array starting the reply): an unreadable reply, never a guess. JSON
 * further on in the reply is not read (reply.ts): it may be a quote of the answer.
 */
export function parseRubricReply(reply: string, criteria: readonly Criterion[]): CriterionScore[] | undefined {
  return readJsonReply(reply, (value) => scoresOf(value, criteria));
}

function scoresOf(value: unknown, criteria: readonly Criterion[]): CriterionScore[] | undefined {
  const list = Array.isArray(value) ? value : (value as { scores?: unknown } | undefined)?.scores;
  if (!Array.isArray(list) || list.length !== criteria.length) return undefined;
  const scores = new Array<{ score: number; reasoning?: string } | undefined>(criteria.length);
  for (let i = 0; i < list.length; i++) {
    const item = list[i];
    const o: Record<string, unknown> = item !== null && typeof item === 'object' ? (item as Record<string, unknown>) : { score: item };
    const index = o.criterion === undefined ? i : (num(o.criterion) ?? NaN) - 1;
    const score = num(o.score);
    if (!Number.isInteger(index) || index < 0 || index >= criteria.length || scores[index] !== undefined) return undefined;
    if (score === undefined || score < 0 || score > 1) return undefined;
    const why = typeof o.reason === 'string' ? o.reason : typeof o.reasoning === 'string' ? o.reasoning : undefined;
    scores[index] = { score, ...(why === undefined || why.trim() === '' ? {} : { reasoning: why.trim().slice(0, 300) }) };
  }
  return criteria.map((c, i) => ({
    criterion: c.description,
    ...(c.title === undefined ? {} : { title: c.title }),
    weight: c.weight,
    score: scores[i]!.score,
    ...(scores[i]!.reasoning === undefined ? {} : { reasoning: scores[i]!.reasoning }),
  }));
}
