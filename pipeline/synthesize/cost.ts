/**
 * What one seed cost: every request sent for it (its stages, the judge's checks, its rollouts),
 * with their tokens. Recorded on the seed's line, so a run's cost is the sum of its lines (and
 * `stats` divides it by the questions kept), and a budget holds across resumed sessions.
 */
import type { SynthesisCost } from '../../schemas/index.js';
import type { Meter } from '../core/judge/judge.js';

export class CostMeter implements Meter {
  requests = 0;
  promptTokens = 0;
  completionTokens = 0;

  charge(used: { readonly promptTokens: number; readonly completionTokens: number }): void {
    this.requests++;
    this.promptTokens += used.promptTokens;
    this.completionTokens += used.completionTokens;
  }

  /** Rollouts: their model requests and tokens, as the trajectories counted them. */
  add(requests: number, promptTokens: number, completionTokens: number): void {
    this.requests += requests;
    this.promptTokens += promptTokens;
    this.completionTokens += completionTokens;
  }

  get tokens(): number {
    return this.promptTokens + this.completionTokens;
  }

  record(): SynthesisCost {
    return { requests: this.requests, prompt_tokens: this.promptTokens, completion_tokens: this.completionTokens };
  }
}
