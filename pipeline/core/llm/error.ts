/**
 * How a request to a model endpoint failed, in the kinds the caller acts on: a refusal, a
 * prompt too long, retries that ran out, an endless answer, or the caller's own abort.
 */
import { WireError } from '../../errors.js';

export type LlmErrorKind =
  /** The endpoint refuses the request itself (401, 403, 404, 400): retrying cannot help. */
  | 'fatal'
  | 'context_overflow'
  /** Retryable errors that did not stop within `max_retries`. */
  | 'exhausted'
  /** The answer passed `endpoint.max_response_bytes`; not retried (the next may be as endless). */
  | 'too_large'
  | 'aborted';

export class LlmError extends WireError {
  readonly kind: LlmErrorKind;
  override readonly status: number | undefined;
  constructor(kind: LlmErrorKind, message: string, status?: number) {
    super(message);
    this.name = 'LlmError';
    this.kind = kind;
    this.status = status;
  }
}

/** A promise that resolves after `ms`, or rejects as `aborted` when `signal` aborts first. */
export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new LlmError('aborted', 'aborted'));
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(new LlmError('aborted', 'aborted'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
