/**
 * What one model client met at its endpoint, in numbers a run directory keeps (the manifest's
 * `endpoint`, docs/output.md): requests sent, their responses by class, the retries and
 * `Retry-After` waits they cost. The client (llm.ts) counts; the run writes them at each
 * manifest checkpoint, and the live page and the end-of-run summary read the same numbers.
 */
import type { EndpointCounts } from '../../../schemas/index.js';
import { ConnectionError, EndpointError, RequestAborted } from './chat-http.js';

export type { EndpointCounts } from '../../../schemas/index.js';
export type ResponseClass = keyof EndpointCounts['responses'];

/** Every counter at zero. */
export function noCounts(): EndpointCounts {
  return {
    requests: 0,
    responses: { ok: 0, rate_limited: 0, server_error: 0, client_error: 0, connection_error: 0, timeout: 0, malformed: 0, aborted: 0 },
    retries: 0,
    retry_after: { waits: 0, seconds: 0 },
    length_retries: 0,
    repetition_resamples: 0,
  };
}

/** The class of the response a failed request got (`err` as chat-http.ts throws it). */
export function responseClass(err: unknown, callerAborted: boolean): ResponseClass {
  if (callerAborted) return 'aborted';
  // Our own per-request timer fired.
  if (err instanceof RequestAborted) return 'timeout';
  if (err instanceof ConnectionError) return 'connection_error';
  if (err instanceof EndpointError) {
    const status = err.status;
    if (status === 429) return 'rate_limited';
    // Undefined: an error inside a stream, the server failing mid-answer.
    if (status === undefined || status >= 500) return 'server_error';
    return status >= 400 ? 'client_error' : 'malformed';
  }
  // A body that is not a completion: malformed, or past `max_response_bytes`.
  return 'malformed';
}

/** `a` plus `b`, counter by counter; the concurrency limit is `b`'s when it has one (the later). */
export function addCounts(a: EndpointCounts, b: EndpointCounts): EndpointCounts {
  const responses = { ...a.responses };
  for (const k of Object.keys(responses) as ResponseClass[]) responses[k] += b.responses[k] ?? 0;
  const limit = b.concurrency_limit ?? a.concurrency_limit;
  return {
    requests: a.requests + b.requests,
    responses,
    retries: a.retries + b.retries,
    retry_after: { waits: a.retry_after.waits + b.retry_after.waits, seconds: round3(a.retry_after.seconds + b.retry_after.seconds) },
    length_retries: a.length_retries + b.length_retries,
    repetition_resamples: a.repetition_resamples + b.repetition_resamples,
    ...(limit === undefined ? {} : { concurrency_limit: limit }),
  };
}

/** Seconds to the millisecond: sums of waits stay readable in JSON. */
export const round3 = (x: number): number => Math.round(x * 1000) / 1000;

/**
 * The counts in one phrase, as the end-of-run summary and the static report's run header say
 * them: `195 requests, 14 retries, 5 rate-limited (429), 2 server errors, Retry-After 5 waits 5 s`
 * (the classes after the 429s only when there were any).
 */
export function countsLine(c: EndpointCounts): string {
  const r = c.responses;
  const more: [number, string][] = [
    [r.server_error, 'server errors (5xx)'],
    [r.client_error, 'other 4xx'],
    [r.connection_error, 'connection errors'],
    [r.timeout, 'timeouts'],
    [r.malformed, 'malformed'],
  ];
  const parts = [`${c.requests} requests`, `${c.retries} retries`, `${r.rate_limited} rate-limited (429)`, ...more.filter(([n]) => n > 0).map(([n, what]) => `${n} ${what}`)];
  if (c.retry_after.waits > 0) parts.push(`Retry-After ${c.retry_after.waits} waits ${Number(c.retry_after.seconds.toFixed(1))} s`);
  return parts.join(', ');
}
