/**
 * The only module that talks MCP. Starts the servers of a `mcpServers` object (stdio,
 * Streamable HTTP, legacy SSE), lists their tools, maps a model's call onto a tool's input
 * schema, runs it with a timeout, restarts a server that died (and, past its restart budget,
 * tries it again with a backoff), caches successful results across runs and processes
 * (cache.ts), and hands what came back to tool-result.ts, which makes it the model's view.
 */
import { createHash } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport, SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { deserializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ErrorCode, McpError, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { McpServerConfig, RunConfig, Trajectory } from '../../schemas/index.js';
import { cacheKey, defaultCacheDir, DirStore, MemoryStore, serverIdentity, type CacheKey, type ResultStore } from '../core/cache.js';
import type { ParsedCall, ToolResultView, ToolSpec } from '../dialects/types.js';
import { TrajforgeError } from '../errors.js';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../json-depth.js';
import { PACKAGE_VERSION } from '../paths.js';
import { BoundedLineReader, RESULT_TOO_LARGE_CODE } from './stdio-lines.js';
import { formatBytes, renderResult } from './tool-result.js';
import { Scrubber } from '../core/secrets.js';

export { toView } from './tool-result.js';

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
  /**
   * A call to a sub-agent: the session it started, and that session's records and its
   * descendants' (post-order: each before the session that called it), for its family.
   */
  readonly child?: { readonly id: string; readonly records: readonly Trajectory[] } | undefined;
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

/** A call refused at once because its server is down and not due for another try. `why`: the state, without the server's name. */
class ServerDown extends Error {
  constructor(
    server: string,
    readonly why: string,
  ) {
    super(`tool server ${server} is down (${why})`);
  }
}

/** A period in which a server was down: its restart budget spent, calls refused until the next try. */
interface DownPeriod {
  readonly from: number;
  readonly to: number;
}

/** One MCP server: its connection, restarted on demand after it dies. */
class ServerConnection {
  readonly name: string;
  readonly #cfg: McpServerConfig;
  readonly #execCfg: ExecutorConfig;
  /** The server's `timeout` (seconds, as Cline and Roo Code write it), else executor.call_timeout_ms. */
  readonly callTimeoutMs: number;
  #client: Client | undefined;
  #transportOf = new WeakMap<Client, Transport>();
  #connecting: Promise<Client> | undefined;
  #closing = false;
  #stderr = '';
  /** Restarts since the last successful call. */
  restarts = 0;
  totalRestarts = 0;
  /** Messages the server sent that were not JSON-RPC (junk on stdout), and other transport errors. */
  protocolErrors = 0;
  lastProtocolError: string | undefined;
  /** The tools of the latest listing (each connection lists them, so the client can check results against their output schemas). */
  tools: ServerTool[] = [];
  #everConnected = false;
  /** When the server last died or failed to start; a server that is down waits from here. */
  #diedAt = 0;
  /** Set while the server is down. */
  #downSince: number | undefined;
  /** Tries to start it since it went down. */
  #tries = 0;
  readonly #down: DownPeriod[] = [];
  /** It was down when it was closed, at the end of the run. */
  #closedDown = false;

  /** Added to a stdio server's environment (`ExecutorOptions.serverEnv`); never part of its identity in the cache. */
  readonly #extraEnv: Readonly<Record<string, string>> | undefined;

  constructor(name: string, cfg: McpServerConfig, execCfg: ExecutorConfig, extraEnv?: Readonly<Record<string, string>>) {
    this.name = name;
    this.#cfg = cfg;
    this.#execCfg = execCfg;
    this.#extraEnv = extraEnv;
    this.callTimeoutMs = cfg.timeout !== undefined ? Math.round(cfg.timeout * 1000) : execCfg.call_timeout_ms;
  }

  get stderrTail(): string {
    // A full buffer begins mid-line, perhaps mid-secret, where no scrubber can see it: that line goes.
    const text = this.#stderr.length >= STDERR_TAIL ? this.#stderr.slice(this.#stderr.indexOf('\n') + 1) : this.#stderr;
    return text.trim();
  }

  /** How long to wait after a failure before the next try, `tries` tries after the server went down. */
  #backoff(tries: number): number {
    return Math.min(this.#execCfg.restart_backoff_max_ms, this.#execCfg.restart_backoff_ms * 2 ** Math.min(tries, 30));
  }

  /**
   * The live client, connecting (once, however many callers wait) when there is none. A server
   * that died is restarted at most `max_restarts` times in a row; after that it is down: its
   * calls fail at once, and it is tried again `restart_backoff_ms` after its last failure, the
   * wait doubling with each failed try up to `restart_backoff_max_ms`. A call that goes through
   * ends the down period.
   */
  client(): Promise<Client> {
    if (this.#client) return Promise.resolve(this.#client);
    if (!this.#connecting) {
      if (this.#everConnected) {
        if (this.restarts >= this.#execCfg.max_restarts) {
          const now = Date.now();
          this.#downSince ??= now;
          const wait = this.#backoff(this.#tries);
          if (now < this.#diedAt + wait) {
            const inS = ((this.#diedAt + wait - now) / 1000).toFixed(1);
            return Promise.reject(
              new ServerDown(
                this.name,
                `its restart budget is spent, executor.max_restarts = ${this.#execCfg.max_restarts}; it is tried again ${wait} ms after its last failure, in ${inS} s`,
              ),
            );
          }
          this.#tries++;
        }
        this.restarts++;
        this.totalRestarts++;
      }
      this.#connecting = this.#connect()
        .catch((err: unknown) => {
          this.#diedAt = Date.now();
          throw err;
        })
        .finally(() => {
          this.#connecting = undefined;
        });
    }
    return this.#connecting;
  }

  /** A call went through: the restart budget is full again, and a down period ends. */
  healthy(): void {
    this.restarts = 0;
    if (this.#downSince !== undefined) {
      this.#down.push({ from: this.#downSince, to: Date.now() });
      this.#downSince = undefined;
      this.#tries = 0;
    }
  }

  /** The periods the server was down, the current one (if any) counted up to `now`. */
  downPeriods(now = Date.now()): DownPeriod[] {
    return this.#downSince === undefined ? [...this.#down] : [...this.#down, { from: this.#downSince, to: now }];
  }

  async #connect(): Promise<Client> {
    const transport = this.#transport();
    const client = new Client({ name: 'trajforge', version: PACKAGE_VERSION });
    client.onclose = () => {
      if (this.#client === client) {
        this.#client = undefined;
        this.#diedAt = Date.now();
      }
    };
    // Without a handler the SDK drops these silently: count them so the run summary shows them.
    client.onerror = (err: Error) => {
      if (this.#closing) return;
      // The legacy SSE stream broke: the server's session is gone with it, so the connection is dead.
      if (err instanceof SseError && this.#client === client) void this.discard(client);
      this.#protocolError(err.message ?? String(err));
    };
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${this.#execCfg.connect_timeout_ms} ms`)), this.#execCfg.connect_timeout_ms);
    });
    try {
      await Promise.race([client.connect(transport), timeout]);
      this.tools = await Promise.race([listAllTools(client), timeout]);
    } catch (err) {
      await client.close().catch(() => {});
      // Give the stderr of a process that just died a moment to arrive.
      await new Promise((r) => setTimeout(r, 50));
      throw err;
    } finally {
      clearTimeout(timer);
    }
    if (transport instanceof StdioClientTransport) allowManyDrainWaiters(transport);
    this.#transportOf.set(client, transport);
    this.#client = client;
    this.#everConnected = true;
    return client;
  }

  #protocolError(message: string): void {
    this.protocolErrors++;
    this.lastProtocolError = `${this.name}: ${message.split('\n')[0]!.slice(0, 200)}`;
  }

  #transport(): Transport {
    const cfg = this.#cfg;
    if ('url' in cfg) {
      const url = new URL(cfg.url);
      const requestInit = { headers: cfg.headers };
      return cfg.type === 'sse' ? new SSEClientTransport(url, { requestInit }) : new StreamableHTTPClientTransport(url, { requestInit });
    }
    const max = this.#execCfg.max_message_bytes;
    // The SDK merges a safe default environment (PATH, HOME…) with this; nothing else of ours leaks.
    const env = this.#extraEnv === undefined ? cfg.env : { ...cfg.env, ...this.#extraEnv };
    const t = new StdioClientTransport({ command: cfg.command, args: cfg.args, env, cwd: cfg.cwd, stderr: 'pipe', maxBufferSize: max });
    t.stderr?.on('data', (d: Buffer) => {
      this.#stderr = (this.#stderr + d.toString('utf8')).slice(-STDERR_TAIL);
    });
    useBoundedReader(
      t,
      new BoundedLineReader<JSONRPCMessage>(max, deserializeMessage, ({ bytes, id }) => {
        const message = `result_too_large: the server sent ${formatBytes(bytes)}, more than executor.max_message_bytes (${formatBytes(max)}); ask for less`;
        if (id === undefined) {
          this.#protocolError(`a message of ${bytes} bytes (past executor.max_message_bytes) was skipped`);
          return undefined;
        }
        return { jsonrpc: '2.0', id, error: { code: RESULT_TOO_LARGE_CODE, message } };
      }),
    );
    return t;
  }

  /** Drops a connection that failed a call, so the next call starts a fresh process. A newer connection is left alone. */
  async discard(failed: Client | undefined): Promise<void> {
    if (failed === undefined || this.#client !== failed) return;
    this.#client = undefined;
    this.#diedAt = Date.now();
    await failed.close().catch(() => {});
  }

  /**
   * Ends the connection for good: a Streamable HTTP session is deleted (as the spec asks of a
   * client that is done with it), then the transport is closed; bounded by close_timeout_ms.
   */
  async close(): Promise<void> {
    this.#closing = true;
    await this.#connecting?.catch(() => {});
    const c = this.#client;
    this.#client = undefined;
    if (this.#downSince !== undefined) {
      this.#down.push({ from: this.#downSince, to: Date.now() });
      this.#downSince = undefined;
      this.#closedDown = true;
    }
    if (!c) return;
    const t = this.#transportOf.get(c);
    let timer: NodeJS.Timeout | undefined;
    const bounded = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, this.#execCfg.close_timeout_ms);
    });
    const shutdown = (async () => {
      if (t instanceof StreamableHTTPClientTransport && t.sessionId !== undefined) await t.terminateSession().catch(() => {});
      await c.close().catch(() => {});
    })();
    await Promise.race([shutdown, bounded]);
    clearTimeout(timer);
  }

  /** Down now, or (after close) when the run ended. */
  get downAtEnd(): boolean {
    return this.#closedDown || this.#downSince !== undefined;
  }
}

/** Every tool a server lists, page after page. */
async function listAllTools(client: Client): Promise<ServerTool[]> {
  const out: ServerTool[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor === undefined ? undefined : { cursor });
    for (const t of page.tools) out.push({ name: t.name, description: t.description ?? '', inputSchema: t.inputSchema as Record<string, unknown> });
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return out;
}

/**
 * The SDK's stdio transport reads through a buffer that throws past its size and then kills
 * the server; ours skips an oversized message and fails only its call (stdio-lines.ts). The
 * SDK keeps the buffer to itself: if a later SDK moves it, this does nothing, and the SDK's
 * own bound (`maxBufferSize`, set to the same size) applies, with the old cost of a restart.
 */
function useBoundedReader(transport: StdioClientTransport, reader: BoundedLineReader<JSONRPCMessage>): void {
  const internals = transport as unknown as { _readBuffer?: unknown };
  if (internals._readBuffer !== undefined) internals._readBuffer = reader;
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

/** A server that was down during the run (its restart budget spent), and for how long. */
export interface ServerDownTime {
  readonly server: string;
  /** How many times it went down. */
  readonly periods: number;
  /** Time down, summed over its periods. */
  readonly ms: number;
  /** It was still down when the run ended. */
  readonly downAtEnd: boolean;
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
  /** Servers that were down at some point, in config order. */
  down: ServerDownTime[];
}

export interface ExecutorOptions {
  readonly servers: Record<string, McpServerConfig>;
  readonly tools: RunConfig['tools'];
  readonly executor: ExecutorConfig;
  /** For the default cache directory; default process.env. */
  readonly env?: NodeJS.ProcessEnv | undefined;
  /**
   * Added to the environment of the stdio servers named (after their own `env`): how a queue
   * worker hands the servers that share their rate limits the Redis to share them through
   * (`SharedLimits.serverEnv`), and no other server. Default none.
   */
  readonly serverEnv?: Readonly<Record<string, Readonly<Record<string, string>>>> | undefined;
  /** Where cache problems are reported, once each kind; default stderr. */
  readonly warn?: ((message: string) => void) | undefined;
  /**
   * The run's secrets: taken out of everything a server sends (results, errors, tool
   * descriptions, stderr) before the model, the cache or a record sees it, and hashed in cache
   * keys. Default none.
   */
  readonly scrubber?: Scrubber | undefined;
}

/** What a call came to: the server's result, or why there is none. */
type Outcome = { raw: unknown } | { failure: string };

/** How a failed call is handled: by what its error says about the server. */
type FailureKind = 'down' | 'timeout' | 'too_large' | 'tool' | 'dead';

function failureKind(err: unknown): FailureKind {
  if (err instanceof ServerDown) return 'down';
  if (err instanceof McpError) {
    if (err.code === ErrorCode.RequestTimeout) return 'timeout';
    if (err.code === RESULT_TOO_LARGE_CODE) return 'too_large';
    if (err.code === ErrorCode.ConnectionClosed) return 'dead';
    // An error response from the server, or one the client raised itself (a tool that requires
    // MCP tasks, a result that breaks the tool's output schema): the call failed, not the server.
    return 'tool';
  }
  // The transport failed: the process is gone, the HTTP session expired, the connection was refused.
  return 'dead';
}

/** Where a call stands in its session, for a toolbox that starts sessions of its own (sub-agents). */
export interface CallSite {
  /** The call's index in the session's `tool_calls`. */
  readonly index: number;
  /**
   * The next number for a session this call starts under `key` (a sub-agent's name), counting
   * only those of the session's kept turns: child ids are `<parent id>/<agent>#<n>`. Call it
   * before the call's first await, so that the calls of a turn are numbered in call order.
   */
  nextChild(key: string): number;
}

/**
 * The tools one agent can call, as the rollout sees them: what to list for the model, whether a
 * name can be called, and the call itself. The executor gives each agent a view of its MCP
 * servers (generate/agents.ts adds the sub-agents); the rollout knows nothing else of them.
 */
export interface Toolbox {
  /** The tools shown to the model. */
  tools(): ToolSpec[];
  /** Whether the model may call this name: only the tools shown can be reached. */
  hasTool(name: string): boolean;
  /** Runs one call. Never throws for a tool's misbehaviour; `used` counts this session's calls per tool, for the limits. */
  call(call: ParsedCall, callId: string, used: ReadonlyMap<string, number>, site?: CallSite): Promise<ExecResult>;
}

export interface ViewOptions {
  /** The servers whose tools it sees; default all. */
  readonly servers?: readonly string[] | undefined;
  /** Where its tools config is written, for errors: `tools` or `agents.NAME.tools`. */
  readonly field?: string | undefined;
  /**
   * Inherited from the top-level tools by an agent that sees fewer servers: an exposed name
   * that leads to no tool of its servers is left out instead of being an error.
   */
  readonly inherited?: boolean | undefined;
}

/** How a view hands a routed, mapped call to the executor. */
type RunRoute = (route: Route, mapped: ReturnType<typeof coerceArguments>, callId: string, started: number) => Promise<ExecResult>;

/** One agent's tools over the executor's servers: its routes, exposed names and limits. */
export class ToolView implements Toolbox {
  readonly #routes: Map<string, Route>;
  /** The tools shown to the model, and the only ones a call may reach. */
  readonly #exposed: string[];
  readonly #limits: Record<string, number>;
  readonly #run: RunRoute;

  constructor(routes: Map<string, Route>, exposed: string[], limits: Record<string, number>, run: RunRoute) {
    this.#routes = routes;
    this.#exposed = exposed;
    this.#limits = limits;
    this.#run = run;
  }

  tools(): ToolSpec[] {
    return this.#exposed.map((n) => this.#routes.get(n)!.spec);
  }

  hasTool(name: string): boolean {
    return this.#exposed.includes(name);
  }

  async call(call: ParsedCall, callId: string, used: ReadonlyMap<string, number>): Promise<ExecResult> {
    const started = performance.now();
    const refuse = (message: string): ExecResult => ({
      ...skippedCall(call, message),
      server: route?.server ?? null,
      mcpTool: route?.tool.name ?? null,
      durationMs: performance.now() - started,
    });
    // A tool left out of tools.expose is unknown to the model, whatever a server offers.
    const route = this.hasTool(call.toolName) ? this.#routes.get(call.toolName) : undefined;
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
    return this.#run(route, mapped, callId, started);
  }
}

export class Executor implements Toolbox {
  readonly #servers: Map<string, ServerConnection>;
  /** The top-level tools config's view: what `call`, `hasTool` and `tools` serve. */
  #view: ToolView | undefined;
  /** Each server's tools as listed at start (secrets scrubbed), in config order. */
  #listed = new Map<string, ServerTool[]>();
  readonly #configured: Record<string, McpServerConfig>;
  readonly #cfg: ExecutorConfig;
  readonly #cache: ResultStore | undefined;
  readonly #identities: Map<string, Record<string, unknown>>;
  /** Calls in flight by cache key: an identical call made meanwhile waits for it instead of paying twice. */
  readonly #inflight = new Map<string, Promise<Outcome>>();
  readonly #warn: (message: string) => void;
  readonly #warned = new Set<string>();
  readonly #scrubber: Scrubber;
  #stats = { calls: 0, cacheHits: 0, cacheMisses: 0, cacheErrors: 0, errors: 0, timeouts: 0 };

  private constructor(opts: ExecutorOptions, servers: Map<string, ServerConnection>) {
    this.#servers = servers;
    this.#configured = opts.servers;
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

  /**
   * Connects every server that is not `disabled` and lists its tools. A server that will not
   * start, an alias or exposed name that leads nowhere, and one tool name offered by two
   * servers are clear errors, before any sample runs.
   */
  static async start(opts: ExecutorOptions): Promise<Executor> {
    const enabled = Object.entries(opts.servers).filter(([, cfg]) => cfg.disabled !== true);
    const servers = new Map(enabled.map(([name, cfg]) => [name, new ServerConnection(name, cfg, opts.executor, opts.serverEnv?.[name])]));
    const ex = new Executor(opts, servers);
    try {
      await Promise.all(
        [...servers.values()].map(async (s) => {
          try {
            await s.client();
          } catch (err) {
            const tail = s.stderrTail ? `\n--- stderr of ${s.name} ---\n${s.stderrTail}` : '';
            const message = ex.#scrubber.text(`mcpServers.${s.name}: the server did not start: ${(err as Error).message}${tail}`);
            throw new TrajforgeError('TOOL_SERVER_FAILED', message, { field: `mcpServers.${s.name}` });
          }
        }),
      );
      // In config order, so that messages list servers the way the user wrote them.
      // Descriptions and schemas go into the system prompt.
      const clean = (t: ServerTool): ServerTool => ({ ...t, description: ex.#scrubber.text(t.description), inputSchema: ex.#scrubber.value(t.inputSchema) });
      ex.#listed = new Map([...servers.values()].map((s) => [s.name, s.tools.map(clean)]));
      ex.#view = ex.view(opts.tools);
    } catch (err) {
      await ex.close();
      throw err;
    }
    return ex;
  }

  /**
   * A view of the servers through a tools config: aliases, exposed names, limits. An alias or
   * exposed name that leads nowhere, and one tool name offered by two servers, are errors
   * naming the field. `run` at start builds the top-level one; each agent gets its own.
   */
  view(tools: RunConfig['tools'], opts: ViewOptions = {}): ToolView {
    const field = opts.field ?? 'tools';
    const listed = opts.servers === undefined ? this.#listed : new Map([...this.#listed].filter(([name]) => opts.servers!.includes(name)));
    const configured = this.#configured;
    const routes = new Map<string, Route>();
    const add = (name: string, server: string, tool: ServerTool, bodyParamPref?: string, description?: string): void => {
      const bodyParam = pickBodyParam(tool.inputSchema, bodyParamPref);
      routes.set(name, {
        server,
        tool,
        bodyParam,
        spec: { name, description: description ?? tool.description, inputSchema: tool.inputSchema, bodyParam, server },
      });
    };
    for (const [alias, a] of Object.entries(tools.aliases)) {
      const at = `${field}.aliases.${alias}.server`;
      if (configured[a.server]?.disabled === true) {
        throw new TrajforgeError('BAD_CONFIG', `${at}: server ${a.server} is disabled (mcpServers.${a.server}.disabled: true)`, { field: at });
      }
      if (!listed.has(a.server)) throw new TrajforgeError('BAD_CONFIG', `${at}: no server named ${a.server} in mcpServers`, { field: at });
      const tool = listed.get(a.server)!.find((t) => t.name === a.tool);
      if (!tool) {
        const names = listed.get(a.server)!.map((t) => t.name).join(', ');
        throw new TrajforgeError('BAD_CONFIG', `${field}.aliases.${alias}.tool: server ${a.server} has no tool ${a.tool} (it has: ${names})`, {
          field: `${field}.aliases.${alias}.tool`,
        });
      }
      add(alias, a.server, tool, a.body_param, a.description);
    }
    // Server tools are callable by their own names too, unless an alias took the name.
    const offeredBy = new Map<string, string[]>();
    for (const [server, ts] of listed) {
      for (const t of ts) {
        offeredBy.set(t.name, [...(offeredBy.get(t.name) ?? []), server]);
        if (!routes.has(t.name)) add(t.name, server, t);
      }
    }
    let exposed = tools.expose ?? (Object.keys(tools.aliases).length ? Object.keys(tools.aliases) : [...routes.keys()]);
    if (opts.inherited) exposed = exposed.filter((name) => routes.has(name));
    for (const name of exposed) {
      if (!routes.has(name)) {
        throw new TrajforgeError('BAD_CONFIG', `${field}.expose: no tool or alias named ${name} (have: ${[...routes.keys()].join(', ')})`, {
          field: `${field}.expose`,
        });
      }
      const owners = offeredBy.get(name) ?? [];
      if (owners.length > 1 && !(name in tools.aliases)) {
        // Whichever server listed first would win, silently: the user has to say which one is meant.
        throw new TrajforgeError(
          'BAD_CONFIG',
          `${field}: servers ${owners.slice(0, -1).join(', ')} and ${owners.at(-1)} both offer a tool named ${name}; ` +
            `choose one with an alias (${field}.aliases.${name}: {server: ${owners[0]}, tool: ${name}})${tools.expose ? ` or leave ${name} out of ${field}.expose` : ''}`,
          { field: tools.expose ? `${field}.expose` : `${field}.aliases` },
        );
      }
    }
    return new ToolView(routes, exposed, tools.limits, (route, mapped, callId, started) => this.#execute(route, mapped, callId, started));
  }

  /** The tools shown to the model (the top-level view). */
  tools(): ToolSpec[] {
    return this.#view!.tools();
  }

  /** Whether the model may call this name: only exposed tools can be reached. */
  hasTool(name: string): boolean {
    return this.#view!.hasTool(name);
  }

  stats(): ExecutorStats {
    let restarts = 0;
    let protocolErrors = 0;
    let lastProtocolError: string | undefined;
    const down: ServerDownTime[] = [];
    const now = Date.now();
    for (const s of this.#servers.values()) {
      restarts += s.totalRestarts;
      protocolErrors += s.protocolErrors;
      lastProtocolError = s.lastProtocolError ?? lastProtocolError;
      const periods = s.downPeriods(now);
      if (periods.length) down.push({ server: s.name, periods: periods.length, ms: periods.reduce((n, p) => n + (p.to - p.from), 0), downAtEnd: s.downAtEnd });
    }
    lastProtocolError = lastProtocolError === undefined ? undefined : this.#scrubber.text(lastProtocolError);
    return { ...this.#stats, restarts, protocolErrors, lastProtocolError, down };
  }

  /**
   * Runs one call through the top-level view. Never throws for tool misbehaviour: errors come
   * back in the result and the model sees them. `used` counts this trajectory's calls per tool, for the limits.
   */
  call(call: ParsedCall, callId: string, used: ReadonlyMap<string, number>): Promise<ExecResult> {
    return this.#view!.call(call, callId, used);
  }

  /** A call a view has routed and mapped: from the cache, or from the server. */
  async #execute(route: Route, mapped: ReturnType<typeof coerceArguments>, callId: string, started: number): Promise<ExecResult> {
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
    const shown = renderResult(outcome.raw, callId, { maxResultChars: this.#cfg.max_result_chars, maxSnippetChars: this.#cfg.max_snippet_chars });
    if (shown.isError) this.#stats.errors++;
    return { ...base, result: shown.result, truncated: shown.truncated, view: shown.view, ...(shown.isError ? { error: shown.view.error } : {}) };
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
      const ok = succeeded(outcome);
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
      return { outcome: { raw: this.#scrubber.value(raw) }, cached: true };
    }
    this.#stats.cacheMisses++;
    this.#stats.calls++;
    const outcome = this.#scrubbed(await this.#run(route, args));
    if (succeeded(outcome)) {
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
    return raw === outcome.raw ? outcome : { raw };
  }

  /**
   * Calls the server. A server that died under the call is replaced (within its restart
   * budget) and the call retried once; a timeout, an error the tool or the client reported, or
   * an oversized result fails this call alone and leaves the server as it is.
   */
  async #run(route: Route, args: Record<string, unknown>): Promise<Outcome> {
    const server = this.#servers.get(route.server)!;
    /** Why the server died under this call, when it did: a retry that finds it down says both. */
    let died: string | undefined;
    for (let attempt = 0; ; attempt++) {
      let client: Client | undefined;
      try {
        client = await server.client();
        const res = await client.callTool({ name: route.tool.name, arguments: args }, undefined, { timeout: server.callTimeoutMs });
        server.healthy();
        // Nested past what any walk of it (the scrubber, the cache, the record) could take: this call fails, not the run.
        if (nestsDeeperThan(res)) return { failure: `${route.server}/${route.tool.name}: the result nests objects and arrays more than ${MAX_JSON_DEPTH} levels deep; not read` };
        return { raw: res };
      } catch (err) {
        const message = (err as Error).message ?? String(err);
        switch (failureKind(err)) {
          case 'down':
            return { failure: died === undefined ? message : `tool server ${route.server} failed: ${died}; it is down now (${(err as ServerDown).why})` };
          case 'timeout':
            // A slow call is not a dead server: other calls may be in flight on it.
            this.#stats.timeouts++;
            return { failure: `tool call timed out after ${server.callTimeoutMs} ms` };
          case 'too_large':
            return { failure: withoutCode(message) };
          case 'tool':
            return { failure: `${route.server}/${route.tool.name}: ${withoutCode(message)}` };
          case 'dead':
            await server.discard(client);
            died = message;
            if (attempt >= 1) return { failure: `tool server ${route.server} failed: ${message}` };
        }
      }
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.#servers.values()].map((s) => s.close()));
    await this.#cache?.close();
  }
}

/** The SDK prefixes `MCP error CODE: ` on each side of the wire; the model needs the message. */
function withoutCode(message: string): string {
  return message.replace(/^(MCP error -?\d+: )+/, '');
}

function succeeded(outcome: Outcome): outcome is { raw: unknown } {
  return 'raw' in outcome && (outcome.raw as { isError?: unknown } | null)?.isError !== true;
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
