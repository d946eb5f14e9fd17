/**
 * NCBI's limit: 3 requests per second per client, 10 with an API key, counted at NCBI's end;
 * a client over it gets `{"error":"API rate limit exceeded"}` and, if it keeps going, a block.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { WireError } from '../../pipeline/errors.js';

/** Keeps the spacing between requests this far above the limit: network jitter can bunch requests up on arrival. */
export const RATE_MARGIN_MS = 100;
/** A slot whose request never reported being sent counts as sent after this long. */
const MAX_PENDING_MS = 60_000;

/** Permission to send one request. Call `sent()` when the request is on the wire (or failed before it got there). */
export interface Slot {
  sent(): void;
}

/** What a client asks for permission to send: this process's RateLimiter, or a window shared through Redis (tools/shared/rate-window.ts). */
export interface Limiter {
  /** Resolves when the caller may send one request; rejects with LimiterUnavailable when the limit cannot be asked. */
  acquire(): Promise<Slot>;
}

/** The limit could not be asked (a shared one whose Redis does not answer): the request is not sent. */
export class LimiterUnavailable extends WireError {
  constructor(message: string) {
    super(message);
    this.name = 'LimiterUnavailable';
  }
}

/** Where the limiter reads the time and waits: the real clock, or a test's. */
export interface Clock {
  /** Milliseconds, monotonic. */
  now(): number;
  sleep(ms: number): Promise<void>;
}

const REAL_CLOCK: Clock = { now: () => performance.now(), sleep: (ms) => sleep(ms) };

interface Start {
  readonly at: Promise<number>;
}

/**
 * A sliding-window limiter: a request may start only when the `rate`-th request before it was
 * sent at least `windowMs` ago. Unlike a token bucket that starts full (which lets `rate`
 * requests through at once and then refills, so one second can hold nearly twice the limit),
 * no window of `windowMs` holds more than `rate` sends. Waiters are served in order.
 *
 * The window runs from when a request was *sent*, not from when it was allowed: opening a
 * connection (a TLS handshake to NCBI takes a few hundred ms) delays the first requests, and
 * timing from the permission would let the next ones, on warm connections, arrive right behind
 * them.
 *
 * A timer may fire up to a millisecond before its delay has passed by `performance.now()` (Node
 * counts timers in whole milliseconds of the event loop's time), so the limiter reads the clock
 * again after each wait instead of trusting that the wait was long enough.
 */
export class RateLimiter implements Limiter {
  readonly rate: number;
  readonly windowMs: number;
  readonly #starts: Start[] = [];
  readonly #clock: Clock;
  #tail: Promise<unknown> = Promise.resolve();

  constructor(rate: number, windowMs = 1000 + RATE_MARGIN_MS, clock: Clock = REAL_CLOCK) {
    if (!Number.isInteger(rate) || rate < 1) throw new Error(`rate must be a positive integer, got ${rate}`);
    this.rate = rate;
    this.windowMs = windowMs;
    this.#clock = clock;
  }

  /** Resolves when the caller may send one request. */
  acquire(): Promise<Slot> {
    const turn = this.#tail.then(() => this.#wait());
    this.#tail = turn;
    return turn;
  }

  async #wait(): Promise<Slot> {
    if (this.#starts.length >= this.rate) {
      const sentAt = await this.#starts.shift()!.at;
      for (let wait = sentAt + this.windowMs - this.#clock.now(); wait > 0; wait = sentAt + this.windowMs - this.#clock.now()) {
        await this.#clock.sleep(wait);
      }
    }
    let mark!: () => void;
    const at = new Promise<number>((resolve) => {
      const timer = setTimeout(() => mark(), MAX_PENDING_MS);
      timer.unref();
      mark = () => {
        clearTimeout(timer);
        resolve(this.#clock.now());
      };
    });
    this.#starts.push({ at });
    let done = false;
    return {
      sent: () => {
        if (done) return;
        done = true;
        mark();
      },
    };
  }
}
