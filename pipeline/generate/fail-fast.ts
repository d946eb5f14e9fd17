/**
 * When a run stops early because of its model endpoint, and what it writes of the samples that
 * led it there (DESIGN: "a run whose requests keep failing stops early with the server's own
 * message"). Three ways, each after `endpoint.fail_fast_after` samples or at once:
 *
 * - The endpoint is wrong: the run's first requests fail on a refused connection, an unknown
 *   host, 404 (a wrong path or model), 401 or 403 (a wrong key), before the endpoint has answered
 *   any (LlmClient's `onWrongEndpoint`). The run stops at once, in seconds, with one line naming
 *   the URL and the model and pointing at `trajforge check`; the samples in flight are cancelled
 *   and none is recorded (none ever got an answer), so the same command redoes them all.
 * - The endpoint refuses requests (`endpoint_rejected`) `fail_fast_after` samples in a row: the
 *   run stops and those refusals are not written (the endpoint's fault, not the samples'; the
 *   same command redoes them). Refusals that a later success breaks were about their own
 *   prompts, and are written then.
 * - Samples fail with `llm_error` (retries ran out) `fail_fast_after` in a row: the endpoint is
 *   down; the run stops, their records written (`rerun --reason llm_error` retries them).
 */
import type { Family } from './agents.js';

export interface FailFastOptions {
  /** `endpoint.fail_fast_after`. */
  readonly after: number;
  /** `endpoint.max_retries`, for the message. */
  readonly retries: number;
  /** The run directory, for the rerun hint. */
  readonly dir: () => string;
  /** Stops the run (aborts its signal). */
  readonly stop: () => void;
}

/** What to write for a sample's final family. */
export type Settled = { readonly held: true } | { readonly held: false; readonly before: readonly Family[] };

export class FailFast {
  readonly #o: FailFastOptions;
  #fatal: string | undefined;
  /** Refusals in a row, and those not written yet. */
  #refusedInARow = 0;
  #held: Family[] = [];
  /** Samples in a row whose requests kept failing. */
  #failingInARow = 0;

  constructor(opts: FailFastOptions) {
    this.#o = opts;
  }

  /** Why the run stopped early, when it did. */
  get fatal(): string | undefined {
    return this.#fatal;
  }

  /** Stops the run for `message`, unless it stopped already (the first reason is the one told). */
  stop(message: string): void {
    if (this.#fatal !== undefined) return;
    this.#fatal = message;
    this.#o.stop();
  }

  /** The run's first requests say the endpoint is wrong (`why`: the URL, the model and what happened). */
  wrongEndpoint(why: string): void {
    this.stop(
      `the model endpoint is wrong: ${why}, before it answered any request. ` +
        'Check endpoint.base_url (it usually ends in /v1), endpoint.model and the key (endpoint.api_key_env), or run `trajforge check --config <this config>`, which tries each',
    );
  }

  /**
   * A sample's final family. `held`: a refusal, kept back until the streak is broken (then
   * written) or reaches fail_fast_after (then dropped: the run stops). Otherwise the refusals
   * held so far, to write before it: this one shows the endpoint serves.
   */
  settle(family: Family): Settled {
    const root = family.root;
    if (root.reason === 'endpoint_rejected') {
      this.#held.push(family);
      if (++this.#refusedInARow >= this.#o.after) this.stop(`the model endpoint refused the requests: ${root.error ?? 'unknown'}`);
      if (this.#fatal !== undefined) this.#held = [];
      return { held: true };
    }
    this.#refusedInARow = 0;
    const before = this.#held;
    this.#held = [];
    if (root.reason !== 'llm_error') this.#failingInARow = 0;
    else if (++this.#failingInARow >= this.#o.after) {
      // A dead endpoint would otherwise turn every remaining question into a failure record.
      this.stop(
        `the model endpoint kept failing: ${this.#failingInARow} samples in a row failed after ${this.#o.retries} retries each; last: ${root.error ?? 'unknown'}. ` +
          `Run the same command again when it is back; \`trajforge rerun ${this.#o.dir()} --reason llm_error\` retries the samples that failed`,
      );
    }
    return { held: false, before };
  }

  /** The refusals still held when a run ends without stopping for them: failures of their own samples, to write. */
  release(): Family[] {
    const held = this.#held;
    this.#held = [];
    return held;
  }
}
