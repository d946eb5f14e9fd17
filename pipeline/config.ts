/**
 * The run config: one YAML or JSON file, `${VAR}` expansion, validation with the path of
 * the bad field, CLI overrides, and the fingerprint that guards resuming a run.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { RunConfig } from '../schemas/index.js';
import { canonicalJson } from './canonical.js';
import { TrajforgeError } from './errors.js';
import { PACKAGE_ROOT } from './paths.js';

/** Flags of `trajforge generate` that override the config file. */
export interface ConfigOverrides {
  questions?: string | undefined;
  out?: string | undefined;
  limit?: number | undefined;
  concurrency?: number | undefined;
  samples?: number | undefined;
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
 * so a config can name bundled files from any working directory.
 */
export function expandVars(value: unknown, env: Record<string, string | undefined>, file: string, path = ''): unknown {
  if (typeof value === 'string') {
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_m, name: string, fallback?: string) => {
      const v = env[name];
      if (v !== undefined && v !== '') return v;
      if (fallback !== undefined) return fallback;
      throw new TrajforgeError('MISSING_ENV', `${file}: ${path || '(root)'}: environment variable ${name} is not set`, {
        file,
        field: path,
      });
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => expandVars(v, env, file, `${path}[${i}]`));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = expandVars(v, env, file, path ? `${path}.${k}` : k);
    return out;
  }
  return value;
}

function formatZodPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out || '(root)';
}

/** A zod failure as one message per bad field: `file: endpoint.model: expected string`. */
export function zodProblem(error: z.ZodError, file: string): TrajforgeError {
  const lines = error.issues.map((i) => `${file}: ${formatZodPath(i.path)}: ${i.message}`);
  const first = error.issues[0];
  return new TrajforgeError('BAD_CONFIG', lines.join('\n'), { file, field: first ? formatZodPath(first.path) : undefined });
}

export function parseConfigText(text: string, file: string): unknown {
  try {
    return file.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    const line = (err as { linePos?: { line: number }[] }).linePos?.[0]?.line;
    throw new TrajforgeError('BAD_CONFIG', `${file}${line ? `:${line}` : ''}: not valid ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${(err as Error).message.split('\n')[0]}`, {
      file,
      line,
    });
  }
}

function applyOverrides(raw: Record<string, any>, o: ConfigOverrides): void {
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
}

/** Validates a config object (already expanded) with overrides applied. */
export function resolveConfig(raw: unknown, file: string, overrides: ConfigOverrides = {}): RunConfig {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new TrajforgeError('BAD_CONFIG', `${file}: expected a mapping of settings at the top level`, { file });
  }
  const copy = structuredClone(raw) as Record<string, any>;
  applyOverrides(copy, overrides);
  const parsed = RunConfig.safeParse(copy);
  if (!parsed.success) throw zodProblem(parsed.error, file);
  return parsed.data;
}

export function loadConfig(file: string, overrides: ConfigOverrides = {}, env: NodeJS.ProcessEnv = process.env): RunConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new TrajforgeError('BAD_CONFIG', `${file}: cannot read config: ${(err as Error).message}`, { file });
  }
  const vars = { ...env, TRAJFORGE_ROOT: PACKAGE_ROOT, CONFIG_DIR: dirname(resolve(file)) };
  return resolveConfig(expandVars(parseConfigText(text, file), vars, file), file, overrides);
}

/**
 * The fields that change what a trajectory is. Resuming a run with different values is
 * refused; the rest (endpoint URL, concurrency, timeouts, limit, output dir) may change.
 */
export function fingerprintFields(cfg: RunConfig): Record<string, unknown> {
  const { path, format, fields, shuffle, seed, samples, shard } = cfg.questions;
  return {
    'endpoint.model': cfg.endpoint.model,
    'endpoint.temperature': cfg.endpoint.temperature,
    'endpoint.top_p': cfg.endpoint.top_p,
    'endpoint.max_tokens': cfg.endpoint.max_tokens,
    'endpoint.seed': cfg.endpoint.seed ?? null,
    'endpoint.extra_body': cfg.endpoint.extra_body,
    dialect: cfg.dialect,
    tools: cfg.tools,
    mcpServers: Object.keys(cfg.mcpServers).sort(),
    'questions.path': path === undefined || path === '-' ? path ?? null : resolve(path),
    'questions.selection': { format, fields, shuffle, seed, samples, shard: shard ?? null },
    budgets: cfg.budgets,
    rollback: cfg.rollback,
    context: cfg.context,
    validation: cfg.validation,
    instructions: cfg.instructions ?? null,
    // Only when set, so runs made before the field existed keep their fingerprint.
    ...(cfg.tokenizer === undefined ? {} : { tokenizer: cfg.tokenizer }),
  };
}

export function fingerprint(fields: Record<string, unknown>): string {
  return createHash('sha256').update(canonicalJson(fields)).digest('hex').slice(0, 16);
}

/** Names of the fingerprint fields that differ between two runs. */
export function fingerprintDiff(a: Record<string, unknown>, b: Record<string, unknown>): string[] {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].filter((k) => canonicalJson(a[k]) !== canonicalJson(b[k])).sort();
}

const SECRET_NAME = /(key|token|secret|password|passwd|authorization|cookie|credential)/i;

/**
 * The config as it may be written to disk. Values under secret-looking keys (headers,
 * server env) are replaced, and so is every occurrence of a secret-looking environment
 * variable's value (and the API key's), wherever `${VAR}` expansion put it: in args, URLs…
 */
export function redactConfig(cfg: RunConfig, env: NodeJS.ProcessEnv = process.env): Record<string, unknown> {
  const secrets = Object.entries(env)
    .filter(([name, value]) => value !== undefined && value.length >= 6 && (SECRET_NAME.test(name) || name === cfg.endpoint.api_key_env))
    .map(([name, value]) => [value as string, `\${${name}}`] as const)
    .sort((a, b) => b[0].length - a[0].length);
  const scrub = (s: string): string => secrets.reduce((acc, [value, name]) => acc.split(value).join(name), s);
  const walk = (v: unknown, key: string): unknown => {
    if (typeof v === 'string') return SECRET_NAME.test(key) && key !== 'api_key_env' ? '[redacted]' : scrub(v);
    if (Array.isArray(v)) return v.map((x) => walk(x, key));
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x, k)]));
    }
    return v;
  };
  const out = walk(cfg, '') as Record<string, unknown>;
  // A path, not a secret, though its name holds "token"; env values in it are still scrubbed.
  if (cfg.tokenizer !== undefined) out.tokenizer = scrub(cfg.tokenizer);
  return out;
}

function isLoopback(url: string): boolean {
  try {
    const h = new URL(url).hostname;
    return h === 'localhost' || h === '[::1]' || h === '::1' || h.startsWith('127.');
  } catch {
    return false;
  }
}

/** The key comes from the environment only. A loopback server (vLLM, sim) may need none. */
export function resolveApiKey(cfg: RunConfig, env: NodeJS.ProcessEnv): string {
  const name = cfg.endpoint.api_key_env;
  const key = env[name];
  if (key) return key;
  if (name === 'none' || isLoopback(cfg.endpoint.base_url)) return 'EMPTY';
  throw new TrajforgeError(
    'MISSING_ENV',
    `endpoint.api_key_env: environment variable ${name} is not set (the key for ${cfg.endpoint.base_url}); set it, or set api_key_env: none for an endpoint without keys`,
    { field: 'endpoint.api_key_env' },
  );
}
