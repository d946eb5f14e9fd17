/**
 * The prices a run directory's manifest recorded with its config (`prices`), and the models of
 * its parts: what `stats`, `report` and `report --serve` price a run's spend with, so they
 * agree with the run's own summary.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { ModelPrice, type RunConfig } from '../../schemas/index.js';
import type { runCost } from '../core/cost.js';
import { MANIFEST } from '../core/run-dir/names.js';

export interface RecordedPrices {
  readonly prices: RunConfig['prices'];
  readonly models: Parameters<typeof runCost>[2];
}

const ModelPrices = z.record(z.string(), ModelPrice);

/** A run directory's prices and models, as its manifest recorded the config; none when it has no readable manifest or no prices. */
export function recordedPrices(dir: string): RecordedPrices | undefined {
  try {
    // Only the fields the spend needs: a config an older trajforge recorded need not parse whole.
    const c = (JSON.parse(readFileSync(join(dir, MANIFEST), 'utf8')) as { config?: { prices?: unknown; endpoint?: { model?: unknown }; validation?: { judge?: { model?: unknown } } } }).config;
    const prices = ModelPrices.safeParse(c?.prices ?? {});
    const model = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
    const main = model(c?.endpoint?.model);
    return prices.success ? { prices: prices.data, models: { main, sub_agents: main, judge: model(c?.validation?.judge?.model) } } : undefined;
  } catch {
    return undefined;
  }
}


/** The main model's price as `report --serve` shows spend (prompt and completion, per million tokens); undefined when the run has none yet. */
export function livePrice(dir: string): { prompt: number; completion: number } | undefined {
  const r = recordedPrices(dir);
  const main = r?.models.main;
  const p = main === undefined || r === undefined || !Object.hasOwn(r.prices, main) ? undefined : r.prices[main];
  return p ? { prompt: p.input, completion: p.output } : undefined;
}
