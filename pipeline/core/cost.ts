/**
 * What a run's tokens cost: prices per model from the config (`prices`, US dollars per million
 * input, output and cached input tokens), the spend split into the main agent's sessions, the
 * sub-agents' and the judge's, and the run's total for `budgets.max_cost_usd`.
 *
 * No price table ships: list prices change every few months, differ by provider for the same
 * weights, and a self-hosted model has none; a stale default would print a confident wrong
 * number. A model without a price is spent in tokens only, and said so.
 *
 * The spend is counted from the records (each session's `usage`, each verdict's
 * `judgement.usage`), so a run's total holds across sessions, crashes and resumes: the store
 * adds up the records it reads when it opens the run, and the run adds each family it writes.
 */
import type { ModelPrice, RunConfig, RunManifest } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';

export interface TokenSpend {
  prompt: number;
  completion: number;
  /** Of `prompt`, those served from the endpoint's prefix cache. */
  cached: number;
}

type Part = 'main' | 'sub_agents' | 'judge';
export type RunCost = NonNullable<RunManifest['cost']>;

const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0);

/** US dollars for `t` at `price` (cached prompt tokens at `cached_input`, else `input`). */
export function usdOf(t: TokenSpend, price: ModelPrice): number {
  const cached = Math.min(t.cached, t.prompt);
  return ((t.prompt - cached) * price.input + cached * (price.cached_input ?? price.input) + t.completion * price.output) / 1e6;
}

/** `$1.23` (cents), `$0.0042` below a dollar cent, `?` for no price. */
export function dollars(usd: number | null): string {
  if (usd === null) return '$?';
  return usd >= 0.1 || usd === 0 ? `$${usd.toFixed(2)}` : `$${usd.toPrecision(2)}`;
}

/**
 * Tokens spent, by part, added up from records as they are read or written. A record is read
 * defensively: lines written by an older trajforge, or another tool, may lack a field.
 */
export class SpendTally {
  readonly parts: Record<Part, TokenSpend> = { main: zero(), sub_agents: zero(), judge: zero() };
  /** Some count came from a local tokenizer. */
  estimated = false;

  /** One session's record (a trajectory or a failed attempt): its usage, and its verdict's. */
  add(rec: unknown): void {
    if (rec === null || typeof rec !== 'object') return;
    const r = rec as Record<string, unknown>;
    this.#addUsage(typeof r.parent_id === 'string' ? 'sub_agents' : 'main', r.usage);
    const j = r.judgement;
    if (j !== null && typeof j === 'object') this.#addUsage('judge', (j as Record<string, unknown>).usage);
  }

  /** Tokens of every part together. */
  get tokens(): number {
    return Object.values(this.parts).reduce((n, p) => n + p.prompt + p.completion, 0);
  }

  #addUsage(part: Part, usage: unknown): void {
    if (usage === null || typeof usage !== 'object') return;
    const u = usage as Record<string, unknown>;
    // No requests, no spend: rows from other systems get token counts made for them (dataset/foreign.ts), which nobody paid for.
    if (count(part === 'judge' ? u.requests : u.llm_calls) === 0) return;
    const p = this.parts[part];
    p.prompt += count(u.prompt_tokens);
    p.completion += count(u.completion_tokens);
    p.cached += count(u.cached_tokens);
    if (u.estimated === true) this.estimated = true;
  }
}

function zero(): TokenSpend {
  return { prompt: 0, completion: 0, cached: 0 };
}

/** The models whose tokens a run spends, by part: the endpoint's (main and sub-agents), the judge's. */
export function modelsOf(config: RunConfig): Record<Part, string | undefined> {
  return { main: config.endpoint.model, sub_agents: config.endpoint.model, judge: config.validation.judge?.model };
}

/** What the run spent so far, for the manifest, the summary and the budget: null dollars when a spent part has no price. */
export function runCost(tally: SpendTally, prices: RunConfig['prices'], models: Record<Part, string | undefined>): RunCost {
  let total: number | null = 0;
  const by = {} as RunCost['by'];
  for (const part of ['main', 'sub_agents', 'judge'] as const) {
    const t = tally.parts[part];
    const model = models[part];
    const price = model === undefined ? undefined : Object.hasOwn(prices, model) ? prices[model] : undefined;
    const spent = t.prompt + t.completion > 0;
    const usd = price ? usdOf(t, price) : spent ? null : 0;
    by[part] = { prompt_tokens: t.prompt, completion_tokens: t.completion, cached_tokens: t.cached, usd };
    total = total === null || usd === null ? null : total + usd;
  }
  return { usd: total, by, estimated: tally.estimated };
}

/**
 * A cost budget needs a price for each model the run spends on: without one, the budget could
 * never be reached. Said before the run starts, naming the field to set.
 */
export function checkCostBudget(config: RunConfig): void {
  if (config.budgets.max_cost_usd === undefined) return;
  const models = modelsOf(config);
  for (const model of new Set([models.main, models.judge])) {
    if (model !== undefined && !Object.hasOwn(config.prices, model)) {
      throw new TrajforgeError('BAD_CONFIG', `budgets.max_cost_usd needs the price of model "${model}": add prices."${model}" with input and output (US dollars per million tokens)`, {
        field: `prices.${model}`,
      });
    }
  }
}

/** One line of the spend: `$1.23 (main $1.00, sub-agents $0.20, judge $0.03), tokens estimated`. */
export function costLine(c: RunCost): string {
  const parts: string[] = [];
  if (c.by.sub_agents.prompt_tokens + c.by.sub_agents.completion_tokens > 0 || c.by.judge.prompt_tokens + c.by.judge.completion_tokens > 0) {
    parts.push(`main ${dollars(c.by.main.usd)}`);
    if (c.by.sub_agents.prompt_tokens + c.by.sub_agents.completion_tokens > 0) parts.push(`sub-agents ${dollars(c.by.sub_agents.usd)}`);
    if (c.by.judge.prompt_tokens + c.by.judge.completion_tokens > 0) parts.push(`judge ${dollars(c.by.judge.usd)}`);
  }
  const tokens = Object.values(c.by).reduce((n, p) => n + p.prompt_tokens + p.completion_tokens, 0);
  const head = c.usd === null ? `${tokens} tokens, not priced: a model has no price in the config (prices, docs/config.md)` : dollars(c.usd);
  return `${head}${parts.length ? ` (${parts.join(', ')})` : ''}${c.estimated ? '; some token counts estimated (the endpoint sent no usage)' : ''}`;
}
