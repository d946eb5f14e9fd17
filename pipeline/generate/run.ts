/**
 * `trajforge generate`: sampler → rollout → validator → store, with p-queue concurrency,
 * progress, fail-fast on a dead endpoint, and a clean stop on interrupt.
 *
 * Everything that can be checked before a sample runs is checked before the run directory
 * is touched: the config, every question row, the API key, the tool servers. Every record is
 * checked against its schema before it is written, and at the end every sample the session
 * planned must have a record: one that has none, or a session whose every sample failed,
 * fails the session with the main reason.
 */
import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import PQueue from 'p-queue';
import { FailureRecord, SCHEMA_VERSION, Trajectory, type RunConfig, type RunManifest, type Sample } from '../../schemas/index.js';
import { fingerprint, fingerprintFields, redactConfig, resolveApiKey, scrubberFor } from '../core/config.js';
import { Agents, assemble, type Family } from './agents.js';
import { summariseFailure } from './experience.js';
import { TrajforgeError } from '../errors.js';
import { Executor } from './executor.js';
import { openJudge, type JudgeStats } from '../core/judge/judge.js';
import { judgeTrajectory } from '../core/judge/trajectory.js';
import { LlmClient, LlmError } from '../core/llm/llm.js';
import { PACKAGE_VERSION } from '../paths.js';
import { Progress, type ProgressSink } from './progress.js';
import { countSamples, sampleQuestions, type BadRow } from './sampler.js';
import type { SharedLimits } from './shared-limits.js';
import { RunStore } from './store.js';
import type { Scrubber } from '../core/secrets.js';

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
   * requests pass its gate, and the tool servers get its `toolEnv`. Default: limits of this process alone.
   */
  readonly sharedLimits?: SharedLimits | undefined;
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
    /** Samples this session set out to roll out (not those skipped as done). */
    readonly planned: number;
    /** Planned samples left without a record: the count and the first few ids. */
    readonly unaccounted: { readonly count: number; readonly first: readonly string[] };
    /** Records that failed their schema and were written as `invalid` failures instead. */
    readonly schemaRejected: number;
    /** `--until-correct`: samples not run (nor planned) because an earlier sample of their question was judged correct. */
    readonly notNeeded: number;
    /** With agents: the sub-agent sessions written, apart from the samples (their tokens, repairs and rollbacks are in the sums above). */
    readonly subAgents: { readonly accepted: number; readonly failed: number; readonly byReason: Record<string, number>; readonly toolCalls: number };
  };
  readonly executor: ReturnType<Executor['stats']>;
  readonly llm: ReturnType<LlmClient['stats']>;
  /** The judge in the loop, when the config has one (`validation.judge`). */
  readonly judge?: JudgeStats | undefined;
  /** What the question reader passed over in this session (`questions.on_bad_row: skip`, duplicate ids). */
  readonly input?: InputReport | undefined;
  /**
   * Set when the run stopped early because of the endpoint: it refused the requests
   * (401, 403, 404, 400), or every request of `fail_fast_after` samples in a row failed.
   */
  readonly fatal?: string | undefined;
  /**
   * Set when the session ran to its end but failed as a whole: samples it planned have no
   * record, or every sample failed. Says why, with the main reason and the server's message.
   */
  readonly failure?: string | undefined;
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

/** With agents, the default `samples_in_flight` per model request slot (`concurrency`); documented with that option. */
const AGENT_FAMILIES_PER_REQUEST = 4;

/** What a session runs: `generate` and `rerun` differ only in where the samples come from. */
export interface SessionPlan extends GenerateOptions {
  /** Samples in the question set, for the progress line; null when unknown. */
  readonly total: number | null;
  /** Opens the run directory, writing nothing the scrubber finds. Called after the tool servers are up, so a dead server leaves nothing behind. */
  openStore(scrubber: Scrubber): Promise<RunStore>;
  /** The samples to roll out; `skipped` counts those passed over because the run holds them. */
  samples(store: RunStore): { samples: AsyncIterable<PlannedSample>; skipped(): number; input?(): InputReport };
  /**
   * Called once a sample's final record is in the store (`written`: false when the store held
   * the id already and wrote nothing), before the session goes on: queue mode accepts it in
   * Redis here. A throw stops the session as a failed write does.
   */
  settled?(records: readonly Trajectory[], written: boolean): Promise<void>;
  /**
   * Called once if the session stops before its samples run out (interrupted, or stopped by a
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
}

/**
 * A sample to roll out; `failed`: its last failed attempt (rerun), whose summary seeds the next
 * one; `rejudge`: an `unjudged` record (rerun) whose recorded answer is judged again, with no rollout.
 */
export type PlannedSample = Sample & { readonly failed?: Trajectory | undefined; readonly rejudge?: Trajectory | undefined };

/** With `--until-correct`, a question's samples run as one unit, in order; otherwise each sample is one. */
async function* units(samples: AsyncIterable<PlannedSample>, byQuestion: boolean): AsyncGenerator<PlannedSample[]> {
  if (!byQuestion) {
    // At once, not when the next sample comes: a queue's last sample has no next one until the run is done.
    for await (const s of samples) yield [s];
    return;
  }
  let unit: PlannedSample[] = [];
  for await (const s of samples) {
    // The sampler yields a question's samples one after another.
    if (unit.length > 0 && unit[0]!.question.id !== s.question.id) {
      yield unit;
      unit = [];
    }
    unit.push(s);
  }
  if (unit.length > 0) yield unit;
}

/** How many planned ids without a record are named in the summary and the error. */
const UNACCOUNTED_SHOWN = 5;

/** A zod issue as `path: message`. */
function schemaProblem(issues: readonly { path: readonly PropertyKey[]; message: string }[]): string {
  const first = issues[0];
  if (first === undefined) return 'does not match its schema';
  const path = first.path.map(String).join('.') || '(root)';
  return `${path}: ${first.message}${issues.length > 1 ? ` (and ${issues.length - 1} more)` : ''}`;
}

/**
 * A failure record with nothing rolled out (no turn, call, usage or time): what is left of a
 * record that fails its schema, or a sample a queue gave up on. `fields` say which sample and why.
 */
export function noRolloutFailure(
  fields: Pick<Trajectory, 'id' | 'question_id' | 'question' | 'gold_answer' | 'meta' | 'dialect' | 'model' | 'reason' | 'error' | 'attempt' | 'run_id'> & { validation?: Trajectory['validation'] },
): Trajectory {
  const now = new Date().toISOString();
  const { validation = { passed: false, issues: [] }, ...which } = fields;
  return {
    schema_version: SCHEMA_VERSION,
    ...which,
    status: 'failed',
    final_answer: '',
    interleaved_text: '',
    messages: [],
    tool_calls: [],
    total_tool_calls: 0,
    tools_used: [],
    cited_ids: [],
    unresolved_cited_ids: [],
    turns: 0,
    repairs: [],
    rollbacks: [],
    validation,
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: 0, estimated: true },
    timing: { started_at: now, finished_at: now, duration_ms: 0, llm_ms: 0, tool_ms: 0 },
  };
}

/**
 * The record as it may be written: one that passes its schema (Trajectory, and FailureRecord
 * for a failure) as it is; otherwise the sample becomes a failure with reason `invalid` and
 * the schema's message, and if even that does not pass, a failure that keeps only the fields
 * trajforge itself sets. A record that fails its schema never reaches the run directory.
 */
export function schemaChecked(traj: Trajectory): { record: Trajectory; rejected: boolean } {
  const check = (t: Trajectory) => (t.status === 'ok' ? Trajectory : FailureRecord).safeParse(t);
  const first = check(traj);
  if (first.success) return { record: traj, rejected: false };
  const error = `the record failed the ${traj.status === 'ok' ? 'Trajectory' : 'FailureRecord'} schema: ${schemaProblem(first.error.issues)}`;
  const invalid: Trajectory = { ...traj, status: 'failed', reason: 'invalid', error: traj.error === undefined ? error : `${error}; before: ${traj.error}` };
  if (check(invalid).success) return { record: invalid, rejected: true };
  const bare = noRolloutFailure({
    id: String(traj.id),
    question_id: String(traj.question_id),
    question: String(traj.question),
    dialect: traj.dialect,
    model: String(traj.model),
    reason: 'invalid',
    error,
    validation: { passed: false, issues: [{ rule: 'schema', severity: 'error', message: error }] },
    attempt: Number.isSafeInteger(traj.attempt) && traj.attempt >= 0 ? traj.attempt : 0,
    run_id: String(traj.run_id),
  });
  const last = check(bare);
  if (!last.success) throw new Error(`a failure record trajforge built fails its own schema: ${schemaProblem(last.error.issues)}`);
  return { record: bare, rejected: true };
}

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

/** Starts the tool servers, opens the run, rolls the samples out and closes everything. */
export async function runSession(plan: SessionPlan): Promise<GenerateSummary> {
  const { config } = plan;
  const env = plan.env ?? process.env;
  const apiKey = resolveApiKey(config, env);
  const scrubber = scrubberFor(config, env);
  // Before the tool servers start: a judge without its key stops the run here.
  const judge = openJudge(config, { env, scrubber });
  const untilCorrect = config.questions.until_correct && config.questions.samples > 1;
  if (config.questions.until_correct && judge === undefined) {
    throw new TrajforgeError('BAD_CONFIG', 'questions.until_correct (--until-correct) needs a judge: set validation.judge (the judge decides what is correct)', { field: 'questions.until_correct' });
  }
  let executor: Executor;
  let store: RunStore;
  let agents: Agents;
  try {
    executor = await Executor.start({ servers: config.mcpServers, tools: config.tools, executor: config.executor, env, scrubber, serverEnv: plan.sharedLimits?.toolEnv });
  } catch (err) {
    await judge?.close().catch(() => undefined);
    throw err;
  }
  try {
    // Each agent's tools and prompt, before the run directory is touched: a name clash leaves nothing behind.
    agents = new Agents({ config, executor });
    store = await plan.openStore(scrubber);
  } catch (err) {
    await executor.close();
    await judge?.close().catch(() => undefined);
    throw err;
  }

  // Said at once, before the progress line, and again in the summary.
  for (const n of store.notices) plan.progress?.write(`note: ${n}\n`);
  const runId = store.manifest.run_id;
  // After the store: `today: run` is the run's creation date, the same on every resume, so the
  // agents' dialects and prompts are made again with it.
  agents = new Agents({ config, executor, runCreatedAt: store.manifest.created_at });
  // `concurrency` is model requests in flight, whichever session of whichever family sends them.
  const llm = new LlmClient(config.endpoint, { apiKey, maxConcurrency: config.concurrency, gate: plan.sharedLimits?.requestGate(config.concurrency) });
  const summaryDeps = { llm, dialect: agents.main.dialect, config: agents.main.config, tools: agents.main.tools };
  const abort = new AbortController();
  // Every request in flight listens on this one signal.
  setMaxListeners(0, abort.signal);
  if (plan.onAbort) abort.signal.addEventListener('abort', plan.onAbort, { once: true });
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
    planned: 0,
    unaccounted: { count: 0, first: [] as string[] },
    schemaRejected: 0,
    notNeeded: 0,
    subAgents: { accepted: 0, failed: 0, byReason: {} as Record<string, number>, toolCalls: 0 },
  };
  /** The first error message of each failure reason in this session: the main reason is reported with one. */
  const firstError = new Map<string, string>();
  /** Planned samples whose final record is not written yet: in flight, or refused and pending. */
  const outstanding = new Set<string>();
  const bump = (m: Record<string, number>, k: string): void => {
    m[k] = (m[k] ?? 0) + 1;
  };
  const progress = new Progress(plan.progress, plan.total, store.accepted.size + store.failed.size);
  if (config.executor.cache) progress.showCache(() => ({ hits: executor.stats().cacheHits, misses: executor.stats().cacheMisses }));
  let fatal: string | undefined;
  /** Refusals (`endpoint_rejected`) in a row; fail_fast_after of them stop the run. */
  let fatalStreak = 0;
  /**
   * The refusals of the current streak, not yet written. A success that breaks the streak, or
   * the end of the run, writes them as failures; a streak that reaches fail_fast_after stops
   * the run and leaves them unwritten, so the same command redoes them once the endpoint is fixed.
   */
  let refused: Family[] = [];
  /** Samples in a row whose requests kept failing (`llm_error`): the endpoint is down. */
  let failingStreak = 0;
  let crash: unknown;
  let manifestWritten = Date.now();

  /** `last`: no further attempt follows in this session (progress counts samples, not attempts). */
  const record = async (family: Family, last = true): Promise<void> => {
    const checked = family.records.map(schemaChecked);
    const rejected = checked.filter((c) => c.rejected).length;
    session.schemaRejected += rejected;
    // A session made invalid by its schema fails the sessions below it, as any failure does.
    const records = rejected > 0 ? assemble(checked.map((c) => c.record)).records : checked.map((c) => c.record);
    const traj = records.at(-1)!;
    const written = await store.appendFamily(records);
    if (last) await plan.settled?.(records, written);
    // An id the run had already accepted is accounted for by that record.
    if (last) outstanding.delete(traj.id);
    if (!written) return;
    if (traj.status === 'ok') session.accepted++;
    else {
      session.failed++;
      bump(session.byReason, traj.reason ?? 'unknown');
      if (last && !firstError.has(traj.reason ?? 'unknown')) firstError.set(traj.reason ?? 'unknown', traj.error ?? '');
    }
    let tokens = 0;
    for (const t of records) {
      for (const r of t.repairs) bump(session.repairs, r.kind);
      for (const r of t.rollbacks) bump(session.rollbacks, r.condition);
      tokens += t.usage.total_tokens;
      if (t === traj) continue;
      // Each session's usage is its own: a family's tokens are the sum of its sessions'.
      if (t.status === 'ok') session.subAgents.accepted++;
      else {
        session.subAgents.failed++;
        bump(session.subAgents.byReason, t.reason ?? 'unknown');
      }
      session.subAgents.toolCalls += t.total_tool_calls;
    }
    session.toolCalls += traj.total_tool_calls;
    session.tokens += tokens;
    if (last) progress.done(traj.status === 'ok', tokens);
    // The manifest's counts follow the run, so a long run can be watched from outside.
    if (Date.now() - manifestWritten > MANIFEST_EVERY_MS) {
      manifestWritten = Date.now();
      store.writeManifest();
    }
  };

  const flushRefused = async (): Promise<void> => {
    const batch = refused;
    refused = [];
    for (const family of batch) await record(family);
  };

  /** Rollouts started this session (a rerun of unjudged samples only judges again). */
  let rollouts = 0;
  /**
   * A family's rollout, its root (the main agent's session, the one with the gold answer) judged
   * when the run has a judge, before the record is written. A wrong answer fails the family as
   * any failed root does; an unjudged one fails nothing below it (those sessions did their work).
   */
  const rolledOut = async (sample: PlannedSample, attempt: number, experience: Awaited<ReturnType<typeof summariseFailure>> | undefined): Promise<Family> => {
    rollouts++;
    const family = await agents.rollout(sample, attempt, { llm, runId, signal: abort.signal }, experience);
    if (!judge) return family;
    const root = await judgeTrajectory(judge, family.root, sample.sample_index, config, abort.signal);
    const records = [...family.records.slice(0, -1), root];
    return root.status === 'failed' && root.reason !== 'unjudged' ? assemble(records) : { root, records };
  };

  const runOne = async (sample: PlannedSample): Promise<void> => {
    if (abort.signal.aborted) return;
    let attempt = (store.failed.get(sample.sample_id)?.attempt ?? -1) + 1;
    const lastAttempt = attempt + config.retry.attempts;
    try {
      let family: Family;
      if (sample.rejudge !== undefined && judge) {
        // The rollout is on record; only its verdict is missing. (Its sub-agent sessions are on record too, as they were.)
        const root = await judgeTrajectory(judge, sample.rejudge, sample.sample_index, config, abort.signal);
        family = { root, records: [root] };
      } else {
        const seed = sample.failed !== undefined && config.retry.experience ? await summariseFailure(sample.failed, summaryDeps, abort.signal) : undefined;
        family = await rolledOut(sample, attempt, seed);
      }
      // Failure-experience retry: a fresh attempt of the whole family, seeded with what the failed root learned.
      while (family.root.status === 'failed' && attempt < lastAttempt && config.retry.on.includes(family.root.reason!) && !abort.signal.aborted) {
        await record(family, false);
        const experience = config.retry.experience ? await summariseFailure(family.root, summaryDeps, abort.signal) : undefined;
        family = await rolledOut(sample, ++attempt, experience);
      }
      const traj = family.root;
      if (traj.reason === 'endpoint_rejected') {
        // The endpoint refused this sample's request: one bad prompt, or the first of many.
        refused.push(family);
        if (++fatalStreak >= config.endpoint.fail_fast_after && fatal === undefined) {
          fatal = `the model endpoint refused the requests: ${traj.error ?? 'unknown'}`;
          abort.abort();
        }
        if (fatal !== undefined) refused = [];
        return;
      }
      fatalStreak = 0;
      // The endpoint served this one: the refusals before it were about their own prompts.
      if (refused.length > 0) await flushRefused();
      if (traj.reason !== 'llm_error') failingStreak = 0;
      else if (++failingStreak >= config.endpoint.fail_fast_after && fatal === undefined) {
        // A dead endpoint would otherwise turn every remaining question into a failure record.
        fatal =
          `the model endpoint kept failing: ${failingStreak} samples in a row failed after ${config.endpoint.max_retries} retries each; last: ${traj.error ?? 'unknown'}. ` +
          `Run the same command again when it is back; \`trajforge rerun ${store.dir} --reason llm_error\` retries the samples that failed`;
        abort.abort();
      }
      await record(family);
      if (judge?.fatal !== undefined && fatal === undefined) {
        // A judge that refuses every request (a wrong key or model) would leave every sample unjudged.
        fatal = `${judge.fatal}. The samples are kept, unjudged: fix validation.judge and run \`trajforge rerun ${store.dir} --reason unjudged\``;
        abort.abort();
      }
    } catch (err) {
      if (err instanceof LlmError && err.kind === 'aborted') return;
      // A failed write, or a bug: stop the run rather than lose records.
      crash ??= err;
      abort.abort();
    }
  };

  /** Why a session that ran to its end failed as a whole, if it did. */
  const accountingProblem = (): string | undefined => {
    const { planned, accepted, failed, unaccounted } = session;
    if (unaccounted.count > 0) {
      const more = unaccounted.count > unaccounted.first.length ? ', …' : '';
      return `${unaccounted.count} of the ${planned} samples this session planned have no record (${unaccounted.first.join(', ')}${more}); accepted ${accepted} + failed ${failed} ≠ planned ${planned}. Run the same command again to redo them`;
    }
    // A session that only judged recorded answers again found them wrong: a verdict, not a broken run.
    if (planned === 0 || accepted > 0 || rollouts === 0) return undefined;
    const [main, count] = Object.entries(session.byReason).sort((a, b) => b[1] - a[1])[0] ?? ['unknown', failed];
    const example = firstError.get(main);
    return `every sample of this session failed (${failed}); the main reason: ${main} (${count})${example ? `: ${example}` : ''}`;
  };
  let failure: string | undefined;

  /**
   * One unit: a sample, or with `--until-correct` a question's samples in order, stopping at
   * the first judged correct (this session's, or an earlier session's: a resumed question whose
   * sample #1 was correct runs no #2). The samples not run leave the plan, so accepted + failed
   * = planned still holds; the summary counts them.
   */
  const runUnit = async (unit: readonly PlannedSample[]): Promise<void> => {
    for (let i = 0; i < unit.length; i++) {
      if (abort.signal.aborted) return;
      if (untilCorrect && store.answered.has(unit[i]!.question.id)) {
        const rest = unit.slice(i);
        for (const s of rest) outstanding.delete(s.sample_id);
        session.planned -= rest.length;
        session.notNeeded += rest.length;
        progress.notNeeded(rest.length);
        return;
      }
      await runOne(unit[i]!);
    }
  };

  // Samples (families) in flight: with agents, more than the requests allowed (AGENT_FAMILIES_PER_REQUEST
  // per request slot), so that the endpoint stays busy while families wait on tools between requests,
  // and the last families of a run, each a chain of requests one after another, finish close together.
  const inFlight = config.samples_in_flight ?? (agents.configured ? AGENT_FAMILIES_PER_REQUEST * config.concurrency : config.concurrency);
  const queue = new PQueue({ concurrency: inFlight });
  const { samples, skipped, input } = plan.samples(store);
  let status: RunManifest['status'] = 'failed';
  progress.start();
  try {
    for await (const unit of units(samples, untilCorrect)) {
      if (abort.signal.aborted) break;
      // Backpressure: the sampler streams, and the queue holds a bounded number of units.
      await queue.onSizeLessThan(plan.readAhead ?? inFlight);
      if (abort.signal.aborted) break;
      session.planned += unit.length;
      for (const s of unit) outstanding.add(s.sample_id);
      void queue.add(() => runUnit(unit));
    }
    await queue.onIdle();
    // Refusals a success never broke, and that never reached fail_fast_after, are failures of
    // their own samples. Interrupted, they stay unwritten, like the samples in flight: redone on resume.
    if (fatal === undefined && !abort.signal.aborted && crash === undefined) await flushRefused().catch((err: unknown) => void (crash ??= err));
    session.skippedDone = skipped();
    if (crash) throw crash;
    session.unaccounted = { count: outstanding.size, first: [...outstanding].slice(0, UNACCOUNTED_SHOWN) };
    const interrupted = fatal === undefined && abort.signal.aborted;
    if (!interrupted) failure = fatal === undefined ? accountingProblem() : undefined;
    status = fatal !== undefined || failure !== undefined ? 'failed' : interrupted ? 'interrupted' : 'completed';
  } finally {
    queue.clear();
    await queue.onIdle();
    progress.stop();
    plan.signal?.removeEventListener('abort', onOuterAbort);
    await executor.close();
    await judge?.close().catch(() => undefined);
    // A failed close (the disk still full) must not hide the error that stopped the run.
    await store.close(status, fatal ?? failure ?? status).catch((err: unknown) => {
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
    ...(judge ? { judge: judge.stats() } : {}),
    input: input?.(),
    fatal,
    failure,
    notices: store.notices,
  };
}
