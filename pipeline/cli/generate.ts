/** `trajforge generate`: flags over the config file, progress, summary, exit code. */
import { loadConfig, type ConfigOverrides } from '../core/config.js';
import { costLine } from '../core/cost.js';
import { countsLine } from '../core/llm/counts.js';
import type { RunOutcome } from '../core/run-dir/outcome.js';
import { loadedTokenCounter } from '../core/tokens/count.js';
import { TrajforgeError } from '../errors.js';
import { dryRun, dryRunText } from '../generate/dry-run.js';
import { generate, type GenerateSummary } from '../generate/run.js';
import { stderrSink } from '../generate/progress.js';
import { configWarnings } from '../generate/warnings.js';
import { HELP } from './main.js';
import { choiceFlag, ON_BAD_ROW, parseFlags } from './flags.js';

export function int(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new TrajforgeError('BAD_USAGE', `--${name}: expected a non-negative integer, got "${v}"`);
  return n;
}

/** `wrong_answer 3, max_turns 1`: counts by name, largest first; `none` when there are none. */
export function byCount(m: Record<string, number>): string {
  return (
    Object.entries(m)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none'
  );
}

export function printSummary(s: GenerateSummary): void {
  const out = (l = ''): void => void process.stdout.write(`${l}\n`);
  const kv = byCount;
  const x = s.invocation;
  const done = x.accepted + x.failed;
  out();
  out(`run        ${s.dir}${s.resumed ? ' (resumed)' : ''}  [${s.status}]`);
  out(`files      ${s.dir}/trajectories.jsonl, ${s.dir}/failures.jsonl, ${s.dir}/manifest.json`);
  for (const n of s.notices) out(`note       ${n}`);
  const set = s.total === null ? 'question set not counted (read from stdin, or a merged run)' : `${s.total} in the question set`;
  out(`samples    ${set}; ${s.counts.accepted} accepted, ${s.counts.failed} failed in the run`);
  out(`this run   ${x.planned} planned, ${done} recorded: ${x.accepted} accepted, ${x.failed} failed${x.skippedDone ? `; ${x.skippedDone} already done, skipped` : ''}`);
  if (x.unaccounted.count) {
    const more = x.unaccounted.count > x.unaccounted.first.length ? ', …' : '';
    out(`no record  ${x.unaccounted.count} planned samples (${x.unaccounted.first.join(', ')}${more}); the same command redoes them`);
  }
  if (x.notNeeded) out(`until      ${x.notNeeded} samples not run: an earlier sample of their question was judged correct (--until-correct)`);
  if (s.judge) {
    const j = s.judge;
    out(`judge      ${j.judged} judged: ${kv(j.byVerdict)}; decided by ${kv(j.bySteps)}; ${j.requests} requests, ${j.cached} from cache${j.endpoint.retries || j.endpoint.responses.rate_limited ? `; its endpoint: ${countsLine(j.endpoint)}` : ''}`);
  }
  if (x.subAgents.accepted + x.subAgents.failed > 0 || s.counts.sub_agents !== undefined) {
    const sub = x.subAgents;
    const run = s.counts.sub_agents;
    out(`sub-agents ${sub.accepted + sub.failed} sessions in this run: ${sub.accepted} accepted, ${sub.failed} failed${sub.failed ? ` (${kv(sub.byReason)})` : ''}; ${sub.toolCalls} tool calls of their own${run ? `; ${run.accepted} accepted, ${run.failed} failed in the run` : ''}`);
  }
  if (x.schemaRejected) out(`schema     ${x.schemaRejected} records failed their schema and were written as invalid failures (the schema's message is in their error)`);
  out(`failed by  ${kv(x.byReason)}`);
  // With agents the cache hits are said by agent: the sub-agents' hits are not the main agent's calls above.
  const agents = x.subAgents.accepted + x.subAgents.failed > 0 || s.counts.sub_agents !== undefined;
  const hits = agents ? `cache hits by agent: ${kv({ main: 0, ...x.cachedByAgent })}` : `${s.executor.cacheHits} from cache`;
  out(`tool calls ${done ? (x.toolCalls / done).toFixed(2) : '0'} per sample (${x.toolCalls} in all${agents ? ', the main agent\'s' : ''}; ${hits}, ${s.executor.errors} errors, ${s.executor.restarts} server restarts)`);
  out(`repairs    ${kv(x.repairs)}`);
  out(`rollbacks  ${kv(x.rollbacks)}`);
  out(`endpoint   ${countsLine(s.llm.counts)}${s.llm.stopRejectedModels.length ? `, stop enforced client-side for ${s.llm.stopRejectedModels.join(', ')}` : ''}${s.llm.maxCompletionTokensModels.length ? `, max_completion_tokens sent for ${s.llm.maxCompletionTokensModels.join(', ')}` : ''}${s.llm.streamedModels.map((m) => `, streamed for ${m.model} (${m.why})`).join('')}; ${x.tokens} tokens`);
  if (s.llm.pastMaxTokens) out(`max_tokens ${s.llm.pastMaxTokens} completions far past the max_tokens they were sent with (flagged endpoint.past_max_tokens)`);
  const rep = s.llm.repetitionRetries + s.llm.repetitionCuts;
  if (rep) out(`repetition ${s.llm.repetitionRetries} completions resampled for degenerate repetition, ${s.llm.repetitionCuts} kept with the repeating tail cut`);
  if (s.input && (s.input.badRows || s.input.duplicates)) {
    const first = s.input.firstBadRows.map((b) => `line ${b.line}: ${b.message}`).join('; ');
    out(`input      ${s.input.rows} rows read; ${s.input.badRows} bad rows skipped${first ? ` (${first}${s.input.badRows > s.input.firstBadRows.length ? '; …' : ''})` : ''}; ${s.input.duplicates} duplicate ids skipped`);
  }
  if (s.executor.down.length) {
    const periods = (n: number): string => (n === 1 ? 'once' : `${n} times`);
    const each = s.executor.down.map((d) => `${d.server} ${(d.ms / 1000).toFixed(1)} s (down ${periods(d.periods)}${d.downAtEnd ? ', still down at the end' : ''})`);
    out(`tools down ${each.join('; ')}; their calls failed at once while down (executor.max_restarts, restart_backoff_ms)`);
  }
  if (s.executor.protocolErrors) out(`tool junk  ${s.executor.protocolErrors} messages from tool servers that were not JSON-RPC (ignored; last: ${s.executor.lastProtocolError ?? 'unknown'})`);
  if (s.cost) out(`cost       ${costLine(s.cost)}, over all runs of this directory`);
  if (s.budgetStop) out(`budget     ${s.budgetStop}; no sample started after it. Raise budgets.max_cost_usd and run the same command to go on (exit 3)`);
  if (s.fatal) out(`stopped    ${s.fatal}`);
  else if (s.failure) out(`failed     ${s.failure}`);
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('generate', argv, {
    config: { type: 'string' },
    questions: { type: 'string' },
    out: { type: 'string' },
    limit: { type: 'string' },
    concurrency: { type: 'string' },
    samples: { type: 'string' },
    'until-correct': { type: 'boolean' },
    shard: { type: 'string' },
    seed: { type: 'string' },
    'base-url': { type: 'string' },
    model: { type: 'string' },
    dialect: { type: 'string' },
    'keep-tool-results': { type: 'string' },
    'max-context-tokens': { type: 'string' },
    retries: { type: 'string' },
    'no-cache': { type: 'boolean' },
    'cache-dir': { type: 'string' },
    'on-bad-row': { type: 'string' },
    'allow-config-change': { type: 'boolean' },
    'dry-run': { type: 'boolean' },
    json: { type: 'boolean' },
  }, { help: HELP, positionals: false });
  if (!parsed) return 0;
  const { values } = parsed;
  if (!values.config) throw new TrajforgeError('BAD_USAGE', 'generate: --config F is required');
  if (values.json && !values['dry-run']) throw new TrajforgeError('BAD_USAGE', 'generate: --json goes with --dry-run (a run prints its progress and summary)');
  const overrides: ConfigOverrides = {
    questions: values.questions,
    out: values.out,
    limit: int('limit', values.limit),
    concurrency: int('concurrency', values.concurrency),
    samples: int('samples', values.samples),
    untilCorrect: values['until-correct'] ? true : undefined,
    shard: values.shard,
    seed: int('seed', values.seed),
    baseUrl: values['base-url'],
    model: values.model,
    dialect: values.dialect,
    keepToolResults: int('keep-tool-results', values['keep-tool-results']),
    maxContextTokens: int('max-context-tokens', values['max-context-tokens']),
    retries: int('retries', values.retries),
    cache: values['no-cache'] ? false : undefined,
    cacheDir: values['cache-dir'],
  };
  const onBadRow = choiceFlag('on-bad-row', values['on-bad-row'], ON_BAD_ROW);
  const config = loadConfig(values.config, overrides);
  if (onBadRow !== undefined) config.questions.on_bad_row = onBadRow;
  // Loaded before the run starts: a tokenizer that does not load stops here, not mid-run.
  try {
    loadedTokenCounter(config.tokenizer);
  } catch (err) {
    if (!(err instanceof TrajforgeError)) throw err;
    throw new TrajforgeError('BAD_CONFIG', `${values.config}: ${err.message}`, { file: values.config, field: 'tokenizer' });
  }
  for (const w of configWarnings(config)) process.stderr.write(`warning: ${w.message}\n`);
  if (values['dry-run']) {
    const shown = await dryRun({ config });
    process.stdout.write(values.json ? `${JSON.stringify(shown, null, 2)}\n` : dryRunText(shown, values.config));
    return 0;
  }
  return runInterruptibly((signal) => generate({ config, signal, progress: stderrSink(), allowConfigChange: values['allow-config-change'] }));
}

/** The exit code of a run the cost budget stopped: resumable, like 130, but a script can tell the two apart. */
export const BUDGET_EXIT = 3;

/** What an invocation's outcome says, for the exit code: `generate`'s, and `synthesize`'s. */
/** What the exit code reads: how the invocation ended, and the budget that stopped it if one did. */
type Outcome = Pick<RunOutcome, 'status' | 'fatal' | 'failure'> & { readonly budgetStop?: string | undefined };

/**
 * Runs an invocation with Ctrl-C (and SIGTERM) wired to a clean stop, prints the summary, and
 * turns the outcome into an exit code: 0 completed; 1 the endpoint refused or kept failing,
 * samples have no record, or every sample failed; 3 stopped by `budgets.max_cost_usd` (resumable
 * with a higher one); 130 interrupted. `print` prints the summary
 * (default: generate's).
 */
export function runInterruptibly(invoke: (signal: AbortSignal) => Promise<GenerateSummary>): Promise<number>;
export function runInterruptibly<S extends Outcome>(session: (signal: AbortSignal) => Promise<S>, print: (summary: S) => void): Promise<number>;
export async function runInterruptibly(invoke: (signal: AbortSignal) => Promise<Outcome>, print: (summary: never) => void = printSummary): Promise<number> {
  const interrupt = new AbortController();
  let interrupts = 0;
  const onSignal = (): void => {
    if (++interrupts > 1) process.exit(130);
    process.stderr.write('\ninterrupted: finishing the writes in flight (Ctrl-C again to quit at once)\n');
    interrupt.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const summary = await invoke(interrupt.signal);
    (print as (summary: Outcome) => void)(summary);
    const why = summary.fatal ?? summary.failure;
    if (why !== undefined) {
      process.stderr.write(`error: ${why}\n`);
      return 1;
    }
    if (summary.status !== 'interrupted') return 0;
    return summary.budgetStop !== undefined ? BUDGET_EXIT : 130;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
