/**
 * The executor: the MCP servers of a `mcpServers` object started and their tools listed, a view
 * of them for each agent (tool-view.ts: aliases, exposed names, limits), and each call run:
 * bound to the tool's schema (call-arguments.ts), answered from the cache or by the server
 * (cached-calls.ts), with a timeout and a restart of a server that died (mcp-call.ts,
 * mcp-server.ts, the only files that talk MCP), and what came back made the model's view
 * (tool-result.ts).
 */
import type { McpServerConfig, RunConfig } from '../../schemas/index.js';
import type { ParsedCall, ToolSpec } from '../dialects/types.js';
import { TrajforgeError } from '../errors.js';
import { Scrubber } from '../core/secrets.js';
import { CachedCalls } from './cached-calls.js';
import type { coerceArguments } from './call-arguments.js';
import type { ExecResult } from './exec-result.js';
import { callTool } from './mcp-call.js';
import { ServerConnection, type ServerTool } from './mcp-server.js';
import { renderResult } from './tool-result.js';
import { routeTools, ToolView, type Route, type Toolbox, type ViewOptions } from './tool-view.js';

// What the rollout, the agents and the tests take from the executor, wherever it is written.
export { coerceArguments } from './call-arguments.js';
export { makeCallId, skippedCall, type ExecResult } from './exec-result.js';
export { toView } from './tool-result.js';
export { ToolView, type CallSite, type Toolbox, type ViewOptions } from './tool-view.js';

type ExecutorConfig = RunConfig['executor'];

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


export class Executor implements Toolbox {
  readonly #servers: Map<string, ServerConnection>;
  /** The top-level tools config's view: what `call`, `hasTool` and `tools` serve. */
  #view: ToolView | undefined;
  /** Each server's tools as listed at start (secrets scrubbed), in config order. */
  #listed = new Map<string, ServerTool[]>();
  readonly #configured: Record<string, McpServerConfig>;
  readonly #cfg: ExecutorConfig;
  readonly #calls: CachedCalls;
  readonly #scrubber: Scrubber;
  #stats = { errors: 0, timeouts: 0 };

  private constructor(opts: ExecutorOptions, servers: Map<string, ServerConnection>) {
    this.#servers = servers;
    this.#configured = opts.servers;
    this.#cfg = opts.executor;
    this.#scrubber = opts.scrubber ?? Scrubber.none;
    this.#calls = new CachedCalls({
      servers: opts.servers,
      executor: opts.executor,
      env: opts.env ?? process.env,
      warn: opts.warn ?? ((m) => void process.stderr.write(`warning: ${m}\n`)),
      scrubber: this.#scrubber,
    });
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
   * A view of the servers through a tools config: aliases, exposed names, limits (tool-view.ts).
   * `run` at start builds the top-level one; each agent gets its own.
   */
  view(tools: RunConfig['tools'], opts: ViewOptions = {}): ToolView {
    const listed = opts.servers === undefined ? this.#listed : new Map([...this.#listed].filter(([name]) => opts.servers!.includes(name)));
    const { routes, exposed } = routeTools(listed, this.#configured, tools, opts);
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
    const { calls, cacheHits, cacheMisses, cacheErrors } = this.#calls.counts;
    return { calls, cacheHits, cacheMisses, cacheErrors, ...this.#stats, restarts, protocolErrors, lastProtocolError, down };
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
    const server = this.#servers.get(route.server)!;
    const { outcome, cached } = await this.#calls.run({ server: route.server, tool: route.tool.name, args: mapped.arguments, cacheable: route.tool.idempotent !== false }, () =>
      callTool(server, route.tool.name, mapped.arguments, () => void this.#stats.timeouts++),
    );
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

  async close(): Promise<void> {
    await Promise.all([...this.#servers.values()].map((s) => s.close()));
    await this.#calls.close();
  }
}
