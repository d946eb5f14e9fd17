/**
 * `trajforge`: a thin layer that parses flags and calls the stages. User errors print
 * without a stack trace; exit codes: 0 done, 1 failed, 2 bad input or usage, 130 interrupted.
 */
import { parseArgs } from 'node:util';
import { loadConfig, type ConfigOverrides } from './config.js';
import { TrajforgeError } from './errors.js';
import { generate, type GenerateSummary } from './generate.js';
import { PACKAGE_VERSION } from './paths.js';
import { stderrSink } from './progress.js';

const HELP = `trajforge ${PACKAGE_VERSION}: agentic SFT trajectories over MCP tools

Usage:
  trajforge generate --config F [options]   run the model over questions, write a run directory
  trajforge sim [options]                   start the offline OpenAI-compatible model stand-in
  trajforge --version | --help

trajforge generate options (each overrides the config file):
  --config F        run config, YAML or JSON (required)
  --questions F     questions file: JSONL, JSON array or CSV ('-' for stdin)
  --out DIR         run directory (resumed when it exists)
  --limit N         at most N questions
  --concurrency N   samples in flight (default 32)
  --samples K       rollouts per question (ids id#0 … id#K-1)
  --shard i/n       this process's share of the questions
  --seed S          shuffle and sampling seed
  --base-url URL    OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1
  --model M         model name
  --dialect D       tulu (mcp-xml and native are planned)

Exit codes: 0 run completed, 1 run failed, 2 bad input or usage, 130 interrupted (resumable).
`;

function int(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new TrajforgeError('BAD_USAGE', `--${name}: expected a non-negative integer, got "${v}"`);
  return n;
}

function printSummary(s: GenerateSummary): void {
  const out = (l = ''): void => void process.stdout.write(`${l}\n`);
  const kv = (m: Record<string, number>): string =>
    Object.entries(m)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none';
  const x = s.session;
  const done = x.accepted + x.failed;
  out();
  out(`run        ${s.dir}${s.resumed ? ' (resumed)' : ''}  [${s.status}]`);
  out(`files      ${s.dir}/trajectories.jsonl, ${s.dir}/failures.jsonl, ${s.dir}/manifest.json`);
  out(`samples    ${s.total ?? 'unknown (stdin)'} in the question set; ${s.counts.accepted} accepted, ${s.counts.failed} failed in the run`);
  out(`session    ${done} rolled out: ${x.accepted} accepted, ${x.failed} failed${x.skippedDone ? `; ${x.skippedDone} already done, skipped` : ''}`);
  out(`failed by  ${kv(x.byReason)}`);
  out(`tool calls ${done ? (x.toolCalls / done).toFixed(2) : '0'} per sample (${x.toolCalls} in all; ${s.executor.cacheHits} from cache, ${s.executor.errors} errors, ${s.executor.restarts} server restarts)`);
  out(`repairs    ${kv(x.repairs)}`);
  out(`rollbacks  ${kv(x.rollbacks)}`);
  out(`endpoint   ${s.llm.requests} requests, ${s.llm.retries} retries, ${s.llm.rateLimited} rate-limited${s.llm.stopRejectedModels.length ? `, stop enforced client-side for ${s.llm.stopRejectedModels.join(', ')}` : ''}; ${x.tokens} tokens`);
  if (s.fatal) out(`stopped    the endpoint refused the requests: ${s.fatal}`);
}

async function cmdGenerate(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      config: { type: 'string' },
      questions: { type: 'string' },
      out: { type: 'string' },
      limit: { type: 'string' },
      concurrency: { type: 'string' },
      samples: { type: 'string' },
      shard: { type: 'string' },
      seed: { type: 'string' },
      'base-url': { type: 'string' },
      model: { type: 'string' },
      dialect: { type: 'string' },
      help: { type: 'boolean' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  if (!values.config) throw new TrajforgeError('BAD_USAGE', 'generate: --config F is required');
  const overrides: ConfigOverrides = {
    questions: values.questions,
    out: values.out,
    limit: int('limit', values.limit),
    concurrency: int('concurrency', values.concurrency),
    samples: int('samples', values.samples),
    shard: values.shard,
    seed: int('seed', values.seed),
    baseUrl: values['base-url'],
    model: values.model,
    dialect: values.dialect,
  };
  const config = loadConfig(values.config, overrides);
  const interrupt = new AbortController();
  let interrupts = 0;
  const onSigint = (): void => {
    if (++interrupts > 1) process.exit(130);
    process.stderr.write('\ninterrupted: finishing the writes in flight (Ctrl-C again to quit at once)\n');
    interrupt.abort();
  };
  process.on('SIGINT', onSigint);
  process.on('SIGTERM', onSigint);
  try {
    const summary = await generate({ config, signal: interrupt.signal, progress: stderrSink() });
    printSummary(summary);
    if (summary.fatal) {
      process.stderr.write(`error: the model endpoint refused the requests: ${summary.fatal}\n`);
      return 1;
    }
    return summary.status === 'interrupted' ? 130 : 0;
  } finally {
    process.off('SIGINT', onSigint);
    process.off('SIGTERM', onSigint);
  }
}

async function cmdSim(argv: string[]): Promise<number> {
  const { runSimCli } = await import('../sim/cli.js');
  await runSimCli(argv);
  return 0;
}

export async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  try {
    switch (cmd) {
      case 'generate':
        return await cmdGenerate(rest);
      case 'sim':
        return await cmdSim(rest);
      case '--version':
      case '-v':
        process.stdout.write(`${PACKAGE_VERSION}\n`);
        return 0;
      case undefined:
      case '--help':
      case '-h':
      case 'help':
        process.stdout.write(HELP);
        return cmd === undefined ? 2 : 0;
      default:
        throw new TrajforgeError('BAD_USAGE', `unknown command "${cmd}" (try trajforge --help)`);
    }
  } catch (err) {
    if (err instanceof TrajforgeError) {
      process.stderr.write(`error: ${err.message}\n`);
      return err.code === 'WRITE_FAILED' || err.code === 'ENDPOINT_FATAL' ? 1 : 2;
    }
    // parseArgs reports unknown flags with a code of its own.
    if ((err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`error: ${(err as Error).message}\n`);
      return 2;
    }
    throw err;
  }
}
