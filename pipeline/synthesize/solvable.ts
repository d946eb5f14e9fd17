/**
 * The solvability check: k rollouts of a question through the normal generate path (the run's
 * endpoint, tools, dialect, agents and judge: generate/run.ts `runPlan`), as an ordinary run
 * in `DIR/solve` (trajectories.jsonl, failures.jsonl, manifest.json: training data too). A
 * question's pass rate p is its rollouts judged correct over k; it is kept by the band
 * `min_pass ≤ p ≤ max_pass`, or by learnability 4p(1−p) ≥ `min_learnability`.
 *
 * One generate run goes beside the synthesis run, fed sample by sample (`Channel`); each
 * sample's record comes back through `settled`. Its run directory is resumed like any run: a
 * seed redone after a crash asks for the same question (the same id, the same text) and finds
 * the rollouts already there, read from the files before the run opens them (`prior`),
 * so none is rolled out twice. Rollouts that got no verdict (the endpoint or the judge down:
 * llm_error, unjudged, …) leave the seed unfinished, with the `rerun` command that redoes them.
 */
import { createReadStream, existsSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { CheckResult, Question, RunConfig, Trajectory } from '../../schemas/index.js';
import { fingerprintFields, redactConfig } from '../core/config.js';
import { FAILURES, TRAJECTORIES } from '../core/run-dir/names.js';
import { newManifest, runPlan, type GenerateSummary, type PlannedSample } from '../generate/run.js';
import { RunStore } from '../generate/store.js';
import { Channel } from './channel.js';
import type { CostMeter } from './cost.js';
import { Unfinished } from './unfinished.js';

/** Failure reasons that say the machinery failed, not the model: such a rollout has no verdict. */
const NO_VERDICT = new Set(['llm_error', 'unjudged', 'aborted', 'endpoint_rejected', 'response_too_large', 'lease_lost', 'tool_error']);

/** A sample's outcome: correct, wrong, or no verdict (`reason`), and what its records cost. */
interface Outcome {
  readonly correct: boolean | undefined;
  readonly reason: string | undefined;
  readonly requests: number;
  readonly promptTokens: number;
  readonly completionTokens: number;
}

/** The meta field that names a rollout's seed, so a resumed run reads back only the rollouts of seeds it has not recorded. */
export const SEED_META = 'synthesis_seed';

type Line = Pick<Trajectory, 'id' | 'status' | 'reason' | 'judgement' | 'usage' | 'parent_id' | 'attempt' | 'meta'>;

function outcomeOf(root: Line, records: readonly Line[]): Outcome {
  const sum = (f: (t: Line) => number): number => records.reduce((n, t) => n + (f(t) || 0), 0);
  const cost = { requests: sum((t) => t.usage?.llm_calls), promptTokens: sum((t) => t.usage?.prompt_tokens), completionTokens: sum((t) => t.usage?.completion_tokens) };
  if (root.status === 'ok') return { correct: root.judgement === undefined || root.judgement.verdict === 'correct', reason: undefined, ...cost };
  const reason = root.reason ?? 'unknown';
  return { correct: NO_VERDICT.has(reason) ? undefined : false, reason, ...cost };
}

export interface SolvabilityOptions {
  /** The synthesis run's config: the rollouts use its endpoint, tools, dialect, budgets and judge. */
  readonly config: RunConfig;
  readonly dir: string;
  readonly k: number;
  readonly env: NodeJS.ProcessEnv;
  readonly signal: AbortSignal;
  readonly allowConfigChange?: boolean | undefined;
}

/** The config of the rollouts: the run's, with k samples per question, no fresh attempts (they would change p), in `dir`. */
export function solveConfig(config: RunConfig, dir: string, k: number): RunConfig {
  return {
    ...config,
    output: { ...config.output, dir },
    questions: { ...config.questions, path: undefined, samples: k, until_correct: false, shuffle: false, limit: undefined, shard: undefined },
    retry: { ...config.retry, attempts: 0 },
  };
}

export class Solvability {
  readonly dir: string;
  readonly #k: number;
  readonly #channel = new Channel<PlannedSample>();
  readonly #waiting = new Map<string, { resolve(o: Outcome): void; reject(e: Error): void }>();
  #prior = new Map<string, Outcome>();
  #store: RunStore | undefined;
  #rollouts: Promise<GenerateSummary> | undefined;
  #stopped = false;

  private constructor(dir: string, k: number) {
    this.dir = dir;
    this.#k = k;
  }

  /**
   * Starts the tool servers and opens `dir` (throwing what keeps them from it, before the
   * synthesis run's own directory is touched); then `readPrior`, then rollouts can be asked for.
   */
  static async start(opts: SolvabilityOptions): Promise<Solvability> {
    const s = new Solvability(opts.dir, opts.k);
    const config = solveConfig(opts.config, opts.dir, opts.k);
    const fields = fingerprintFields(config, opts.env);
    let ready!: () => void;
    const opened = new Promise<void>((resolve) => (ready = resolve));
    s.#rollouts = runPlan({
      config,
      env: opts.env,
      signal: opts.signal,
      allowConfigChange: opts.allowConfigChange,
      total: null,
      openStore: (scrubber) =>
        RunStore.open({ dir: opts.dir, fingerprintFields: fields, scrubber, allowConfigChange: opts.allowConfigChange, config: redactConfig(config, opts.env), fresh: () => newManifest(config, opts.env, fields, { path: null, total: null }) }),
      samples: (store) => {
        s.#store = store;
        ready();
        return { samples: s.#channel, skipped: () => 0 };
      },
      settled: async (records) => s.#settle(records.at(-1)!.id, outcomeOf(records.at(-1)!, records)),
      onAbort: () => s.#stop(),
    });
    // Tool servers that do not start, or a run directory that cannot be opened, fail the synthesis run here.
    const ended = s.#rollouts.then(() => Promise.reject(new Error('the solvability rollouts ended before they opened their run')));
    // Only the race reads it: once the run is open, its end is no error.
    ended.catch(() => undefined);
    await Promise.race([opened, ended]);
    return s;
  }

  /** Reads the rollouts on record whose seed still needs them (`wanted`: it has no line yet), so none is rolled out again. */
  async readPrior(wanted: (seed: string) => boolean): Promise<void> {
    this.#prior = await readPrior(this.dir, wanted);
  }

  /** The question's k rollouts (those on record, and the rest rolled out now) and its pass rate; their cost is charged to `meter`. Throws Unfinished. */
  async rate(q: Question, meter: CostMeter): Promise<{ passRate: number; correct: number }> {
    const ids = Array.from({ length: this.#k }, (_, i) => `${q.id}#${i}`);
    const outcomes = await Promise.all(ids.map((id, i) => this.#outcome(id, i, q)));
    for (const o of outcomes) meter.add(o.requests, o.promptTokens, o.completionTokens);
    const missing = outcomes.find((o) => o.correct === undefined);
    if (missing !== undefined) {
      throw new Unfinished(`solvable: a rollout of ${q.id} got no verdict (${missing.reason}); \`trajforge rerun ${this.dir} --reason ${missing.reason}\` redoes it, then run the same command again`);
    }
    const correct = outcomes.filter((o) => o.correct).length;
    return { passRate: correct / this.#k, correct };
  }

  #outcome(id: string, index: number, question: Question): Promise<Outcome> {
    if (this.#stopped) return Promise.reject(new Unfinished('solvable: the rollouts stopped'));
    if (this.#store!.isDone(id)) {
      const known = this.#prior.get(id);
      if (known !== undefined) return Promise.resolve(known);
    }
    return new Promise<Outcome>((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject });
      this.#channel.push({ sample_id: id, sample_index: index, question });
    });
  }

  #settle(id: string, o: Outcome): void {
    const w = this.#waiting.get(id);
    this.#waiting.delete(id);
    w?.resolve(o);
  }

  /** The rollouts stopped early: nobody waits for what it will not roll out. */
  #stop(): void {
    this.#stopped = true;
    for (const w of this.#waiting.values()) w.reject(new Unfinished('solvable: the rollouts stopped'));
    this.#waiting.clear();
    if (!this.#channel.ended) this.#channel.end();
  }

  /** Ends the rollouts: their summary (a fatal endpoint or judge is in `fatal`). */
  async close(): Promise<GenerateSummary> {
    if (!this.#channel.ended) this.#channel.end();
    return this.#rollouts!;
  }

  /** Keep by the band, or by learnability when `min_learnability` is set. */
  static verdict(passRate: number, correct: number, k: number, keep: { min_pass: number; max_pass: number; min_learnability?: number | undefined }): CheckResult {
    const p = `${correct} of ${k} rollouts judged correct (p = ${passRate.toFixed(2)})`;
    if (keep.min_learnability !== undefined) {
      const l = 4 * passRate * (1 - passRate);
      return { verdict: l >= keep.min_learnability ? 'pass' : 'fail', reason: `${p}; learnability 4p(1−p) = ${l.toFixed(2)} ${l >= keep.min_learnability ? '≥' : '<'} ${keep.min_learnability}` };
    }
    const inBand = passRate >= keep.min_pass && passRate <= keep.max_pass;
    return { verdict: inBand ? 'pass' : 'fail', reason: `${p}; ${inBand ? 'in' : 'outside'} the band [${keep.min_pass}, ${keep.max_pass}]${inBand ? '' : passRate > keep.max_pass ? ': too easy' : ': too hard'}` };
  }
}

/**
 * The outcomes already in the rollouts' run, of seeds that still need them: the latest state
 * of each sample id (an accepted record wins; else the latest attempt). A last line cut short
 * by a crash is skipped (the store moves it aside, and the sample is rolled out again).
 */
async function readPrior(dir: string, wanted: (seed: string) => boolean): Promise<Map<string, Outcome>> {
  const out = new Map<string, Outcome & { attempt: number; accepted: boolean }>();
  for (const file of [join(dir, TRAJECTORIES), join(dir, FAILURES)]) {
    if (!existsSync(file)) continue;
    for await (const text of createInterface({ input: createReadStream(file, 'utf8'), crlfDelay: Infinity })) {
      let t: Line;
      try {
        t = JSON.parse(text) as Line;
      } catch {
        continue;
      }
      const seed = t.meta?.[SEED_META];
      if (typeof t.id !== 'string' || t.parent_id !== undefined || typeof seed !== 'string' || !wanted(seed)) continue;
      const before = out.get(t.id);
      const attempt = typeof t.attempt === 'number' ? t.attempt : 0;
      const accepted = t.status === 'ok';
      if (before !== undefined && (before.accepted || (!accepted && attempt < before.attempt))) continue;
      // Sub-agent sessions' costs are not in the root's usage; a resumed seed counts its roots' (a small undercount with agents).
      out.set(t.id, { ...outcomeOf(t, [t]), attempt, accepted });
    }
  }
  return out;
}
