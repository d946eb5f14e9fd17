/**
 * A loopback HTTP server that stands in for NCBI, Serper and web sites: each route answers
 * from a script, and every request is recorded with its arrival time, so tests can check
 * what the tool servers sent and how fast.
 */
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';

export const REPLAY_FIXTURES = join(PACKAGE_ROOT, 'tests/fixtures/replay');

export function fixture(name: string): string {
  return readFileSync(join(REPLAY_FIXTURES, name), 'utf8');
}

export interface Recorded {
  /** performance.now() in this process when the request line arrived. */
  readonly at: number;
  readonly method: string;
  readonly url: URL;
  readonly headers: IncomingMessage['headers'];
  readonly body: string;
}

export interface Reply {
  readonly status?: number;
  readonly headers?: Record<string, string>;
  readonly body?: string | Buffer;
  /** Sends the headers, then never the body (or the rest of it). */
  readonly hang?: boolean;
}

/** Answers the n-th request to its route (0-based). */
export type Handler = (req: Recorded, n: number) => Reply | Promise<Reply>;

export class Replay {
  readonly requests: Recorded[] = [];
  readonly #routes = new Map<string, { handler: Handler; count: number }>();
  readonly #open = new Set<ServerResponse>();
  #server = createServer((req, res) => void this.#serve(req, res));
  url = '';
  port = 0;

  static async start(): Promise<Replay> {
    const r = new Replay();
    await new Promise<void>((resolve) => r.#server.listen(0, '127.0.0.1', resolve));
    r.port = (r.#server.address() as AddressInfo).port;
    r.url = `http://127.0.0.1:${r.port}`;
    return r;
  }

  /** A handler for a path, or a list of replies given in turn (the last one repeats). */
  route(path: string, how: Handler | Reply | Reply[]): this {
    const handler: Handler = typeof how === 'function' ? how : Array.isArray(how) ? (_r, n) => how[Math.min(n, how.length - 1)]! : () => how;
    this.#routes.set(path, { handler, count: 0 });
    return this;
  }

  on(path: string): Recorded[] {
    return this.requests.filter((r) => r.url.pathname === path);
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const at = performance.now();
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const rec: Recorded = { at, method: req.method ?? 'GET', url: new URL(req.url ?? '/', 'http://replay'), headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
    this.requests.push(rec);
    const route = this.#routes.get(rec.url.pathname);
    if (!route) {
      res.writeHead(404, { 'Content-Type': 'text/plain' }).end(`no route for ${rec.url.pathname}`);
      return;
    }
    const reply = await route.handler(rec, route.count++);
    res.writeHead(reply.status ?? 200, reply.headers ?? {});
    if (reply.hang) {
      this.#open.add(res);
      if (reply.body !== undefined) res.write(reply.body);
      return;
    }
    res.end(reply.body ?? '');
  }

  async close(): Promise<void> {
    for (const res of this.#open) res.destroy();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

/** The largest number of timestamps inside any window of `ms` (a window starts at each timestamp). */
export function maxInWindow(times: readonly number[], ms: number): number {
  const t = [...times].sort((a, b) => a - b);
  let best = 0;
  let j = 0;
  for (let i = 0; i < t.length; i++) {
    while (t[i]! - t[j]! >= ms) j++;
    best = Math.max(best, i - j + 1);
  }
  return best;
}
