/**
 * `trajforge`: a thin layer that parses flags and calls the stages. User errors print
 * without a stack trace; exit codes: 0 done, 1 failed, 2 bad input or usage, 130 interrupted.
 */
import { TrajforgeError, UserError } from '../errors.js';
import { fsError, isFsError } from '../files.js';
import { PACKAGE_VERSION } from '../paths.js';
import { printable } from '../printable.js';
import { suggestKey } from '../core/config-hints.js';

const HELP = `trajforge ${PACKAGE_VERSION}: agentic SFT trajectories over MCP tools

Usage:
  trajforge init [--preset P] [--out DIR]   write a commented starter config and a questions file
  trajforge check --config F                 can a run start? endpoint, key, model, servers, tools, questions, output
  trajforge generate --config F [options]   run the model over questions, write a run directory
  trajforge synthesize --config F [--out DIR]   questions of its own from a corpus or a knowledge graph, checked
  trajforge <command> --help                that command's options
  trajforge validate <file|run|-> [--rules F] [--json] [--judge --config F]   check every row against the rules
  trajforge filter <file|run|-> [--keep EXPR] [--drop EXPR] --out F [--rejects F]
  trajforge stats <file|run|-> [--json]                  the shape of a dataset
  trajforge rerun <run> [--reason R…] [--max-attempts N]  re-run failed samples only
  trajforge merge <run…> --out DIR                       merge shard runs into one
  trajforge enqueue --config F --queue redis://H:P/DB --run NAME   queue mode: the run's samples onto Redis, once
  trajforge worker --config F --queue URL --run NAME     queue mode: pull samples, roll out, accept (any number, anywhere)
  trajforge status --queue URL --run NAME                queue mode: planned, in flight, accepted, per worker
  trajforge export <file|run|-> --format F --out F   training rows with loss masks, or preference pairs;
                    F: messages, sharegpt, text, tokens, adp, atif, dpo (F.parquet for Parquet)
  trajforge report <file|run|-> --out report.html        one self-contained HTML report and trajectory viewer
  trajforge report --serve RUN [--port N]                the same report on 127.0.0.1, updated while the run writes
  trajforge dedup <file|run>… --out F [--clusters F]     drop near-duplicate questions, one kept per cluster
  trajforge decontaminate <file|run|->… --against F… [--drop] --out F   flag rows that overlap eval sets (13-grams)
  trajforge corpus index DOCS.jsonl[.gz] --out DIR   an on-disk full-text index for the corpus server (--index DIR)
  (the dataset commands read trajforge records, DR Tulu generator rows and chat rows;
   --input-format F forces one, --on-bad-row skip counts bad rows instead of stopping)
  trajforge sim [options]                   start the offline OpenAI-compatible model stand-in
  trajforge demo [--dialect D] [--limit N] [--out DIR]   the sim, the bundled corpus server, a run: no network, no keys
  trajforge --version | --help

trajforge generate options (each overrides the config file):
  --config F        run config, YAML or JSON (required)
  --questions F     questions file: JSONL, JSON array or CSV ('-' for stdin)
  --out DIR         run directory (resumed when it exists)
  --limit N         at most N questions
  --concurrency N   model requests in flight, whichever session sends them (default 32)
  --samples K       rollouts per question (ids id#0 … id#K-1)
  --until-correct   with --samples K and validation.judge: a question's samples run in order and
                    stop at the first judged correct (pass@K); the ones not run are not failures
  --shard i/n       this process's share of the questions
  --seed S          shuffle and sampling seed
  --base-url URL    OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1
  --model M         model name
  --dialect D       tulu (<call_tool>), mcp-xml (MiroThinker <use_mcp_tool>, \\boxed{} answers)
                    or native (OpenAI tools / tool_calls)
  --keep-tool-results K   send only the last K tool results in full (context.keep_tool_results)
  --max-context-tokens N  the endpoint's context window: stop and ask for the answer before it overflows
  --retries N       fresh attempts after a failed one, each seeded with a summary of the failure
  --on-bad-row M    error (default: a bad question row stops the run) or skip (counted, reported)
  --no-cache        neither read nor write the tool-result cache
  --cache-dir DIR   where the tool-result cache lives (default ~/.cache/trajforge)
  --allow-config-change   resume a run although the config now changes what a sample is
                    (model, sampling, tools, servers, prompts…); the change is recorded
  --dry-run         send nothing, write nothing: print each agent's system prompt and tools and the
                    first request of the first sample as it would be sent (the tool servers start
                    to list their tools, then stop); --json for the same as JSON

Exit codes: 0 run completed, 1 run failed, 2 bad input or usage, 130 interrupted (resumable).
`;

async function cmdSim(argv: string[]): Promise<number> {
  const { runSimCli } = await import('../../sim/cli.js');
  await runSimCli(argv);
  return 0;
}

export { HELP };

interface Command {
  run(argv: string[]): Promise<number>;
}

/**
 * The commands, each a module of this folder with `run(argv)` (the sim's is its own), loaded only
 * when called. Each import names its file, so the bundler (build/bundle.ts) can follow it.
 */
const LOADERS = new Map<string, () => Promise<Command>>(Object.entries({
  generate: () => import('./generate.js'),
  synthesize: () => import('./synthesize.js'),
  check: () => import('./check.js'),
  init: () => import('./init.js'),
  demo: () => import('./demo.js'),
  validate: () => import('./validate.js'),
  filter: () => import('./filter.js'),
  stats: () => import('./stats.js'),
  rerun: () => import('./rerun.js'),
  merge: () => import('./merge.js'),
  export: () => import('./export.js'),
  report: () => import('./report.js'),
  dedup: () => import('./dedup.js'),
  decontaminate: () => import('./decontaminate.js'),
  corpus: () => import('./corpus.js'),
  enqueue: () => import('./enqueue.js'),
  worker: () => import('./worker.js'),
  status: () => import('./status.js'),
}));

export const COMMANDS: readonly string[] = [...LOADERS.keys()];

export async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  try {
    const load = cmd === undefined ? undefined : LOADERS.get(cmd);
    if (load !== undefined) return await (await load()).run(rest);
    switch (cmd) {
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
        throw unknownCommand(cmd);
    }
  } catch (err) {
    const user = asUserError(err);
    // Anything else is a bug, or a wire error no command turned into a message: bin.ts prints its stack.
    if (user === undefined) throw err;
    // Messages quote what the user gave (paths, lines of files, flags): never a control character of theirs to the terminal.
    process.stderr.write(`error: ${printable(user.message)}\n`);
    return user.exitCode;
  }
}

function unknownCommand(cmd: string): TrajforgeError {
  const near = suggestKey(cmd, [...COMMANDS, 'sim']);
  return new TrajforgeError('BAD_USAGE', `unknown command "${cmd}"${near !== undefined ? ` (did you mean ${near}?)` : ''} (try trajforge --help)`);
}

/** The error as the user kind the CLI prints (message, no stack, its exit code), or undefined when it is not one. */
function asUserError(err: unknown): UserError | undefined {
  if (err instanceof UserError) return err;
  // parseArgs reports unknown flags with a code of its own.
  if ((err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS')) return new TrajforgeError('BAD_USAGE', (err as Error).message);
  // A path the user named that a call could not use, where no command said so itself: the
  // path and the reason still beat a stack trace.
  if (isFsError(err) && err.path !== undefined) return fsError(err.path, err, `cannot ${err.syscall}`);
  return undefined;
}
