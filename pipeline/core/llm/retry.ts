/**
 * What a failed request to the model endpoint means for the next one: how long to wait before
 * trying again, and whether the failure says the endpoint itself is wrong.
 *
 * The wait is an exponential back-off with jitter, or what the endpoint asked for
 * (`Retry-After`, `retry-after-ms`), and never longer than `retry_max_ms`: an endpoint that
 * asks for an hour gets asked again after `retry_max_ms`, and after `max_retries` such waits
 * the request fails (`llm_error`) instead of holding the run silent for the hour. Every wait is
 * noted (waits.ts) so the progress line can say what the run waits for.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { ConnectionError, EndpointError } from './chat-http.js';

/** Seconds or an HTTP date in `Retry-After`, or milliseconds in `retry-after-ms`. */
export function retryAfterMs(headers: IncomingHttpHeaders | undefined): number | undefined {
  if (!headers) return undefined;
  const msHeader = headers['retry-after-ms'];
  const ms = Number(msHeader);
  if (typeof msHeader === 'string' && msHeader.trim() !== '' && Number.isFinite(ms) && ms >= 0) return ms;
  const ra = headers['retry-after'];
  if (ra === undefined) return undefined;
  const secs = Number(ra);
  if (Number.isFinite(secs) && secs >= 0) return secs * 1000;
  const date = Date.parse(ra);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

export interface RetryTiming {
  readonly retry_base_ms: number;
  readonly retry_max_ms: number;
}

/** The wait before the next try, and whether what the endpoint asked for was cut to `retry_max_ms`. */
export interface RetryWait {
  readonly ms: number;
  /** What the endpoint asked for, when it asked. */
  readonly asked: number | undefined;
  readonly capped: boolean;
}

/**
 * The wait before retry number `failures` (1 for the first): what the endpoint `asked` for, else
 * `retry_base_ms` doubled per failure with jitter (half to all of it); at most `retry_max_ms`.
 */
export function retryWait(cfg: RetryTiming, failures: number, asked: number | undefined, random: () => number = Math.random): RetryWait {
  if (asked !== undefined && Number.isFinite(asked)) {
    const ms = Math.max(0, Math.min(asked, cfg.retry_max_ms));
    return { ms, asked, capped: asked > cfg.retry_max_ms };
  }
  const backoff = Math.min(cfg.retry_max_ms, cfg.retry_base_ms * 2 ** Math.min(failures - 1, 30));
  return { ms: backoff / 2 + random() * (backoff / 2), asked: undefined, capped: false };
}

/** Seconds, for messages: `3600 s`, `0.5 s`. */
export function seconds(ms: number): string {
  const s = ms / 1000;
  return `${s >= 10 ? Math.round(s) : Number(s.toFixed(1))} s`;
}

/** What the progress line says a wait is for. */
export function waitReason(model: string, wait: RetryWait, rateLimited: boolean, lastError: string): string {
  const asked = wait.asked === undefined ? '' : ` (Retry-After ${seconds(wait.asked)}${wait.capped ? `, cut to retry_max_ms ${seconds(wait.ms)}` : ''})`;
  return rateLimited ? `${model} rate-limited${asked}` : `${model} failed, retrying${asked}: ${lastError.slice(0, 120)}`;
}

/** Connection failures that say no server is at the address, rather than a busy one. */
const NOT_THERE: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'refused the connection: nothing listens there',
  ENOTFOUND: 'names a host that does not exist (DNS)',
  EAI_AGAIN: 'names a host DNS could not resolve',
};

/**
 * Why `err` says the endpoint is the wrong one — nothing listening, no such host, no such path or
 * model (404), a key it refuses (401, 403) — or undefined for a failure a busy or flaky endpoint
 * gives too. Asked only before the endpoint has answered once: later, the same failure is a
 * moment's trouble and retried as any other.
 */
export function wrongEndpoint(err: unknown): string | undefined {
  if (err instanceof ConnectionError && err.code !== undefined) return NOT_THERE[err.code] === undefined ? undefined : `${NOT_THERE[err.code]} (${err.code})`;
  if (!(err instanceof EndpointError)) return undefined;
  if (err.status === 401 || err.status === 403) return `refused the key: ${err.status} ${err.message}`;
  if (err.status === 404) return `has no such path or model: 404 ${err.message}`;
  return undefined;
}
