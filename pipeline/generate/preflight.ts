/**
 * `trajforge check`: whether a run of this config can start, learnt with the real pieces and
 * a handful of small requests, one line per check with what to do when it fails.
 *
 * What it sends to the model endpoint, at most: `GET /models`; an 8-token completion (is the
 * max-tokens field taken and honoured?); and one turn of the first question in the run's
 * dialect with the run's tools and stop strings (does the endpoint honour `stop`, does the
 * model write the dialect?). A request the endpoint refuses for its `stop` or `max_tokens` is
 * sent once more without it, as a run does: five requests in the worst case. The tool servers
 * start as in a run (without the result cache) and stop again; nothing is written.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { RunManifest, type RunConfig } from '../../schemas/index.js';
import { compareFingerprints, fingerprintFields, resolveApiKey, scrubberFor } from '../core/config.js';
import { getDialect } from '../dialects/index.js';
import type { ToolSpec, TurnAction } from '../dialects/types.js';
import { TrajforgeError } from '../errors.js';
import { fsReason } from '../files.js';
import type { Scrubber } from '../core/secrets.js';
import { Executor } from './executor.js';
import { Agents } from './agents.js';
import { LlmClient, LlmError, PAST_MAX_TOKENS, type Completion } from '../core/llm/llm.js';
import { probeEndpoint, unreachableHint, type Reachability } from '../core/llm/probe.js';
import { countSamples, sampleQuestions } from './sampler.js';
import { MANIFEST } from '../core/run-dir/names.js';
import { notARunPlace } from '../core/run-dir/place.js';
import { configWarnings, noToolsListedWarning } from './warnings.js';
import { createJudge, judgeSettings } from '../core/judge/judge.js';
import { resolveJudgeKey } from '../core/judge/settings.js';
import { VERDICT, verdictMaterial } from '../core/judge/kinds.js';

export type CheckStatus = 'ok' | 'warn' | 'FAIL' | 'skip';

export interface CheckLine {
  readonly status: CheckStatus;
  /** What was checked: `key`, `endpoint`, `server corpus`… */
  readonly name: string;
  /** What it found, and on failure what to do. */
  readonly detail: string;
  /** Further lines shown under it (the first questions as parsed). */
  readonly more?: readonly string[] | undefined;
}

export interface PreflightOptions {
  readonly config: RunConfig;
  readonly env?: NodeJS.ProcessEnv | undefined;
  /** Called with each line as soon as it is known. */
  readonly onLine?: ((line: CheckLine) => void) | undefined;
}

export interface PreflightResult {
  readonly lines: readonly CheckLine[];
  /** No line failed: a run of this config can start. */
  readonly canRun: boolean;
}

/** The completion limit the max-tokens check asks for. */
export const LIMIT_PROBE_TOKENS = 8;
/** Questions shown as parsed. */
const ROWS_SHOWN = 3;
const PREVIEW_CHARS = 80;

export async function preflight(opts: PreflightOptions): Promise<PreflightResult> {
  const { config } = opts;
  const env = opts.env ?? process.env;
  const scrubber = scrubberFor(config, env);
  const lines: CheckLine[] = [];
  // Every line goes through the run's scrubber: a server's stderr or an endpoint's message may hold a key.
  const say = (status: CheckStatus, name: string, detail: string, more?: string[]): void => {
    const line = { status, name, detail: scrubber.text(detail), more: more?.map((m) => scrubber.text(m)) };
    lines.push(line);
    opts.onLine?.(line);
  };

  const key = checkKey(config, env, say);
  await checkQuestions(config, say);
  checkOutput(config, env, say);
  const main = await checkServers(config, env, scrubber, say);
  await checkEndpoint(config, key, main, say);
  await checkJudge(config, env, say);
  for (const w of configWarnings(config)) say('warn', w.id, w.message);
  return { lines, canRun: !lines.some((l) => l.status === 'FAIL') };
}

type Say = (status: CheckStatus, name: string, detail: string, more?: string[]) => void;

/** The key the run will send: present, or not needed. Never printed, not even in part. */
function checkKey(config: RunConfig, env: NodeJS.ProcessEnv, say: Say): string | undefined {
  const name = config.endpoint.api_key_env;
  if (name === 'none') {
    say('ok', 'key', 'none sent (endpoint.api_key_env: none)');
    return 'EMPTY';
  }
  try {
    const key = resolveApiKey(config, env);
    if (key === 'EMPTY') say('ok', 'key', `${name} is not set; none is sent to a loopback endpoint`);
    else say('ok', 'key', `${name} is set (${key.length} characters)`);
    return key;
  } catch {
    say('FAIL', 'key', `${name} is not set (the key for ${config.endpoint.base_url}): \`export ${name}=…\`, or endpoint.api_key_env: none for an endpoint without keys`);
    return undefined;
  }
}

async function checkQuestions(config: RunConfig, say: Say): Promise<void> {
  const path = config.questions.path;
  if (path === undefined) return say('FAIL', 'questions', 'no questions file: set questions.path in the config, or pass --questions F');
  if (path === '-') return say('skip', 'questions', 'read from stdin when the run starts; not read here');
  try {
    const total = await countSamples({ path, config: config.questions });
    const rows: string[] = [];
    const { samples } = sampleQuestions({ path, config: config.questions });
    for await (const s of samples) {
      const q = s.question;
      rows.push(`${s.sample_id}  ${JSON.stringify(preview(q.question))}${q.answer !== undefined ? `  answer: ${JSON.stringify(preview(q.answer))}` : ''}`);
      if (rows.length >= ROWS_SHOWN) break;
    }
    if (total === 0) return say('FAIL', 'questions', `${path}: no questions selected (check the file, questions.limit and questions.shard)`);
    say('ok', 'questions', `${path}: ${total} samples; the first as parsed:`, rows);
  } catch (err) {
    if (!(err instanceof TrajforgeError)) throw err;
    say('FAIL', 'questions', err.message);
  }
}

function preview(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > PREVIEW_CHARS ? `${flat.slice(0, PREVIEW_CHARS)}…` : flat;
}

/** The run directory: a new one can be made there, or the one there resumes with this config. */
function checkOutput(config: RunConfig, env: NodeJS.ProcessEnv, say: Say): void {
  const dir = config.output.dir;
  const manifestPath = join(dir, MANIFEST);
  let text: string | undefined;
  try {
    text = readFileSync(manifestPath, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ENOTDIR') return say('FAIL', 'output', `${manifestPath}: ${fsReason(err)}: choose another output.dir (or --out)`);
  }
  if (text !== undefined) {
    // What RunStore.open would refuse, refused here with the same words.
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return say('FAIL', 'output', `${manifestPath}: not valid JSON: choose another output.dir (or --out)`);
    }
    const manifest = RunManifest.safeParse(parsed);
    if (!manifest.success) return say('FAIL', 'output', `${manifestPath}: not a trajforge run manifest (${manifest.error.issues[0]?.message}): choose another output.dir (or --out)`);
    const { changed } = compareFingerprints(manifest.data.fingerprint_fields ?? {}, fingerprintFields(config, env));
    const { accepted, failed } = manifest.data.counts;
    if (changed.length > 0) {
      return say('FAIL', 'output', `${dir} holds a run made with another config (${changed.join(', ')} differ): generate would refuse to resume it. Choose another output.dir (or --out), or resume it on purpose with --allow-config-change`);
    }
    return say('ok', 'output', `${dir} holds a run this config resumes (${accepted} accepted, ${failed} failed)`);
  }
  const notRun = notARunPlace(dir);
  if (notRun !== undefined) return say('FAIL', 'output', `${notRun}: choose another output.dir (or --out)`);
  // The nearest part of the path that exists must be a directory we can make files in.
  let existing = resolve(dir);
  while (!exists(existing) && dirname(existing) !== existing) existing = dirname(existing);
  try {
    if (!statSync(existing).isDirectory()) return say('FAIL', 'output', `${dir}: ${existing} is a file, not a directory: choose another output.dir (or --out)`);
    rmSync(mkdtempSync(join(existing, '.trajforge-check-')), { recursive: true });
  } catch (err) {
    return say('FAIL', 'output', `${dir}: cannot write in ${existing} (${fsReason(err)}): choose another output.dir (or --out)`);
  }
  say('ok', 'output', existing === resolve(dir) ? `${dir} exists and is writable; no run in it yet` : `${dir} will be made (${existing} is writable)`);
}

/**
 * The judge in the loop (`validation.judge`), when the config has one: its key, `GET /models`,
 * and one grading of an answer that is plainly right, read as a run reads it. One or two
 * requests; `--until-correct` without a judge fails here as it would at the run's start.
 */
async function checkJudge(config: RunConfig, env: NodeJS.ProcessEnv, say: Say): Promise<void> {
  const judge = config.validation.judge;
  if (judge === undefined) {
    if (config.questions.until_correct) say('FAIL', 'judge', 'questions.until_correct (--until-correct) needs a judge: set validation.judge (the judge decides what is correct)');
    return;
  }
  let key: string;
  try {
    key = resolveJudgeKey(judge, env);
  } catch {
    return say('FAIL', 'judge', `${judge.api_key_env} is not set (the key for the judge at ${judge.base_url}): \`export ${judge.api_key_env}=…\`, or validation.judge.api_key_env: none`);
  }
  const reach = await probeEndpoint(judge.base_url, key, config.endpoint.probe_timeout_ms);
  if (!reach.reachable) return say('FAIL', 'judge', `${reach.why} at ${judge.base_url} — ${unreachableHint(judge.base_url, reach.code)}. A run would record every sample unjudged`);
  if (reach.status === 401 || reach.status === 403) return say('FAIL', 'judge', `the judge refused its key (${reach.status}: ${reach.message ?? 'no message'}): check ${judge.api_key_env}`);
  // One grading through the judge as a run has it (its prompt, its reading of replies), without cache or retries.
  const tester = createJudge({ ...judgeSettings(config, { env })!, timeout_ms: config.endpoint.probe_timeout_ms, max_retries: 0, unreadable_retries: 0, cache: false }, { env, scrubber: scrubberFor(config, env) });
  const asked = await tester.ask(VERDICT, verdictMaterial('What is the capital of France?', ['Paris'], 'The capital of France is Paris.'));
  if (!('error' in asked)) return say(asked.value.verdict === 'CORRECT' ? 'ok' : 'warn', 'judge', `${judge.model} at ${judge.base_url} graded a plainly right test answer ${asked.value.verdict}`);
  if (asked.raw !== undefined) return say('warn', 'judge', `${judge.model} at ${judge.base_url} answered a test grading with no readable verdict ("${preview(asked.raw)}"): a run would record such samples unjudged`);
  say('FAIL', 'judge', `a test grading failed at ${judge.base_url}: ${asked.error}; check validation.judge.model and its key`);
}

/** A word as a shell reads it back: quoted only when it has to be. */
export function shellWord(w: string): string {
  return /^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`;
}

function exists(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Starts each server alone (a line each: its tools, or why it did not start), then all of them
 * with the config's aliases, limits and expose list as a run does (a line: the tools the model
 * is offered, or the clash or the dangling alias). Returns the main agent as a run builds it
 * (its dialect, system prompt and tools: with agents, its sub-agents among them), for the turn;
 * undefined when the tools could not be listed.
 */
async function checkServers(config: RunConfig, env: NodeJS.ProcessEnv, scrubber: Scrubber, say: Say): Promise<MainAgent | undefined> {
  const executor = { ...config.executor, cache: false };
  const enabled = Object.entries(config.mcpServers).filter(([, s]) => s.disabled !== true);
  for (const [name] of Object.entries(config.mcpServers).filter(([, s]) => s.disabled === true)) say('skip', `server ${name}`, 'disabled');
  const quiet = (): void => {};
  const alone = await Promise.all(
    enabled.map(async ([name, server]) => {
      const started = performance.now();
      try {
        const ex = await Executor.start({ servers: { [name]: server }, tools: { aliases: {}, limits: {} }, executor, env, scrubber, warn: quiet });
        const names = ex.tools().map((t) => t.name);
        await ex.close();
        return { name, ok: true as const, detail: `started in ${((performance.now() - started) / 1000).toFixed(1)} s; ${names.length} tool${names.length === 1 ? "" : "s"}: ${names.join(', ') || '(none)'}` };
      } catch (err) {
        if (!(err instanceof TrajforgeError)) throw err;
        const [first, ...rest] = err.message.split('\n');
        const how = 'command' in server ? `; try it yourself: \`${[server.command, ...server.args].map(shellWord).join(' ')}\`` : '; check its url and headers';
        return { name, ok: false as const, detail: `${first}${how}`, more: rest };
      }
    }),
  );
  for (const s of alone) say(s.ok ? 'ok' : 'FAIL', `server ${s.name}`, s.detail, s.ok ? undefined : s.more);
  if (alone.some((s) => !s.ok)) {
    say('skip', 'tools', 'the tools offered are checked once every server starts');
    return undefined;
  }
  try {
    const ex = await Executor.start({ servers: config.mcpServers, tools: config.tools, executor, env, scrubber, warn: quiet });
    const tools = ex.tools();
    // The agents as the run builds them; with agents, each one's tools too: its view of the servers and its sub-agents, no name twice.
    let main: MainAgent;
    let offered: [string, readonly ToolSpec[]][];
    try {
      const agents = new Agents({ config, executor: ex });
      main = agents.shown()[0]!;
      offered = agents.configured ? agents.offered() : [];
    } finally {
      await ex.close();
    }
    for (const [name, list] of offered) say('ok', `tools ${name}`, `${list.length} offered to agent ${name}: ${list.map((t) => t.name).join(', ') || 'none'}`);
    if (enabled.length === 0) return main; // configWarnings says no_tools
    // With agents each agent is offered its own share (the lines above); these are every server's tools.
    const to = offered.length > 0 ? 'listed by the servers' : 'offered to the model';
    if (tools.length === 0) say('warn', 'tools', noToolsListedWarning(enabled.map(([n]) => n)).message);
    else say('ok', 'tools', `${tools.length} ${to}, no name offered twice: ${tools.map((t) => t.name).join(', ')}`);
    return main;
  } catch (err) {
    if (!(err instanceof TrajforgeError)) throw err;
    say('FAIL', 'tools', err.message);
    return undefined;
  }
}

/** The main agent as a run builds it: the turn check sends what its first request would. */
type MainAgent = ReturnType<Agents['shown']>[number];

/** Reachable, the model served, the limit honoured, `stop` honoured, the dialect spoken, and whether turns stream. */
/** The base URL with `/v1` added when that one lists models (the usual slip: `http://host:8000` for vLLM); else undefined. */
async function underV1(baseUrl: string, key: string, timeoutMs: number): Promise<string | undefined> {
  const trimmed = baseUrl.replace(/\/+$/, '');
  if (/\/v1$/.test(trimmed)) return undefined;
  const v1 = `${trimmed}/v1`;
  const r = await probeEndpoint(v1, key, timeoutMs);
  return r.reachable && r.status === 200 ? v1 : undefined;
}

async function checkEndpoint(config: RunConfig, key: string | undefined, main: MainAgent | undefined, say: Say): Promise<void> {
  const ep = config.endpoint;
  const skipAll = (why: string): void => {
    for (const name of ['model', 'max_tokens', 'stop', 'turn', 'stream']) say('skip', name, why);
  };
  if (key === undefined) {
    say('skip', 'endpoint', 'no key to send');
    return skipAll('no key to send');
  }
  const reach = await probeEndpoint(ep.base_url, key, ep.probe_timeout_ms);
  if (!reach.reachable) {
    say('FAIL', 'endpoint', `${reach.why} at ${ep.base_url} — ${unreachableHint(ep.base_url, reach.code)}`);
    return skipAll('the endpoint did not answer');
  }
  const withV1 = reach.status === 404 ? await underV1(ep.base_url, key, ep.probe_timeout_ms) : undefined;
  if (withV1 !== undefined) {
    say('FAIL', 'endpoint', `${ep.base_url} answered GET /models with 404, ${withV1}/models answers: OpenAI-compatible servers (vLLM, SGLang, the sim) serve under /v1. Set endpoint.base_url (or --base-url) to ${withV1}`);
    return skipAll('the base URL lacks /v1');
  }
  say('ok', 'endpoint', `${ep.base_url} answered GET /models (${reach.status}) in ${Math.round(reach.ms)} ms`);
  if (reach.status === 401 || reach.status === 403) {
    say('FAIL', 'key', `the endpoint refused the key (${reach.status}: ${reach.message ?? 'no message'}): check ${ep.api_key_env}`);
    return skipAll('the key was refused');
  }

  // The tiny completion: is the max-tokens field taken, and is it honoured?
  LlmClient.resetStopMemory();
  const client = (maxTokens: number, timeoutMs: number): LlmClient =>
    new LlmClient({ ...ep, max_tokens: maxTokens, timeout_ms: timeoutMs, max_retries: 0, length_retries: 0, repetition_retries: 0 }, { apiKey: key });
  const limitClient = client(LIMIT_PROBE_TOKENS, ep.probe_timeout_ms);
  let limit: Completion;
  try {
    limit = await limitClient.complete({ messages: [{ role: 'user', content: 'Count from 1 to 500, separated by spaces. Write only the numbers.' }], stop: [] });
  } catch (err) {
    const e = err as LlmError;
    if (e.status === 404) {
      const served = reach.models?.length ? `; it serves: ${listed(reach.models)}` : '';
      say('FAIL', 'model', `${ep.model} is not served at ${ep.base_url} (404: ${e.message})${served}. Set endpoint.model (or --model)`);
    } else if (e.status === 401 || e.status === 403) {
      say('FAIL', 'key', `the endpoint refused the key (${e.message}): check ${ep.api_key_env}`);
    } else {
      say('FAIL', 'model', `a ${LIMIT_PROBE_TOKENS}-token completion failed: ${e.message}`);
    }
    for (const name of ['max_tokens', 'stop', 'turn', 'stream']) say('skip', name, 'the first completion failed');
    return;
  }
  say(...modelLine(ep.model, reach));
  say(...limitLine(limit, limitClient, ep.model));

  // One turn of the first question, as the run will send it.
  // Without the main agent (a server failed to start), the dialect's prompt with no tools.
  const dialect = main?.dialect ?? getDialect(config.dialect);
  const question = await firstQuestion(config);
  const offered = main?.tools ?? [];
  const system = main?.systemPrompt ?? [dialect.systemPrompt(offered), config.instructions].filter(Boolean).join('\n\n');
  const requestTools = dialect.requestTools?.(offered);
  const turnClient = client(ep.max_tokens, ep.timeout_ms);
  let turn: Completion;
  try {
    turn = await turnClient.complete({
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: question },
      ],
      stop: dialect.stopStrings,
      ...(requestTools === undefined || requestTools.length === 0 ? {} : { tools: requestTools, toolChoice: 'auto' as const }),
    });
  } catch (err) {
    say('FAIL', 'turn', `one turn in the ${dialect.name} dialect failed: ${(err as Error).message}`);
    say('skip', 'stop', 'the turn failed');
    say(...streamLine(config, turnClient, dialect.stopStrings));
    return;
  }
  const repaired = dialect.repairTurn(turn.text, turn.finishReason, turn.toolCalls);
  say(...stopLine(dialect.stopStrings, turn, repaired.action, turnClient, ep.model));
  say(...turnLine(config, dialect.name, turn, repaired.action, offered, main === undefined));
  say(...streamLine(config, turnClient, dialect.stopStrings));
}

type Line = [CheckStatus, string, string];

function listed(models: readonly string[]): string {
  return models.length > 8 ? `${models.slice(0, 8).join(', ')}, … (${models.length} in all)` : models.join(', ');
}

function modelLine(model: string, reach: Extract<Reachability, { reachable: true }>): Line {
  if (reach.models === undefined) return ['ok', 'model', `${model} answered (the endpoint lists no models: GET /models gave ${reach.status}${reach.status === 404 ? '; does base_url end in /v1?' : ''})`];
  if (reach.models.includes(model)) return ['ok', 'model', `${model} is listed by GET /models and answered`];
  return ['warn', 'model', `${model} answered, but GET /models does not list it (${listed(reach.models)}): an alias? check endpoint.model`];
}

function limitLine(c: Completion, client: LlmClient, model: string): Line {
  const field = client.stats().maxCompletionTokensModels.includes(model)
    ? `max_completion_tokens (the model refused max_tokens; trajforge switches by itself, endpoint.completion_limit_param: max_completion_tokens saves the refused request)`
    : 'max_tokens';
  const counted = c.estimated ? `${c.completionTokens} by a local count (the endpoint sent no usage)` : `${c.completionTokens}`;
  if (c.completionTokens > PAST_MAX_TOKENS * LIMIT_PROBE_TOKENS) {
    return ['warn', 'max_tokens', `ignored: asked for ${LIMIT_PROBE_TOKENS} tokens in ${field}, got ${counted}. Turns run past endpoint.max_tokens; trajforge keeps them and flags them (endpoint.past_max_tokens)`];
  }
  if (c.finishReason !== 'length') return ['ok', 'max_tokens', `${field} taken; not exercised: the model stopped by itself after ${counted} tokens`];
  return ['ok', 'max_tokens', `honoured: asked for ${LIMIT_PROBE_TOKENS} tokens in ${field}, got ${counted} (finish: length)`];
}

function stopLine(stops: readonly string[], turn: Completion, action: TurnAction, client: LlmClient, model: string): Line {
  if (stops.length === 0) return ['ok', 'stop', 'not used by this dialect (calls come back as tool_calls)'];
  const shown = stops.map((s) => `\`${s}\``).join(', ');
  if (client.stats().stopRejectedModels.includes(model)) {
    return ['warn', 'stop', `the endpoint rejects \`stop\` (400 unsupported_parameter): trajforge enforces ${shown} itself, cutting each turn there as it streams`];
  }
  if (turn.clientStop) return ['warn', 'stop', `ignored: the endpoint answered past ${shown}; trajforge cuts there itself (and, with endpoint.stream: auto, streams this model to stop paying for the rest)`];
  if (turn.finishReason === 'stop' && (action.kind === 'call' || action.kind === 'calls')) return ['ok', 'stop', `honoured: the endpoint ended the turn at ${shown}`];
  return ['ok', 'stop', `${shown} sent and accepted; not exercised (the turn did not reach one)`];
}

function turnLine(config: RunConfig, d: string, turn: Completion, action: TurnAction, tools: readonly ToolSpec[], toolsUnknown: boolean): Line {
  const tokens = `${turn.completionTokens} tokens`;
  const without = toolsUnknown ? ' (sent without tools: the tools check did not pass)' : '';
  if (action.kind === 'call' || action.kind === 'calls') {
    const calls = action.kind === 'call' ? [action.call] : action.calls;
    const names = calls.map((c) => c.toolName);
    const unknown = names.filter((n) => !tools.some((t) => t.name === n));
    if (unknown.length > 0) return ['warn', 'turn', `the model called ${unknown.join(', ')}, which is not offered (${d}, ${tokens})${without}: the run rolls such turns back (unknown_tool)`];
    return ['ok', 'turn', `the model's first turn calls ${names.join(', ')} in the ${d} dialect (${tokens})${without}`];
  }
  if (turn.finishReason === 'length') {
    return ['warn', 'turn', `the first turn was cut at endpoint.max_tokens (${config.endpoint.max_tokens}) before a call or an answer (${tokens})${without}: raise endpoint.max_tokens`];
  }
  if (action.kind === 'answer') {
    return ['warn', 'turn', `the model answered at once, with no tool call (${d}, ${tokens})${without}: if it does so often, the trajectories hold no tool use`];
  }
  const text = preview(turn.text.replace(/<think>[\s\S]*?<\/think>/g, ''));
  return ['warn', 'turn', `the first turn holds neither a call nor an answer in the ${d} dialect (${tokens})${without}: does the model write ${d}? It wrote: ${JSON.stringify(text)}`];
}

function streamLine(config: RunConfig, client: LlmClient, stops: readonly string[]): Line {
  const { stream, model } = config.endpoint;
  if (stream === true) return ['ok', 'stream', 'every turn is streamed (endpoint.stream: true)'];
  const why = client.stats().streamedModels.find((m) => m.model === model)?.why;
  if (stream === false) {
    return why === undefined
      ? ['ok', 'stream', 'whole answers (endpoint.stream: false)']
      : ['warn', 'stream', `endpoint.stream is false, yet ${why}: each turn runs to its end before trajforge cuts it; endpoint.stream: auto would stop it at the stop string`];
  }
  if (why !== undefined) return ['ok', 'stream', `turns will be streamed, since ${why} (endpoint.stream: auto)`];
  if (stops.length === 0) return ['ok', 'stream', 'whole answers: this dialect sends no stop strings to cut at (endpoint.stream: auto streams a model once it loops)'];
  return ['ok', 'stream', 'whole answers: the endpoint applied the stop strings (endpoint.stream: auto streams a model once it rejects stop, answers past one, or loops)'];
}

/** The first question the run would ask (a stand-in when the file cannot be read: that is the questions line's failure). */
async function firstQuestion(config: RunConfig): Promise<string> {
  const path = config.questions.path;
  if (path !== undefined && path !== '-') {
    try {
      for await (const s of sampleQuestions({ path, config: config.questions }).samples) return s.question.question;
    } catch {
      // Reported by the questions check.
    }
  }
  return 'Which year was the first version of the HTTP protocol documented?';
}
