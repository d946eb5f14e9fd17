/**
 * `trajforge synthesize`: seeds → draft → obfuscate → checks → a question bank, as a run like
 * `generate`'s: its own run directory (store.ts), one line per seed exactly once under kills,
 * resumed by the same command, a manifest with the config's fingerprint, progress with an ETA,
 * `--limit`, `--seed`, `--concurrency`, budgets, and a clean stop on interrupt.
 *
 * Everything that can be checked before a seed runs is checked before the run directory is
 * touched: the config, the keys, the source file (every row), the eval sets. The solvability
 * rollouts run as a generate run beside it (solvable.ts), in `DIR/solve`.
 */
import { setMaxListeners } from 'node:events';
import { join } from 'node:path';
import PQueue from 'p-queue';
import { DecontaminateOptions, type RunConfig, type RunManifest } from '../../schemas/index.js';
import { keyFromEnv, redactConfig, resolveApiKey, scrubberFor } from '../core/config.js';
import { createJudge, judgeSettings } from '../core/judge/judge.js';
import { LlmClient, LlmError } from '../core/llm/llm.js';
import { SYNTH_SOLVE_DIR } from '../core/run-dir/names.js';
import { runOutcome, type RunOutcome } from '../core/run-dir/outcome.js';
import { EvalIndex } from '../dataset/decontaminate.js';
import { TrajforgeError } from '../errors.js';
import { Progress } from '../generate/progress.js';
import { newManifest, type GenerateOptions, type GenerateSummary } from '../generate/run.js';
import { openDocuments } from './documents.js';
import { synthesisFingerprint } from './fingerprint.js';
import { openGraph } from './graph.js';
import { NearDuplicates } from './near-duplicates.js';
import { runSeed, type SeedContext } from './pipeline.js';
import type { Seed, SeedSource } from './seed.js';
import { Solvability } from './solvable.js';
import { SynthStore } from './store.js';
import { Unfinished } from './unfinished.js';

/** generate's options (aborting stops scheduling and cancels the seeds in flight, redone on resume), and `--limit`. */
export interface SynthesizeOptions extends Pick<GenerateOptions, 'config' | 'env' | 'signal' | 'progress' | 'allowConfigChange'> {
  /** Seeds at most (`--limit`). */
  readonly limit?: number | undefined;
}

export interface SynthesisSummary extends RunOutcome {
  /** Seeds the run plans (the source's, capped by `--limit` and `synthesis.seeds`). */
  readonly planned: number;
  /** The run over all its invocations: seeds on record. */
  readonly kept: number;
  readonly rejected: number;
  readonly byCheck: Record<string, number>;
  readonly spent: { readonly requests: number; readonly tokens: number };
  readonly invocation: { kept: number; rejected: number; skippedDone: number; unfinished: number; firstUnfinished: string | undefined };
  /** The budget that stopped the run (`kept`, `tokens`, `requests`), if one did. */
  readonly budget?: string | undefined;
  /** Why fewer seeds could be drawn than planned. */
  readonly shortfall?: string | undefined;
  /** The solvability rollouts' run, when the check is on. */
  readonly solve?: GenerateSummary | undefined;
}

function openSource(config: RunConfig, limit: number | undefined): Promise<SeedSource> {
  const syn = config.synthesis!;
  return syn.source.kind === 'documents' ? openDocuments(syn, limit) : openGraph(syn, limit);
}

/** The run's model clients: the writer's (`synthesis.writer`, else the endpoint) and the endpoint's (the closed-book solver). */
function clients(config: RunConfig, env: NodeJS.ProcessEnv): { writer: LlmClient; solver: LlmClient } {
  const solver = new LlmClient(config.endpoint, { apiKey: resolveApiKey(config, env), maxConcurrency: config.concurrency });
  const w = config.synthesis!.writer;
  return { solver, writer: w === undefined ? solver : new LlmClient(w, { apiKey: keyFromEnv(w, 'synthesis.writer', env), maxConcurrency: config.concurrency }) };
}

export async function synthesize(opts: SynthesizeOptions): Promise<SynthesisSummary> {
  const { config } = opts;
  const syn = config.synthesis;
  if (syn === undefined) throw new TrajforgeError('BAD_CONFIG', 'synthesis: the config has no synthesis section (docs/synthesize.md)', { field: 'synthesis' });
  const env = opts.env ?? process.env;
  const scrubber = scrubberFor(config, env);
  const { writer, solver } = clients(config, env);
  const source = await openSource(config, opts.limit);
  const evalIndex = syn.checks.eval_sets.length === 0 ? undefined : await EvalIndex.load(syn.checks.eval_sets, DecontaminateOptions.parse({ fields: ['question'] }));
  const nd = syn.checks.near_duplicate;
  const near = nd === false ? undefined : new NearDuplicates(nd);
  // The judge of the checks: validation.judge, else the endpoint (as `validate --judge`).
  const judge = createJudge(judgeSettings(config, { env, orEndpoint: true })!, { env, scrubber });
  const fields = synthesisFingerprint(config, env);
  const abort = new AbortController();
  let store: SynthStore;
  let solve: Solvability | undefined;
  try {
    // The tool servers start first: one that cannot start leaves nothing behind.
    const solvable = syn.checks.solvable;
    if (solvable !== false) solve = await Solvability.start({ config, dir: join(config.output.dir, SYNTH_SOLVE_DIR), k: solvable.k, env, signal: abort.signal, allowConfigChange: opts.allowConfigChange });
    store = await SynthStore.open({
      dir: config.output.dir,
      fingerprintFields: fields,
      scrubber,
      allowConfigChange: opts.allowConfigChange,
      config: redactConfig(config, env),
      fresh: () => newManifest(config, env, fields, { path: source.path, total: source.planned }),
      onKept: (id, question) => near?.add(id, question),
    });
  } catch (err) {
    await solve?.close().catch(() => undefined);
    await judge.close().catch(() => undefined);
    throw err;
  }
  await solve?.readPrior((seed) => !store.isDone(seed));
  return new Invocation(opts, config, store, source, { writer, solver, judge, evalIndex, near, solve, abort }).run();
}

/** What a seed is made with (the clients, the indexes, the rollouts), opened once for the run. */
interface Parts extends Pick<SeedContext, 'writer' | 'solver' | 'judge' | 'evalIndex' | 'near' | 'solve'> {
  /** Stops the seeds in flight and the rollouts. */
  readonly abort: AbortController;
}

/** One invocation of a synthesis run: the seeds scheduled, each one's line written, the run closed. */
class Invocation {
  readonly #opts: SynthesizeOptions;
  readonly #config: RunConfig;
  readonly #store: SynthStore;
  readonly #source: SeedSource;
  readonly #parts: Parts;
  readonly #abort: AbortController;
  readonly #progress: Progress;
  readonly #counts = { kept: 0, rejected: 0, skippedDone: 0, unfinished: 0, firstUnfinished: undefined as string | undefined };
  #streak = 0;
  #fatal: string | undefined;
  #crash: unknown;
  #budget: string | undefined;
  #manifestAt = Date.now();

  constructor(opts: SynthesizeOptions, config: RunConfig, store: SynthStore, source: SeedSource, parts: Parts) {
    this.#opts = opts;
    this.#config = config;
    this.#store = store;
    this.#source = source;
    this.#parts = parts;
    this.#abort = parts.abort;
    setMaxListeners(0, this.#abort.signal);
    // With a budget of kept questions, how many seeds it takes is not known ahead: no total, no ETA.
    const total = config.synthesis!.budgets.kept === undefined ? source.planned : null;
    this.#progress = new Progress(opts.progress, total, store.done, { ok: 'kept', failed: 'rejected' });
  }

  async run(): Promise<SynthesisSummary> {
    const onOuter = (): void => this.#abort.abort();
    this.#opts.signal?.addEventListener('abort', onOuter, { once: true });
    for (const n of this.#store.notices) this.#opts.progress?.write(`note: ${n}\n`);
    const { solve } = this.#parts;
    let solveSummary: GenerateSummary | undefined;
    let status: RunManifest['status'] = 'failed';
    let failure: string | undefined;
    try {
      await this.#schedule(this.#context(solve));
      solveSummary = await solve?.close();
      if (this.#crash !== undefined) throw this.#crash;
      this.#fatal ??= solveSummary?.fatal;
      const interrupted = this.#fatal === undefined && this.#abort.signal.aborted;
      const { unfinished, firstUnfinished } = this.#counts;
      if (!interrupted && this.#fatal === undefined && unfinished > 0) failure = `${unfinished} seeds are unfinished (their requests failed; the first: ${firstUnfinished}); run the same command again to redo them`;
      status = this.#fatal !== undefined || failure !== undefined ? 'failed' : interrupted ? 'interrupted' : 'completed';
    } finally {
      this.#progress.stop();
      this.#opts.signal?.removeEventListener('abort', onOuter);
      if (solveSummary === undefined) await solve?.close().catch(() => undefined);
      await this.#parts.judge.close().catch(() => undefined);
      await this.#store.close(status, this.#fatal ?? failure ?? (this.#budget ? `budget reached: ${this.#budget}` : status)).catch((err: unknown) => {
        if (this.#crash === undefined) throw err;
      });
    }
    return this.#summary(status, failure, solveSummary);
  }

  #context(solve: Solvability | undefined): SeedContext {
    const c = this.#config;
    const { writer, solver, judge, evalIndex, near } = this.#parts;
    const provenance = { model: c.endpoint.model, writer_model: c.synthesis!.writer?.model ?? c.endpoint.model, judge_model: judge.settings.model };
    return { synthesis: c.synthesis!, sourcePath: this.#source.path, writer, solver, judge, evalIndex, near, solve, provenance, signal: this.#abort.signal };
  }

  /** The seeds not on record, a bounded number in flight, until they run out, a budget is reached or the run stops. */
  async #schedule(ctx: SeedContext): Promise<void> {
    const syn = this.#config.synthesis!;
    const inFlight = syn.seeds_in_flight ?? this.#config.concurrency;
    const queue = new PQueue({ concurrency: inFlight });
    this.#progress.start();
    try {
      for (const seed of this.#source.seeds()) {
        if (this.#store.isDone(seed.id)) {
          this.#counts.skippedDone++;
          continue;
        }
        await queue.onSizeLessThan(inFlight);
        if (this.#abort.signal.aborted || this.#spent() !== undefined) break;
        void queue.add(() => this.#one(seed, ctx));
      }
      await queue.onIdle();
    } finally {
      queue.clear();
      await queue.onIdle();
    }
  }

  /** The budget reached, if one is: kept (exactly), tokens or requests (what the seeds on record spent). */
  #spent(): string | undefined {
    const b = this.#config.synthesis!.budgets;
    const s = this.#store;
    if (b.kept !== undefined && s.kept >= b.kept) return (this.#budget = `kept ${s.kept} of ${b.kept}`);
    if (b.tokens !== undefined && s.spent.tokens >= b.tokens) return (this.#budget = `tokens ${s.spent.tokens} of ${b.tokens}`);
    if (b.requests !== undefined && s.spent.requests >= b.requests) return (this.#budget = `requests ${s.spent.requests} of ${b.requests}`);
    return undefined;
  }

  async #one(seed: Seed, ctx: SeedContext): Promise<void> {
    if (this.#abort.signal.aborted) return;
    try {
      const outcome = await runSeed(seed, ctx);
      this.#streak = 0;
      const kept = 'kept' in outcome;
      const keptBudget = this.#config.synthesis!.budgets.kept;
      const row = kept ? outcome.kept : outcome.rejected;
      const written = await this.#store.append(row, kept, () => keptBudget === undefined || this.#store.kept < keptBudget);
      if (!written) {
        // The kept budget was reached by other seeds first: this one stays unrecorded, for a run with a larger budget.
        if (kept) outcome.release?.();
        return;
      }
      this.#counts[kept ? 'kept' : 'rejected']++;
      this.#progress.done(kept, row.cost.prompt_tokens + row.cost.completion_tokens);
      if (Date.now() - this.#manifestAt > this.#config.output.checkpoint_s * 1000) {
        this.#manifestAt = Date.now();
        this.#store.writeManifest();
      }
    } catch (err) {
      if (err instanceof LlmError && err.kind === 'aborted') return;
      if (err instanceof Unfinished || err instanceof LlmError) return this.#unfinished(err);
      this.#crash ??= err;
      this.#abort.abort();
    } finally {
      const refused = this.#parts.judge.fatal;
      if (refused !== undefined && this.#fatal === undefined) {
        this.#fatal = `${refused}; the seeds it could not check are left for the next run`;
        this.#abort.abort();
      }
    }
  }

  /** A seed the machinery failed: no line; `fail_fast_after` of them in a row stop the run. */
  #unfinished(err: Error): void {
    if (this.#abort.signal.aborted) return;
    this.#counts.unfinished++;
    this.#counts.firstUnfinished ??= err.message;
    if (++this.#streak >= this.#config.synthesis!.fail_fast_after && this.#fatal === undefined) {
      this.#fatal = `${this.#streak} seeds in a row could not be finished; the last: ${err.message}. Run the same command again when the endpoint and judge are back`;
      this.#abort.abort();
    }
  }

  #summary(status: RunManifest['status'], failure: string | undefined, solve: GenerateSummary | undefined): SynthesisSummary {
    const s = this.#store;
    const notices = [...s.notices, ...(solve?.notices ?? []).map((n) => `solve: ${n}`), ...(solve?.failure ? [`solve: ${solve.failure}`] : [])];
    return {
      ...runOutcome(s, status, { fatal: this.#fatal, failure, notices }),
      planned: this.#source.planned,
      kept: s.kept,
      rejected: s.rejected,
      byCheck: { ...s.byCheck },
      spent: { ...s.spent },
      invocation: { ...this.#counts },
      budget: this.#budget,
      shortfall: this.#source.shortfall,
      solve,
    };
  }
}
