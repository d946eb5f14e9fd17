/**
 * The chat-completions wire (pipeline/core/llm/chat-http.ts) against a loopback server that writes raw
 * bytes: SSE read exactly as the OpenAI SDK reads it (the SDK is the oracle), however the bytes
 * are cut into pieces; errors before and inside a stream; early stop; dropped connections.
 */
import { getEventListeners, once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { chatWire, ConnectionError, EndpointError, MalformedResponse, postJson, postStream, RequestAborted, ResponseTooLarge } from '../../../pipeline/core/llm/chat-http.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = undefined;
});

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void | Promise<void>;
const seen: { headers: IncomingMessage['headers']; url: string; body: string }[] = [];

async function serve(handler: Handler): Promise<string> {
  seen.length = 0;
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      seen.push({ headers: req.headers, url: req.url ?? '', body });
      void handler(req, res, body);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

/** Writes `raw` in pieces of `size` bytes (0: at once), each flushed on its own. */
function sse(raw: string, size: number): Handler {
  return async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const bytes = Buffer.from(raw, 'utf8');
    for (let i = 0; i < bytes.length; i += size || bytes.length) {
      res.write(bytes.subarray(i, i + (size || bytes.length)));
      if (size) await sleep(1);
    }
    res.end();
  };
}

async function ours(url: string, opts: { stopAfter?: number } = {}): Promise<unknown[]> {
  const got: unknown[] = [];
  await postStream(chatWire(url, 'sk-test'), '{}', new AbortController().signal, (d) => {
    got.push(d);
    return opts.stopAfter !== undefined && got.length >= opts.stopAfter;
  });
  return got;
}

async function sdk(url: string): Promise<unknown[]> {
  const client = new OpenAI({ baseURL: url, apiKey: 'sk-test', maxRetries: 0, logLevel: 'off' });
  const got: unknown[] = [];
  for await (const chunk of await client.chat.completions.create({ model: 'm', messages: [], stream: true })) got.push(chunk);
  return got;
}

const chunk = (content: string, extra: Record<string, unknown> = {}): string => JSON.stringify({ choices: [{ index: 0, delta: { content }, finish_reason: null }], ...extra });

/** Events as servers write them: comments, an `event:` name, a data field split over lines, no space after the colon. */
function rawStream(eol: string): string {
  return [
    `: keep-alive${eol}${eol}`,
    `data: ${chunk('héllo 中')}${eol}${eol}`,
    `event: message${eol}data: ${chunk('🙂 wörld')}${eol}${eol}`,
    `data:${chunk('no space')}${eol}${eol}`,
    `data: {"choices": [{"index": 0,${eol}data: "delta": {"content": "two lines"}, "finish_reason": "stop"}]}${eol}${eol}`,
    `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 4 } })}${eol}${eol}`,
    `data: [DONE]${eol}${eol}`,
  ].join('');
}

describe('postStream reads SSE as the OpenAI SDK does', () => {
  for (const [name, eol] of [
    ['\\n', '\n'],
    ['\\r\\n', '\r\n'],
    ['\\r', '\r'],
  ] as const) {
    for (const size of [0, 1, 5, 64]) {
      it(`line ends ${name}, written ${size ? `${size} bytes at a time` : 'at once'}`, async () => {
        const url = await serve(sse(rawStream(eol), size));
        const mine = await ours(url);
        expect(mine).toHaveLength(5);
        expect(mine).toEqual(await sdk(url));
      });
    }
  }

  it('drops a last event that has no blank line after it (it may be cut short), and ignores what follows [DONE]', async () => {
    const url = await serve(sse(`data: ${chunk('a')}\n\ndata: ${chunk('b')}`, 0));
    expect(await ours(url)).toHaveLength(1);
    expect(await ours(url)).toEqual(await sdk(url));
    const after = await serve(sse(`data: ${chunk('a')}\n\ndata: [DONE]\n\ndata: not json\n\n`, 0));
    expect(await ours(after)).toHaveLength(1);
  });

  it('sends the key as a bearer token, JSON, to base_url/chat/completions (a trailing slash or not)', async () => {
    for (const tail of ['', '/']) {
      const url = await serve(sse('data: [DONE]\n\n', 0));
      await postStream(chatWire(url + tail, 'sk-secret'), '{"model":"m"}', new AbortController().signal, () => {});
      expect(seen[0]).toMatchObject({ url: '/v1/chat/completions', body: '{"model":"m"}' });
      expect(seen[0]!.headers.authorization).toBe('Bearer sk-secret');
      expect(seen[0]!.headers['content-type']).toBe('application/json');
      await new Promise<void>((r) => server!.close(() => r()));
      server = undefined;
    }
  });

  it('stops when told: resolves at once, and the server sees the connection go', async () => {
    let closed = false;
    const url = await serve(async (req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      req.socket.on('close', () => (closed = true));
      // Would stream for 20 s.
      for (let i = 0; i < 2000 && !closed; i++) {
        res.write(`data: ${chunk(String(i))}\n\n`);
        await sleep(10);
      }
      res.end();
    });
    const t0 = Date.now();
    expect(await ours(url, { stopAfter: 3 })).toHaveLength(3);
    expect(Date.now() - t0).toBeLessThan(5000);
    await sleep(100);
    expect(closed).toBe(true);
  });
});

describe('failures', () => {
  it('an error event inside a 200 stream is an EndpointError; a numeric code is its status', async () => {
    const url = await serve(sse(`data: ${chunk('a')}\n\ndata: {"error": {"message": "model crashed", "type": "server_error"}}\n\n`, 0));
    const err = await ours(url).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EndpointError);
    expect(err).toMatchObject({ status: undefined, message: 'model crashed' });
    const coded = await serve(sse(`event: error\ndata: {"error": {"code": 502, "message": "Provider returned error"}}\n\n`, 0));
    expect(await ours(coded).catch((e: unknown) => e)).toMatchObject({ status: 502, message: 'Provider returned error' });
  });

  it('an event that is not JSON is a MalformedResponse', async () => {
    const url = await serve(sse(`data: ${chunk('a')}\n\ndata: {"choices": [\n\n`, 0));
    await expect(ours(url)).rejects.toBeInstanceOf(MalformedResponse);
  });

  it('a connection dropped mid-stream is a ConnectionError, not a short answer', async () => {
    const url = await serve(async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${chunk('a')}\n\n`);
      await sleep(20);
      res.socket?.destroy();
    });
    await expect(ours(url)).rejects.toBeInstanceOf(ConnectionError);
  });

  it('a non-2xx answer: status, message, code and param from an OpenAI error body, headers kept', async () => {
    const url = await serve((_req, res) => {
      res.writeHead(400, { 'content-type': 'application/json', 'retry-after': '3' });
      res.end(JSON.stringify({ error: { message: "Unsupported parameter: 'stop'", type: 'invalid_request_error', param: 'stop', code: 'unsupported_parameter' } }));
    });
    const err = (await postJson(chatWire(url, 'k'), '{}', new AbortController().signal).catch((e: unknown) => e)) as EndpointError;
    expect(err).toBeInstanceOf(EndpointError);
    expect(err).toMatchObject({ status: 400, message: "Unsupported parameter: 'stop'", code: 'unsupported_parameter', param: 'stop' });
    expect(err.headers['retry-after']).toBe('3');
  });

  /** Until `res` drains or closes; whichever comes first takes the other's listener with it (a `close` listener left on each drain piles up). */
  const drainedOrClosed = (res: import('node:http').ServerResponse): Promise<void> =>
    new Promise((resolve) => {
      const done = (): void => {
        res.off('drain', done).off('close', done);
        resolve();
      };
      res.once('drain', done).once('close', done);
    });

  it('a body, a stream or an error body that never ends is dropped at its byte limit, not read until the process runs out of memory', async () => {
    // Writes as fast as it is read until the client goes away.
    const endless = (status: number, head: string, piece: string) => async (_req: unknown, res: import('node:http').ServerResponse) => {
      res.writeHead(status, { 'content-type': status === 200 && head === '' ? 'text/event-stream' : 'application/json' });
      res.write(head);
      while (!res.destroyed) if (!res.write(piece)) await drainedOrClosed(res);
    };
    const limit = 256 * 1024;
    const whole = await serve(endless(200, '{"choices":[{"message":{"content":"', 'x'.repeat(4096)));
    const err = await postJson(chatWire(whole, 'k'), '{}', new AbortController().signal, limit).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ResponseTooLarge);
    expect((err as Error).message).toBe(`the answer passed ${limit} bytes (endpoint.max_response_bytes); dropped there`);
    const sse = await serve(endless(200, '', `data: ${chunk('y'.repeat(200))}\n\n`));
    let events = 0;
    const streamed = await postStream(chatWire(sse, 'k'), '{}', new AbortController().signal, () => void events++, limit).catch((e: unknown) => e);
    expect(streamed).toBeInstanceOf(ResponseTooLarge);
    expect(events).toBeGreaterThan(100);
    // An error body is read up to 64 KiB, then dropped; the status and the start of the text are the error.
    const refusal = await serve(endless(401, 'Unauthorized: ', 'z'.repeat(4096)));
    const e401 = (await postJson(chatWire(refusal, 'k'), '{}', new AbortController().signal).catch((e: unknown) => e)) as EndpointError;
    expect(e401).toBeInstanceOf(EndpointError);
    expect(e401.status).toBe(401);
    expect(e401.message.startsWith('Unauthorized: zzz')).toBe(true);
  });

  it('a proxy’s HTML page is reduced to its text; an empty body says so', async () => {
    const url = await serve((_req, res) => {
      res.writeHead(502, { 'content-type': 'text/html' });
      res.end('<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>');
    });
    expect(await ours(url).catch((e: unknown) => e)).toMatchObject({ status: 502, message: '502 Bad Gateway Bad Gateway' });
    const empty = await serve((_req, res) => {
      res.writeHead(503);
      res.end();
    });
    expect(await ours(empty).catch((e: unknown) => e)).toMatchObject({ status: 503, message: 'status 503 (no body)' });
  });

  it('a 200 whose body is not JSON is a MalformedResponse; a whole JSON body is returned parsed', async () => {
    const half = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"choices": [');
    });
    await expect(postJson(chatWire(half, 'k'), '{}', new AbortController().signal)).rejects.toBeInstanceOf(MalformedResponse);
    const whole = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(chunk('x'));
    });
    expect(await postJson(chatWire(whole, 'k'), '{}', new AbortController().signal)).toEqual(JSON.parse(chunk('x')));
  });

  it('an abort through the signal, before or during the answer, is RequestAborted', async () => {
    const url = await serve(async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${chunk('a')}\n\n`);
      await sleep(5000);
      res.end();
    });
    const early = new AbortController();
    early.abort();
    await expect(postStream(chatWire(url, 'k'), '{}', early.signal, () => {})).rejects.toBeInstanceOf(RequestAborted);
    const late = new AbortController();
    const p = postStream(chatWire(url, 'k'), '{}', late.signal, () => {
      late.abort();
    });
    await expect(p).rejects.toBeInstanceOf(RequestAborted);
  });

  it('leaves no listener on a signal that outlives its requests: whole, streamed, stopped early, or an error status', async () => {
    const url = await serve(async (req, res) => {
      if (req.url?.includes('fail')) {
        res.writeHead(503, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"busy"}}');
        return;
      }
      res.writeHead(200, { 'content-type': req.url?.includes('sse') ? 'text/event-stream' : 'application/json' });
      res.end(req.url?.includes('sse') ? `data: ${chunk('a')}\n\ndata: ${chunk('b')}\n\ndata: [DONE]\n\n` : chunk('x'));
    });
    const shared = new AbortController().signal;
    for (let i = 0; i < 15; i++) {
      await postJson(chatWire(url, 'k'), '{}', shared);
      await postStream(chatWire(`${url}/sse`, 'k'), '{}', shared, () => {});
      await postStream(chatWire(`${url}/sse`, 'k'), '{}', shared, () => true);
      await postJson(chatWire(`${url}/fail`, 'k'), '{}', shared).catch(() => {});
    }
    // A request closes just after its answer is read.
    await sleep(50);
    expect(getEventListeners(shared, 'abort')).toHaveLength(0);
  });
});
