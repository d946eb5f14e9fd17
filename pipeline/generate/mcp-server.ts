/**
 * One MCP server as the executor holds it: its transport (stdio, Streamable HTTP or legacy SSE,
 * from its `mcpServers` entry), the connection made with a timeout and its tools listed, and the
 * restarts: a server that died is started again on the next call, within `max_restarts` in a
 * row; past that it is down, its calls refused until a backoff has passed. One of the two files
 * that talk MCP (with mcp-call.ts).
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport, SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { deserializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { McpServerConfig, RunConfig } from '../../schemas/index.js';
import { WireError } from '../errors.js';
import { PACKAGE_VERSION } from '../paths.js';
import { BoundedLineReader, RESULT_TOO_LARGE_CODE } from './stdio-lines.js';
import { formatBytes } from './tool-result.js';

type ExecutorConfig = RunConfig['executor'];

/** A tool as its server lists it. */
export interface ServerTool {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
  /**
   * False when the server marks the tool `idempotentHint: false` (a code interpreter: the same
   * code may answer differently the next time); its results are then never cached or shared.
   */
  readonly idempotent?: boolean;
}

const STDERR_TAIL = 4_000;

/** A call refused at once because its server is down and not due for another try. `why`: the state, without the server's name. */
export class ServerDown extends WireError {
  constructor(
    server: string,
    readonly why: string,
  ) {
    super(`tool server ${server} is down (${why})`);
  }
}

/** A period in which a server was down: its restart budget spent, calls refused until the next try. */
export interface DownPeriod {
  readonly from: number;
  readonly to: number;
}

/** One MCP server: its connection, restarted on demand after it dies. */
export class ServerConnection {
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
    for (const t of page.tools) {
      const tool = { name: t.name, description: t.description ?? '', inputSchema: t.inputSchema as Record<string, unknown> };
      out.push(t.annotations?.idempotentHint === false ? { ...tool, idempotent: false } : tool);
    }
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
