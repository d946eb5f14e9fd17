/**
 * Rows trajforge did not write (DR Tulu generator rows, chat rows) arrive from the readers
 * with no verdict of their own. `stats`, `filter`, `report` and `export` run the validator's
 * rules on them here, with the rules' defaults, so that broken data is counted as broken:
 * a row with an error becomes `status: failed`, `reason: invalid` (its `error` lists the
 * failed rules), exactly as an inline validation would have made it. Their token count, which
 * no endpoint reported, is counted here too (`usage.total_tokens`: question and interleaved
 * text, with the chosen tokenizer; `usage.estimated` stays true).
 */
import type { Trajectory } from '../../schemas/index.js';
import { getDialect } from '../dialects/index.js';
import type { Dialect } from '../dialects/types.js';
import { O200K, type TokenCounter } from '../core/tokens/count.js';
import type { DatasetRow } from './readers.js';
import { validateTrajectory } from '../core/validator.js';

export interface ForeignOptions {
  /** Count the row's tokens with this counter; default: o200k_base. */
  readonly counter?: TokenCounter | undefined;
  /** Also count tokens (`stats`, `filter`, `report` need them; `export` does not). */
  readonly countTokens?: boolean | undefined;
}

export class ForeignCheck {
  readonly #counter: TokenCounter;
  readonly #countTokens: boolean;
  readonly #dialects = new Map<string, Dialect>();
  /** Foreign rows validated so far, and how many of them failed. */
  validated = 0;
  failed = 0;

  constructor(opts: ForeignOptions = {}) {
    this.#counter = opts.counter ?? O200K;
    this.#countTokens = opts.countTokens ?? false;
  }

  /** Validates `row` in place when trajforge did not write it; a trajforge row is left as it is. */
  check(row: DatasetRow): void {
    if (row.format === 'trajforge') return;
    const t = row.trajectory;
    let dialect = this.#dialects.get(t.dialect);
    if (dialect === undefined) {
      dialect = getDialect(t.dialect);
      this.#dialects.set(t.dialect, dialect);
    }
    const v = validateTrajectory(t, { dialect });
    t.validation = v;
    this.validated++;
    if (!v.passed) {
      this.failed++;
      markInvalid(t);
    }
    if (this.#countTokens) {
      const n = this.#counter.count(t.question) + this.#counter.count(t.interleaved_text);
      t.usage = { ...t.usage, total_tokens: n, completion_tokens: n, estimated: true };
    }
  }
}

function markInvalid(t: Trajectory): void {
  const errors = t.validation.issues.filter((i) => i.severity === 'error');
  t.status = 'failed';
  t.reason = 'invalid';
  t.error = errors.map((i) => `${i.rule}: ${i.message}`).join('; ');
}

/** `rows`, each foreign row validated (and its tokens counted) on its way through. */
export async function* validatedRows(rows: AsyncIterable<DatasetRow>, check: ForeignCheck): AsyncGenerator<DatasetRow> {
  for await (const row of rows) {
    check.check(row);
    yield row;
  }
}
