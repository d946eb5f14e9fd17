/**
 * An LLM judge for answers against gold answers, graded the SimpleQA way: CORRECT,
 * INCORRECT or NOT_ATTEMPTED, with a rationale. It goes through the configured endpoint
 * (LlmClient: the same retries, rate-limit handling and error kinds as a run).
 *
 * The judge is optional and never decides a rule alone: its result becomes a `gold.judge`
 * issue (INCORRECT → the rule's severity, error by default; NOT_ATTEMPTED, an unreadable
 * grading or a failed request → warn at most), added to the deterministic rules' Validation.
 */
import type { EndpointConfig, Validation, ValidationIssue } from '../../../schemas/index.js';
import { TrajforgeError } from '../../errors.js';
import { LlmClient, LlmError } from '../llm/llm.js';
import { loadPrompt, renderPrompt } from '../../prompts.js';
import { cleanText } from '../../text.js';
import { ruleSeverity, type RuleSeverity } from '../validator.js';

export const JUDGE_PROMPT = 'judge-simpleqa';

export type Verdict = 'CORRECT' | 'INCORRECT' | 'NOT_ATTEMPTED';

export interface JudgeResult {
  /** null: the judge's reply named no verdict that could be read, or the request failed. */
  readonly verdict: Verdict | null;
  readonly rationale: string;
  /** Set when the grading request failed (retries exhausted, context too long). */
  readonly error?: string | undefined;
  /** The reply, cut, when no verdict could be read from it. */
  readonly raw?: string | undefined;
}

const VERDICT_WORD = String.raw`(NOT[_ -]?ATTEMPTED|INCORRECT|CORRECT)`;
// "Verdict: CORRECT", "**Grade**: INCORRECT", {"verdict": "NOT_ATTEMPTED"}, "verdict = [CORRECT]";
// SimpleQA's own letters (A/B/C) only after such a label.
const LABELLED = new RegExp(String.raw`\b(?:verdict|grade|grading|judg(?:e)?ment|classification)\b["'*_\s]*[:：=]\s*["'*_\`\[(]*\s*(?:${VERDICT_WORD}\b|([ABC])\b)`, 'gi');
// Upper case only: prose ("the answer is not correct") must not read as a verdict.
const BARE = new RegExp(String.raw`(?<![A-Za-z_])(NOT[_ ]ATTEMPTED|INCORRECT|CORRECT)(?![A-Za-z_])`, 'g');
const RATIONALE = /\b(?:rationale|reason(?:ing)?|explanation|justification)\b["'*_\s]*[:：=]\s*["'*_]*/i;
const LETTERS: Record<string, Verdict> = { A: 'CORRECT', B: 'INCORRECT', C: 'NOT_ATTEMPTED' };

function canonical(word: string): Verdict {
  const w = word.toUpperCase();
  return w.startsWith('NOT') ? 'NOT_ATTEMPTED' : w === 'INCORRECT' ? 'INCORRECT' : 'CORRECT';
}

function clip(s: string, n: number): string {
  const one = s.replace(/\s+/g, ' ').trim();
  return one.length <= n ? one : `${one.slice(0, n - 1)}…`;
}

/**
 * The verdict and rationale in a judge's reply. Reasoning (`<think>…</think>`) is dropped;
 * a labelled verdict wins (the last one: a model that corrects itself means the later one);
 * otherwise a verdict word in capitals counts only when it is the only one the reply uses.
 * Anything else is unreadable: verdict null, never a guess.
 */
export function parseVerdict(reply: string): { verdict: Verdict | null; rationale: string } {
  const text = reply.replace(/<think>[\s\S]*?<\/think>/gi, ' ').trim();
  let verdict: Verdict | null = null;
  for (const m of text.matchAll(LABELLED)) verdict = m[1] !== undefined ? canonical(m[1]) : LETTERS[m[2]!.toUpperCase()]!;
  if (verdict === null) {
    const seen = new Set([...text.matchAll(BARE)].map((m) => canonical(m[1]!)));
    if (seen.size === 1) verdict = [...seen][0]!;
  }
  const r = RATIONALE.exec(text);
  let rationale = r ? text.slice(r.index + r[0].length) : text.replace(LABELLED, ' ');
  rationale = clip(rationale.replace(/["'*_}\s]+$/, ''), 500);
  return { verdict, rationale };
}

export interface JudgeOptions {
  /** The endpoint that grades; `temperature` 0 is recommended (the CLI sets it). */
  readonly endpoint: EndpointConfig;
  readonly apiKey: string;
  /** Requests in flight at most. */
  readonly concurrency?: number | undefined;
  /** A template with {question} {gold} {answer}; default prompts/judge-simpleqa.txt. */
  readonly template?: string | undefined;
}

export interface JudgeInput {
  readonly question: string;
  readonly gold: string;
  readonly answer: string;
}

export class Judge {
  readonly #llm: LlmClient;
  readonly #template: string;
  readonly #base: string;
  #graded = 0;

  constructor(opts: JudgeOptions) {
    this.#llm = new LlmClient(opts.endpoint, { apiKey: opts.apiKey, maxConcurrency: opts.concurrency });
    this.#template = opts.template ?? loadPrompt(JUDGE_PROMPT);
    this.#base = opts.endpoint.base_url;
  }

  get graded(): number {
    return this.#graded;
  }

  /**
   * One grading. An endpoint that refuses the request itself (401, 404, 400…) would refuse
   * every row, so it stops the command (TrajforgeError); a request that failed after its
   * retries is reported on this row and the rest go on.
   */
  async grade(input: JudgeInput, signal?: AbortSignal): Promise<JudgeResult> {
    const prompt = renderPrompt(this.#template, { question: input.question, gold: input.gold, answer: input.answer });
    try {
      const c = await this.#llm.complete({ messages: [{ role: 'user', content: prompt }], stop: [], signal });
      this.#graded++;
      // The grader's words end up in validation issues, and from there in files: clean like any model text.
      const text = cleanText(c.text);
      const { verdict, rationale } = parseVerdict(text);
      return verdict === null ? { verdict, rationale: '', raw: clip(text, 300) } : { verdict, rationale };
    } catch (err) {
      if (err instanceof LlmError && (err.kind === 'exhausted' || err.kind === 'context_overflow')) {
        return { verdict: null, rationale: '', error: err.message };
      }
      if (err instanceof LlmError && err.kind === 'fatal') {
        throw new TrajforgeError('BAD_CONFIG', `judge: ${this.#base} refused the grading request: ${err.message}`, { field: 'endpoint', cause: err });
      }
      throw err;
    }
  }
}

/** The `gold.judge` issue for a grading, or undefined (CORRECT, or the rule is off). */
export function judgeIssue(result: JudgeResult, severities?: Readonly<Record<string, RuleSeverity>>): ValidationIssue | undefined {
  const configured = ruleSeverity('gold.judge', severities);
  if (configured === 'off' || result.verdict === 'CORRECT') return undefined;
  const rationale = result.rationale ? `: ${result.rationale}` : '';
  if (result.verdict === 'INCORRECT') return { rule: 'gold.judge', severity: configured, message: `judge: INCORRECT${rationale}` };
  // Not a wrong answer, or no grading at all: flag it, never reject on it.
  const severity = 'warn';
  if (result.verdict === 'NOT_ATTEMPTED') return { rule: 'gold.judge', severity, message: `judge: NOT_ATTEMPTED${rationale}` };
  if (result.error !== undefined) return { rule: 'gold.judge', severity, message: `judge: no grading, the request failed: ${result.error}` };
  return { rule: 'gold.judge', severity, message: `judge: the reply names no verdict (CORRECT, INCORRECT or NOT_ATTEMPTED): "${result.raw ?? ''}"` };
}

/** A Validation with the judge's issue added and `passed` recomputed. */
export function withJudge(v: Validation, result: JudgeResult, severities?: Readonly<Record<string, RuleSeverity>>): Validation {
  const issue = judgeIssue(result, severities);
  if (!issue) return v;
  const issues = [...v.issues, issue];
  return { passed: !issues.some((i) => i.severity === 'error'), issues };
}
