/** `trajforge synthesize`: flags over the config's synthesis section, progress, summary, exit code. */
import { join } from 'node:path';
import { loadConfig } from '../core/config.js';
import { SYNTH_QUESTIONS, SYNTH_REJECTED, SYNTH_SOLVE_DIR } from '../core/run-dir/names.js';
import { TrajforgeError } from '../errors.js';
import { stderrSink } from '../generate/progress.js';
import { shellWord } from '../generate/preflight.js';
import { CLI_COMMAND } from '../paths.js';
import { synthesize, type SynthesisSummary } from '../synthesize/run.js';
import { byCount, int, runInterruptibly } from './generate.js';
import { parseFlags } from './flags.js';

const HELP = `Usage: trajforge synthesize --config F [options]

Questions of its own, from a corpus or a knowledge graph (the config's synthesis section):
seeds (a document, a chain of linked documents, or a walk through a graph) → a draft
(question, answer, quoted evidence) → an obfuscated question → checks (quotes verbatim, no
answer in the question, eval sets, the judge: evidence entails the answer, the answer is
unique; a closed-book solver; near-duplicates; k rollouts with tools for the pass rate).
A run directory like generate's, resumed by the same command:
  DIR/questions.jsonl   kept questions: a question bank generate reads as it is
  DIR/rejected.jsonl    every rejected draft, with the check that rejected it
  DIR/solve/            the solvability rollouts, an ordinary run directory
  DIR/manifest.json     config (secrets redacted), fingerprint, counts

  --config F        run config with a synthesis section, YAML or JSON (required)
  --out DIR         run directory (default: output.dir; resumed when it exists)
  --limit N         at most N seeds
  --seed S          the draws' seed (synthesis.seed): which documents, chains, walks
  --concurrency N   model requests in flight (default 32), and seeds in flight
  --base-url URL    the endpoint (the closed-book solver and the rollouts; the writer too
                    unless synthesis.writer is set)
  --model M         its model
  --allow-config-change   resume although the config now changes what a seed yields

Exit codes: 0 completed, 1 failed (unfinished seeds, a dead endpoint or judge), 2 bad input
or usage, 130 interrupted (resumable). Reference: docs/synthesize.md.
`;

function printSynthesis(s: SynthesisSummary): void {
  const out = (l = ''): void => void process.stdout.write(`${l}\n`);
  const kv = byCount;
  const x = s.invocation;
  out();
  out(`run        ${s.dir}${s.resumed ? ' (resumed)' : ''}  [${s.status}]`);
  out(`files      ${join(s.dir, SYNTH_QUESTIONS)}, ${join(s.dir, SYNTH_REJECTED)}${s.solve ? `, ${join(s.dir, SYNTH_SOLVE_DIR)}/` : ''}`);
  for (const n of s.notices) out(`note       ${n}`);
  out(`seeds      ${s.planned} planned; ${s.kept} kept, ${s.rejected} rejected in the run directory; this run ${x.kept} kept, ${x.rejected} rejected${x.skippedDone ? `, ${x.skippedDone} already done` : ''}`);
  out(`rejected   ${kv(s.byCheck)}`);
  const perKept = s.kept ? `; ${Math.round(s.spent.tokens / s.kept)} tokens and ${(s.spent.requests / s.kept).toFixed(1)} requests per kept question` : '';
  out(`spent      ${s.spent.requests} requests, ${s.spent.tokens} tokens${perKept}`);
  if (s.solve) out(`rollouts   ${s.solve.invocation.accepted + s.solve.invocation.failed} this run (${s.solve.invocation.accepted} accepted, ${s.solve.invocation.failed} failed: ${kv(s.solve.invocation.byReason)})`);
  if (s.budget) out(`budget     ${s.budget}: the run stopped there`);
  if (s.shortfall) out(`seeds      ${s.shortfall}`);
  if (x.unfinished) out(`unfinished ${x.unfinished} seeds (no line written; the same command redoes them): ${x.firstUnfinished}`);
  if (s.fatal) out(`stopped    ${s.fatal}`);
  else if (s.failure) out(`failed     ${s.failure}`);
  if (s.kept > 0) {
    const d = shellWord(s.dir);
    out(`next       ${CLI_COMMAND} stats ${d}      # the funnel, the difficulty histogram, the cost per kept question`);
    out(`           ${CLI_COMMAND} generate --config CONFIG --questions ${shellWord(join(s.dir, SYNTH_QUESTIONS))}`);
  }
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('synthesize', argv, {
    config: { type: 'string' },
    out: { type: 'string' },
    limit: { type: 'string' },
    seed: { type: 'string' },
    concurrency: { type: 'string' },
    'base-url': { type: 'string' },
    model: { type: 'string' },
    'allow-config-change': { type: 'boolean' },
  }, { help: HELP, positionals: false });
  if (!parsed) return 0;
  const { values } = parsed;
  if (!values.config) throw new TrajforgeError('BAD_USAGE', 'synthesize: --config F is required');
  const seed = values.seed === undefined ? undefined : Number(values.seed);
  if (seed !== undefined && !Number.isInteger(seed)) throw new TrajforgeError('BAD_USAGE', `--seed: expected an integer, got "${values.seed}"`);
  const config = loadConfig(values.config, { out: values.out, concurrency: int('concurrency', values.concurrency), baseUrl: values['base-url'], model: values.model });
  if (config.synthesis === undefined) throw new TrajforgeError('BAD_CONFIG', `${values.config}: synthesis: missing; synthesize needs a synthesis section (docs/synthesize.md)`, { file: values.config, field: 'synthesis' });
  if (seed !== undefined) config.synthesis.seed = seed;
  const limit = int('limit', values.limit);
  if (limit === 0) throw new TrajforgeError('BAD_USAGE', '--limit: expected a positive integer, got "0"');
  return runInterruptibly(
    (signal) => synthesize({ config, signal, progress: stderrSink(), limit, allowConfigChange: values['allow-config-change'] }),
    printSynthesis,
  );
}
