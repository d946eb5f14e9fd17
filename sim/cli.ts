/**
 * `trajforge sim`: flags → startSim. Prints exactly one line to stdout once it listens, so a
 * parent process can read the URL; everything else goes to stderr.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { TrajforgeError } from '../pipeline/errors.js';
import { suggestKey } from '../pipeline/core/config-hints.js';
import { untilStopped } from '../pipeline/wait.js';
import {
  EXCLUDED_FROM_ALL,
  EXCLUDED_FROM_ALL_BY_WHY,
  isMisbehaviourKind,
  MISBEHAVIOUR_HELP,
  MISBEHAVIOUR_KINDS,
  type MisbehaviourKind,
} from './misbehave.js';
import { SIM_DEFAULTS, SIM_MODEL, startSim, type SimOptions } from './server.js';
import { parsePlant, PLANTED_DEFECTS } from './synth.js';

export function simUsage(): string {
  const width = Math.max(...MISBEHAVIOUR_KINDS.map((k) => k.length));
  const kinds = MISBEHAVIOUR_KINDS.map((k) => `  ${k.padEnd(width)}  ${MISBEHAVIOUR_HELP[k]}`).join('\n');
  return `Usage: trajforge sim [options]

An offline stand-in for an OpenAI-compatible model endpoint (POST /v1/chat/completions,
streaming or not; GET /v1/models; GET /sim/stats). It searches with words from the question,
then answers citing the snippet ids it was shown, in the tool-call dialect of each request:
  native   the request offers tools: tool_calls, reasoning (in --reasoning-field), a cited answer
  mcp-xml  the system prompt shows <use_mcp_tool>: calls to the listed server and tool,
           an answer in \\boxed{}
  tulu     otherwise: <call_tool>, <answer> with <cite>
A last user message containing FAILURE SUMMARY gets one JSON object (failure_type,
what_happened, useful_findings) in any dialect.

Hierarchical agents (prompts/ of trajforge's agents), in any dialect:
  main      a tool on offer requires exactly {subtask}: it plans, hands 1-2 subtasks to
            that tool, then (given run_python_code) has Python count the days from the
            release the report names to the prompt's "Today is:", and answers from the
            reports it gets back
  browsing  the system prompt holds the browsing objective, or the first user message
            ends with the subtask line: it searches, reads 1-2 results whole
            (read_document, or open), given find finds the subtask's key word in each
            page it opened, answers, and on the browsing summary prompt writes a report
            from the documents it read
Misbehaviours apply to both roles alike.

Deterministic for a seed. Prints "sim listening on http://127.0.0.1:PORT/v1" when ready;
stops on SIGINT or SIGTERM and prints its counters to stderr.

As vLLM, it serves only the model names it was given and only under /v1: a request for
another model gets vLLM's 404 ("The model \`X\` does not exist."), a path without /v1
FastAPI's 404 ({"detail":"Not Found"}); --lenient forgives both.

Options:
  --port P               port on 127.0.0.1 (default 0: a free port)
  --served-model-name M  a model name it serves (repeatable; default ${SIM_MODEL})
  --lenient              answer any model name, and paths without /v1 (/chat/completions)
  --pid-file F           once listening, write its process id to F (removed when it stops):
                         started in the background, wait for F, stop it with kill $(cat F)
  --seed S               seed for every draw (default ${SIM_DEFAULTS.seed})
  --latency-ms N         added to every chat request (default ${SIM_DEFAULTS.latencyMs})
  --misbehave KIND=RATE  misbehave at RATE (0..1) per completion; repeatable, later wins;
                         all=RATE sets every kind except:
${Object.entries(EXCLUDED_FROM_ALL_BY_WHY).map(([why, kinds]) => `                           ${why}: ${kinds.join(', ')}`).join('\n')}
  --reject-stop          answer any request that carries 'stop' with 400 unsupported_parameter
  --reject-max-tokens    answer any request that carries 'max_tokens' with 400 unsupported_parameter
                         ("Use 'max_completion_tokens' instead", as OpenAI's GPT-5 and o-series do)
  --reasoning-field F    the field the reasoning goes out in: reasoning_content (default),
                         reasoning (vLLM since 0.16, OpenRouter) or both
  --reasoning-parser     tulu and mcp-xml: a leading <think> leaves the content for the
                         reasoning field, as a server with a reasoning parser does
  --content-filter TEXT  refuse any request whose messages contain TEXT with 400 content_filter
  --calls-per-sample N   searches before answering (default ${SIM_DEFAULTS.callsPerSample}; the roles follow their own script)
  --context-window N     reject prompts over N tokens (400 context_length_exceeded), counted with
                         o200k_base as trajforge's context guard counts them
  --stall-ms N           how long a stall waits (default ${SIM_DEFAULTS.stallMs})
  --retry-after S        seconds a rate_limit asks the client to wait, fractions allowed (default ${SIM_DEFAULTS.retryAfterMs / 1000})
  --burst KIND=N         the first N chat requests each get KIND whatever its rate; repeatable
  --server-error-status LIST
                         statuses a server_error answers with, e.g. 500,502,503 (default 500;
                         502 comes with an HTML body, as from a proxy)
  --plant KIND=RATE      synthesis (trajforge synthesize): plant a defect in RATE of the seeds,
                         at most one a seed; all=RATE for each of ${PLANTED_DEFECTS.join(', ')}
  --knowledge FILE       synthesis: a JSONL of documents or triples the closed-book solver
                         remembers (repeatable; default the bundled corpus)
  -h, --help             this text

Misbehaviour kinds (each drawn independently for every completion):
${kinds}

Completion tokens, and prompt tokens without --context-window, are estimated as characters / 4.
`;
}

export type ParsedSimArgs = { readonly help: true } | { readonly help: false; readonly options: SimOptions; readonly pidFile?: string };

function usageError(message: string): TrajforgeError {
  return new TrajforgeError('BAD_USAGE', `trajforge sim: ${message} (see trajforge sim --help)`);
}

function numberArg(flag: string, raw: string | undefined, integer: boolean, min: number): number {
  if (raw === undefined || raw === '') throw usageError(`${flag} needs a value`);
  const n = Number(raw);
  if (!Number.isFinite(n) || (integer && !Number.isInteger(n)) || n < min) {
    throw usageError(`${flag} must be ${integer ? 'an integer' : 'a number'} >= ${min}, got '${raw}'`);
  }
  return n;
}

type NumberOption = 'port' | 'seed' | 'latencyMs' | 'callsPerSample' | 'contextWindow' | 'stallMs' | 'retryAfterMs';

/** The flags that take a number: the option each sets, whether it must be an integer, its bounds, and what the value is multiplied by. */
const NUMBER_FLAGS: Readonly<Record<string, { option: NumberOption; integer: boolean; min: number; max?: number; scale?: number }>> = {
  '--port': { option: 'port', integer: true, min: 0, max: 65535 },
  '--seed': { option: 'seed', integer: true, min: -Number.MAX_SAFE_INTEGER },
  '--latency-ms': { option: 'latencyMs', integer: false, min: 0 },
  '--calls-per-sample': { option: 'callsPerSample', integer: true, min: 0 },
  '--context-window': { option: 'contextWindow', integer: true, min: 1 },
  '--stall-ms': { option: 'stallMs', integer: false, min: 0 },
  '--retry-after': { option: 'retryAfterMs', integer: false, min: 0, scale: 1000 },
};

/** The flags that take no value: the option each turns on. */
const SWITCHES: Readonly<Record<string, 'rejectStop' | 'rejectMaxTokens' | 'reasoningParser' | 'lenient'>> = {
  '--lenient': 'lenient',
  '--reject-stop': 'rejectStop',
  '--reject-max-tokens': 'rejectMaxTokens',
  '--reasoning-parser': 'reasoningParser',
};

export function parseSimArgs(argv: readonly string[]): ParsedSimArgs {
  const options: SimOptions = {};
  const rates: Partial<Record<MisbehaviourKind, number>> = {};
  const burst: Partial<Record<MisbehaviourKind, number>> = {};
  let pidFile: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (arg === '-h' || arg === '--help') return { help: true };
    const eq = arg.indexOf('=');
    const flag = arg.startsWith('--') && eq !== -1 ? arg.slice(0, eq) : arg;
    const inline = arg.startsWith('--') && eq !== -1 ? arg.slice(eq + 1) : undefined;
    const value = (): string | undefined => inline ?? argv[++i];
    if (flag === '--pid-file') {
      pidFile = value();
      if (pidFile === undefined || pidFile === '') throw usageError('--pid-file needs a file');
    } else if (Object.hasOwn(NUMBER_FLAGS, flag)) {
      const f = NUMBER_FLAGS[flag]!;
      const n = numberArg(flag, value(), f.integer, f.min);
      if (f.max !== undefined && n > f.max) throw usageError(`${flag} must be at most ${f.max}, got ${n}`);
      options[f.option] = n * (f.scale ?? 1);
    } else if (Object.hasOwn(SWITCHES, flag)) {
      if (inline !== undefined) throw usageError(`${flag} takes no value`);
      options[SWITCHES[flag]!] = true;
    } else {
      readValueFlag(flag, arg, value, options, rates, burst);
    }
  }
  if (Object.keys(rates).length > 0) options.misbehave = rates;
  if (Object.keys(burst).length > 0) options.burst = burst;
  return { help: false, options, ...(pidFile !== undefined ? { pidFile } : {}) };
}

/** The flags whose values are words or lists (readValueFlag's cases). */
const VALUE_FLAGS = ['--reasoning-field', '--content-filter', '--burst', '--plant', '--served-model-name', '--knowledge', '--server-error-status', '--misbehave'];

/** An unknown flag, with the nearest known one when it looks like a slip. */
function unknownOption(arg: string): TrajforgeError {
  const flag = arg.replace(/=.*$/, '');
  const known = [...Object.keys(NUMBER_FLAGS), ...Object.keys(SWITCHES), ...VALUE_FLAGS, '--pid-file', '--help'];
  const near = flag.startsWith('--') ? suggestKey(flag.slice(2), known.map((k) => k.slice(2))) : undefined;
  return usageError(`unknown option '${flag}'${near !== undefined ? ` (did you mean --${near}?)` : ''}`);
}

/** The flags whose values are words or lists; anything else is an unknown option. */
function readValueFlag(
  flag: string,
  arg: string,
  value: () => string | undefined,
  options: SimOptions,
  rates: Partial<Record<MisbehaviourKind, number>>,
  burst: Partial<Record<MisbehaviourKind, number>>,
): void {
  switch (flag) {
    case '--reasoning-field': {
      const field = value();
      if (field !== 'reasoning_content' && field !== 'reasoning' && field !== 'both') throw usageError(`--reasoning-field takes reasoning_content, reasoning or both, got '${field ?? ''}'`);
      options.reasoningField = field;
      return;
    }
    case '--content-filter': {
      const text = value();
      if (text === undefined || text === '') throw usageError('--content-filter needs the text to refuse');
      options.contentFilter = text;
      return;
    }
    case '--burst': {
      const spec = value() ?? '';
      for (const item of spec.split(',')) {
        const eq = item.indexOf('=');
        const kind = item.slice(0, eq).trim();
        if (eq === -1 || !isMisbehaviourKind(kind)) throw usageError(`--burst takes KIND=N with a misbehaviour kind, got '${item}'`);
        burst[kind] = numberArg('--burst', item.slice(eq + 1).trim(), true, 0);
      }
      return;
    }
    case '--plant':
      options.plant = { ...options.plant, ...parsePlant(value() ?? '') };
      return;
    case '--served-model-name': {
      const name = value();
      if (name === undefined || name === '') throw usageError('--served-model-name needs a model name');
      options.models = [...(options.models ?? []), name];
      return;
    }
    case '--knowledge': {
      const file = value();
      if (file === undefined || file === '') throw usageError('--knowledge needs a file');
      options.knowledge = [...(options.knowledge ?? []), file];
      return;
    }
    case '--server-error-status': {
      const list = (value() ?? '').split(',').map((x) => x.trim());
      options.serverErrorStatuses = list.map((x) => {
        const n = numberArg('--server-error-status', x, true, 500);
        if (n > 599) throw usageError(`--server-error-status takes 5xx statuses, got '${x}'`);
        return n;
      });
      return;
    }
    case '--misbehave': {
      const spec = value();
      if (spec === undefined || spec === '') throw usageError('--misbehave needs KIND=RATE');
      // Comma-separated lists save repeating the flag in shell scripts.
      Object.assign(rates, parseMisbehave([spec]));
      return;
    }
    default:
      throw unknownOption(arg);
  }
}

/**
 * `KIND=RATE` specs (each may be a comma-separated list) → rates; `all=RATE` sets every kind
 * but those in EXCLUDED_FROM_ALL, and later specs override earlier ones. Throws BAD_USAGE on a bad spec.
 */
export function parseMisbehave(specs: readonly string[]): Partial<Record<MisbehaviourKind, number>> {
  const rates: Partial<Record<MisbehaviourKind, number>> = {};
  for (const spec of specs) for (const item of spec.split(',')) parseRate(item.trim(), rates);
  return rates;
}

function parseRate(item: string, rates: Partial<Record<MisbehaviourKind, number>>): void {
  const eq = item.indexOf('=');
  if (eq === -1) throw usageError(`--misbehave takes KIND=RATE, got '${item}'`);
  const kind = item.slice(0, eq).trim();
  const raw = item.slice(eq + 1).trim();
  const rate = Number(raw);
  if (raw === '' || !Number.isFinite(rate) || rate < 0 || rate > 1) {
    throw usageError(`misbehaviour rate must be a number from 0 to 1, got '${raw}' for ${kind}`);
  }
  if (kind === 'all') {
    for (const k of MISBEHAVIOUR_KINDS) if (!EXCLUDED_FROM_ALL.includes(k)) rates[k] = rate;
    return;
  }
  if (!isMisbehaviourKind(kind)) {
    throw usageError(`unknown misbehaviour '${kind}'; known: all, ${MISBEHAVIOUR_KINDS.join(', ')}`);
  }
  rates[kind] = rate;
}

/** Runs until SIGINT or SIGTERM; `--help` prints usage and returns at once. */
export async function runSimCli(argv: string[]): Promise<void> {
  const parsed = parseSimArgs(argv);
  if (parsed.help) {
    process.stdout.write(simUsage());
    return;
  }
  const sim = await startSim(parsed.options).catch((err: unknown) => {
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') {
      throw usageError(`port ${parsed.options.port} is already in use; pick another or --port 0 for a free one`);
    }
    throw err;
  });
  const stopped = untilStopped();
  // Written once it listens: a script that started it in the background waits for the file, and stops it with kill $(cat F).
  if (parsed.pidFile !== undefined) writeFileSync(parsed.pidFile, `${process.pid}\n`);
  process.stdout.write(`sim listening on ${sim.url}\n`);
  await stopped;
  await sim.close();
  if (parsed.pidFile !== undefined) rmSync(parsed.pidFile, { force: true });
  process.stderr.write(`sim stopped: ${JSON.stringify(sim.stats())}\n`);
}
