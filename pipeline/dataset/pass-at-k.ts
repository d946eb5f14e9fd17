/**
 * pass@1 and pass@k from judged records, per run and per split (`meta.split`).
 *
 * A question counts when one of its rows has a gold answer or rubrics. A sample is correct
 * when it was accepted and the judge found it correct (`status ok`, `judgement.verdict
 * correct`); every other sample of the question that ran counts as not correct (a rollout that
 * failed gave no correct answer), except an `unjudged` one: a question with one is left out
 * (and counted) until `rerun --reason unjudged` has judged it. k is the samples planned per
 * question (`sampling.k`, else the most samples a question has).
 *
 * - All k samples ran (no `--until-correct`): with n samples of which c are correct, the unbiased
 *   estimator of Chen et al. (2021), pass@k = 1 − C(n−c, k) / C(n, k), computed as
 *   1 − Π_{i=n−c+1..n} (1 − k/i); averaged over the questions with n ≥ k. pass@1 = c/n.
 * - `--until-correct` (`sampling.until_correct`): the samples ran in order and stopped at the
 *   first correct, so c/n is biased (a question stops at its first success). From the index f
 *   of the first correct sample: pass@1 = [f = 0] over the questions whose sample #0 ran, and
 *   pass@k = [f < k] over the questions that either have a correct sample or ran all k. Both are
 *   exact on what ran: the first j samples of a question are as drawn, whatever came after.
 *
 * Memory: a few numbers per question.
 */
import type { Trajectory } from '../../schemas/index.js';

export interface PassFigures {
  /** Questions in pass@1. */
  questions: number;
  pass_at_1: number | null;
  /** Questions in pass@k (all k samples, or a correct one, known). */
  questions_at_k: number;
  pass_at_k: number | null;
}

export interface PassAtK {
  k: number;
  /** `unbiased` (all samples ran), `first_correct` (--until-correct), or `mixed` (some questions each way). */
  method: 'unbiased' | 'first_correct' | 'mixed';
  /** Judged samples counted (unjudged ones not). */
  samples: number;
  overall: PassFigures;
  by_split: Record<string, PassFigures>;
  /** Questions left out because a sample of theirs is unjudged. */
  unjudged_questions: number;
}

interface Tally {
  n: number;
  c: number;
  /** Index of the first correct sample; Infinity when none. */
  first: number;
  hasFirst: boolean;
  until: boolean;
  unjudged: number;
  split: string;
}

/** The unbiased estimator, in its product form (no large binomials). */
export function unbiasedPassAtK(n: number, c: number, k: number): number {
  if (n - c < k) return 1;
  let miss = 1;
  for (let i = n - c + 1; i <= n; i++) miss *= 1 - k / i;
  return 1 - miss;
}

const indexOf = (t: Partial<Trajectory>): number => {
  const i = t.sampling?.index;
  if (typeof i === 'number' && Number.isInteger(i) && i >= 0) return i;
  const m = typeof t.id === 'string' ? /#(\d+)$/.exec(t.id) : null;
  return m ? Number(m[1]) : 0;
};

function gradable(t: Partial<Trajectory>): boolean {
  if (typeof t.gold_answer === 'string' && t.gold_answer.trim() !== '') return true;
  const meta = t.meta as Record<string, unknown> | undefined;
  return Array.isArray(meta?.rubrics) || Array.isArray(meta?.rubric) || Array.isArray(meta?.answers) || t.judgement !== undefined;
}

export class PassCounter {
  readonly #questions = new Map<string, Tally>();
  #judged = false;
  /** The largest `sampling.k` seen; 0 when no row says. */
  #k = 0;

  /** Rows come from any reader: every field is checked. */
  add(t: Partial<Trajectory>): void {
    const verdict = (t.judgement as { verdict?: unknown } | undefined)?.verdict;
    if (typeof verdict === 'string') this.#judged = true;
    if (typeof t.question_id !== 'string' || !gradable(t)) return;
    let q = this.#questions.get(t.question_id);
    if (q === undefined) {
      const split = (t.meta as Record<string, unknown> | undefined)?.split;
      q = { n: 0, c: 0, first: Infinity, hasFirst: false, until: false, unjudged: 0, split: typeof split === 'string' ? split : '' };
      this.#questions.set(t.question_id, q);
    }
    const s = t.sampling;
    if (s !== undefined && typeof s.k === 'number' && Number.isInteger(s.k) && s.k > this.#k) this.#k = s.k;
    if (s?.until_correct === true) q.until = true;
    if (verdict === 'unjudged') {
      q.unjudged++;
      return;
    }
    const index = indexOf(t);
    q.n++;
    if (index === 0) q.hasFirst = true;
    if (t.status === 'ok' && verdict === 'correct') {
      q.c++;
      q.first = Math.min(q.first, index);
    }
  }

  /** The figures, or null when no row carried a judgement (a run without a judge). */
  result(): PassAtK | null {
    if (!this.#judged) return null;
    // The samples planned per question, as the records say; rows that do not say (other systems'): the most a question has.
    let k = this.#k;
    if (k === 0) for (const q of this.#questions.values()) k = Math.max(k, q.n);
    k = Math.max(k, 1);
    let samples = 0;
    let untilQs = 0;
    const sums = new Map<string, { q1: number; p1: number; qk: number; pk: number }>();
    const add = (key: string, p1: number | undefined, pk: number | undefined): void => {
      let s = sums.get(key);
      if (s === undefined) sums.set(key, (s = { q1: 0, p1: 0, qk: 0, pk: 0 }));
      if (p1 !== undefined) {
        s.q1++;
        s.p1 += p1;
      }
      if (pk !== undefined) {
        s.qk++;
        s.pk += pk;
      }
    };
    let unjudged = 0;
    for (const q of this.#questions.values()) {
      if (q.unjudged > 0) {
        unjudged++;
        continue;
      }
      if (q.n === 0) continue;
      samples += q.n;
      let p1: number | undefined;
      let pk: number | undefined;
      if (q.until) {
        untilQs++;
        if (q.hasFirst) p1 = q.first === 0 ? 1 : 0;
        if (q.first < Infinity || q.n >= k) pk = q.first < k ? 1 : 0;
      } else {
        p1 = q.c / q.n;
        if (q.n >= k) pk = unbiasedPassAtK(q.n, q.c, k);
      }
      add('', p1, pk);
      if (q.split !== '') add(q.split, p1, pk);
    }
    const figures = (key: string): PassFigures => {
      const s = sums.get(key) ?? { q1: 0, p1: 0, qk: 0, pk: 0 };
      return { questions: s.q1, pass_at_1: s.q1 ? s.p1 / s.q1 : null, questions_at_k: s.qk, pass_at_k: s.qk ? s.pk / s.qk : null };
    };
    const judgedQs = [...this.#questions.values()].filter((q) => q.unjudged === 0 && q.n > 0).length;
    const method = untilQs === 0 ? 'unbiased' : untilQs === judgedQs ? 'first_correct' : 'mixed';
    const splits = [...sums.keys()].filter((key) => key !== '').sort();
    return { k, method, samples, overall: figures(''), by_split: Object.fromEntries(splits.map((key) => [key, figures(key)])), unjudged_questions: unjudged };
  }
}
