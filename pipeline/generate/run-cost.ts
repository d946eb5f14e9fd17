/**
 * A run's spend while it runs: priced from the store's tally of the records on disk (every
 * invocation's, so the budget holds across resumes), shown on the progress line, written in the
 * manifest, and checked against `budgets.max_cost_usd` after each family is written.
 */
import type { RunConfig } from '../../schemas/index.js';
import { dollars, modelsOf, runCost, type RunCost, type SpendTally } from '../core/cost.js';

export class RunSpend {
  readonly #spent: SpendTally;
  readonly #config: RunConfig;
  readonly #models: ReturnType<typeof modelsOf>;
  /** Dollars on record when this invocation began (null: unpriced). */
  readonly #atStart: number | null;
  #reached: { max_cost_usd: number; spent_usd: number } | undefined;

  constructor(spent: SpendTally, config: RunConfig) {
    this.#spent = spent;
    this.#config = config;
    this.#models = modelsOf(config);
    this.#atStart = this.cost().usd;
  }

  /** What the run spent so far, all invocations, with the budget that stopped it if one did. */
  cost(): RunCost {
    const c = runCost(this.#spent, this.#config.prices, this.#models);
    return this.#reached ? { ...c, budget_reached: this.#reached } : c;
  }

  /** Dollars the run spent, and this invocation's part of them; null when a model has no price. */
  dollars(): { run: number | null; invocation: number | null } {
    const run = this.cost().usd;
    return { run, invocation: run === null || this.#atStart === null ? null : run - this.#atStart };
  }

  /** True once the run's spend reached `budgets.max_cost_usd` (checked after each write; it stays reached). */
  reached(): boolean {
    if (this.#reached) return true;
    const max = this.#config.budgets.max_cost_usd;
    const usd = max === undefined ? null : this.cost().usd;
    if (max === undefined || usd === null || usd < max) return false;
    this.#reached = { max_cost_usd: max, spent_usd: usd };
    return true;
  }

  /** The summary's word on a budget stop: `$5.02 of $5.00`. */
  get budgetStop(): string | undefined {
    return this.#reached ? `budgets.max_cost_usd reached: ${dollars(this.#reached.spent_usd)} spent of ${dollars(this.#reached.max_cost_usd)}` : undefined;
  }
}
