/**
 * `trajforge generate`: sampler → rollout → validator → store, with p-queue concurrency,
 * progress, fail-fast on a dead endpoint, and a clean stop on interrupt.
 *
 * Everything that can be checked before a sample runs is checked before the run directory
 * is touched: the config, every question row, the API key, the tool servers. Every record is
 * checked against its schema before it is written, and at the end every sample the invocation
 * planned must have a record: one that has none, or an invocation whose every sample failed,
 * fails the invocation with the main reason.
 */
import { randomUUID } from 'node:crypto';
import { SCHEMA_VERSION, type RunConfig, type RunManifest, type Sample, type Trajectory } from '../../schemas/index.js';
import { fingerprint, fingerprintFields, redactConfig, resolveApiKey, scrubberFor } from '../core/config.js';
import { checkCostBudget, type RunCost } from '../core/cost.js';
import { Agents } from './agents.js';
import { TrajforgeError } from '../errors.js';
import { Executor } from './executor.js';
import { openJudge, type JudgeStats } from '../core/judge/judge.js';
import type { LlmClient } from '../core/llm/llm.js';
import { PACKAGE_VERSION } from '../paths.js';
import type { ProgressSink } from './progress.js';
import { RunLoop } from './run-loop.js';
import type { RunOutcome } from '../core/run-dir/outcome.js';
import { countSamples, sampleQuestions, type BadRow } from './sampler.js';
import type { SharedLimits } from './shared-limits.js';
import { RunStore } from './store.js';
import type { Scrubber, Secret } from '../core/secrets.js';

export { noRolloutFailure, schemaChecked } from './record-check.js';

export interface GenerateOptions {
  readonly config: RunConfig;
  readonly env?: NodeJS.ProcessEnv | undefined;
  /** Aborting stops scheduling, cancels the rollouts in flight (they are redone on resume) and closes the run. */
  readonly signal?: AbortSignal | undefined;
  readonly progress?: ProgressSink | undefined;
  /** Resume a run whose fingerprint fields differ from this config's, recording the change. Default false. */
  readonly allowConfigChange?: boolean | undefined;
  /**
   * Limits shared with every other worker of a queue run (`openSharedLimits`): the model
   * requests pass its gate, and the tool servers that share their rate limits get its `toolEnv`. Default: limits of this process alone.
   */
  readonly sharedLimits?: SharedLimits | undefined;
}

/** What this invocation of `generate` (or `rerun`, or a worker) did, for the summary. A run
 * directory may take several invocations (resumes); "session" means one agent conversation only. */
export interface GenerateSummary extends RunOutcome {
  /** The run's state over all its invocations: latest state per id. */
  readonly counts: RunManifest['counts'];
  /** Samples in the question set; null when reading stdin. */
  readonly total: number | null;
  readonly invocation: {
    readonly accepted: number;
    readonly failed: number;
    readonly byReason: Record<string, number>;
    readonly repairs: Record<string, number>;
    readonly rollbacks: Record<string, number>;
    readonly toolCalls: number;
    readonly tokens: number;
    readonly skippedDone: number;
    /** Samples this invocation set out to roll out (not those skipped as done). */
    readonly planned: number;
    /** Planned samples left without a record: the count and the first few ids. */
    readonly unaccounted: { readonly count: number; readonly first: readonly string[] };
    /** Records that failed their schema and were written as `invalid` failures instead. */
    readonly schemaRejected: number;
    /** `--until-correct`: samples not run (nor planned) because an earlier sample of their question was judged correct. */
    readonly notNeeded: number;
    /** With agents: the sub-agent sessions written, apart from the samples (their tokens, repairs and rollbacks are in the sums above). */
    readonly subAgents: { readonly accepted: number; readonly failed: number; readonly byReason: Record<string, number>; readonly toolCalls: number };
    /** Tool calls served from the result cache, by the agent that made them (`main` without agents). */
    readonly cachedByAgent: Record<string, number>;
  };
  readonly executor: ReturnType<Executor['stats']>;
  readonly llm: ReturnType<LlmClient['stats']>;
  /** The judge in the loop, when the config has one (`validation.judge`). */
  readonly judge?: JudgeStats | undefined;
  /** What the question reader passed over in this invocation (`questions.on_bad_row: skip`, duplicate ids). */
  readonly input?: InputReport | undefined;
  /** What the run spent over all its invocations, priced at `prices` (core/cost.ts). */
  readonly cost?: RunCost | undefined;
  /** Set when `budgets.max_cost_usd` stopped the run (status `interrupted`): what it spent of what. */
  readonly budgetStop?: string | undefined;
}

export interface InputReport {
  /** Rows read (bad and duplicate ones included). */
  readonly rows: number;
  /** Rows skipped as bad, with `questions.on_bad_row: skip`: the count and the first few. */
  readonly badRows: number;
  readonly firstBadRows: readonly BadRow[];
  /** Rows whose id had already been read; the first row with an id wins. */
  readonly duplicates: number;
}

/** What an invocation runs: `generate` and `rerun` differ only in where the samples come from. */
export interface RunPlan extends GenerateOptions {
  /** Samples in the question set, for the progress line; null when unknown. */
  readonly total: number | null;
  /** Opens the run directory, writing nothing the scrubber finds. Called after the tool servers are up, so a dead server leaves nothing behind. */
  openStore(scrubber: Scrubber): Promise<RunStore>;
  /** The samples to roll out; `skipped` counts those passed over because the run holds them. */
  samples(store: RunStore): { samples: AsyncIterable<PlannedSample>; skipped(): number; input?(): InputReport };
  /**
   * Called once a sample's final record is in the store (`written`: false when the store held
   * the id already and wrote nothing), before the invocation goes on: queue mode accepts it in
   * Redis here. A throw stops the invocation as a failed write does.
   */
  settled?(records: readonly Trajectory[], written: boolean): Promise<void>;
  /**
   * Called once if the invocation stops before its samples run out (interrupted, or stopped by a
   * fatal endpoint or judge): the samples in flight get no `settled`, and a caller that feeds
   * `samples` as it goes (synthesize's solvability check) stops waiting for them here.
   */
  readonly onAbort?: (() => void) | undefined;
  /**
   * Samples taken from `samples` ahead of a free slot. Default: as many as are in flight (the
   * sampler reads a file; reading ahead costs nothing). A queue worker takes 1: a sample it
   * holds waiting is a lease another worker could be using.
   */
  readonly readAhead?: number | undefined;
  /** Secrets of this invocation besides the config's (a queue worker's Redis password): scrubbed like them. */
  readonly secrets?: readonly Secret[] | undefined;
}

/**
 * A sample to roll out; `failed`: its last failed attempt (rerun), whose summary seeds the next
 * one; `rejudge`: an `unjudged` record (rerun) whose recorded answer is judged again, with no rollout.
 */
export type PlannedSample = Sample & { readonly failed?: Trajectory | undefined; readonly rejudge?: Trajectory | undefined };

export async function generate(opts: GenerateOptions): Promise<GenerateSummary> {
  const { config } = opts;
  const env = opts.env ?? process.env;
  const questionsPath = config.questions.path;
  if (!questionsPath) throw new TrajforgeError('BAD_CONFIG', 'questions.path: no questions file (set it in the config or pass --questions)', { field: 'questions.path' });
  resolveApiKey(config, env);

  // Reads the rows the run will use once: a broken one stops the run here, before anything
  // is written. Stdin can be read only once, so it goes uncounted.
  const total = questionsPath === '-' ? null : await countSamples({ path: questionsPath, config: config.questions });
  const fields = fingerprintFields(config, env);
  return runPlan({
    ...opts,
    total,
    openStore: (scrubber) =>
      RunStore.open({
        dir: config.output.dir,
        fingerprintFields: fields,
        scrubber,
        allowConfigChange: opts.allowConfigChange,
        config: redactConfig(config, env),
        fresh: () => newManifest(config, env, fields, { path: questionsPath, total }),
      }),
    samples: (store) => {
      const { samples, report } = sampleQuestions({ path: questionsPath, config: config.questions, isDone: (id) => store.isDone(id) });
      return {
        samples,
        skipped: () => report.skippedDone,
        input: () => ({ rows: report.rows, badRows: report.badRows.length, firstBadRows: report.badRows.slice(0, 3), duplicates: report.duplicates }),
      };
    },
  });
}

/** The manifest of a run directory that holds no run yet. */
export function newManifest(config: RunConfig, env: NodeJS.ProcessEnv, fields: Record<string, unknown>, questions: RunManifest['questions'], extra: Partial<RunManifest> = {}): RunManifest {
  const now = new Date().toISOString();
  return {
    schema_version: SCHEMA_VERSION,
    run_id: randomUUID(),
    created_at: now,
    updated_at: now,
    status: 'running',
    trajforge_version: PACKAGE_VERSION,
    node_version: process.version,
    model: config.endpoint.model,
    dialect: config.dialect,
    config: redactConfig(config, env),
    config_fingerprint: fingerprint(fields),
    fingerprint_fields: fields,
    questions,
    counts: { accepted: 0, failed: 0, by_reason: {} },
    sessions: [],
    ...extra,
  };
}

/** Starts the tool servers, opens the run, rolls the samples out (run-loop.ts) and closes everything. */
export async function runPlan(plan: RunPlan): Promise<GenerateSummary> {
  const { config } = plan;
  const env = plan.env ?? process.env;
  const apiKey = resolveApiKey(config, env);
  checkCostBudget(config);
  const scrubber = scrubberFor(config, env).with(plan.secrets ?? []);
  // Before the tool servers start: a judge without its key stops the run here.
  const judge = openJudge(config, { env, scrubber });
  if (config.questions.until_correct && judge === undefined) {
    throw new TrajforgeError('BAD_CONFIG', 'questions.until_correct (--until-correct) needs a judge: set validation.judge (the judge decides what is correct)', { field: 'questions.until_correct' });
  }
  let executor: Executor;
  let store: RunStore;
  try {
    executor = await Executor.start({ servers: config.mcpServers, tools: config.tools, executor: config.executor, env, scrubber, serverEnv: plan.sharedLimits?.serverEnv(config.mcpServers) });
  } catch (err) {
    await judge?.close().catch(() => undefined);
    throw err;
  }
  try {
    // Each agent's tools and prompt, before the run directory is touched: a name clash leaves nothing behind.
    new Agents({ config, executor });
    store = await plan.openStore(scrubber);
  } catch (err) {
    await executor.close();
    await judge?.close().catch(() => undefined);
    throw err;
  }
  // Said at once, before the progress line, and again in the summary.
  for (const n of store.notices) plan.progress?.write(`note: ${n}\n`);
  // After the store: `today: run` is the run's creation date, the same on every resume, so the
  // agents' dialects and prompts are made again with it.
  const agents = new Agents({ config, executor, runCreatedAt: store.manifest.created_at });
  return new RunLoop(plan, { apiKey, judge, executor, agents, store }).run();
}
