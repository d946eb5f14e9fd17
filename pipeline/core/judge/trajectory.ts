/**
 * The judge in the loop (`validation.judge`): what a verdict does to a trajectory, after its
 * rollout and before its record is written. The trajectory records why (`judgement`, and
 * `sampling`: which of its question's samples it is). With a judge the gold rule
 * (`validation.gold_match`) steps aside: a wrong answer (INCORRECT or NOT_ATTEMPTED) fails the
 * sample as `wrong_answer` with a `gold.judge` issue, as the gold rule's mismatch did. A rubric
 * score never fails a sample (it is for selection: `filter --keep 'rubric_score >= 0.7'`), but a
 * question with rubrics and no gold answer counts as answered correctly from `rubric_pass` on
 * (until-correct, pass@k, DPO pairs).
 *
 * What is judged: samples that finished with an answer and that only the gold rule could have
 * failed (status ok, or `wrong_answer`), or that an earlier judge left `unjudged`. Samples that
 * failed otherwise (max_turns, invalid structure, tool errors…) are not: their answer is not
 * one to train on or to prefer.
 *
 * A judge that cannot be reached, or whose replies stay unreadable, fails no sample: the sample
 * is recorded `unjudged`, with its whole rollout, in failures.jsonl, and `trajforge rerun
 * --reason unjudged` judges that recorded answer again without a new rollout. A judge that
 * refuses the requests themselves `fail_fast_after` times in a row (`Judge.fatal`) stops the run.
 */
import type { Judgement, RunConfig, Trajectory, ValidationIssue } from '../../../schemas/index.js';
import { ruleSeverity } from '../validator.js';
import { goldsOf } from './cascade.js';
import type { Judge, Meter } from './judge.js';
import { readRubrics } from './rubrics.js';

/** A correct verdict is one that a sample can stand on: accepted, and judged correct. */
export function judgedCorrect(t: Pick<Trajectory, 'status' | 'judgement'>): boolean {
  return t.status === 'ok' && t.judgement?.verdict === 'correct';
}

/**
 * The trajectory with its judgement (and `sampling`), its status and validation set by the
 * verdict. Never throws for the judge's own failures (they make the sample unjudged); an
 * aborted run's LlmError('aborted') goes through.
 */
export async function judgeTrajectory(judge: Judge, traj: Trajectory, sampleIndex: number, run: RunConfig, signal?: AbortSignal): Promise<Trajectory> {
  const { samples, until_correct } = run.questions;
  const withSampling: Trajectory = { ...traj, sampling: { index: sampleIndex, k: samples, until_correct: until_correct && samples > 1 } };
  const golds = goldsOf(traj);
  const rubric = readRubrics(traj.meta);
  const criteria = Array.isArray(rubric) ? rubric : undefined;
  if (golds.length === 0 && criteria === undefined) return withSampling;
  const judgeable = traj.status === 'ok' || traj.reason === 'wrong_answer' || traj.reason === 'unjudged';
  if (!judgeable || traj.final_answer.trim() === '') return withSampling;
  const base = cleared(withSampling);
  if (base.status !== 'ok') return base;
  const meter = new JudgeMeter();
  const judgement = await judge.grade({ question: traj.question, gold: golds, answer: traj.final_answer, rubric: criteria }, signal, meter);
  return applied(base, meter.usage === undefined ? judgement : { ...judgement, usage: meter.usage }, golds.length > 0, run);
}

/** What grading one answer cost, for its judgement (the run's cost counts the judge apart: core/cost.ts). */
class JudgeMeter implements Meter {
  usage: Judgement['usage'];

  charge(used: Parameters<Meter['charge']>[0]): void {
    const u = (this.usage ??= { requests: 0, prompt_tokens: 0, completion_tokens: 0 });
    u.requests++;
    u.prompt_tokens += used.promptTokens;
    u.completion_tokens += used.completionTokens;
    if (used.cachedTokens !== undefined) u.cached_tokens = (u.cached_tokens ?? 0) + used.cachedTokens;
    if (used.estimated) u.estimated = true;
  }
}

/** The trajectory without an earlier verdict: no gold rule or judge issues, status as the other rules leave it. */
function cleared(t: Trajectory): Trajectory {
  const issues = t.validation.issues.filter((i) => i.rule !== 'gold.mismatch' && i.rule !== 'gold.judge');
  const passed = !issues.some((i) => i.severity === 'error');
  const { reason: _r, error: _e, judgement: _j, ...rest } = t;
  if (passed) return { ...rest, status: 'ok', validation: { passed, issues } };
  const errors = issues.filter((i) => i.severity === 'error');
  return { ...rest, status: 'failed', reason: 'invalid', error: errors.map((i) => `${i.rule}: ${i.message}`).join('; '), validation: { passed, issues } };
}

/** The verdict's consequences: a wrong answer to a gold question fails the sample; an unjudged one waits for rerun. */
function applied(t: Trajectory, j: Judgement, hasGold: boolean, run: RunConfig): Trajectory {
  const out: Trajectory = { ...t, judgement: j };
  if (j.verdict === 'unjudged') {
    const issue: ValidationIssue = { rule: 'gold.judge', severity: 'warn', message: `judge: unjudged (${j.step}): ${j.error}` };
    return {
      ...out,
      status: 'failed',
      reason: 'unjudged',
      error: `the judge could not grade this sample: ${j.error}; \`trajforge rerun RUN --reason unjudged\` judges the recorded answer again, with no new rollout`,
      validation: { passed: t.validation.passed, issues: [...t.validation.issues, issue] },
    };
  }
  if (!hasGold || j.verdict === 'correct') return out;
  const severity = ruleSeverity('gold.judge', run.validation.severities);
  if (severity === 'off') return out;
  const why = j.reasoning === undefined ? '' : `: ${j.reasoning}`;
  const issue: ValidationIssue = { rule: 'gold.judge', severity, message: `judge: ${j.verdict === 'not_attempted' ? 'NOT_ATTEMPTED' : 'INCORRECT'}${why}` };
  const issues = [...t.validation.issues, issue];
  if (severity !== 'error') return { ...out, validation: { passed: t.validation.passed, issues } };
  return { ...out, status: 'failed', reason: 'wrong_answer', error: `gold.judge: ${issue.message}`, validation: { passed: false, issues } };
}
