/**
 * A seed that cannot be decided now: a request failed past its retries (the endpoint or the
 * judge is down), or a rollout of it failed for want of an endpoint or a judge. Its line is not
 * written, so the next run of the same command redoes it; a check never rejects a question for
 * a fault of the machinery.
 */
import { WireError } from '../errors.js';

/** The other end (the endpoint, the judge) did not answer: a wire error, handled by the run, never shown as the user's. */
export class Unfinished extends WireError {
  constructor(message: string) {
    super(message);
    this.name = 'Unfinished';
  }
}
