/**
 * `trajforge report --serve RUN`: the report of a run served over HTTP, kept up to date while
 * the run writes.
 *
 *   GET /              the report page (build.ts) of the run as it is now, with the live panel
 *   GET /events        server-sent events: `figures` (live.ts) whenever they change, and every
 *                      `heartbeat_s` (which keeps proxies from closing a quiet stream)
 *   GET /rows?g&t&f    the rows a page at that place in the files has not seen (JSON)
 *   GET /overview?g&t&f  the overview (figures and charts) of the rows a page at that place holds
 *   GET /figures.json  the figures, for scripts
 *
 * One follower (`LiveRun`) looks at the run every `poll_ms` and reads only what was appended;
 * pages are told of changes and fetch the rows they lack. A page load reads the run's files up
 * to the follower's place, so the page and its figures describe the same bytes. The charts
 * need every row counted again (`stats`' figures cannot be followed row by row at the cost of
 * a few counters), so they are redrawn only when a page asks (a button, and once when the run
 * stops): one read of the files, never one per look.
 *
 * The page shows the run's trajectories (questions, answers, tool outputs), which can be
 * private: the server listens on loopback unless told otherwise, and while it does it answers
 * only requests addressed to a loopback name, so a web page elsewhere cannot read it through
 * a DNS name rebound to 127.0.0.1. It sends no CORS headers, and the page may fetch nothing but
 * its own server.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { Writable } from 'node:stream';
import type { ReportServeOptions } from '../../../schemas/index.js';
import { TrajforgeError } from '../../errors.js';
import { statPath } from '../../files.js';
import type { TokenCounter } from '../../core/tokens/count.js';
import { latestIndexFor } from '../latest.js';
import { readDataset, type DatasetRow, type ReadOptions } from '../readers.js';
import { computeStats } from '../stats.js';
import { writeReport, type ReportData } from './build.js';
import { overview } from './page.js';
import { LiveRun, type Cursor } from './live.js';
import { LIVE_SCRIPT, liveHtml } from './live-page.js';
import { DEFAULT_ROW_OPTIONS, type RowOptions } from './rows.js';

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

/** Whether `host` names this machine's loopback interface. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || h === '0:0:0:0:0:0:0:1' || /^::ffff:127\./.test(h);
  return false;
}

/** The host name of a Host header (`name`, `name:port`, `[v6]:port`). */
function hostOf(header: string | undefined): string {
  if (!header) return '';
  if (header.startsWith('[')) return header.slice(0, header.indexOf(']') + 1);
  const colon = header.lastIndexOf(':');
  return colon === -1 ? header : header.slice(0, colon);
}

const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  // The page is inline and fetches only from its own server: no tool output can load or send anything.
  'content-security-policy': "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'",
};

/** Unsent bytes past which an event stream's reader is taken to be gone. */
const STALLED_STREAM_BYTES = 1 << 20;

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
  res.end(text);
}

function sendText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' });
  res.end(`${text}\n`);
}

/**
 * The response as a stream the page writer can wait on: its writes fail, rather than wait for
 * a drain that never comes, once the browser has gone away.
 */
function responseStream(res: ServerResponse): Writable {
  return new Writable({
    write(chunk: Buffer, _enc, done) {
      if (res.destroyed || res.writableEnded) return done(Object.assign(new Error('the page was closed'), { code: 'ERR_STREAM_DESTROYED' }));
      if (res.write(chunk)) return done();
      const onDrain = (): void => {
        res.off('close', onClose);
        done();
      };
      const onClose = (): void => {
        res.off('drain', onDrain);
        done(Object.assign(new Error('the page was closed'), { code: 'ERR_STREAM_DESTROYED' }));
      };
      res.once('drain', onDrain);
      res.once('close', onClose);
    },
  });
}

/** Starts serving `dir` (a run directory, or where one will be). */
export async function serveReport(dir: string, opts: ServeOptions): Promise<ReportServer> {
  const o = opts.options;
  const log = opts.log ?? ((line: string) => void process.stderr.write(`${line}\n`));
  const local = isLoopback(o.host);
  if (!local && !o.allow_remote) {
    throw new TrajforgeError(
      'BAD_USAGE',
      `report --serve: --host ${o.host} is not a loopback address; the page shows the run's trajectories to anyone who can reach it. Add --allow-remote to serve it there anyway`,
      { field: 'host' },
    );
  }
  const st = statPath(dir);
  if (st && !st.isDirectory()) throw new TrajforgeError('BAD_USAGE', `report --serve: ${dir} is a file; --serve follows a run directory (report ${dir} --out page.html makes the page of a file)`, { file: dir });
  const rowOpts: RowOptions = { ...DEFAULT_ROW_OPTIONS, ...(opts.outputChars ? { outputChars: opts.outputChars } : {}) };
  const live = new LiveRun(dir, {
    rateWindowMs: o.rate_window_s * 1000,
    newest: o.newest,
    chunkBytes: o.read_chunk_bytes,
    price: o.price_prompt !== undefined && o.price_completion !== undefined ? { prompt: o.price_prompt, completion: o.price_completion } : undefined,
  });
  // The first look reads what the run holds already; the address is printed once it is ready.
  await live.poll();

  const streams = new Set<ServerResponse>();
  const broadcast = (): void => {
    if (streams.size === 0) return;
    const event = `event: figures\ndata: ${JSON.stringify(live.figures())}\n\n`;
    for (const res of streams) {
      // A page that stopped reading (a suspended laptop) would have events pile up here: it is let
      // go, and its EventSource reconnects when it wakes.
      if (res.writableLength > STALLED_STREAM_BYTES) res.destroy();
      else res.write(event);
    }
  };

  /** The run's rows up to `cursor`, as the page builder and `stats` take them. */
  async function rowsAt(cursor: Cursor): Promise<ReportData> {
    const files = live.files;
    const read: ReadOptions = { format: 'trajforge', onBadRow: 'skip', until: new Map([[files.trajectories, cursor.trajectories], [files.failures, cursor.failures]]) };
    const any = statPath(files.trajectories) !== undefined || statPath(files.failures) !== undefined;
    return any
      ? { ...readDataset(dir, read), latest: await latestIndexFor(dir, read), source: dir }
      : { rows: (async function* (): AsyncGenerator<DatasetRow> {})(), latest: { failuresFile: '', winners: new Map() }, source: dir };
  }

  async function page(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.writeHead(200, PAGE_HEADERS);
    if (req.method === 'HEAD') return void res.end();
    // The page holds the rows up to where the figures are: the same bytes, however far the run has gone since.
    const figures = live.figures();
    const data = await rowsAt(figures.cursor);
    await writeReport(data, '-', {
      stdout: responseStream(res),
      title: opts.title ?? `trajforge live report: ${dir}`,
      counter: opts.counter,
      outputChars: rowOpts.outputChars,
      live: { html: liveHtml(figures), script: LIVE_SCRIPT },
    });
    res.end();
  }

  function cursorOf(url: URL): Cursor {
    const n = (k: string): number => {
      const v = url.searchParams.get(k);
      return v !== null && /^\d+$/.test(v) ? Number(v) : Number.NaN;
    };
    return { generation: n('g'), trajectories: n('t'), failures: n('f') };
  }

  async function rows(url: URL, res: ServerResponse): Promise<void> {
    sendJson(res, 200, await live.rowsSince(cursorOf(url), rowOpts));
  }

  /** Pages at one place get one overview: it is made once. */
  let drawn: { key: string; html: string } | undefined;
  async function overviewOf(url: URL, res: ServerResponse): Promise<void> {
    const cursor = cursorOf(url);
    const now = live.cursor;
    if (cursor.generation !== now.generation || !(cursor.trajectories <= now.trajectories) || !(cursor.failures <= now.failures)) {
      return sendJson(res, 409, { reload: true });
    }
    const key = `${cursor.generation}:${cursor.trajectories}:${cursor.failures}`;
    if (drawn?.key !== key) {
      const data = await rowsAt(cursor);
      const stats = await computeStats(data.rows, { latest: data.latest, report: data.report });
      drawn = { key, html: overview(stats, stats.rows.counted, rowOpts) };
    }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
    res.end(drawn.html);
  }

  function events(res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', connection: 'keep-alive', 'x-content-type-options': 'nosniff' });
    res.write(`retry: 2000\nevent: figures\ndata: ${JSON.stringify(live.figures())}\n\n`);
    streams.add(res);
    res.on('close', () => streams.delete(res));
  }

  const server: Server = createServer((req, res) => {
    const done = (err: unknown): void => {
      log(`report --serve: ${req.url}: ${(err as Error).message}`);
      if (!res.headersSent) sendText(res, 500, (err as Error).message);
      else res.destroy();
    };
    try {
      if (local && !isLoopback(hostOf(req.headers.host))) {
        return sendText(res, 403, 'this report is served to loopback addresses only (Host must be 127.0.0.1, localhost or [::1])');
      }
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.setHeader('allow', 'GET, HEAD');
        return sendText(res, 405, 'only GET and HEAD');
      }
      const url = new URL(req.url ?? '/', 'http://localhost');
      switch (url.pathname) {
        case '/':
        case '/index.html':
          return void page(req, res).catch(done);
        case '/events':
          return events(res);
        case '/rows':
          return void rows(url, res).catch(done);
        case '/overview':
          return void overviewOf(url, res).catch(done);
        case '/figures.json':
          return sendJson(res, 200, live.figures());
        default:
          return sendText(res, 404, 'not found: this server has /, /events, /rows, /overview and /figures.json');
      }
    } catch (err) {
      done(err);
    }
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') reject(new TrajforgeError('BAD_USAGE', `report --serve: port ${o.port} on ${o.host} is in use (another report --serve?); pass --port N, or --port 0 for any free port`, { field: 'port' }));
      else if (err.code === 'EADDRNOTAVAIL' || err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') reject(new TrajforgeError('BAD_USAGE', `report --serve: cannot listen on ${o.host} (${err.code}): not an address of this machine`, { field: 'host' }));
      else reject(err);
    });
    server.listen(o.port, o.host, () => resolve());
  });
  server.on('error', (err) => log(`report --serve: ${err.message}`));

  // The follower: one look every poll_ms, never two at once. A look that fails (a file that cannot
  // be read) is said once, and the next look tries again.
  let stopped = false;
  let lastProblem = '';
  let timer: NodeJS.Timeout | undefined;
  let looking: Promise<void> = Promise.resolve();
  const look = (): void => {
    looking = live
      .poll()
      .then(
        (changed) => {
          lastProblem = '';
          if (changed) broadcast();
        },
        (err: unknown) => {
          const message = (err as Error).message;
          if (message !== lastProblem) log(`report --serve: cannot read ${dir}: ${message} (trying again every ${o.poll_ms} ms)`);
          lastProblem = message;
        },
      )
      .then(() => {
        if (!stopped) timer = setTimeout(look, o.poll_ms);
      });
  };
  timer = setTimeout(look, o.poll_ms);
  const heartbeat = setInterval(broadcast, o.heartbeat_s * 1000);

  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : o.port;
  const shown = isIP(o.host) === 6 ? `[${o.host}]` : o.host;
  return {
    url: `http://${shown}:${port}/`,
    live,
    async close(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      clearInterval(heartbeat);
      await looking;
      for (const res of streams) res.end();
      streams.clear();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
