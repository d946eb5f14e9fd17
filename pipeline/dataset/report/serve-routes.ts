/**
 * What a served report answers (serve.ts starts the server):
 *
 *   GET /              the report page (build.ts) of the run as it is now, with the live panel
 *   GET /events        server-sent events: `figures` (live.ts) whenever they change, and every
 *                      `heartbeat_s` (which keeps proxies from closing a quiet stream)
 *   GET /rows?g&t&f    the rows a page at that place in the files has not seen (JSON)
 *   GET /overview?g&t&f  the overview (figures and charts) of the rows a page at that place holds
 *   GET /figures.json  the figures, for scripts
 *
 * A page load reads the run's files up to the follower's place, so the page and its figures
 * describe the same bytes. The charts need every row counted again, so they are drawn only when
 * a page asks, once per place. While the server listens on loopback it answers only requests
 * addressed to a loopback name, so a web page elsewhere cannot read it through a DNS name rebound
 * to 127.0.0.1; it sends no CORS headers, and the page may fetch nothing but its own server.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { statPath } from '../../files.js';
import type { TokenCounter } from '../../core/tokens/count.js';
import { latestFilter, latestIndexFor } from '../latest.js';
import { readDataset, type DatasetRow, type ReadOptions } from '../readers.js';
import { recordedPrices } from '../run-prices.js';
import { reportFigures } from './figures.js';
import { writeReport, type ReportData } from './build.js';
import { liveHtml } from './live-page.js';
import type { Cursor, LiveRun } from './live.js';
import { overview } from './page.js';
import type { RowOptions } from './rows.js';
import { readRunHeader, runHeaderHtml } from './run-header.js';
import { liveScript } from './scripts.js';
import { hostOf, isLoopback } from './loopback.js';

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

function cursorOf(url: URL): Cursor {
  const n = (k: string): number => {
    const v = url.searchParams.get(k);
    return v !== null && /^\d+$/.test(v) ? Number(v) : Number.NaN;
  };
  return { generation: n('g'), trajectories: n('t'), failures: n('f') };
}

export interface RoutesOptions {
  readonly dir: string;
  readonly live: LiveRun;
  /** The server listens on loopback: only loopback Host names are answered. */
  readonly local: boolean;
  readonly rowOpts: RowOptions;
  readonly title?: string | undefined;
  readonly counter?: TokenCounter | undefined;
  readonly log: (line: string) => void;
}

/** The served report's request handler, and its open event streams. */
export class ReportRoutes {
  readonly #o: RoutesOptions;
  readonly #streams = new Set<ServerResponse>();
  /** Pages at one place get one overview: it is made once. */
  #drawn: { key: string; html: string } | undefined;

  constructor(o: RoutesOptions) {
    this.#o = o;
  }

  /** Answers one request; a failure is logged, and answered with a 500 while it still can be. */
  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    const done = (err: unknown): void => {
      this.#o.log(`report --serve: ${req.url}: ${(err as Error).message}`);
      if (!res.headersSent) sendText(res, 500, (err as Error).message);
      else res.destroy();
    };
    try {
      if (this.#o.local && !isLoopback(hostOf(req.headers.host))) {
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
          return void this.#page(req, res).catch(done);
        case '/events':
          return this.#events(res);
        case '/rows':
          return void this.#rows(url, res).catch(done);
        case '/overview':
          return void this.#overview(url, res).catch(done);
        case '/figures.json':
          return sendJson(res, 200, this.#o.live.figures());
        default:
          return sendText(res, 404, 'not found: this server has /, /events, /rows, /overview and /figures.json');
      }
    } catch (err) {
      done(err);
    }
  };

  /** Sends the figures to every open event stream; a page that stopped reading is let go. */
  readonly broadcast = (): void => {
    if (this.#streams.size === 0) return;
    const event = `event: figures\ndata: ${JSON.stringify(this.#o.live.figures())}\n\n`;
    for (const res of this.#streams) {
      // A page that stopped reading (a suspended laptop) would have events pile up here: it is let
      // go, and its EventSource reconnects when it wakes.
      if (res.writableLength > STALLED_STREAM_BYTES) res.destroy();
      else res.write(event);
    }
  };

  /** Ends every event stream (the server is closing). */
  endStreams(): void {
    for (const res of this.#streams) res.end();
    this.#streams.clear();
  }

  /** The run's rows up to `cursor`, as the page builder and `stats` take them. */
  async #rowsAt(cursor: Cursor): Promise<ReportData> {
    const { dir, live } = this.#o;
    const files = live.files;
    const read: ReadOptions = { format: 'trajforge', onBadRow: 'skip', until: new Map([[files.trajectories, cursor.trajectories], [files.failures, cursor.failures]]) };
    const any = statPath(files.trajectories) !== undefined || statPath(files.failures) !== undefined;
    return any
      ? { ...readDataset(dir, read), latest: await latestIndexFor(dir, read), source: dir }
      : { rows: (async function* (): AsyncGenerator<DatasetRow> {})(), latest: { failuresFile: '', winners: new Map() }, source: dir };
  }

  async #page(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.writeHead(200, PAGE_HEADERS);
    if (req.method === 'HEAD') return void res.end();
    // The page holds the rows up to where the figures are: the same bytes, however far the run has gone since.
    const figures = this.#o.live.figures();
    const header = readRunHeader(this.#o.dir);
    const data = { ...(await this.#rowsAt(figures.cursor)), header: header && runHeaderHtml(header) };
    await writeReport(data, '-', {
      stdout: responseStream(res),
      title: this.#o.title ?? `trajforge live report: ${this.#o.dir}`,
      counter: this.#o.counter,
      outputChars: this.#o.rowOpts.outputChars,
      live: { html: liveHtml(figures), script: liveScript() },
    });
    res.end();
  }

  async #rows(url: URL, res: ServerResponse): Promise<void> {
    sendJson(res, 200, await this.#o.live.rowsSince(cursorOf(url), this.#o.rowOpts));
  }

  async #overview(url: URL, res: ServerResponse): Promise<void> {
    const cursor = cursorOf(url);
    const now = this.#o.live.cursor;
    if (cursor.generation !== now.generation || !(cursor.trajectories <= now.trajectories) || !(cursor.failures <= now.failures)) {
      return sendJson(res, 409, { reload: true });
    }
    const key = `${cursor.generation}:${cursor.trajectories}:${cursor.failures}`;
    if (this.#drawn?.key !== key) {
      const data = await this.#rowsAt(cursor);
      const { stats, rubric } = await reportFigures(data.rows, { latest: data.latest, report: data.report, prices: recordedPrices(this.#o.dir) }, data.latest && latestFilter(data.latest));
      this.#drawn = { key, html: overview(stats, stats.rows.counted, this.#o.rowOpts, rubric) };
    }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
    res.end(this.#drawn.html);
  }

  #events(res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', connection: 'keep-alive', 'x-content-type-options': 'nosniff' });
    res.write(`retry: 2000\nevent: figures\ndata: ${JSON.stringify(this.#o.live.figures())}\n\n`);
    this.#streams.add(res);
    res.on('close', () => this.#streams.delete(res));
  }
}
