/**
 * The judge on dataset rows (`validate --judge`): the run config's judge (`validation.judge`),
 * else its endpoint, grades each row that has a gold answer or a rubric and an answer, with
 * the same cascade, prompts, cache, retries and limits as the judge in the loop (judge.ts).
 *
 * The judge never decides a row alone: its verdict becomes a `gold.judge` issue added to the
 * deterministic rules' Validation. INCORRECT → the rule's severity (error by default);
 * NOT_ATTEMPTED, an unreadable grading or a failed request → a warning at most; a rubric score
 * alone → no issue (it is for selection). A judge that refuses a request (a wrong key or model:
 * 401, 403, 404, 400) would refuse every row, so the first refusal stops the command.
 */
import type { CriterionScore, JudgeStep, RunConfig, Trajectory, Validation, ValidationIssue } from '../../../schemas/index.js';
import { TrajforgeError } from '../../errors.js';
import { scrubberFor } from '../config.js';
import { ruleSeverity, type RuleSeverity } from '../validator.js';
import { goldsOf } from './cascade.js';
import { createJudge, judgeSettings, type Judge } from './judge.js';
import type { Verdict } from './reply.js';
import { readRubrics } from './rubrics.js';
import type { JudgeOverrides } from './settings.js';

/** A row's grading as `validate --json` prints it. */
export interface RowJudgement {
  /** null: no verdict; the request failed (`error`) or no reply could be read (`raw`). */
  readonly verdict: Verdict | null;
  readonly rationale: string;
  /** The step that decided (cascade.ts), or the one that could not. */
  readonly step: JudgeStep;
  readonly raw?: string | undefined;
  readonly error?: string | undefined;
  readonly cached?: true | undefined;
  readonly f1?: number | undefined;
  readonly rubric_score?: number | undefined;
  readonly criteria?: CriterionScore[] | undefined;
}

/** The judge for a dataset: the config's, with the rules file's overrides; it stops at the first refusal. */
export function openRowJudge(config: RunConfig, overrides: JudgeOverrides, env: NodeJS.ProcessEnv): Judge {
  const settings = judgeSettings(config, { env, orEndpoint: true, overrides: { ...overrides, fail_fast_after: 1 } })!;
  return createJudge(settings, { env, scrubber: scrubberFor(config, env) });
}

/**
 * A row graded: its Validation with the judge's issue, and the grading; the Validation alone
 * when there is nothing to grade (no gold answer nor rubric, no answer).
 */
export async function judgeRow(
  judge: Judge,
  t: Trajectory,
  answer: string | undefined,
  v: Validation,
  severities?: Readonly<Record<string, RuleSeverity>>,
): Promise<{ validation: Validation; judge?: RowJudgement }> {
  const golds = goldsOf(t);
  const rubric = readRubrics(t.meta);
  const criteria = Array.isArray(rubric) ? rubric : undefined;
  if ((golds.length === 0 && criteria === undefined) || answer === undefined || answer.trim() === '') return { validation: v };
  const j = await judge.grade({ question: typeof t.question === 'string' ? t.question : '', gold: golds, answer, rubric: criteria });
  if (judge.fatal !== undefined) throw new TrajforgeError('BAD_CONFIG', `judge: ${judge.fatal}`, { field: judge.settings.section });
  const row: RowJudgement = {
    verdict: j.verdict === 'unjudged' ? null : (j.verdict.toUpperCase() as Verdict),
    rationale: j.reasoning ?? '',
    step: j.step,
    ...(j.verdict !== 'unjudged' ? {} : j.raw !== undefined ? { raw: j.raw } : { error: j.error }),
    ...(j.cached ? { cached: true } : {}),
    ...(j.f1 === undefined ? {} : { f1: j.f1 }),
    ...(j.rubric_score === undefined ? {} : { rubric_score: j.rubric_score, criteria: j.criteria }),
  };
  const issue = judgeIssue(row, golds.length > 0, severities);
  if (!issue) return { validation: v, judge: row };
  const issues = [...v.issues, issue];
  return { validation: { passed: !issues.some((i) => i.severity === 'error'), issues }, judge: row };
}

/** The `gold.judge` issue for a grading, or undefined (CORRECT, a rubric score alone, or the rule is off). */
function judgeIssue(r: RowJudgement, hasGold: boolean, severities?: Readonly<Record<string, RuleSeverity>>): ValidationIssue | undefined {
  const configured = ruleSeverity('gold.judge', severities);
  if (configured === 'off' || (r.verdict !== null && (r.verdict === 'CORRECT' || !hasGold))) return undefined;
  const rationale = r.rationale ? `: ${r.rationale}` : '';
  if (r.verdict === 'INCORRECT') return { rule: 'gold.judge', severity: configured, message: `judge: INCORRECT${rationale}` };
  // Not a wrong answer, or no grading at all: flag it, never reject on it.
  const severity = 'warn';
  if (r.verdict === 'NOT_ATTEMPTED') return { rule: 'gold.judge', severity, message: `judge: NOT_ATTEMPTED${rationale}` };
  if (r.error !== undefined) return { rule: 'gold.judge', severity, message: `judge: no grading, the request failed: ${r.error}` };
  return { rule: 'gold.judge', severity, message: `judge: the reply names no verdict (CORRECT, INCORRECT or NOT_ATTEMPTED): "${r.raw ?? ''}"` };
}
