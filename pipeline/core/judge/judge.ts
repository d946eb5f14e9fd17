/**
 * The judge: is this answer right? One module for every use: `generate` (the judge in the
 * loop), `validate --judge`, `check`, and what comes (synthesis, curation).
 *
 *   const judge = openJudge(config, { env, scrubber });  // the config's validation.judge
 *   const j = await judge.grade({ question, gold: ['Paris', 'Lutetia'], answer, rubric });
 *   j.verdict;  // 'correct' | 'incorrect' | 'not_attempted' | 'unjudged', with step, reasoning…
 *   await judge.close();
 *
 * (`createJudge(settings)` takes settings made otherwise: settings.ts.) Every use gets the one
 * client (client.ts): the judge's own endpoint, cache, retries, limits and secret scrubbing.
 *
 * `grade` runs the cascade: the cheap steps first (cascade.ts: exact, normalised, token F1 ≥
 * `f1_threshold`), which only ever accept; then, when none did, the LLM, SimpleQA-style
 * (CORRECT, INCORRECT, NOT_ATTEMPTED); and, when the item has a rubric (rubrics.ts), a score
 * per criterion in one more request. Its result is a `Judgement` (schemas/index.ts), the shape a
 * trajectory records. A judge that cannot be reached, or whose replies stay unreadable, gives
 * `unjudged` with the reason, never a guess and never a throw.
 *
 * `ask(kind, material)` is the level below: one question of a kind (kinds.ts: one prompt per
 * kind) through the one client (client.ts), for questions other than "is this answer right".
 *
 * What the judge reads is data: the answer goes into the prompt as a delimited block it cannot
 * close (prompt.ts), and the verdict is read at one fixed place of the reply, never from a
 * quote of the answer (reply.ts). What a verdict does to a trajectory (the run) or a dataset
 * row (validate) is trajectory.ts's and rows.ts's.
 */
import type { EndpointCounts, Judgement, JudgeStep, JudgeVerdict, RunConfig } from '../../../schemas/index.js';
import type { Scrubber } from '../secrets.js';
import { cheapSteps } from './cascade.js';
import { JudgeClient, type Asked, type Meter } from './client.js';
import { rubricKind, rubricMaterial, VERDICT, verdictMaterial, type QuestionKind } from './kinds.js';
import type { Verdict } from './reply.js';
import { weightedScore, type Criterion } from './rubrics.js';
import { judgeSettings, resolveJudgeKey, type JudgeSettings } from './settings.js';

export { judgeSettings, type JudgeSettings } from './settings.js';
export type { Asked, Meter } from './client.js';

export interface GradeItem {
  readonly question: string;
  /** The gold answer, or its alternatives (any one is right). */
  readonly gold?: string | readonly string[] | undefined;
  readonly answer: string;
  /** Criteria to score the answer against. An item needs a gold answer, a rubric or both. */
  readonly rubric?: readonly Criterion[] | undefined;
}

export interface JudgeStats {
  /** Items graded. */
  judged: number;
  /** Decided by each step (unjudged ones by the step that could not decide). */
  bySteps: Record<string, number>;
  byVerdict: Record<string, number>;
  /** Grading requests sent (retries of one request not counted twice), and answers served from the cache. */
  requests: number;
  cached: number;
  /** What the judge's endpoint answered, by class, and the retries it cost (HTTP requests: every retry counted). */
  endpoint: EndpointCounts;
}

export interface CreateJudgeOptions {
  /** Where the key is read (`api_key_env`). Default process.env. */
  readonly env?: NodeJS.ProcessEnv | undefined;
  /** The caller's secrets, taken out of every reply; the judge's own key always is. */
  readonly scrubber?: Scrubber | undefined;
  /** Where a cache that cannot be opened is said. Default stderr. */
  readonly warn?: ((message: string) => void) | undefined;
}

/** The judge a run config names (`validation.judge`), or undefined when it has none. Throws when its key is not set. */
export function openJudge(config: RunConfig, opts: CreateJudgeOptions = {}): Judge | undefined {
  const settings = judgeSettings(config, { env: opts.env ?? process.env });
  return settings === undefined ? undefined : createJudge(settings, opts);
}

/** A judge with these settings. Throws (MISSING_ENV, naming the field) when its key is not set. */
export function createJudge(settings: JudgeSettings, opts: CreateJudgeOptions = {}): Judge {
  return new Judge(settings, new JudgeClient(settings, { ...opts, apiKey: resolveJudgeKey(settings, opts.env ?? process.env) }));
}

const VERDICTS: Readonly<Record<Verdict, JudgeVerdict>> = { CORRECT: 'correct', INCORRECT: 'incorrect', NOT_ATTEMPTED: 'not_attempted' };
const round4 = (x: number): number => Math.round(x * 1e4) / 1e4;

/** What one step of a grading found: fields of the Judgement, or why it could not decide. */
interface Found {
  readonly step: JudgeStep;
  readonly verdict?: JudgeVerdict | undefined;
  readonly fields: Partial<Judgement>;
  /** The template asked with (`name@hash`), when the LLM was asked. */
  readonly prompt?: string | undefined;
  readonly unjudged?: { readonly error: string; readonly raw?: string | undefined } | undefined;
}

export class Judge {
  readonly settings: JudgeSettings;
  readonly #client: JudgeClient;
  readonly #stats = { judged: 0, bySteps: {} as Record<string, number>, byVerdict: {} as Record<string, number> };

  constructor(settings: JudgeSettings, client: JudgeClient) {
    this.settings = settings;
    this.#client = client;
  }

  /** Set once the judge refused `fail_fast_after` requests in a row (a wrong key or model): the caller should stop, saying this. */
  get fatal(): string | undefined {
    return this.#client.fatal;
  }

  stats(): JudgeStats {
    return { ...structuredClone(this.#stats), ...this.#client.stats, endpoint: this.#client.endpointCounts() };
  }

  /** What the judge's endpoint answered, by class, and the retries it cost: the run's manifest keeps them apart from the agents'. */
  endpointCounts(): EndpointCounts {
    return this.#client.endpointCounts();
  }

  /** Text with the caller's secrets and the judge's key taken out: for what a caller prints of the judge's. */
  scrub(text: string): string {
    return this.#client.scrub(text);
  }

  async close(): Promise<void> {
    await this.#client.close();
  }

  /** One question of a kind about some material (kinds.ts), through the client, the cache and the retries; `meter` is charged for each request sent. */
  ask<T>(kind: QuestionKind<T>, material: Readonly<Record<string, string>>, signal?: AbortSignal, meter?: Meter): Promise<Asked<T>> {
    return this.#client.ask(kind, material, signal, meter);
  }

  /** Is the answer right: the cascade, then the LLM, and the rubric's scores. Never throws for the judge's own failures. */
  async grade(item: GradeItem, signal?: AbortSignal, meter?: Meter): Promise<Judgement> {
    const golds = (typeof item.gold === 'string' ? [item.gold] : (item.gold ?? [])).filter((g) => g.trim() !== '');
    if (golds.length === 0 && item.rubric === undefined) throw new Error('Judge.grade: an item needs a gold answer or a rubric');
    this.#stats.judged++;
    const found: Found[] = [];
    if (golds.length > 0) found.push(await this.#byGold(item.question, golds, item.answer, signal, meter));
    // A rubric is scored unless the gold's verdict could not be had: the item is unjudged either way.
    if (item.rubric !== undefined && found[0]?.unjudged === undefined) found.push(await this.#byRubric(item, item.rubric, golds.length === 0, signal, meter));
    const failed = found.find((f) => f.unjudged !== undefined);
    const prompts = found.flatMap((f) => (f.prompt === undefined ? [] : [f.prompt]));
    const judgement: Judgement = {
      verdict: failed !== undefined ? 'unjudged' : found.find((f) => f.verdict !== undefined)!.verdict!,
      // The step that decided (the gold's when there is one), or the one that could not.
      step: (failed ?? found[0]!).step,
      ...Object.assign({}, ...found.map((f) => f.fields)),
      ...(prompts.length ? { prompt: prompts.join(', ') } : {}),
      ...(failed === undefined ? {} : { error: failed.unjudged!.error, ...(failed.unjudged!.raw === undefined ? {} : { raw: failed.unjudged!.raw }) }),
      judged_at: new Date().toISOString(),
    };
    this.#stats.bySteps[judgement.step] = (this.#stats.bySteps[judgement.step] ?? 0) + 1;
    this.#stats.byVerdict[judgement.verdict] = (this.#stats.byVerdict[judgement.verdict] ?? 0) + 1;
    return judgement;
  }

  /** Against the gold answers: a cheap step that accepts, else the LLM's verdict. */
  async #byGold(question: string, golds: readonly string[], answer: string, signal: AbortSignal | undefined, meter: Meter | undefined): Promise<Found> {
    const cheap = cheapSteps(answer, golds, this.settings.f1_threshold);
    const f1 = round4(cheap.f1);
    if (cheap.step !== undefined) return { step: cheap.step, verdict: 'correct', fields: { f1 } };
    const asked = await this.#client.ask(VERDICT, verdictMaterial(question, golds, answer), signal, meter);
    const base = { step: 'llm', prompt: this.#client.tag(VERDICT) } as const;
    const fields: Partial<Judgement> = { f1, judge_model: this.settings.model };
    if ('error' in asked) return { ...base, fields, unjudged: asked };
    const { verdict, rationale } = asked.value;
    return { ...base, verdict: VERDICTS[verdict], fields: { ...fields, ...(rationale === '' ? {} : { reasoning: rationale }), ...(asked.cached ? { cached: true } : {}) } };
  }

  /** Against the rubric: a score per criterion, weighted; the verdict too when there is no gold answer (`rubric_pass`). */
  async #byRubric(item: GradeItem, criteria: readonly Criterion[], decides: boolean, signal: AbortSignal | undefined, meter: Meter | undefined): Promise<Found> {
    const kind = rubricKind(criteria);
    const asked = await this.#client.ask(kind, rubricMaterial(item.question, item.answer, criteria), signal, meter);
    const base = { step: 'rubric', prompt: this.#client.tag(kind) } as const;
    const fields: Partial<Judgement> = { judge_model: this.settings.model };
    if ('error' in asked) return { ...base, fields, unjudged: asked };
    const score = round4(weightedScore(criteria, asked.value.map((c) => c.score)));
    return {
      ...base,
      verdict: decides ? (score >= this.settings.rubric_pass ? 'correct' : 'incorrect') : undefined,
      fields: { ...fields, criteria: asked.value, rubric_score: score, ...(asked.cached ? { cached: true } : {}) },
    };
  }
}
