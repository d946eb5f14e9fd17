/**
 * `export --out FILE.parquet`: any row format as a Parquet file with a dataset card beside it.
 * The export writes its JSONL rows as always (counts, checks, `--on-bad-row` and all), into a
 * temporary file beside the target; those rows then become the Parquet file
 * (parquet-file.ts) and its card (dataset-card.ts). The JSONL is removed whatever happens.
 */
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { TrajforgeError } from '../../errors.js';
import { statPath } from '../../files.js';
import { PACKAGE_VERSION } from '../../paths.js';
import { MANIFEST } from '../../core/run-dir/names.js';
import { cardPathFor, writeCard, type CardFacts } from './dataset-card.js';
import { tempBeside, writeParquet } from './parquet-file.js';

export interface ParquetPlan {
  readonly out: string;
  readonly card: string | undefined;
  readonly license: string;
  readonly format: string;
  readonly input: string;
}

export const isParquetPath = (out: string): boolean => out.toLowerCase().endsWith('.parquet');

/** The plan for `--out`, or undefined when it is not a Parquet file; card conflicts fail here, before anything is read. */
export function planParquet(out: string, format: string, input: string, flags: { card?: string | undefined; license?: string | undefined }): ParquetPlan | undefined {
  if (!isParquetPath(out)) {
    for (const flag of ['card', 'license'] as const) {
      if (flags[flag] !== undefined) throw new TrajforgeError('BAD_USAGE', `--${flag} is for a Parquet --out (FILE.parquet)`, { field: flag });
    }
    return undefined;
  }
  return { out, format, input, card: cardPathFor(out, flags.card), license: flags.license ?? 'other' };
}

function sourceFacts(input: string): CardFacts['source'] {
  if (input === '-' || statPath(input)?.isDirectory() !== true) return { input: input === '-' ? '<stdin>' : input };
  try {
    const m = JSON.parse(readFileSync(join(input, MANIFEST), 'utf8')) as Record<string, unknown>;
    const str = (k: string): Record<string, string> => (typeof m[k] === 'string' ? { [k]: m[k] as string } : {});
    return { input, ...str('run_id'), ...str('config_fingerprint'), ...str('trajforge_version'), ...str('model'), ...str('dialect') };
  } catch {
    return { input };
  }
}

/** Counts for the card's body, gathered row by row. */
class RowCounts {
  readonly #agents = new Map<string, number>();
  #tokens = 0;
  #train = 0;
  #counted = false;

  add(row: Record<string, unknown>): void {
    const links = (row.metadata ?? row.details ?? row.extra) as Record<string, unknown> | undefined;
    // A session split into parts (tokens, messages with a chat template) counts once, at its first part.
    const first = typeof row.part !== 'number' || row.part === 0;
    if (first && typeof links?.agent === 'string') this.#agents.set(links.agent, (this.#agents.get(links.agent) ?? 0) + 1);
    const tokens = typeof row.num_tokens === 'number' ? row.num_tokens : row.tokens;
    if (typeof tokens === 'number') {
      this.#counted = true;
      this.#tokens += tokens;
      if (typeof row.train_tokens === 'number') this.#train += row.train_tokens;
    }
  }

  lines(): string[] {
    const out: string[] = [];
    if (this.#agents.size > 0) out.push(`sessions by agent: ${[...this.#agents].map(([a, n]) => `${a} ${n}`).join(', ')}`);
    if (this.#counted) out.push(`tokens: ${this.#tokens}, with loss on: ${this.#train}`);
    return out;
  }
}

/** Runs the export into a temporary JSONL (`writeJsonl`), then writes the Parquet file and its card. */
export async function exportViaParquet(plan: ParquetPlan, writeJsonl: (path: string) => Promise<number>): Promise<number> {
  const jsonl = tempBeside(plan.out, 'jsonl');
  try {
    const code = await writeJsonl(jsonl);
    if (code !== 0 || statPath(jsonl) === undefined) return code;
    const counts = new RowCounts();
    const meta = { trajforge_version: PACKAGE_VERSION, trajforge_format: plan.format };
    const result = await writeParquet(jsonl, plan.out, meta, (row) => counts.add(row));
    if (plan.card !== undefined) {
      writeCard(plan.card, { parquetPath: plan.out, format: plan.format, license: plan.license, rows: result.rows, bytes: result.bytes, columns: result.columns, trajforgeVersion: PACKAGE_VERSION, source: sourceFacts(plan.input), counts: counts.lines() });
    }
    process.stderr.write(`export: ${plan.out}: ${result.rows} rows, ${result.bytes} bytes of Parquet${plan.card === undefined ? '' : `; dataset card ${plan.card}`}\n`);
    return 0;
  } finally {
    rmSync(jsonl, { force: true });
  }
}
