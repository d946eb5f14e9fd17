/**
 * The chat-completions wire: one POST over node:http(s) with a keep-alive agent, the answer
 * read as one JSON body or as server-sent events split as the bytes arrive (sse.ts).
 *
 * This replaced the OpenAI SDK on the request path. Per request the SDK built WHATWG
 * Request/Response/Headers objects, piped the body through web streams, and decoded SSE
 * through three layers of async iterators; that was most of trajforge's CPU per turn
 * (bench/BENCHMARKS.md, before and after). The protocol facts kept from it: the URL is
 * `base_url` + `/chat/completions`; a non-2xx answer carries `{error: {message, code, param}}`
 * (or text, from a proxy); a stream is `data: <json>` events ending in `data: [DONE]`, and an
 * event carrying `error` is a failure reported after the 200.
 */
import { Agent, request, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { StringDecoder } from 'node:string_decoder';
import { PACKAGE_VERSION } from '../../paths.js';
import { WireError } from '../../errors.js';
import { SseLines, type SseEvent } from './sse.js';

const agent = new Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' });
const httpsAgent = new HttpsAgent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' });

/** An error body is read up to this size; the rest is not worth holding. */
const MAX_ERROR_BODY = 64 * 1024;

/** The endpoint answered with an error: a non-2xx status, or an `error` event inside a stream. */
export class EndpointError extends WireError {
  /** Undefined for an error reported inside a stream without a numeric code. */
  override readonly status: number | undefined;
  readonly code: string | undefined;
  readonly param: string | undefined;
  readonly headers: IncomingHttpHeaders;
  constructor(status: number | undefined, message: string, fields: { code?: unknown; param?: unknown }, headers: IncomingHttpHeaders) {
    super(message);
    this.name = 'EndpointError';
    this.status = status;
    this.code = typeof fields.code === 'string' ? fields.code : undefined;
    this.param = typeof fields.param === 'string' ? fields.param : undefined;
    this.headers = headers;
  }
}

/** The connection failed or dropped before the answer was whole. */
export class ConnectionError extends WireError {
  /** The system's code, when there was one: `ECONNREFUSED`, `ENOTFOUND`, `ECONNRESET`, a TLS code… */
  readonly code: string | undefined;
  constructor(message: string, code?: string) {
    super(message);
    this.name = 'ConnectionError';
    this.code = code;
  }
}

/** A 2xx body that is not what the protocol promises (not JSON, an SSE event that does not parse). */
export class MalformedResponse extends WireError {
  constructor(message: string) {
    super(message);
    this.name = 'MalformedResponse';
  }
}

/** The answer passed the byte limit the caller set (`endpoint.max_response_bytes`): it was dropped there. */
export class ResponseTooLarge extends WireError {
  readonly limit: number;
  constructor(limit: number, what: string) {
    super(`${what} passed ${limit} bytes (endpoint.max_response_bytes); dropped there`);
    this.name = 'ResponseTooLarge';
    this.limit = limit;
  }
}

/** The request was aborted through its signal (by the caller, or by a timer the caller set). */
export class RequestAborted extends WireError {
  constructor() {
    super('aborted');
    this.name = 'RequestAborted';
  }
}

export interface ChatWire {
  readonly url: URL;
  readonly headers: Readonly<Record<string, string>>;
  readonly secure: boolean;
}

/** Where and how to POST chat completions for `baseUrl`. The key goes into a header, nowhere else. */
export function chatWire(baseUrl: string, apiKey: string): ChatWire {
  const url = new URL(`${baseUrl.replace(/\/+$/, '')}/chat/completions`);
  return {
    url,
    secure: url.protocol === 'https:',
    headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${apiKey}`, 'user-agent': `trajforge/${PACKAGE_VERSION}` },
  };
}

/**
 * POSTs `body` and resolves with the parsed JSON answer. A body longer than `maxBytes` is
 * dropped as soon as it passes them (a body with no end would otherwise grow until the
 * process runs out of string length).
 */
export async function postJson(wire: ChatWire, body: string, signal: AbortSignal, maxBytes = Infinity): Promise<unknown> {
  const res = await send(wire, body, signal);
  const { text, over } = await readAll(res, signal, maxBytes);
  if (over) throw new ResponseTooLarge(maxBytes, 'the answer');
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new MalformedResponse(`the body is not JSON: ${preview(text)}`);
  }
}

/**
 * POSTs `body` and calls `onEvent` with each parsed SSE `data` event until `[DONE]` or the end
 * of the body (an event the end of the body cuts off is not passed on). `onEvent` returns true
 * to stop early: the response is then dropped (its connection too, as the server may still be
 * sending) and the promise resolves. A stream that passes `maxBytes` is dropped with
 * ResponseTooLarge: one that never ends would otherwise run until the request's timeout.
 */
export async function postStream(wire: ChatWire, body: string, signal: AbortSignal, onEvent: (data: unknown) => boolean | void, maxBytes = Infinity): Promise<void> {
  const res = await send(wire, body, signal);
  await new Promise<void>((resolve, reject) => {
    // Bytes are counted before decoding; the decoder keeps a character split across pieces whole.
    const decoder = new StringDecoder('utf8');
    let received = 0;
    let settled = false;
    const finish = (err?: Error): void => {
      if (settled) return;
      settled = true;
      if (err) reject(err);
      else resolve();
    };
    const stop = (err?: Error): true => {
      res.destroy();
      finish(err);
      return true;
    };
    const events = new SseLines(streamEvents(res.headers, onEvent, stop));
    res.on('data', (piece: Buffer) => {
      if (settled) return;
      received += piece.length;
      if (received > maxBytes) return void stop(new ResponseTooLarge(maxBytes, 'the stream'));
      events.push(decoder.write(piece));
    });
    res.on('end', () => {
      if (settled) return;
      events.push(decoder.end(), true);
      finish();
    });
    res.on('error', (err) => finish(signal.aborted ? new RequestAborted() : new ConnectionError(err.message)));
    res.on('close', () => {
      if (!settled) finish(signal.aborted ? new RequestAborted() : new ConnectionError('the stream was cut off'));
    });
  });
}

/**
 * What each SSE event of a chat stream means: `[DONE]` ends it (later events are not passed
 * on), one that is not JSON or that carries `error` fails it, and the rest go to `onEvent`,
 * which returns true to stop reading. `stop` drops the response (with an error, or without when
 * the reader is done); returns true when the stream is over for us.
 */
function streamEvents(headers: IncomingHttpHeaders, onEvent: (data: unknown) => boolean | void, stop: (err?: Error) => true): (e: SseEvent) => boolean {
  let done = false;
  return ({ data, event }) => {
    if (done) return false;
    if (data.startsWith('[DONE]')) {
      done = true;
      return false;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      return stop(new MalformedResponse(`a stream event is not JSON: ${preview(data)}`));
    }
    const error = (parsed as { error?: unknown } | null)?.error;
    if (event === 'error' || (error !== undefined && error !== null)) return stop(streamError(error ?? parsed, headers));
    if (onEvent(parsed) === true) {
      done = true;
      return stop();
    }
    return false;
  };
}

function send(wire: ChatWire, body: string, signal: AbortSignal): Promise<IncomingMessage> {
  if (signal.aborted) return Promise.reject(new RequestAborted());
  return new Promise((resolve, reject) => {
    const opts = { method: 'POST', headers: { ...wire.headers, 'content-length': String(Buffer.byteLength(body)) }, agent: wire.secure ? httpsAgent : agent };
    const req = (wire.secure ? httpsRequest : request)(wire.url, opts, (res) => {
      const status = res.statusCode ?? 0;
      if (status >= 200 && status < 300) return resolve(res);
      readAll(res, signal, MAX_ERROR_BODY).then(({ text }) => reject(statusError(status, text, res.headers)), reject);
    });
    // Not http.request's own `signal` option: it watches the request through stream.finished,
    // which cost ~0.03 ms of CPU per request on the bench machine (of ~0.2 for the whole
    // exchange). Destroying the request ends its response too; the request closes once its
    // response has ended, and takes its listener with it.
    const onAbort = (): void => void req.destroy();
    signal.addEventListener('abort', onAbort, { once: true });
    req.once('close', () => signal.removeEventListener('abort', onAbort));
    req.on('error', (err: NodeJS.ErrnoException) => reject(signal.aborted ? new RequestAborted() : new ConnectionError(err.message, err.code)));
    req.end(body);
  });
}

/**
 * GETs `path` below `baseUrl` (`/models`: the cheapest request an OpenAI-compatible server
 * answers) and resolves with the parsed JSON body, or undefined when the body is not JSON. A
 * non-2xx answer is an EndpointError, a failed connection a ConnectionError (with its code).
 */
export function getJson(baseUrl: string, path: string, apiKey: string, signal: AbortSignal, maxBytes: number): Promise<unknown> {
  if (signal.aborted) return Promise.reject(new RequestAborted());
  const url = new URL(`${baseUrl.replace(/\/+$/, '')}${path}`);
  const secure = url.protocol === 'https:';
  const headers = { ...chatWire(baseUrl, apiKey).headers };
  delete (headers as Record<string, string>)['content-type'];
  return new Promise((resolve, reject) => {
    const req = (secure ? httpsRequest : request)(url, { method: 'GET', headers, agent: secure ? httpsAgent : agent }, (res) => {
      const status = res.statusCode ?? 0;
      readAll(res, signal, status >= 200 && status < 300 ? maxBytes : MAX_ERROR_BODY).then(({ text }) => {
        if (status < 200 || status >= 300) return reject(statusError(status, text, res.headers));
        try {
          resolve(JSON.parse(text) as unknown);
        } catch {
          resolve(undefined);
        }
      }, reject);
    });
    const onAbort = (): void => void req.destroy();
    signal.addEventListener('abort', onAbort, { once: true });
    req.once('close', () => signal.removeEventListener('abort', onAbort));
    req.on('error', (err: NodeJS.ErrnoException) => reject(signal.aborted ? new RequestAborted() : new ConnectionError(err.message, err.code)));
    req.end();
  });
}

/**
 * The body as text, read up to `limit` bytes. Past them the response is destroyed (the server
 * may never stop sending) and `over` is set, with the first `limit` bytes as the text.
 */
function readAll(res: IncomingMessage, signal: AbortSignal, limit: number): Promise<{ text: string; over: boolean }> {
  return new Promise((resolve, reject) => {
    const pieces: Buffer[] = [];
    let size = 0;
    let settled = false;
    const done = (over: boolean): void => {
      if (settled) return;
      settled = true;
      const body = Buffer.concat(pieces, Math.min(size, limit));
      resolve({ text: body.toString('utf8'), over });
    };
    res.on('data', (piece: Buffer) => {
      if (settled) return;
      pieces.push(piece);
      size += piece.length;
      if (size > limit) {
        done(true);
        res.destroy();
      }
    });
    res.on('end', () => done(false));
    res.on('error', (err) => {
      if (!settled) {
        settled = true;
        reject(signal.aborted ? new RequestAborted() : new ConnectionError(err.message));
      }
    });
    res.on('close', () => {
      if (!settled && !res.complete) {
        settled = true;
        reject(signal.aborted ? new RequestAborted() : new ConnectionError('the response was cut off'));
      }
    });
  });
}

/** `{error: {message, code, param}}`, `{message}`, `{detail}`, or text (an HTML page from a proxy). */
function statusError(status: number, text: string, headers: IncomingHttpHeaders): EndpointError {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    const plain = text.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim();
    return new EndpointError(status, plain === '' ? `status ${status} (no body)` : preview(plain), {}, headers);
  }
  const obj = json as Record<string, unknown> | null;
  const err = (obj?.error ?? obj) as Record<string, unknown> | string | null;
  if (typeof err === 'string') return new EndpointError(status, err, {}, headers);
  const message = err?.message ?? err?.detail;
  return new EndpointError(status, typeof message === 'string' ? message : preview(JSON.stringify(json)), err ?? {}, headers);
}

/** An `error` reported after the 200, as vLLM and OpenRouter do: a numeric code is the status. */
function streamError(error: unknown, headers: IncomingHttpHeaders): EndpointError {
  if (typeof error === 'string') return new EndpointError(undefined, error, {}, headers);
  const e = (error ?? {}) as Record<string, unknown>;
  const status = typeof e.code === 'number' ? e.code : undefined;
  const message = typeof e.message === 'string' ? e.message : preview(JSON.stringify(error));
  return new EndpointError(status, message, { code: typeof e.code === 'string' ? e.code : undefined, param: e.param }, headers);
}

function preview(text: string): string {
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}
