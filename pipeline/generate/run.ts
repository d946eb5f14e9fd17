/**
 * `trajforge generate`: sampler → rollout → validator → store, with p-queue concurrency,
 * progress, fail-fast on a dead endpoint, and a clean stop on interrupt.
 *
 * Everything that can be checked before a sample runs is checked before the run directory
 * is touched: the config, every question row, the API key, the tool servers.
 */
import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import PQueue from 'p-queue';
import { SCHEMA_VERSION, type RunConfig, type RunManifest, type Sample, type Trajectory } from '../../schemas/index.js';
import { fingerprint, fingerprintFields, redactConfig, resolveApiKey } from '../config.js';
import { getDialect } from '../dialects/index.js';
import { summariseFailure } from './experience.js';
import { TrajforgeError } from '../errors.js';
import { Executor } from './executor.js';
import { LlmClient, LlmError } from './llm.js';
import { PACKAGE_VERSION } from '../paths.js';
import { Progress, type ProgressSink } from './progress.js';
import { rollout } from './rollout.js';
import { countSamples, sampleQuestions, type BadRow } from './sampler.js';
import { RunStore } from './store.js';

export interface GenerateOptions {
  readonly config: RunConfig;
  readonly env?: NodeJS.ProcessEnv | undefined;
  /** Aborting stops scheduling, cancels the rollouts in flight (they are redone on resume) and closes the run. */
  readonly signal?: AbortSignal | undefined;
  readonly progress?: ProgressSink | undefined;
  /** Resume a run whose fingerprint fields differ from this config's, recording the change. Default false. */
  readonly allowConfigChange?: boolean | undefined;
}

/** What this session did, for the summary. */
export interface GenerateSummary {
  readonly dir: string;
  readonly runId: string;
  readonly resumed: boolean;
  readonly status: RunManifest['status'];
  /** The run's state over all sessions: latest state per id. */
  readonly counts: RunManifest['counts'];
  /** Samples in the question set; null when reading stdin. */
  readonly total: number | null;
  readonly session: {
    readonly accepted: number;
    readonly failed: number;
    readonly byReason: Record<string, number>;
    readonly repairs: Record<string, number>;
    readonly rollbacks: Record<string, number>;
    readonly toolCalls: number;
    readonly tokens: number;
    readonly skippedDone: number;
  };
  readonly executor: ReturnType<Executor['stats']>;
  readonly llm: ReturnType<LlmClient['stats']>;
  /** What the question reader passed over in this session (`questions.on_bad_row: skip`, duplicate ids). */
  readonly input?: InputReport | undefined;
  /**
   * Set when the run stopped early because of the endpoint: it refused the requests
   * (401, 403, 404, 400), or every request of `fail_fast_after` samples in a row failed.
   */
  readonly fatal?: string | undefined;
  /** What opening the run repaired or found (a cut last line moved aside, a config change…). */
  readonly notices: readonly string[];
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

const MANIFEST_EVERY_MS = 30_000;

/** What a session runs: `generate` and `rerun` differ only in where the samples come from. */
export interface SessionPlan extends GenerateOptions {
  /** Samples in the question set, for the progress line; null when unknown. */
  readonly total: number | null;
  /** Opens the run directory. Called after the tool servers are up, so a dead server leaves nothing behind. */
  openStore(): Promise<RunStore>;
  /** The samples to roll out; `skipped` counts those passed over because the run holds them. */
  samples(store: RunStore): { samples: AsyncIterable<PlannedSample>; skipped(): number; input?(): InputReport };
}

/** A sample to roll out; `failed`: its last failed attempt (rerun), whose summary seeds the next one. */
export type PlannedSample = Sample & { readonly failed?: Trajectory | undefined };

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
  return runSession({
    ...opts,
    total,
    openStore: () =>
      RunStore.open({
        dir: config.output.dir,
        fingerprintFields: fields,
        allowConfigChange: opts.allowConfigChange,
        config: redactConfig(config, env),
        fresh: (): RunManifest => {
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
            questions: { path: questionsPath, total },
            counts: { accepted: 0, failed: 0, by_reason: {} },
            sessions: [],
          };
        },
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

/** Starts the tool servers, opens the run, rolls the samples out and closes everything. */
export async function runSession(plan: SessionPlan): Promise<GenerateSummary> {
  const { config } = plan;
  const env = plan.env ?? process.env;
  const dialect = getDialect(config.dialect);
  const apiKey = resolveApiKey(config, env);
  const executor = await Executor.start({ servers: config.mcpServers, tools: config.tools, executor: config.executor, env });
  let store: RunStore;
  try {
    store = await plan.openStore();
  } catch (err) {
    await executor.close();
    throw err;
  }

  // Said at once, before the progress line, and again in the summary.
  for (const n of store.notices) plan.progress?.write(`note: ${n}\n`);
  const runId = store.manifest.run_id;
  const llm = new LlmClient(config.endpoint, { apiKey, maxConcurrency: config.concurrency });
  const tools = executor.tools();
  const systemPrompt = [dialect.systemPrompt(tools), config.instructions].filter(Boolean).join('\n\n');
  const deps = { llm, executor, dialect, config, systemPrompt, runId, tools };
  const abort = new AbortController();
  // Every request in flight listens on this one signal.
  setMaxListeners(0, abort.signal);
  const onOuterAbort = (): void => abort.abort();
  plan.signal?.addEventListener('abort', onOuterAbort, { once: true });

  const session = {
    accepted: 0,
    failed: 0,
    byReason: {} as Record<string, number>,
    repairs: {} as Record<string, number>,
    rollbacks: {} as Record<string, number>,
    toolCalls: 0,
    tokens: 0,
    skippedDone: 0,
  };
  const bump = (m: Record<string, number>, k: string): void => {
    m[k] = (m[k] ?? 0) + 1;
  };
  const progress = new Progress(plan.progress, plan.total, store.accepted.size + store.failed.size);
  if (config.executor.cache) progress.showCache(() => ({ hits: executor.stats().cacheHits, misses: executor.stats().cacheMisses }));
  let fatal: string | undefined;
  let fatalStreak = 0;
  /** Samples in a row whose requests kept failing (`llm_error`): the endpoint is down. */
  let failingStreak = 0;
  let crash: unknown;
  let manifestWritten = Date.now();

  /** `last`: no further attempt follows in this session (progress counts samples, not attempts). */
  const record = async (traj: Trajectory, last = true): Promise<void> => {
    const written = await store.append(traj);
    if (!written) return;
    if (traj.status === 'ok') session.accepted++;
    else {
      session.failed++;
      bump(session.byReason, traj.reason ?? 'unknown');
    }
    for (const r of traj.repairs) bump(session.repairs, r.kind);
    for (const r of traj.rollbacks) bump(session.rollbacks, r.condition);
    session.toolCalls += traj.total_tool_calls;
    session.tokens += traj.usage.total_tokens;
    if (last) progress.done(traj.status === 'ok', traj.usage.total_tokens);
    // The manifest's counts follow the run, so a long run can be watched from outside.
    if (Date.now() - manifestWritten > MANIFEST_EVERY_MS) {
      manifestWritten = Date.now();
      store.writeManifest();
    }
  };

  const runOne = async (sample: PlannedSample): Promise<void> => {
    if (abort.signal.aborted) return;
    let attempt = (store.failed.get(sample.sample_id)?.attempt ?? -1) + 1;
    const lastAttempt = attempt + config.retry.attempts;
    try {
      const seed = sample.failed !== undefined && config.retry.experience ? await summariseFailure(sample.failed, deps, abort.signal) : undefined;
      let traj = await rollout(sample, attempt, deps, abort.signal, seed);
      // Failure-experience retry: a fresh attempt, seeded with what the failed one learned.
      while (traj.status === 'failed' && attempt < lastAttempt && config.retry.on.includes(traj.reason!) && !abort.signal.aborted) {
        await record(traj, false);
        const experience = config.retry.experience ? await summariseFailure(traj, deps, abort.signal) : undefined;
        traj = await rollout(sample, ++attempt, deps, abort.signal, experience);
      }
      fatalStreak = 0;
      if (traj.reason !== 'llm_error') failingStreak = 0;
      else if (++failingStreak >= config.endpoint.fail_fast_after && fatal === undefined) {
        // A dead endpoint would otherwise turn every remaining question into a failure record.
        fatal =
          `the model endpoint kept failing: ${failingStreak} samples in a row failed after ${config.endpoint.max_retries} retries each; last: ${traj.error ?? 'unknown'}. ` +
          `Run the same command again when it is back; \`trajforge rerun ${store.dir} --reason llm_error\` retries the samples that failed`;
        abort.abort();
      }
      await record(traj);
    } catch (err) {
      if (err instanceof LlmError && err.kind === 'aborted') return;
      if (err instanceof LlmError && err.kind === 'fatal') {
        // The endpoint refuses the requests themselves: stop before burning the queue.
        if (++fatalStreak >= config.endpoint.fail_fast_after && fatal === undefined) {
          fatal = `the model endpoint refused the requests: ${err.message}`;
          abort.abort();
        }
        return;
      }
      // A failed write, or a bug: stop the run rather than lose records.
      crash ??= err;
      abort.abort();
    }
  };

  const queue = new PQueue({ concurrency: config.concurrency });
  const { samples, skipped, input } = plan.samples(store);
  let status: RunManifest['status'] = 'failed';
  progress.start();
  try {
    for await (const sample of samples) {
      if (abort.signal.aborted) break;
      // Backpressure: the sampler streams, and the queue holds a bounded number of samples.
      await queue.onSizeLessThan(config.concurrency);
      if (abort.signal.aborted) break;
      void queue.add(() => runOne(sample));
    }
    await queue.onIdle();
    session.skippedDone = skipped();
    if (crash) throw crash;
    status = fatal !== undefined ? 'failed' : abort.signal.aborted ? 'interrupted' : 'completed';
  } finally {
    queue.clear();
    await queue.onIdle();
    progress.stop();
    plan.signal?.removeEventListener('abort', onOuterAbort);
    await executor.close();
    // A failed close (the disk still full) must not hide the error that stopped the run.
    await store.close(status, fatal ?? status).catch((err: unknown) => {
      if (crash === undefined) throw err;
    });
  }
  return {
    dir: store.dir,
    runId,
    resumed: store.resumed,
    status,
    counts: store.counts(),
    total: plan.total,
    session,
    executor: executor.stats(),
    llm: llm.stats(),
    input: input?.(),
    fatal,
    notices: store.notices,
  };
}
