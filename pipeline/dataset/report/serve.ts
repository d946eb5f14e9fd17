/**
 * `trajforge report --serve RUN`: the report of a run served over HTTP, kept up to date while
 * the run writes. What it answers is in serve-routes.ts.
 *
 * One follower (`LiveRun`, live.ts) looks at the run every `poll_ms` and reads only what was
 * appended; pages are told of changes over their event streams and fetch the rows they lack.
 * The charts need every row counted again (`stats`' figures cannot be followed row by row at the
 * cost of a few counters), so they are redrawn only when a page asks (a button, and once when the
 * run stops): one read of the files, never one per look.
 *
 * The page shows the run's trajectories (questions, answers, tool outputs), which can be
 * private: the server listens on loopback unless told otherwise (`--allow-remote`).
 */
import { livePrice } from '../run-prices.js';
import { createServer, type Server } from 'node:http';
import { isIP } from 'node:net';
import type { ReportServeOptions } from '../../../schemas/index.js';
import { TrajforgeError } from '../../errors.js';
import { statPath } from '../../files.js';
import type { TokenCounter } from '../../core/tokens/count.js';
import { LiveRun } from './live.js';
import { isLoopback } from './loopback.js';
import { DEFAULT_ROW_OPTIONS, type RowOptions } from './rows.js';
import { ReportRoutes } from './serve-routes.js';

export { isLoopback } from './loopback.js';

export interface ServeOptions {
  readonly options: ReportServeOptions;
  readonly title?: string | undefined;
  readonly outputChars?: number | undefined;
  /** Counts tokens of rows from other systems (a run holds none, but the page builder takes it). */
  readonly counter?: TokenCounter | undefined;
  /** Where problems met while serving are told (a file that cannot be read); default stderr. */
  readonly log?: ((line: string) => void) | undefined;
}

export interface ReportServer {
  /** `http://host:port/`. */
  readonly url: string;
  readonly live: LiveRun;
  /** Stops following the run, ends the event streams and closes the server. */
  close(): Promise<void>;
}

/** Starts serving `dir` (a run directory, or where one will be). */
export async function serveReport(dir: string, opts: ServeOptions): Promise<ReportServer> {
  const o = opts.options;
  const log = opts.log ?? ((line: string) => void process.stderr.write(`${line}\n`));
  const local = isLoopback(o.host);
  checkTarget(dir, o, local);
  const rowOpts: RowOptions = { ...DEFAULT_ROW_OPTIONS, ...(opts.outputChars ? { outputChars: opts.outputChars } : {}) };
  const live = new LiveRun(dir, {
    rateWindowMs: o.rate_window_s * 1000,
    newest: o.newest,
    chunkBytes: o.read_chunk_bytes,
    // The flags win; without them, the prices the run's config recorded (docs/config.md#prices).
    price: o.price_prompt !== undefined && o.price_completion !== undefined ? { prompt: o.price_prompt, completion: o.price_completion } : livePrice(dir),
  });
  // The first look reads what the run holds already; the address is printed once it is ready.
  await live.poll();

  const routes = new ReportRoutes({ dir, live, local, rowOpts, title: opts.title, counter: opts.counter, log });
  const server = createServer(routes.handle);
  await listen(server, o);
  server.on('error', (err) => log(`report --serve: ${err.message}`));
  const follower = follow(live, dir, o.poll_ms, log, routes.broadcast);
  const heartbeat = setInterval(routes.broadcast, o.heartbeat_s * 1000);

  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : o.port;
  const shown = isIP(o.host) === 6 ? `[${o.host}]` : o.host;
  return {
    url: `http://${shown}:${port}/`,
    live,
    async close(): Promise<void> {
      clearInterval(heartbeat);
      await follower.stop();
      routes.endStreams();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

/** A host that is not loopback needs `--allow-remote`; `--serve` follows a directory, not a file. */
function checkTarget(dir: string, o: ReportServeOptions, local: boolean): void {
  if (!local && !o.allow_remote) {
    throw new TrajforgeError(
      'BAD_USAGE',
      `report --serve: --host ${o.host} is not a loopback address; the page shows the run's trajectories to anyone who can reach it. Add --allow-remote to serve it there anyway`,
      { field: 'host' },
    );
  }
  const st = statPath(dir);
  if (st && !st.isDirectory()) throw new TrajforgeError('BAD_USAGE', `report --serve: ${dir} is a file; --serve follows a run directory (report ${dir} --out page.html makes the page of a file)`, { file: dir });
}

/** Listens on the host and port asked for; a port in use or a host that is not this machine's is a usage error. */
function listen(server: Server, o: ReportServeOptions): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') reject(new TrajforgeError('BAD_USAGE', `report --serve: port ${o.port} on ${o.host} is in use (another report --serve?); pass --port N, or --port 0 for any free port`, { field: 'port' }));
      else if (err.code === 'EADDRNOTAVAIL' || err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') reject(new TrajforgeError('BAD_USAGE', `report --serve: cannot listen on ${o.host} (${err.code}): not an address of this machine`, { field: 'host' }));
      else reject(err);
    });
    server.listen(o.port, o.host, () => resolve());
  });
}

/**
 * The follower: one look at the run every `pollMs`, never two at once; `changed` after a look
 * that found something. A look that fails (a file that cannot be read) is said once, and the
 * next look tries again.
 */
function follow(live: LiveRun, dir: string, pollMs: number, log: (line: string) => void, changed: () => void): { stop(): Promise<void> } {
  let stopped = false;
  let lastProblem = '';
  let timer: NodeJS.Timeout | undefined;
  let looking: Promise<void> = Promise.resolve();
  const look = (): void => {
    looking = live
      .poll()
      .then(
        (found) => {
          lastProblem = '';
          if (found) changed();
        },
        (err: unknown) => {
          const message = (err as Error).message;
          if (message !== lastProblem) log(`report --serve: cannot read ${dir}: ${message} (trying again every ${pollMs} ms)`);
          lastProblem = message;
        },
      )
      .then(() => {
        if (!stopped) timer = setTimeout(look, pollMs);
      });
  };
  timer = setTimeout(look, pollMs);
  return {
    async stop(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      await looking;
    },
  };
}
