/**
 * The judge in the loop (`validation.judge`): after a rollout and before its record is
 * written, decide whether the answer is right, and record why on the trajectory
 * (`judgement`). With a judge the gold rule (`validation.gold_match`) steps aside: the
 * cascade decides, and a wrong answer fails the sample as `wrong_answer` with a `gold.judge`
 * issue, as the gold rule's mismatch did.
 *
 * The cascade (judge-cascade.ts for the cheap steps): exact → normalised → token F1 ≥
 * `validation.f1_threshold` → the LLM judge. The LLM is asked exactly when the question has a
 * gold answer, the rollout ended with an answer, and no cheap step accepted it against any
 * gold alternative. Questions with rubrics (judge-rubrics.ts) are scored criterion by
 * criterion in one more request; a rubric score never fails a sample (it is for selection:
 * `filter --keep 'rubric_score >= 0.7'`), but a question with rubrics and no gold counts as
 * answered correctly from `rubric_pass` on (until-correct, pass@k, DPO pairs).
 *
 * What is judged: samples that finished with an answer and that only the gold rule could have
 * failed (status ok, or `wrong_answer`), or that an earlier judge left `unjudged`. Samples that
 * failed otherwise (max_turns, invalid structure, tool errors…) are not: their answer is not
 * one to train on or to prefer.
 *
 * The judge has its own endpoint, its own LlmClient (so its retries, 429 backoff and limit of
 * requests in flight never mix with the policy model's), and a cache of verdicts on disk
 * (`<cache_dir>/judge`, the tool cache's segment store). A judge that cannot be reached, or whose
 * replies stay unreadable, fails no sample: the sample is recorded `unjudged`, with its whole
 * rollout, in failures.jsonl, and `trajforge rerun --reason unjudged` judges that recorded
 * answer again without a new rollout. A judge that refuses the requests themselves (a wrong
 * key or model: 401, 403, 404, 400) `fail_fast_after` times in a row stops the run.
 */
import { createHash } from 'node:crypto';
import { EndpointConfig, type Judgement, type JudgeConfig, type JudgeStep, type JudgeVerdict, type RunConfig, type Trajectory, type ValidationIssue } from '../../../schemas/index.js';
import { TrajforgeError } from '../../errors.js';
import { loadPrompt, renderPrompt } from '../../prompts.js';
import { Scrubber } from '../secrets.js';
import { cleanText } from '../../text.js';
import { cheapSteps, goldsOf } from './cascade.js';
import { parseVerdict, type Verdict } from './judge.js';
import { criteriaForPrompt, parseRubricReply, readRubrics, weightedScore, type Criterion } from './rubrics.js';
import { ruleSeverity } from '../validator.js';
import { cacheKey, defaultCacheDir, DirStore, MemoryStore, type ResultStore } from '../cache.js';
import { LlmClient, LlmError } from '../llm/llm.js';

export const VERDICT_PROMPT = 'judge-simpleqa';
export const RUBRIC_PROMPT = 'judge-rubric';

/** `name@hash`: which template, in which version, a verdict was asked with. */
function templateTag(name: string): string {
  return `${name}@${createHash('sha256').update(loadPrompt(name)).digest('hex').slice(0, 8)}`;
}

const isLoopback = (url: string): boolean => {
  try {
    const h = new URL(url).hostname;
    return h === 'localhost' || h === '[::1]' || h === '::1' || h.startsWith('127.');
  } catch {
    return false;
  }
};

/** The judge's key, from the environment only (as the endpoint's); a loopback judge may need none. */
export function resolveJudgeKey(judge: JudgeConfig, env: NodeJS.ProcessEnv): string {
  const key = env[judge.api_key_env];
  if (key) return key;
  if (judge.api_key_env === 'none' || isLoopback(judge.base_url)) return 'EMPTY';
  throw new TrajforgeError(
    'MISSING_ENV',
    `validation.judge.api_key_env: environment variable ${judge.api_key_env} is not set (the key for the judge at ${judge.base_url}); set it, or set api_key_env: none for a judge without keys`,
    { field: 'validation.judge.api_key_env' },
  );
}

/** The judge's section as an endpoint for LlmClient: a verdict is short and read whole (no stream, no stop strings, no loop to resample). */
export function judgeEndpoint(cfg: JudgeConfig): EndpointConfig {
  return EndpointConfig.parse({
    base_url: cfg.base_url,
    model: cfg.model,
    api_key_env: cfg.api_key_env,
    temperature: cfg.temperature,
    max_tokens: cfg.max_tokens,
    extra_body: cfg.extra_body,
    timeout_ms: cfg.timeout_ms,
    max_retries: cfg.max_retries,
    retry_base_ms: cfg.retry_base_ms,
    retry_max_ms: cfg.retry_max_ms,
    stream: false,
    repetition_retries: 0,
  });
}

/** A correct verdict is one that a sample can stand on: accepted, and judged correct. */
export function judgedCorrect(t: Pick<Trajectory, 'status' | 'judgement'>): boolean {
  return t.status === 'ok' && t.judgement?.verdict === 'correct';
}

export interface JudgeStats {
  /** Samples the judge step saw with something to judge against. */
  judged: number;
  /** Decided by each step (unjudged ones by the step that could not decide). */
  bySteps: Record<string, number>;
  byVerdict: Record<string, number>;
  /** Grading requests sent (retries of one request not counted twice), and verdicts served from the cache. */
  requests: number;
  cached: number;
}

type Asked<T> = { readonly value: T; readonly cached: boolean } | { readonly error: string; readonly raw?: string | undefined };

const clip = (s: string, n: number): string => {
  const one = s.replace(/\s+/g, ' ').trim();
  return one.length <= n ? one : `${one.slice(0, n - 1)}…`;
};

const VERDICTS: Readonly<Record<Verdict, JudgeVerdict>> = { CORRECT: 'correct', INCORRECT: 'incorrect', NOT_ATTEMPTED: 'not_attempted' };

export interface RunJudgeOptions {
  readonly config: RunConfig;
  readonly env: NodeJS.ProcessEnv;
  readonly scrubber?: Scrubber | undefined;
  /** Where a cache that cannot be opened is said. Default stderr. */
  readonly warn?: ((message: string) => void) | undefined;
}

export class RunJudge {
  readonly #cfg: JudgeConfig;
  readonly #run: RunConfig;
  readonly #llm: LlmClient;
  readonly #cache: ResultStore | undefined;
  readonly #scrubber: Scrubber;
  readonly #verdictTag = templateTag(VERDICT_PROMPT);
  readonly #rubricTag = templateTag(RUBRIC_PROMPT);
  #refusals = 0;
  #fatal: string | undefined;
  readonly #stats: JudgeStats = { judged: 0, bySteps: {}, byVerdict: {}, requests: 0, cached: 0 };

  /** A judge for the run, or undefined when the config has none. Throws when its key is missing. */
  static open(opts: RunJudgeOptions): RunJudge | undefined {
    const judge = opts.config.validation.judge;
    return judge === undefined ? undefined : new RunJudge(judge, opts);
  }

  private constructor(cfg: JudgeConfig, opts: RunJudgeOptions) {
    this.#cfg = cfg;
    this.#run = opts.config;
    this.#scrubber = opts.scrubber ?? Scrubber.none;
    this.#llm = new LlmClient(judgeEndpoint(cfg), { apiKey: resolveJudgeKey(cfg, opts.env), maxConcurrency: cfg.concurrency });
    if (cfg.cache) {
      const dir = `${opts.config.executor.cache_dir ?? defaultCacheDir(opts.env)}/judge`;
      try {
        this.#cache = DirStore.open({ dir, ttlS: cfg.cache_ttl_s, scrubber: opts.scrubber });
      } catch (err) {
        (opts.warn ?? ((m) => void process.stderr.write(`warning: ${m}\n`)))(`judge cache: cannot use ${dir} (${(err as Error).message}); caching verdicts in memory for this run only`);
        this.#cache = new MemoryStore(cfg.cache_ttl_s);
      }
    }
  }

  /** Set once the judge refused `fail_fast_after` requests in a row: the run should stop, saying this. */
  get fatal(): string | undefined {
    return this.#fatal;
  }

  stats(): JudgeStats {
    return structuredClone(this.#stats);
  }

  async close(): Promise<void> {
    await this.#cache?.close();
  }

  /**
   * The trajectory with its judgement (and `sampling`), its status and validation set by the
   * verdict. Never throws for the judge's own failures (they make the sample unjudged); an
   * aborted run's LlmError('aborted') goes through.
   */
  async judge(traj: Trajectory, sampleIndex: number, signal?: AbortSignal): Promise<Trajectory> {
    const { samples, until_correct } = this.#run.questions;
    const withSampling: Trajectory = { ...traj, sampling: { index: sampleIndex, k: samples, until_correct: until_correct && samples > 1 } };
    const golds = goldsOf(traj);
    const rubric = readRubrics(traj.meta);
    const criteria = Array.isArray(rubric) ? rubric : undefined;
    if (golds.length === 0 && criteria === undefined) return withSampling;
    const judgeable = traj.status === 'ok' || traj.reason === 'wrong_answer' || traj.reason === 'unjudged';
    if (!judgeable || traj.final_answer.trim() === '') return withSampling;
    const base = this.#cleared(withSampling);
    if (base.status !== 'ok') return base;
    this.#stats.judged++;

    const answer = traj.final_answer;
    let verdict: JudgeVerdict | undefined;
    let step: JudgeStep = 'rubric';
    const judgement: Partial<Judgement> = {};
    const prompts: string[] = [];
    let unjudged: { error: string; raw?: string | undefined } | undefined;

    if (golds.length > 0) {
      const cheap = cheapSteps(answer, golds, this.#run.validation.f1_threshold);
      judgement.f1 = Math.round(cheap.f1 * 1e4) / 1e4;
      if (cheap.step !== undefined) {
        verdict = 'correct';
        step = cheap.step;
      } else {
        step = 'llm';
        prompts.push(this.#verdictTag);
        const gold = golds.length === 1 ? golds[0]! : `${golds[0]} (also accepted: ${golds.slice(1).join('; ')})`;
        const asked = await this.#verdict(traj.question, gold, answer, signal);
        judgement.judge_model = this.#cfg.model;
        if ('error' in asked) unjudged = asked;
        else {
          verdict = VERDICTS[asked.value.verdict];
          if (asked.value.rationale !== '') judgement.reasoning = asked.value.rationale;
          if (asked.cached) judgement.cached = true;
        }
      }
    }
    if (criteria !== undefined && unjudged === undefined) {
      prompts.push(this.#rubricTag);
      judgement.judge_model = this.#cfg.model;
      const asked = await this.#rubric(traj.question, answer, criteria, signal);
      if ('error' in asked) {
        unjudged = asked;
        step = 'rubric';
      } else {
        judgement.criteria = asked.value;
        judgement.rubric_score = Math.round(weightedScore(criteria, asked.value.map((c) => c.score)) * 1e4) / 1e4;
        if (asked.cached) judgement.cached = true;
        if (golds.length === 0) verdict = judgement.rubric_score >= this.#cfg.rubric_pass ? 'correct' : 'incorrect';
      }
    }
    if (prompts.length) judgement.prompt = prompts.join(', ');
    const final: JudgeVerdict = unjudged !== undefined ? 'unjudged' : verdict!;
    const record: Judgement = {
      verdict: final,
      step,
      ...judgement,
      ...(unjudged === undefined ? {} : { error: unjudged.error, ...(unjudged.raw === undefined ? {} : { raw: unjudged.raw }) }),
      judged_at: new Date().toISOString(),
    };
    this.#stats.bySteps[step] = (this.#stats.bySteps[step] ?? 0) + 1;
    this.#stats.byVerdict[final] = (this.#stats.byVerdict[final] ?? 0) + 1;
    return this.#apply(base, record, golds.length > 0);
  }

  /** The trajectory without an earlier verdict: no gold rule or judge issues, status as the other rules leave it. */
  #cleared(t: Trajectory): Trajectory {
    const issues = t.validation.issues.filter((i) => i.rule !== 'gold.mismatch' && i.rule !== 'gold.judge');
    const passed = !issues.some((i) => i.severity === 'error');
    const { reason: _r, error: _e, judgement: _j, ...rest } = t;
    if (passed) return { ...rest, status: 'ok', validation: { passed, issues } };
    const errors = issues.filter((i) => i.severity === 'error');
    return { ...rest, status: 'failed', reason: 'invalid', error: errors.map((i) => `${i.rule}: ${i.message}`).join('; '), validation: { passed, issues } };
  }

  /** The verdict's consequences: a wrong answer to a gold question fails the sample; an unjudged one waits for rerun. */
  #apply(t: Trajectory, j: Judgement, hasGold: boolean): Trajectory {
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
    const severity = ruleSeverity('gold.judge', this.#run.validation.severities);
    if (severity === 'off') return out;
    const why = j.reasoning === undefined ? '' : `: ${j.reasoning}`;
    const issue: ValidationIssue = { rule: 'gold.judge', severity, message: `judge: ${j.verdict === 'not_attempted' ? 'NOT_ATTEMPTED' : 'INCORRECT'}${why}` };
    const issues = [...t.validation.issues, issue];
    if (severity !== 'error') return { ...out, validation: { passed: t.validation.passed, issues } };
    return { ...out, status: 'failed', reason: 'wrong_answer', error: `gold.judge: ${issue.message}`, validation: { passed: false, issues } };
  }

  async #verdict(question: string, gold: string, answer: string, signal?: AbortSignal): Promise<Asked<{ verdict: Verdict; rationale: string }>> {
    const prompt = renderPrompt(loadPrompt(VERDICT_PROMPT), { question, gold, answer });
    return this.#ask('verdict', this.#verdictTag, { question, gold, answer }, prompt, signal, (text) => {
      const v = parseVerdict(text);
      return v.verdict === null ? undefined : { verdict: v.verdict, rationale: v.rationale };
    });
  }

  async #rubric(question: string, answer: string, criteria: readonly Criterion[], signal?: AbortSignal): Promise<Asked<NonNullable<ReturnType<typeof parseRubricReply>>>> {
    const listed = criteriaForPrompt(criteria);
    const prompt = renderPrompt(loadPrompt(RUBRIC_PROMPT), { question, answer, criteria: listed });
    return this.#ask('rubric', this.#rubricTag, { question, answer, criteria: listed }, prompt, signal, (text) => parseRubricReply(text, criteria));
  }

  /**
   * One grading: from the cache, else asked (again when the reply is unreadable, up to
   * `unreadable_retries` times). Failures become an error to record, never a throw.
   */
  async #ask<T>(kind: string, template: string, material: Record<string, string>, prompt: string, signal: AbortSignal | undefined, parse: (reply: string) => T | undefined): Promise<Asked<T>> {
    const key = cacheKey({ judge: this.#cfg.model, template, temperature: this.#cfg.temperature }, kind, material);
    const hit = await this.#cache?.get(key).catch(() => undefined);
    if (typeof hit === 'string') {
      const value = parse(hit);
      if (value !== undefined) {
        this.#stats.cached++;
        return { value, cached: true };
      }
    }
    let raw: string | undefined;
    for (let tries = 0; tries <= this.#cfg.unreadable_retries; tries++) {
      let reply: string;
      try {
        this.#stats.requests++;
        // The grader's words reach records, the summary and the cache: cleaned, and with the run's secrets taken out as they arrive (as tool output is).
        reply = this.#scrubber.text(cleanText((await this.#llm.complete({ messages: [{ role: 'user', content: prompt }], stop: [], signal })).text));
      } catch (err) {
        if (!(err instanceof LlmError) || err.kind === 'aborted') throw err;
        if (err.kind === 'fatal' && ++this.#refusals >= this.#cfg.fail_fast_after && this.#fatal === undefined) {
          this.#fatal = `the judge at ${this.#cfg.base_url} refused ${this.#refusals} grading requests in a row (model ${this.#cfg.model}): ${err.message}. The samples are kept, unjudged: fix validation.judge and run \`trajforge rerun RUN --reason unjudged\``;
        }
        return { error: `the judge request failed (${err.kind}): ${clip(err.message, 300)}` };
      }
      this.#refusals = 0;
      const value = parse(reply);
      if (value !== undefined) {
        await this.#cache?.set(key, reply).catch(() => undefined);
        return { value, cached: false };
      }
      raw = clip(reply, 300);
    }
    return { error: `no readable ${kind === 'rubric' ? 'rubric scores' : 'verdict'} in ${this.#cfg.unreadable_retries + 1} replies`, raw };
  }
}
