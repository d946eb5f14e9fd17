/**
 * How many requests to an endpoint are in flight at once: the gate every request of a model
 * client passes (llm.ts), lowered on 429 and raised again after a run of successes. A queue run
 * shares one gate among its workers through Redis (generate/shared-limits.ts).
 */
/**
 * What LlmClient asks before each request and tells after it: the process's AdaptiveGate, or one
 * shared by every worker of a queue run through Redis (shared-limits.ts).
 */
export interface RequestGate {
  /** Resolves when a request may be sent; may reject with an LlmError (`aborted`, or `exhausted` when a shared limit cannot be asked). */
  acquire(signal?: AbortSignal): Promise<void>;
  release(): void;
  /** A 429; `retryAfterMs` is what the endpoint asked every client to wait, when it said. */
  rateLimited(retryAfterMs?: number): void;
  succeeded(): void;
  /** Requests in flight allowed now (as last seen, for a shared gate). */
  readonly limit: number;
}

/**
 * Lowers the number of requests in flight on 429 and raises it again after a run of
 * successes. First come, first served: a freed slot goes to the request that has waited
 * longest, never to one that arrives meanwhile, so with agents a sub-agent's requests and
 * every other family's share the endpoint in the order they asked.
 */
export class AdaptiveGate implements RequestGate {
  #limit: number;
  readonly #max: number;
  #inFlight = 0;
  #streak = 0;
  readonly #waiters: (() => void)[] = [];
  static readonly RAISE_AFTER = 20;

  constructor(max: number) {
    this.#max = Math.max(1, max);
    this.#limit = this.#max;
  }

  get limit(): number {
    return this.#limit;
  }

  acquire(): Promise<void> {
    if (this.#waiters.length === 0 && this.#inFlight < this.#limit) {
      this.#inFlight++;
      return Promise.resolve();
    }
    // The slot is counted when it is handed over (#admit), so no later caller can take it first.
    return new Promise<void>((r) => this.#waiters.push(r));
  }

  release(): void {
    this.#inFlight--;
    this.#admit();
  }

  /** Hands free slots to the longest waiters. */
  #admit(): void {
    while (this.#inFlight < this.#limit && this.#waiters.length > 0) {
      this.#inFlight++;
      this.#waiters.shift()!();
    }
  }

  rateLimited(): void {
    this.#streak = 0;
    this.#limit = Math.max(1, Math.floor(this.#limit / 2));
  }

  succeeded(): void {
    if (++this.#streak < AdaptiveGate.RAISE_AFTER || this.#limit >= this.#max) return;
    this.#streak = 0;
    this.#limit++;
    this.#admit();
  }
}
