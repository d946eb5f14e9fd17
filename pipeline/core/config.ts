/**
 * The run config: one YAML or JSON file, `${VAR}` expansion, validation with the path of
 * the bad field, CLI overrides, and the fingerprint that guards resuming a run.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { DialectName, RunConfig } from '../../schemas/index.js';
import { canonicalJson } from '../canonical.js';
import { describeIssues, formatPath, locator, type Position } from './config-hints.js';
import { TrajforgeError } from '../errors.js';
import { PACKAGE_ROOT } from '../paths.js';
import { runSecrets, Scrubber, SECRET_NAME, type Expansion } from './secrets.js';
import { agentDialects, agentSettings, OPTIONAL_PROMPTS, sentPrompts } from './agent-config.js';

/** Flags of `trajforge generate` that override the config file. */
export interface ConfigOverrides {
  questions?: string | undefined;
  out?: string | undefined;
  limit?: number | undefined;
  concurrency?: number | undefined;
  samples?: number | undefined;
  /** `--until-correct` sets true. */
  untilCorrect?: boolean | undefined;
  shard?: string | undefined;
  seed?: number | undefined;
  baseUrl?: string | undefined;
  model?: string | undefined;
  dialect?: string | undefined;
  /** `--no-cache` sets false. */
  cache?: boolean | undefined;
  cacheDir?: string | undefined;
  keepToolResults?: number | undefined;
  maxContextTokens?: number | undefined;
  retries?: number | undefined;
}

/**
 * `${VAR}` and `${VAR:-default}` in every string value. Besides the environment,
 * `${TRAJFORGE_ROOT}` is the package root and `${CONFIG_DIR}` the config file's folder,
 * so a config can name bundled files from any working directory. Each variable filled from
 * `env` is pushed to `expanded`, with where it went: some of them are secrets (secrets.ts).
 */
export function expandVars(value: unknown, env: Record<string, string | undefined>, file: string, path = '', expanded?: Expansion[]): unknown {
  if (typeof value === 'string') {
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_m, name: string, fallback?: string) => {
      const v = env[name];
      if (v !== undefined && v !== '') {
        expanded?.push({ path, name, value: v });
        return v;
      }
      if (fallback !== undefined) return fallback;
      throw new TrajforgeError('MISSING_ENV', `${file}: ${path || '(root)'}: environment variable ${name} is not set`, {
        file,
        field: path,
      });
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => expandVars(v, env, file, `${path}[${i}]`, expanded));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = expandVars(v, env, file, path ? `${path}.${k}` : k, expanded);
    return out;
  }
  return value;
}

/**
 * A zod failure as one message per bad field: `file:line:col: endpoint.model: expected string`
 * (the line when `locate` finds the field in the file). With the `schema` that failed, an
 * unknown key gets "did you mean" and an MCP server entry the shape it came closest to.
 */
export function zodProblem(error: z.ZodError, file: string, schema?: z.core.$ZodType, locate?: (path: readonly PropertyKey[]) => Position | undefined): TrajforgeError {
  const issues = describeIssues(error.issues, schema);
  const lines = issues.map((i) => {
    const at = locate?.(i.path);
    return `${file}${at ? `:${at.line}:${at.col}` : ''}: ${formatPath(i.path)}: ${i.message}`;
  });
  const first = issues[0];
  const line = first ? locate?.(first.path)?.line : undefined;
  return new TrajforgeError('BAD_CONFIG', lines.join('\n'), { file, line, field: first ? formatPath(first.path) : undefined });
}

export function parseConfigText(text: string, file: string): unknown {
  try {
    return file.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    // The yaml library's position (1-based line and column); JSON.parse gives none.
    const pos = (err as { linePos?: Position[] }).linePos?.[0];
    const line = pos?.line;
    throw new TrajforgeError('BAD_CONFIG', `${file}${pos ? `:${pos.line}:${pos.col}` : ''}: not valid ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${yamlReason(err as Error)}`, {
      file,
      line,
    });
  }
}

/** The parser's message without the position it repeats (shown in front as file:line:col). */
function yamlReason(err: Error): string {
  return (err.message.split('\n')[0] ?? '').replace(/ at line \d+, column \d+:?$/, '');
}

/** Sets what the flags say; returns the paths it set, whose values come from no line of the file. */
function applyOverrides(raw: Record<string, any>, o: ConfigOverrides): string[] {
  const section = (k: string): Record<string, any> => (raw[k] ??= {});
  if (o.questions !== undefined) section('questions').path = o.questions;
  if (o.limit !== undefined) section('questions').limit = o.limit;
  if (o.samples !== undefined) section('questions').samples = o.samples;
  if (o.shard !== undefined) section('questions').shard = o.shard;
  if (o.seed !== undefined) {
    section('questions').seed = o.seed;
    section('endpoint').seed = o.seed;
  }
  if (o.out !== undefined) section('output').dir = o.out;
  if (o.concurrency !== undefined) raw.concurrency = o.concurrency;
  if (o.baseUrl !== undefined) section('endpoint').base_url = o.baseUrl;
  if (o.model !== undefined) section('endpoint').model = o.model;
  if (o.dialect !== undefined) raw.dialect = o.dialect;
  if (o.cache !== undefined) section('executor').cache = o.cache;
  if (o.cacheDir !== undefined) section('executor').cache_dir = o.cacheDir;
  if (o.keepToolResults !== undefined) section('context').keep_tool_results = o.keepToolResults;
  if (o.maxContextTokens !== undefined) section('context').max_context_tokens = o.maxContextTokens;
  if (o.retries !== undefined) section('retry').attempts = o.retries;
  if (o.untilCorrect !== undefined) section('questions').until_correct = o.untilCorrect;
  const set: [unknown, string][] = [
    [o.questions, 'questions.path'], [o.limit, 'questions.limit'], [o.samples, 'questions.samples'], [o.shard, 'questions.shard'],
    [o.seed, 'questions.seed'], [o.seed, 'endpoint.seed'], [o.out, 'output.dir'], [o.concurrency, 'concurrency'],
    [o.baseUrl, 'endpoint.base_url'], [o.model, 'endpoint.model'], [o.dialect, 'dialect'], [o.cache, 'executor.cache'],
    [o.cacheDir, 'executor.cache_dir'], [o.keepToolResults, 'context.keep_tool_results'],
    [o.maxContextTokens, 'context.max_context_tokens'], [o.retries, 'retry.attempts'],
    [o.untilCorrect, 'questions.until_correct'],
  ];
  return set.flatMap(([v, path]) => (v === undefined ? [] : [path]));
}

/**
 * Validates a config object (already expanded) with overrides applied. `locate` finds a field's
 * line in the file, for the error; a field a flag set is not looked for there.
 */
export function resolveConfig(raw: unknown, file: string, overrides: ConfigOverrides = {}, locate?: (path: readonly PropertyKey[]) => Position | undefined): RunConfig {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new TrajforgeError('BAD_CONFIG', `${file}: expected a mapping of settings at the top level`, { file });
  }
  const copy = structuredClone(raw) as Record<string, any>;
  const flagged = applyOverrides(copy, overrides);
  const parsed = RunConfig.safeParse(copy);
  if (!parsed.success) {
    const inFile = (path: readonly PropertyKey[]): Position | undefined => (flagged.includes(formatPath(path)) ? undefined : locate?.(path));
    throw zodProblem(parsed.error, file, RunConfig, inFile);
  }
  // Checked here, not in the schema: a refined object schema can no longer be extended.
  if (parsed.data.dialect_options !== undefined && parsed.data.dialect !== 'mcp-xml') {
    throw new TrajforgeError('BAD_CONFIG', `${file}: dialect_options: only the mcp-xml dialect takes options (today, tool_results); the dialect is ${parsed.data.dialect}`, {
      file,
      field: 'dialect_options',
    });
  }
  try {
    // The agents' references (sub-agents, servers, prompts, depth) are checked here, so their errors name the file and line too.
    agentSettings(parsed.data);
  } catch (err) {
    if (!(err instanceof TrajforgeError) || err.field === undefined) throw err;
    const at = locate?.(fieldPath(err.field));
    throw new TrajforgeError('BAD_CONFIG', `${file}${at ? `:${at.line}:${at.col}` : ''}: ${err.message}`, { file, line: at?.line, field: err.field });
  }
  return parsed.data;
}

/** `agents.main.sub_agents[0]` as a path: `['agents', 'main', 'sub_agents', 0]`. */
function fieldPath(field: string): PropertyKey[] {
  return field.split('.').flatMap((part) => {
    const m = /^(.*?)((?:\[\d+\])+)$/.exec(part);
    return m ? [m[1]!, ...[...m[2]!.matchAll(/\[(\d+)\]/g)].map((i) => Number(i[1]))] : [part];
  });
}

export function loadConfig(given: string, overrides: ConfigOverrides = {}, env: NodeJS.ProcessEnv = process.env): RunConfig {
  const file = bundledConfig(given);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new TrajforgeError('BAD_CONFIG', `${file}: cannot read config: ${(err as Error).message}`, { file });
  }
  const vars = { ...env, TRAJFORGE_ROOT: PACKAGE_ROOT, CONFIG_DIR: dirname(resolve(file)) };
  const expanded: Expansion[] = [];
  const cfg = resolveConfig(expandVars(parseConfigText(text, file), vars, file, '', expanded), file, overrides, locator(text));
  Object.defineProperty(cfg, EXPANDED, { value: expanded, enumerable: true });
  return cfg;
}

/**
 * A config the package ships, found from any directory: `data/configs/curate.yaml` as the
 * README writes it, or just `curate`, when no such file is where the user is. Else `file` as given.
 */
export function bundledConfig(file: string): string {
  if (existsSync(file)) return file;
  const name = /^(?:\.\/)?(?:data\/configs\/)?([a-z0-9-]+)(?:\.ya?ml)?$/.exec(file)?.[1];
  const shipped = name === undefined ? undefined : join(PACKAGE_ROOT, 'data', 'configs', `${name}.yaml`);
  return shipped !== undefined && existsSync(shipped) ? shipped : file;
}

/**
 * Where loadConfig keeps what it expanded: on the config object itself, under a symbol, so it
 * travels with the config through spreads (`{...config, output}`) and never into JSON, a
 * fingerprint or the manifest. A config made otherwise (resolveConfig, a manifest) has none.
 */
const EXPANDED = Symbol('trajforge.expanded');

export function expansionsOf(cfg: RunConfig): readonly Expansion[] {
  return (cfg as { [EXPANDED]?: Expansion[] })[EXPANDED] ?? [];
}

/** The run's secrets (secrets.ts) as a Scrubber: the API key from `env`, and what the config put in its tool servers. */
export function scrubberFor(cfg: RunConfig, env: NodeJS.ProcessEnv): Scrubber {
  return new Scrubber(runSecrets(cfg, env, expansionsOf(cfg)));
}

/**
 * The fields that change what a trajectory is. Resuming a run with different values is
 * refused (unless on purpose, `--allow-config-change`); the rest (endpoint URL, concurrency,
 * timeouts, restarts, the cache, limit, output dir) may change, since they decide whether a
 * request or a call succeeds, not what a successful one yields.
 *
 * Besides the config's own sampling, dialect, tools, budgets and selection: how each MCP
 * server is started (command, args, cwd, and the *names* of its env and headers, never their
 * values; a secret in an arg appears as `${VAR}`, as in the manifest's config; an HTTP
 * server's URL may move, like the endpoint's), the executor's cuts of what a tool returned
 * (`max_result_chars` is what the record keeps, `max_snippet_chars` what the model sees),
 * whether a retry is seeded with the failure's summary, and a hash of every prompt template a
 * run of this dialect can send. `env` is the one whose secrets are hidden as `${VAR}`.
 */
export function fingerprintFields(cfg: RunConfig, env: NodeJS.ProcessEnv = process.env): Record<string, unknown> {
  const { path, format, fields, shuffle, seed, samples, shard, until_correct } = cfg.questions;
  return {
    'endpoint.model': cfg.endpoint.model,
    'endpoint.temperature': cfg.endpoint.temperature,
    'endpoint.top_p': cfg.endpoint.top_p,
    'endpoint.max_tokens': cfg.endpoint.max_tokens,
    'endpoint.seed': cfg.endpoint.seed ?? null,
    'endpoint.extra_body': cfg.endpoint.extra_body,
    // Reasoning sent back is part of what the model sees on every later turn.
    'endpoint.send_reasoning': cfg.endpoint.send_reasoning,
    dialect: cfg.dialect,
    // The `Today is:` sentence and how results are sent are part of every request.
    dialect_options: cfg.dialect_options ?? null,
    tools: cfg.tools,
    mcpServers: Object.keys(cfg.mcpServers).sort(),
    'mcpServers.launch': serverLaunch(cfg, env),
    'questions.path': path === undefined || path === '-' ? path ?? null : resolve(path),
    // until_correct only when set, so runs made before the field existed keep their fingerprint.
    'questions.selection': { format, fields, shuffle, seed, samples, shard: shard ?? null, ...(until_correct ? { until_correct } : {}) },
    // The cost budget decides how far a run goes, not what a sample is: raising it continues the run.
    budgets: withoutCostBudget(cfg.budgets),
    rollback: cfg.rollback,
    context: cfg.context,
    validation: validationFingerprint(cfg),
    executor: { max_result_chars: cfg.executor.max_result_chars, max_snippet_chars: cfg.executor.max_snippet_chars },
    'retry.experience': cfg.retry.experience,
    instructions: cfg.instructions ?? null,
    prompts: promptHashes(agentDialects(cfg), sentPrompts(cfg)),
    // A run without agents records null: resuming it with agents is a change, refused like any other.
    agents: cfg.agents === undefined ? null : { sections: cfg.agents, max_agent_depth: cfg.max_agent_depth },
    // Only when set, so runs made before the field existed keep their fingerprint.
    ...(cfg.tokenizer === undefined ? {} : { tokenizer: cfg.tokenizer }),
  };
}

function withoutCostBudget(b: RunConfig['budgets']): Omit<RunConfig['budgets'], 'max_cost_usd'> {
  const { max_cost_usd: _, ...rest } = b;
  return rest;
}

/**
 * The validation settings, with of the judge only what changes a verdict: its model, sampling,
 * rubric threshold and prompt templates; not where it is, its key, timeouts, retries or cache.
 * Without a judge, the section as it always was (so older runs keep their fingerprint).
 */
function validationFingerprint(cfg: RunConfig): Record<string, unknown> {
  const { judge, ...rest } = cfg.validation;
  if (judge === undefined) return rest;
  const { model, temperature, max_tokens, extra_body, rubric_pass } = judge;
  return { ...rest, judge: { model, temperature, max_tokens, extra_body, rubric_pass, prompts: judgePromptHashes() } };
}

/** Each server as it is started, from the redacted config, so a secret never reaches the fingerprint. */
function serverLaunch(cfg: RunConfig, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const servers = (redactConfig(cfg, env).mcpServers ?? {}) as Record<string, Record<string, unknown>>;
  const names = (v: unknown): string[] => Object.keys((v ?? {}) as object).sort();
  const out: Record<string, unknown> = {};
  for (const name of Object.keys(servers).sort()) {
    const s = servers[name]!;
    out[name] =
      'command' in s
        ? { command: s.command, args: s.args ?? [], cwd: s.cwd ?? null, env: names(s.env) }
        : { type: s.type ?? null, headers: names(s.headers) };
  }
  return out;
}

/**
 * The prompt templates a run of these dialects can send, by a hash of their text: the shared
 * ones and the dialects' own (`<dialect>-*.txt`), not the other dialects'; the agent-only
 * prompts and a layout's only when the run sends them (`agentPrompts`: agent-config.ts `sentPrompts`). A template that trajforge adds
 * later is counted from the start, so a shared template is never missed.
 */
export function promptHashes(dialects: string | readonly string[], agentPrompts: readonly string[] = []): Record<string, string> {
  const dir = join(PACKAGE_ROOT, 'prompts');
  const used = typeof dialects === 'string' ? [dialects] : dialects;
  const others = DialectName.options.filter((d) => !used.includes(d));
  const out: Record<string, string> = {};
  for (const file of readdirSync(dir).sort()) {
    // The judge's templates go to the judge's fingerprint (validationFingerprint), with the judge;
    // synthesis's (`synth-*`) to a synthesis run's (pipeline/synthesize/fingerprint.ts): a rollout never sends them.
    if (!file.endsWith('.txt') || others.some((d) => file.startsWith(`${d}-`)) || file.startsWith('judge-') || file.startsWith('synth-')) continue;
    const stem = file.slice(0, -'.txt'.length);
    if (OPTIONAL_PROMPTS.includes(stem) && !agentPrompts.includes(stem)) continue;
    out[file] = createHash('sha256').update(readFileSync(join(dir, file))).digest('hex').slice(0, 16);
  }
  for (const stem of agentPrompts) {
    // A prompt the config names from outside the shared set (another dialect's prefix) is counted too.
    if (!(`${stem}.txt` in out)) out[`${stem}.txt`] = createHash('sha256').update(readFileSync(join(dir, `${stem}.txt`))).digest('hex').slice(0, 16);
  }
  return out;
}

/** The judge's prompt templates (`judge-*.txt`) by a hash of their text: part of the fingerprint when a run has a judge. */
export function judgePromptHashes(): Record<string, string> {
  return prefixedPromptHashes('judge-');
}

/** The prompt templates whose names start with `prefix` (`judge-`, `synth-`), by a hash of their text. */
export function prefixedPromptHashes(prefix: string): Record<string, string> {
  const dir = join(PACKAGE_ROOT, 'prompts');
  const out: Record<string, string> = {};
  for (const file of readdirSync(dir).sort()) {
    if (file.startsWith(prefix) && file.endsWith('.txt')) out[file] = createHash('sha256').update(readFileSync(join(dir, file))).digest('hex').slice(0, 16);
  }
  return out;
}

export function fingerprint(fields: Record<string, unknown>): string {
  return createHash('sha256').update(canonicalJson(fields)).digest('hex').slice(0, 16);
}

export interface FingerprintComparison {
  /** Fields both record, with different values. */
  readonly changed: string[];
  /**
   * Fields only one of them records: a manifest written before trajforge recorded them. A
   * change there cannot be told, so it is said rather than refused.
   */
  readonly unknown: string[];
}

/** Compares a run's recorded fingerprint fields with another's (the config now, or another shard's). */
export function compareFingerprints(before: Record<string, unknown>, now: Record<string, unknown>): FingerprintComparison {
  const changed: string[] = [];
  const unknown: string[] = [];
  for (const k of [...new Set([...Object.keys(before), ...Object.keys(now)])].sort()) {
    if (!Object.hasOwn(before, k) || !Object.hasOwn(now, k)) unknown.push(k);
    else if (canonicalJson(before[k]) !== canonicalJson(now[k])) changed.push(k);
  }
  return { changed, unknown };
}

/**
 * The config as it may be written to disk. Values under secret-looking keys (headers,
 * server env) are replaced by `[redacted]`; elsewhere (args, URLs…) the run's secrets
 * (scrubberFor) and the value of every secret-looking environment variable become
 * `[redacted:NAME]`.
 */
export function redactConfig(cfg: RunConfig, env: NodeJS.ProcessEnv = process.env): Record<string, unknown> {
  const fromEnv = Object.entries(env).flatMap(([name, value]) => (value !== undefined && SECRET_NAME.test(name) ? [{ name, value }] : []));
  const scrubber = new Scrubber([...runSecrets(cfg, env, expansionsOf(cfg)), ...fromEnv]);
  const walk = (v: unknown, key: string): unknown => {
    if (typeof v === 'string') return SECRET_NAME.test(key) && key !== 'api_key_env' ? '[redacted]' : scrubber.text(v);
    if (Array.isArray(v)) return v.map((x) => walk(x, key));
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x, k)]));
    }
    return v;
  };
  const out = walk(cfg, '') as Record<string, unknown>;
  // A path, not a secret, though its name holds "token"; env values in it are still scrubbed.
  if (cfg.tokenizer !== undefined) out.tokenizer = scrubber.text(cfg.tokenizer);
  return out;
}

/** A server on this machine (vLLM, SGLang, the sim): one that may need no key. */
export function isLoopbackUrl(url: string): boolean {
  try {
    const h = new URL(url).hostname;
    return h === 'localhost' || h === '[::1]' || h === '::1' || h.startsWith('127.');
  } catch {
    return false;
  }
}

/**
 * The key of an OpenAI-compatible server, from the environment only: the value of the
 * variable `api_key_env` names. `none`, or a server on loopback, may go without ('EMPTY').
 * `field` is where the section is set (`endpoint`, `validation.judge`), for the message. One
 * function for the model's endpoint and the judge's.
 */
export function keyFromEnv(section: { readonly api_key_env: string; readonly base_url: string }, field: string, env: NodeJS.ProcessEnv): string {
  const name = section.api_key_env;
  const key = env[name];
  if (key) return key;
  if (name === 'none' || isLoopbackUrl(section.base_url)) return 'EMPTY';
  throw new TrajforgeError(
    'MISSING_ENV',
    `${field}.api_key_env: environment variable ${name} is not set (the key for ${section.base_url}); set it, or set api_key_env: none for a server without keys`,
    { field: `${field}.api_key_env` },
  );
}

/** The endpoint's key: the environment only. A loopback server (vLLM, sim) may need none. */
export function resolveApiKey(cfg: RunConfig, env: NodeJS.ProcessEnv): string {
  return keyFromEnv(cfg.endpoint, 'endpoint', env);
}
