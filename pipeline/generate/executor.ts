/**
 * The only module that talks MCP. Starts the servers of a `mcpServers` object, lists their
 * tools, maps a model's call onto a tool's input schema, runs it with a timeout, restarts
 * a server that died, caches successful results across runs and processes (cache.ts), and turns
 * what came back into documents with ids.
 */
import { createHash } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { McpServerConfig, RunConfig } from '../../schemas/index.js';
import { cacheKey, defaultCacheDir, DirStore, MemoryStore, serverIdentity, type CacheKey, type ResultStore } from './cache.js';
import type { ParsedCall, ToolDocument, ToolResultView, ToolSpec } from '../dialects/types.js';
import { TrajforgeError } from '../errors.js';
import { PACKAGE_VERSION } from '../paths.js';
import { Scrubber } from '../secrets.js';

type ExecutorConfig = RunConfig['executor'];

/** What one call produced: the record's fields, and the view the dialect renders. */
export interface ExecResult {
  readonly server: string | null;
  readonly mcpTool: string | null;
  readonly parameters: Record<string, unknown>;
  readonly arguments: Record<string, unknown>;
  readonly result: unknown;
  readonly truncated: boolean;
  readonly view: ToolResultView;
  readonly error?: string | undefined;
  /** The call never reached a server (unknown tool, over its limit, bad arguments). */
  readonly skipped: boolean;
  readonly cached: boolean;
  readonly durationMs: number;
}

interface ServerTool {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
}

interface Route {
  readonly server: string;
  readonly tool: ServerTool;
  readonly bodyParam: string | undefined;
  readonly spec: ToolSpec;
}

const STDERR_TAIL = 4_000;

/** One MCP server: its connection, restarted on demand after it dies. */
class ServerConnection {
  readonly name: string;
  readonly #cfg: McpServerConfig;
  readonly #execCfg: ExecutorConfig;
  #client: Client | undefined;
  #connecting: Promise<Client> | undefined;
  #stderr = '';
  /** Restarts since the last successful call. */
  restarts = 0;
  totalRestarts = 0;
  /** Messages the server sent that were not JSON-RPC (junk on stdout), and other transport errors. */
  protocolErrors = 0;
  lastProtocolError: string | undefined;
  #everConnected = false;

  constructor(name: string, cfg: McpServerConfig, execCfg: ExecutorConfig) {
    this.name = name;
    this.#cfg = cfg;
    this.#execCfg = execCfg;
  }

  get stderrTail(): string {
    // A full buffer begins mid-line, perhaps mid-secret, where no scrubber can see it: that line goes.
    const text = this.#stderr.length >= STDERR_TAIL ? this.#stderr.slice(this.#stderr.indexOf('\n') + 1) : this.#stderr;
    return text.trim();
  }

  /**
   * The live client, connecting (once, however many callers wait) when there is none. A
   * server that died is restarted at most `max_restarts` times in a row; after that it
   * stays down for the run and its calls fail at once.
   */
  client(): Promise<Client> {
    if (this.#client) return Promise.resolve(this.#client);
    if (!this.#connecting) {
      if (this.#everConnected) {
        if (this.restarts >= this.#execCfg.max_restarts) {
          return Promise.reject(new Error(`it died and was restarted ${this.restarts} times in a row; not restarting it again`));
        }
        this.restarts++;
        this.totalRestarts++;
      }
      this.#connecting = this.#connect().finally(() => {
        this.#connecting = undefined;
      });
    }
    return this.#connecting;
  }

  /** A call went through: the restart budget is full again. */
  healthy(): void {
    this.restarts = 0;
  }

  async #connect(): Promise<Client> {
    const transport = this.#transport();
    const client = new Client({ name: 'trajforge', version: PACKAGE_VERSION });
    client.onclose = () => {
      if (this.#client === client) this.#client = undefined;
    };
    // Without a handler the SDK drops these silently: count them so the run summary shows them.
    client.onerror = (err: Error) => {
      this.protocolErrors++;
      this.lastProtocolError = `${this.name}: ${(err.message ?? String(err)).split('\n')[0]!.slice(0, 200)}`;
    };
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${this.#execCfg.connect_timeout_ms} ms`)), this.#execCfg.connect_timeout_ms);
    });
    try {
      await Promise.race([client.connect(transport), timeout]);
    } catch (err) {
      await client.close().catch(() => {});
      // Give the stderr of a process that just died a moment to arrive.
      await new Promise((r) => setTimeout(r, 50));
      throw err;
    } finally {
      clearTimeout(timer);
    }
    if (transport instanceof StdioClientTransport) allowManyDrainWaiters(transport);
    this.#client = client;
    this.#everConnected = true;
    return client;
  }

  #transport(): Transport {
    const cfg = this.#cfg;
    if ('url' in cfg) {
      return new StreamableHTTPClientTransport(new URL(cfg.url), { requestInit: { headers: cfg.headers } });
    }
    // The SDK merges a safe default environment (PATH, HOME…) with this; nothing else of ours leaks.
    const t = new StdioClientTransport({ command: cfg.command, args: cfg.args, env: cfg.env, cwd: cfg.cwd, stderr: 'pipe' });
    t.stderr?.on('data', (d: Buffer) => {
      this.#stderr = (this.#stderr + d.toString('utf8')).slice(-STDERR_TAIL);
    });
    return t;
  }

  /** Drops a connection that failed a call, so the next call starts a fresh process. */
  async discard(): Promise<void> {
    const c = this.#client;
    this.#client = undefined;
    await c?.close().catch(() => {});
  }

  async close(): Promise<void> {
    await this.discard();
  }
}

/**
 * Calls go to a stdio server as they are made; when more are in flight than its stdin pipe
 * holds, the SDK waits for 'drain' once per waiting message, and past ten waiters Node prints a
 * listener-leak warning. Hundreds of calls in flight are normal at a high concurrency, so the
 * pipe's listener limit is lifted. The SDK keeps the child process to itself: if a later SDK
 * moves it, this does nothing and the warning (only a warning) comes back.
 */
function allowManyDrainWaiters(transport: StdioClientTransport): void {
  const stdin = (transport as unknown as { _process?: { stdin?: { setMaxListeners?: (n: number) => unknown } | null } })._process?.stdin;
  stdin?.setMaxListeners?.(0);
}

/** The parameter that receives a call's body: the alias's choice, `query`, or the first required string. */
function pickBodyParam(schema: Record<string, unknown>, preferred?: string): string | undefined {
  const props = (schema.properties ?? {}) as Record<string, { type?: unknown }>;
  if (preferred && preferred in props) return preferred;
  const isString = (k: string): boolean => props[k]?.type === 'string' || props[k]?.type === undefined;
  const required = Array.isArray(schema.required) ? (schema.required as string[]) : [];
  for (const k of ['query', ...required, ...Object.keys(props)]) if (k in props && isString(k)) return k;
  return undefined;
}

/** Attribute strings → the types the input schema declares. Throws a message meant for the model. */
export function coerceArguments(
  call: ParsedCall,
  schema: Record<string, unknown>,
  bodyParam: string | undefined,
): { parameters: Record<string, unknown>; arguments: Record<string, unknown> } {
  const props = (schema.properties ?? {}) as Record<string, { type?: unknown; items?: { type?: unknown } }>;
  const parameters: Record<string, unknown> = {};
  const args: Record<string, unknown> = {};
  if (call.arguments !== undefined) {
    // JSON dialects: typed already; a string where the schema wants a number or flag is coerced.
    for (const [k, raw] of Object.entries(call.arguments)) {
      const type = props[k]?.type;
      const value = typeof raw === 'string' && type !== undefined && type !== 'string' ? coerce(raw, type, k) : raw;
      parameters[k] = value;
      args[k] = value;
    }
  } else {
    for (const [k, raw] of Object.entries(call.attributes)) {
      const prop = props[k];
      const value = coerce(raw, prop?.type, k);
      parameters[k] = value;
      if (prop) args[k] = value;
    }
    if (bodyParam !== undefined && call.query !== '') args[bodyParam] = call.query;
  }
  const required = Array.isArray(schema.required) ? (schema.required as string[]) : [];
  const missing = required.filter((k) => !(k in args));
  if (missing.length) throw new Error(`missing required parameter${missing.length > 1 ? 's' : ''}: ${missing.join(', ')}`);
  return { parameters, arguments: args };
}

function coerce(raw: string, type: unknown, key: string): unknown {
  const t = Array.isArray(type) ? type.find((x) => x !== 'null') : type;
  switch (t) {
    case 'integer':
    case 'number': {
      const n = Number(raw.trim());
      if (raw.trim() === '' || !Number.isFinite(n) || (t === 'integer' && !Number.isInteger(n))) {
        throw new Error(`parameter ${key} must be ${t === 'integer' ? 'an integer' : 'a number'}, got "${raw}"`);
      }
      return n;
    }
    case 'boolean': {
      const v = raw.trim().toLowerCase();
      if (v === 'true' || v === '1' || v === 'yes') return true;
      if (v === 'false' || v === '0' || v === 'no') return false;
      throw new Error(`parameter ${key} must be true or false, got "${raw}"`);
    }
    case 'array':
      return raw
        .split(/[,;]/)
        .map((s) => s.trim())
        .filter(Boolean);
    default:
      return raw;
  }
}

const DOC_ID_FIELDS = ['paperId', 'pmid', 'PMID', 'doi', 'DOI', 'id', 'docid', 'url', 'link'] as const;
const DOC_TEXT_FIELDS = ['abstract', 'snippet', 'text', 'content', 'body', 'summary', 'description'] as const;

function firstString(o: Record<string, unknown>, keys: readonly string[]): string | undefined {
  for (const k of keys) {
    const v = o[k];
    if (typeof v === 'string' && v.trim() !== '') return v;
    if (typeof v === 'number') return String(v);
  }
  return undefined;
}

function cutText(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max)} [...]`;
}

/**
 * MCP content → documents (search results: the document's own id, else `{call_id}-{i}`)
 * or plain text shown as one snippet `{call_id}-0`.
 */
export function toView(text: string, callId: string, maxSnippetChars: number): ToolResultView {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const list = Array.isArray(parsed)
    ? parsed
    : parsed && typeof parsed === 'object'
      ? (['data', 'results', 'documents', 'organic', 'items'].map((k) => (parsed as Record<string, unknown>)[k]).find(Array.isArray) as unknown[] | undefined)
      : undefined;
  if (list && list.every((d) => d !== null && typeof d === 'object' && !Array.isArray(d))) {
    const seen = new Set<string>();
    const documents: ToolDocument[] = (list as Record<string, unknown>[]).map((d, i) => {
      let id = firstString(d, DOC_ID_FIELDS) ?? `${callId}-${i}`;
      // Ids the model writes in attributes: no whitespace, no quotes, unique within the call.
      id = id.replace(/[\s"'<>,;]+/g, '_');
      if (seen.has(id)) id = `${callId}-${i}`;
      seen.add(id);
      const authors = Array.isArray(d.authors) ? d.authors.map((a) => (typeof a === 'string' ? a : (a as { name?: string })?.name ?? '')).filter(Boolean) : [];
      const metaParts = [
        authors.length ? `Authors: ${authors.slice(0, 3).join(', ')}${authors.length > 3 ? ' et al.' : ''}` : '',
        d.year !== undefined ? `Year: ${String(d.year)}` : '',
        typeof d.venue === 'string' ? `Journal: ${d.venue}` : typeof d.journal === 'string' ? `Journal: ${d.journal}` : '',
      ].filter(Boolean);
      return {
        id,
        title: typeof d.title === 'string' ? d.title : undefined,
        meta: metaParts.length ? metaParts.join(' | ') : undefined,
        text: cutText(firstString(d, DOC_TEXT_FIELDS) ?? '', maxSnippetChars),
      };
    });
    const total = parsed && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as { total?: unknown }).total : undefined;
    const header = documents.length === 0 ? 'No results found.' : typeof total === 'number' ? `Found ${total} results. Showing top ${documents.length}:` : undefined;
    return { documents, header };
  }
  return { text: cutText(text, maxSnippetChars * 4), textId: `${callId}-0` };
}

export interface ExecutorStats {
  /** Calls that reached a server. */
  calls: number;
  cacheHits: number;
  /** Cacheable calls the cache did not hold (0 with the cache off). */
  cacheMisses: number;
  /** Cache reads or writes that failed (disk full, permissions); each was treated as a miss or skipped. */
  cacheErrors: number;
  errors: number;
  restarts: number;
  timeouts: number;
  /** Messages from servers that were not JSON-RPC (a server printing to stdout), ignored. */
  protocolErrors: number;
  lastProtocolError?: string | undefined;
}

export interface ExecutorOptions {
  readonly servers: Record<string, McpServerConfig>;
  readonly tools: RunConfig['tools'];
  readonly executor: ExecutorConfig;
  /** For the default cache directory; default process.env. */
  readonly env?: NodeJS.ProcessEnv | undefined;
  /** Where cache problems are reported, once each kind; default stderr. */
  readonly warn?: ((message: string) => void) | undefined;
  /**
   * The run's secrets: taken out of everything a server sends (results, errors, tool
   * descriptions, stderr) before the model, the cache or a record sees it, and hashed in cache
   * keys. Default none.
   */
  readonly scrubber?: Scrubber | undefined;
}

/** The text the model sees of an MCP result: its text parts, else its structured content. */
function resultText(res: unknown): string {
  const r = (res ?? {}) as { content?: unknown; structuredContent?: unknown };
  const content = (Array.isArray(r.content) ? r.content : []) as { type?: string; text?: unknown }[];
  const text = content
    .filter((c) => c?.type === 'text' && typeof c.text === 'string')
    .map((c) => c.text as string)
    .join('\n');
  return text || (r.structuredContent ? JSON.stringify(r.structuredContent) : '');
}

type Outcome = { text: string; isError: boolean; raw: unknown } | { failure: string };

export class Executor {
  readonly #servers: Map<string, ServerConnection>;
  readonly #routes = new Map<string, Route>();
  readonly #limits: Record<string, number>;
  readonly #cfg: ExecutorConfig;
  readonly #cache: ResultStore | undefined;
  readonly #identities: Map<string, Record<string, unknown>>;
  /** Calls in flight by cache key: an identical call made meanwhile waits for it instead of paying twice. */
  readonly #inflight = new Map<string, Promise<Outcome>>();
  readonly #warn: (message: string) => void;
  readonly #warned = new Set<string>();
  readonly #scrubber: Scrubber;
  #stats: ExecutorStats = { calls: 0, cacheHits: 0, cacheMisses: 0, cacheErrors: 0, errors: 0, restarts: 0, timeouts: 0, protocolErrors: 0 };

  private constructor(opts: ExecutorOptions, servers: Map<string, ServerConnection>) {
    this.#servers = servers;
    this.#limits = opts.tools.limits;
    this.#cfg = opts.executor;
    this.#warn = opts.warn ?? ((m) => void process.stderr.write(`warning: ${m}\n`));
    this.#scrubber = opts.scrubber ?? Scrubber.none;
    this.#identities = new Map(Object.entries(opts.servers).map(([name, cfg]) => [name, serverIdentity(cfg, this.#scrubber)]));
    if (opts.executor.cache) {
      const dir = opts.executor.cache_dir ?? defaultCacheDir(opts.env ?? process.env);
      try {
        this.#cache = DirStore.open({ dir, ttlS: opts.executor.cache_ttl_s, scrubber: this.#scrubber });
      } catch (err) {
        // A run is worth more than its cache: keep going with one that lasts this run only.
        this.#warnOnce('open', `tool-result cache: cannot use ${dir} (${(err as Error).message}); caching in memory for this run only`);
        this.#cache = new MemoryStore(opts.executor.cache_ttl_s);
      }
    }
  }

  #warnOnce(kind: string, message: string): void {
    if (this.#warned.has(kind)) return;
    this.#warned.add(kind);
    this.#warn(message);
  }

  /** Connects every server and lists its tools. A server that will not start is a clear error, before any sample runs. */
  static async start(opts: ExecutorOptions): Promise<Executor> {
    const servers = new Map(Object.entries(opts.servers).map(([name, cfg]) => [name, new ServerConnection(name, cfg, opts.executor)]));
    const ex = new Executor(opts, servers);
    const listed = new Map<string, ServerTool[]>();
    try {
      await Promise.all(
        [...servers.values()].map(async (s) => {
          let client: Client;
          try {
            client = await s.client();
          } catch (err) {
            const tail = s.stderrTail ? `\n--- stderr of ${s.name} ---\n${s.stderrTail}` : '';
            const message = ex.#scrubber.text(`mcpServers.${s.name}: the server did not start: ${(err as Error).message}${tail}`);
            throw new TrajforgeError('TOOL_SERVER_FAILED', message, { field: `mcpServers.${s.name}` });
          }
          const { tools } = await client.listTools();
          // Descriptions and schemas go into the system prompt.
          listed.set(
            s.name,
            tools.map((t) => ({
              name: t.name,
              description: ex.#scrubber.text(t.description ?? ''),
              inputSchema: ex.#scrubber.value(t.inputSchema as Record<string, unknown>),
            })),
          );
        }),
      );
      ex.#buildRoutes(opts.tools, listed);
    } catch (err) {
      await ex.close();
      throw err;
    }
    return ex;
  }

  #buildRoutes(tools: RunConfig['tools'], listed: Map<string, ServerTool[]>): void {
    const add = (name: string, server: string, tool: ServerTool, bodyParamPref?: string, description?: string): void => {
      const bodyParam = pickBodyParam(tool.inputSchema, bodyParamPref);
      this.#routes.set(name, {
        server,
        tool,
        bodyParam,
        spec: { name, description: description ?? tool.description, inputSchema: tool.inputSchema, bodyParam, server },
      });
    };
    for (const [alias, a] of Object.entries(tools.aliases)) {
      const tool = listed.get(a.server)?.find((t) => t.name === a.tool);
      if (!listed.has(a.server)) {
        throw new TrajforgeError('BAD_CONFIG', `tools.aliases.${alias}.server: no server named ${a.server} in mcpServers`, { field: `tools.aliases.${alias}.server` });
      }
      if (!tool) {
        const names = listed.get(a.server)!.map((t) => t.name).join(', ');
        throw new TrajforgeError('BAD_CONFIG', `tools.aliases.${alias}.tool: server ${a.server} has no tool ${a.tool} (it has: ${names})`, {
          field: `tools.aliases.${alias}.tool`,
        });
      }
      add(alias, a.server, tool, a.body_param, a.description);
    }
    // Server tools are callable by their own names too, unless an alias took the name.
    for (const [server, ts] of listed) for (const t of ts) if (!this.#routes.has(t.name)) add(t.name, server, t);
    this.#exposed = tools.expose ?? (Object.keys(tools.aliases).length ? Object.keys(tools.aliases) : [...this.#routes.keys()]);
    for (const name of this.#exposed) {
      if (!this.#routes.has(name)) {
        throw new TrajforgeError('BAD_CONFIG', `tools.expose: no tool or alias named ${name} (have: ${[...this.#routes.keys()].join(', ')})`, {
          field: 'tools.expose',
        });
      }
    }
  }

  #exposed: string[] = [];

  /** The tools shown to the model. */
  tools(): ToolSpec[] {
    return this.#exposed.map((n) => this.#routes.get(n)!.spec);
  }

  hasTool(name: string): boolean {
    return this.#routes.has(name);
  }

  stats(): ExecutorStats {
    let restarts = 0;
    let protocolErrors = 0;
    let lastProtocolError: string | undefined;
    for (const s of this.#servers.values()) {
      restarts += s.totalRestarts;
      protocolErrors += s.protocolErrors;
      lastProtocolError = s.lastProtocolError ?? lastProtocolError;
    }
    lastProtocolError = lastProtocolError === undefined ? undefined : this.#scrubber.text(lastProtocolError);
    return { ...this.#stats, restarts, protocolErrors, lastProtocolError };
  }

  /**
   * Runs one call. Never throws for tool misbehaviour: errors come back in the result and
   * the model sees them. `used` counts this trajectory's calls per tool, for the limits.
   */
  async call(call: ParsedCall, callId: string, used: ReadonlyMap<string, number>): Promise<ExecResult> {
    const started = performance.now();
    const refuse = (message: string): ExecResult => ({
      ...skippedCall(call, message),
      server: route?.server ?? null,
      mcpTool: route?.tool.name ?? null,
      durationMs: performance.now() - started,
    });
    const route = this.#routes.get(call.toolName);
    if (!route) return refuse(`unknown tool "${call.toolName}"; available tools: ${this.#exposed.join(', ')}`);
    const limit = this.#limits[call.toolName];
    if (limit !== undefined && (used.get(call.toolName) ?? 0) >= limit) {
      return refuse(`call limit reached: ${call.toolName} may be called at most ${limit} times; answer with what you have`);
    }
    let mapped: ReturnType<typeof coerceArguments>;
    try {
      mapped = coerceArguments(call, route.tool.inputSchema, route.bodyParam);
    } catch (err) {
      return refuse((err as Error).message);
    }

    const { outcome, cached } = await this.#cachedRun(route, mapped.arguments);
    const base = {
      server: route.server,
      mcpTool: route.tool.name,
      parameters: mapped.parameters,
      arguments: mapped.arguments,
      skipped: false,
      cached,
      durationMs: performance.now() - started,
    };
    if ('failure' in outcome) {
      this.#stats.errors++;
      return { ...base, result: { error: outcome.failure }, truncated: false, view: { error: outcome.failure }, error: outcome.failure };
    }
    const truncated = outcome.text.length > this.#cfg.max_result_chars;
    const result = truncated ? outcome.text.slice(0, this.#cfg.max_result_chars) : outcome.raw;
    if (outcome.isError) {
      this.#stats.errors++;
      const msg = cutText(outcome.text.trim() || 'the tool reported an error', 2_000);
      return { ...base, result, truncated, view: { error: msg }, error: msg };
    }
    return { ...base, result, truncated, view: toView(outcome.text, callId, this.#cfg.max_snippet_chars) };
  }

  /**
   * The outcome from the cache, from an identical call in flight, or from the server. Only
   * successful results are stored: a timeout or a tool error may not happen next time.
   */
  async #cachedRun(route: Route, args: Record<string, unknown>): Promise<{ outcome: Outcome; cached: boolean }> {
    if (!this.#cache) {
      this.#stats.calls++;
      return { outcome: this.#scrubbed(await this.#run(route, args)), cached: false };
    }
    const key = cacheKey(this.#identities.get(route.server) ?? { name: route.server }, route.tool.name, args);
    const waiting = this.#inflight.get(key.id);
    if (waiting) {
      const outcome = await waiting;
      const ok = 'text' in outcome && !outcome.isError;
      if (ok) this.#stats.cacheHits++;
      return { outcome, cached: ok };
    }
    const pending = this.#lookupOrRun(route, args, key);
    this.#inflight.set(key.id, pending.then((r) => r.outcome));
    try {
      return await pending;
    } finally {
      this.#inflight.delete(key.id);
    }
  }

  async #lookupOrRun(route: Route, args: Record<string, unknown>, key: CacheKey): Promise<{ outcome: Outcome; cached: boolean }> {
    const store = this.#cache!;
    let raw: unknown;
    try {
      raw = await store.get(key);
    } catch (err) {
      this.#stats.cacheErrors++;
      this.#warnOnce('read', `tool-result cache: a read failed (${(err as Error).message}); treating it as a miss`);
    }
    if (raw !== undefined) {
      this.#stats.cacheHits++;
      // An entry stored before secrets were scrubbed may hold one.
      const clean = this.#scrubber.value(raw);
      return { outcome: { text: resultText(clean), isError: false, raw: clean }, cached: true };
    }
    this.#stats.cacheMisses++;
    this.#stats.calls++;
    const outcome = this.#scrubbed(await this.#run(route, args));
    if ('text' in outcome && !outcome.isError) {
      try {
        await store.set(key, outcome.raw);
      } catch (err) {
        this.#stats.cacheErrors++;
        this.#warnOnce('write', `tool-result cache: a write failed (${(err as Error).message}); results are not being kept`);
      }
    }
    return { outcome, cached: false };
  }

  /** What a server sent, without the run's secrets: an upstream error body may echo the key it was sent. */
  #scrubbed(outcome: Outcome): Outcome {
    if ('failure' in outcome) return { failure: this.#scrubber.text(outcome.failure) };
    const raw = this.#scrubber.value(outcome.raw);
    return raw === outcome.raw ? outcome : { text: resultText(raw), isError: outcome.isError, raw };
  }

  /** Calls the server, restarting it once if it died under the call. */
  async #run(route: Route, args: Record<string, unknown>): Promise<Outcome> {
    const server = this.#servers.get(route.server)!;
    for (let attempt = 0; ; attempt++) {
      try {
        const client = await server.client();
        const res = await client.callTool({ name: route.tool.name, arguments: args }, undefined, { timeout: this.#cfg.call_timeout_ms });
        server.healthy();
        return { text: resultText(res), isError: res.isError === true, raw: res };
      } catch (err) {
        const message = (err as Error).message ?? String(err);
        if (/timed out|timeout/i.test(message)) {
          // A slow call is not a dead server: other calls may be in flight on it.
          this.#stats.timeouts++;
          return { failure: `tool call timed out after ${this.#cfg.call_timeout_ms} ms` };
        }
        // A dead server is replaced (by client(), within its restart budget) and the call retried once.
        await server.discard();
        if (attempt >= 1) return { failure: `tool server ${route.server} failed: ${message}` };
      }
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.#servers.values()].map((s) => s.close()));
    await this.#cache?.close();
  }
}

/** Short, stable call ids: DR Tulu's snippet ids look like `7552a5aa-0`. */
/** A call refused before any server: the model is told why, and the record says `skipped`. */
export function skippedCall(call: ParsedCall, message: string): ExecResult {
  return {
    server: null,
    mcpTool: null,
    parameters: { ...(call.arguments ?? call.attributes) },
    arguments: {},
    result: null,
    truncated: false,
    view: { error: message },
    error: message,
    skipped: true,
    cached: false,
    durationMs: 0,
  };
}

export function makeCallId(sampleId: string, attempt: number, index: number): string {
  return createHash('sha1').update(`${sampleId}\u0000${attempt}\u0000${index}`).digest('hex').slice(0, 8);
}
