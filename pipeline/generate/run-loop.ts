/**
 * The heart of a run (run.ts `runPlan` opens its pieces and hands them here): samples taken
 * from the plan as slots free up (p-queue), each rolled out (with its failure-experience
 * retries), judged when the run has a judge, written with its family, and counted; progress
 * drawn; the run stopped early when its endpoint is wrong or keeps failing (fail-fast.ts); and
 * a clean stop on interrupt. At the end every sample the invocation planned must have a record.
 */
import { setMaxListeners } from 'node:events';
import PQueue from 'p-queue';
import type { RunConfig, RunManifest } from '../../schemas/index.js';
import { runOutcome } from '../core/run-dir/outcome.js';
import type { Judge } from '../core/judge/judge.js';
import { judgeTrajectory } from '../core/judge/trajectory.js';
import { LlmClient, LlmError } from '../core/llm/llm.js';
import { assemble, type Agents, type Family } from './agents.js';
import type { Executor } from './executor.js';
import { summariseFailure } from './experience.js';
import { FailFast } from './fail-fast.js';
import { Progress } from './progress.js';
import { schemaChecked } from './record-check.js';
import type { GenerateSummary, PlannedSample, RunPlan } from './run.js';
import { RunSpend } from './run-cost.js';
import { RunTally } from './run-tally.js';
import type { RunStore } from './store.js';

/** With agents, the default `samples_in_flight` per model request slot (`concurrency`); documented with that option. */
const AGENT_FAMILIES_PER_REQUEST = 4;

/** What runPlan opened for the run. */
export interface OpenedRun {
  readonly apiKey: string;
  readonly judge: Judge | undefined;
  readonly executor: Executor;
  readonly agents: Agents;
  readonly store: RunStore;
}

type Experience = Awaited<ReturnType<typeof summariseFailure>>;

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

export class RunLoop {
  readonly #plan: RunPlan;
  readonly #config: RunConfig;
  readonly #judge: Judge | undefined;
  readonly #executor: Executor;
  readonly #agents: Agents;
  readonly #store: RunStore;
  readonly #llm: LlmClient;
  readonly #abort = new AbortController();
  readonly #tally = new RunTally();
  readonly #failFast: FailFast;
  readonly #progress: Progress;
  readonly #untilCorrect: boolean;
  /** The run's spend, priced, and its cost budget: once reached no sample starts, and those in flight finish. */
  readonly #spend: RunSpend;
  /** A failed write, or a bug: the run stops rather than lose records, and this is thrown. */
  #crash: unknown;
  #manifestWritten = Date.now();
  #budgetSaid = false;
  /** Rollouts started this invocation (a rerun of unjudged samples only judges again). */
  #rollouts = 0;

  constructor(plan: RunPlan, opened: OpenedRun) {
    this.#plan = plan;
    this.#config = plan.config;
    this.#judge = opened.judge;
    this.#executor = opened.executor;
    this.#agents = opened.agents;
    this.#store = opened.store;
    const config = plan.config;
    this.#untilCorrect = config.questions.until_correct && config.questions.samples > 1;
    // Every request in flight listens on this one signal.
    setMaxListeners(0, this.#abort.signal);
    if (plan.onAbort) this.#abort.signal.addEventListener('abort', plan.onAbort, { once: true });
    this.#failFast = new FailFast({ after: config.endpoint.fail_fast_after, retries: config.endpoint.max_retries, dir: () => this.#store.dir, stop: () => this.#abort.abort() });
    // `concurrency` is model requests in flight, whichever session of whichever family sends them.
    this.#llm = new LlmClient(config.endpoint, {
      apiKey: opened.apiKey,
      maxConcurrency: config.concurrency,
      gate: plan.sharedLimits?.requestGate(config.concurrency),
      onWrongEndpoint: (why) => this.#failFast.wrongEndpoint(why),
    });
    this.#progress = new Progress(plan.progress, plan.total, this.#store.accepted.size + this.#store.failed.size);
    this.#spend = new RunSpend(this.#store.spent, config);
    this.#store.priceSpendWith(() => this.#spend.cost());
    this.#store.countEndpointWith(() => ({ agents: this.#llm.counts(), ...(this.#judge ? { judge: this.#judge.endpointCounts() } : {}) }));
    this.#progress.showCost(() => this.#spend.dollars());
    if (config.executor.cache) this.#progress.showCache(() => ({ hits: this.#executor.stats().cacheHits, misses: this.#executor.stats().cacheMisses }));
  }

  /** Rolls the plan's samples out and closes the run (tool servers, judge, store); the invocation's summary. */
  async run(): Promise<GenerateSummary> {
    const plan = this.#plan;
    const onOuterAbort = (): void => this.#abort.abort();
    plan.signal?.addEventListener('abort', onOuterAbort, { once: true });
    // Samples (families) in flight: with agents, more than the requests allowed (AGENT_FAMILIES_PER_REQUEST
    // per request slot), so that the endpoint stays busy while families wait on tools between requests,
    // and the last families of a run, each a chain of requests one after another, finish close together.
    const config = this.#config;
    const inFlight = config.samples_in_flight ?? (this.#agents.configured ? AGENT_FAMILIES_PER_REQUEST * config.concurrency : config.concurrency);
    const queue = new PQueue({ concurrency: inFlight });
    const { samples, skipped, input } = plan.samples(this.#store);
    let status: RunManifest['status'] = 'failed';
    let failure: string | undefined;
    this.#progress.start();
    // A run held back by 429s writes no record for minutes: its checkpoints (and their endpoint counts) go on.
    const checkpoints = setInterval(() => this.#checkpoint(), this.#config.output.checkpoint_s * 1000).unref();
    try {
      await this.#schedule(queue, samples, inFlight);
      ({ status, failure } = await this.#finish(skipped));
    } finally {
      clearInterval(checkpoints);
      queue.clear();
      await queue.onIdle();
      this.#progress.stop();
      plan.signal?.removeEventListener('abort', onOuterAbort);
      await this.#executor.close();
      await this.#judge?.close().catch(() => undefined);
      // A failed close (the disk still full) must not hide the error that stopped the run.
      await this.#store.close(status, this.#failFast.fatal ?? failure ?? status).catch((err: unknown) => {
        if (this.#crash === undefined) throw err;
      });
    }
    return this.#summary(status, failure, input?.());
  }

  /** Takes units from the plan as slots free up, until it runs out or the run stops. */
  async #schedule(queue: PQueue, samples: AsyncIterable<PlannedSample>, inFlight: number): Promise<void> {
    const abort = this.#abort.signal;
    for await (const unit of units(samples, this.#untilCorrect)) {
      if (abort.aborted || this.#spend.reached()) break;
      // Backpressure: the sampler streams, and the queue holds a bounded number of units.
      await queue.onSizeLessThan(this.#plan.readAhead ?? inFlight);
      if (abort.aborted || this.#spend.reached()) break;
      this.#tally.planned(unit.map((s) => s.sample_id));
      void queue.add(() => this.#runUnit(unit));
    }
    await queue.onIdle();
  }

  /** After the last unit: the refusals nobody stopped for written, and the invocation's status. */
  async #finish(skipped: () => number): Promise<{ status: RunManifest['status']; failure: string | undefined }> {
    const fatal = this.#failFast.fatal;
    const aborted = this.#abort.signal.aborted;
    // Refusals a success never broke, and that never reached fail_fast_after, are failures of
    // their own samples. Interrupted, they stay unwritten, like the samples in flight: redone on resume.
    if (fatal === undefined && !aborted && this.#crash === undefined) {
      await this.#writeAll(this.#failFast.release()).catch((err: unknown) => void (this.#crash ??= err));
    }
    this.#tally.invocation.skippedDone = skipped();
    if (this.#crash) throw this.#crash;
    this.#tally.closeAccounts();
    // A cost budget stops the run as Ctrl-C does, and the same command with a higher budget goes on.
    const interrupted = fatal === undefined && (aborted || this.#spend.reached());
    const failure = interrupted || fatal !== undefined ? undefined : this.#tally.problem(this.#rollouts);
    return { status: fatal !== undefined || failure !== undefined ? 'failed' : interrupted ? 'interrupted' : 'completed', failure };
  }

  /** Writes a family (each record checked against its schema first) and counts it. `last`: no further attempt follows in this invocation. */
  async #record(family: Family, last = true): Promise<void> {
    const checked = family.records.map(schemaChecked);
    const rejected = checked.filter((c) => c.rejected).length;
    this.#tally.invocation.schemaRejected += rejected;
    // A session made invalid by its schema fails the sessions below it, as any failure does.
    const records = rejected > 0 ? assemble(checked.map((c) => c.record)).records : checked.map((c) => c.record);
    const traj = records.at(-1)!;
    const written = await this.#store.appendFamily(records);
    if (last) await this.#plan.settled?.(records, written);
    if (last) this.#tally.settled(traj.id);
    if (!written) return;
    const tokens = this.#tally.written(records, last);
    if (last) this.#progress.done(traj.status === 'ok', tokens);
    this.#checkpoint();
    // Said once, when it happens; the samples in flight finish (their spend is on record), no more start.
    if (this.#spend.reached() && !this.#budgetSaid) {
      this.#budgetSaid = true;
      this.#plan.progress?.write(`\n${this.#spend.budgetStop}: no more samples start; those in flight finish\n`);
    }
  }

  /** The manifest's counts follow the run, at most every `output.checkpoint_s`, so a long run can be watched from outside. */
  #checkpoint(): void {
    if (Date.now() - this.#manifestWritten < this.#config.output.checkpoint_s * 1000) return;
    this.#manifestWritten = Date.now();
    try {
      this.#store.writeManifest();
    } catch (err) {
      // A manifest that cannot be written (the disk full): the run stops rather than go on unwatched, as a failed append stops it.
      this.#crash ??= err;
      this.#abort.abort();
    }
  }

  async #writeAll(families: readonly Family[]): Promise<void> {
    for (const family of families) await this.#record(family);
  }

  /**
   * A family's rollout, its root (the main agent's session, the one with the gold answer) judged
   * when the run has a judge, before the record is written. A wrong answer fails the family as
   * any failed root does; an unjudged one fails nothing below it (those sessions did their work).
   */
  async #rolledOut(sample: PlannedSample, attempt: number, experience: Experience | undefined): Promise<Family> {
    this.#rollouts++;
    const signal = this.#abort.signal;
    const family = await this.#agents.rollout(sample, attempt, { llm: this.#llm, runId: this.#store.manifest.run_id, signal }, experience);
    if (!this.#judge) return family;
    const root = await judgeTrajectory(this.#judge, family.root, sample.sample_index, this.#config, signal);
    const records = [...family.records.slice(0, -1), root];
    return root.status === 'failed' && root.reason !== 'unjudged' ? assemble(records) : { root, records };
  }

  /** One sample: rolled out (or judged again), retried with its failure's experience, settled with fail-fast, written. */
  async #runOne(sample: PlannedSample): Promise<void> {
    const signal = this.#abort.signal;
    if (signal.aborted) return;
    try {
      const family = await this.#attempts(sample);
      const settled = this.#failFast.settle(family);
      if (settled.held) return;
      // The endpoint served this one: the refusals before it were about their own prompts.
      await this.#writeAll(settled.before);
      await this.#record(family);
      // A judge that refuses every request (a wrong key or model) would leave every sample unjudged.
      if (this.#judge?.fatal !== undefined) this.#failFast.stop(`${this.#judge.fatal}. The samples are kept, unjudged: fix validation.judge and run \`trajforge rerun ${this.#store.dir} --reason unjudged\``);
    } catch (err) {
      if (err instanceof LlmError && err.kind === 'aborted') return;
      // A failed write, or a bug: stop the run rather than lose records.
      this.#crash ??= err;
      this.#abort.abort();
    }
  }

  /** The sample's final family, after the failure-experience retries `retry` allows (each failed attempt written). */
  async #attempts(sample: PlannedSample): Promise<Family> {
    const { config, store, judge } = { config: this.#config, store: this.#store, judge: this.#judge };
    const signal = this.#abort.signal;
    const summaryDeps = { llm: this.#llm, dialect: this.#agents.main.dialect, config: this.#agents.main.config, tools: this.#agents.main.tools };
    let attempt = (store.failed.get(sample.sample_id)?.attempt ?? -1) + 1;
    const lastAttempt = attempt + config.retry.attempts;
    let family: Family;
    if (sample.rejudge !== undefined && judge) {
      // The rollout is on record; only its verdict is missing. (Its sub-agent sessions are on record too, as they were.)
      const root = await judgeTrajectory(judge, sample.rejudge, sample.sample_index, config, signal);
      family = { root, records: [root] };
    } else {
      const seed = sample.failed !== undefined && config.retry.experience ? await summariseFailure(sample.failed, summaryDeps, signal) : undefined;
      family = await this.#rolledOut(sample, attempt, seed);
    }
    // Failure-experience retry: a fresh attempt of the whole family, seeded with what the failed root learned.
    while (family.root.status === 'failed' && attempt < lastAttempt && config.retry.on.includes(family.root.reason!) && !signal.aborted) {
      await this.#record(family, false);
      const experience = config.retry.experience ? await summariseFailure(family.root, summaryDeps, signal) : undefined;
      family = await this.#rolledOut(sample, ++attempt, experience);
    }
    return family;
  }

  /**
   * One unit: a sample, or with `--until-correct` a question's samples in order, stopping at
   * the first judged correct (this invocation's, or an earlier one's: a resumed question whose
   * sample #1 was correct runs no #2). The samples not run leave the plan, so accepted + failed
   * = planned still holds; the summary counts them.
   */
  async #runUnit(unit: readonly PlannedSample[]): Promise<void> {
    for (let i = 0; i < unit.length; i++) {
      if (this.#abort.signal.aborted || this.#spend.reached()) return;
      if (this.#untilCorrect && this.#store.answered.has(unit[i]!.question.id)) {
        const rest = unit.slice(i);
        this.#tally.notNeeded(rest.map((s) => s.sample_id));
        this.#progress.notNeeded(rest.length);
        return;
      }
      await this.#runOne(unit[i]!);
    }
  }

  #summary(status: RunManifest['status'], failure: string | undefined, input: GenerateSummary['input']): GenerateSummary {
    const store = this.#store;
    return {
      ...runOutcome(store, status, { fatal: this.#failFast.fatal, failure, notices: store.notices }),
      counts: store.counts(),
      // A rerun's plan has no total of its own: the question set is the run's, as its manifest recorded it.
      total: this.#plan.total ?? store.manifest.questions.total,
      invocation: this.#tally.invocation,
      executor: this.#executor.stats(),
      llm: this.#llm.stats(),
      ...(this.#judge ? { judge: this.#judge.stats() } : {}),
      input,
      cost: this.#spend.cost(),
      budgetStop: this.#spend.budgetStop,
    };
  }
}
