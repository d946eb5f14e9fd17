/**
 * A `filter` expression's tree (filter-expr.ts) compiled to a closure over a row: no eval, no
 * `new Function`, nothing from the expression ever runs as code. And the `--keep`/`--drop`
 * flags of a command as one predicate.
 */
import type { DatasetRow } from './readers.js';
import { FIELDS, type NumberField } from './filter-fields.js';
import { ExprError, parseExpr, type Expr, type Range, type Test } from './filter-expr.js';
import { UserError } from '../errors.js';

export type RowPredicate = (row: DatasetRow) => boolean;

function inRanges(n: number, ranges: readonly Range[]): boolean {
  for (const r of ranges) if (n >= r.min && n <= r.max) return true;
  return false;
}

function compileCmp(e: Extract<Test, { op: 'cmp' }>): RowPredicate {
  const get = (FIELDS[e.field] as NumberField).get;
  const v = e.value;
  // A missing value is NaN here, so every comparison with it is false.
  switch (e.cmp) {
    case '<':
      return (row) => (get(row.trajectory, row) ?? NaN) < v;
    case '<=':
      return (row) => (get(row.trajectory, row) ?? NaN) <= v;
    case '>':
      return (row) => (get(row.trajectory, row) ?? NaN) > v;
    case '>=':
      return (row) => (get(row.trajectory, row) ?? NaN) >= v;
  }
}

/** The tree as a closure over a row. Fields are read straight from the record: no copy, no validation. */
export function compileExpr(e: Expr): RowPredicate {
  switch (e.op) {
    case 'and': {
      const l = compileExpr(e.left);
      const r = compileExpr(e.right);
      return (row) => l(row) && r(row);
    }
    case 'or': {
      const l = compileExpr(e.left);
      const r = compileExpr(e.right);
      return (row) => l(row) || r(row);
    }
    case 'not': {
      const x = compileExpr(e.expr);
      return (row) => !x(row);
    }
    case 'cmp':
      return compileCmp(e);
    case 'eq':
    case 'in': {
      const f = FIELDS[e.field]!;
      const values = e.values;
      const ranges = e.op === 'in' ? e.ranges : [];
      if (f.kind === 'number') {
        const get = f.get;
        return (row) => {
          const n = get(row.trajectory, row);
          return n !== undefined && (values.includes(n) || inRanges(n, ranges));
        };
      }
      if (f.kind === 'word') {
        const get = f.get;
        return (row) => {
          const s = get(row.trajectory, row);
          return s !== undefined && values.includes(s);
        };
      }
      const get = f.get;
      const qualifier = 'qualifier' in e ? e.qualifier : undefined;
      return (row) => {
        const list = get(row.trajectory, row, qualifier);
        if (!list) return false;
        for (const x of list) if (values.includes(x)) return true;
        return false;
      };
    }
  }
}

export interface FilterSpec {
  /** Every one must match. */
  readonly keep?: readonly string[];
  /** None may match. */
  readonly drop?: readonly string[];
}

/** Thrown for a bad `--keep`/`--drop`: the flag and the expression are in the message. */
export class FilterSpecError extends UserError {
  readonly flag: string;
  readonly expression: string;
  readonly column: number;
  constructor(flag: string, expression: string, err: ExprError) {
    super(`--${flag} '${expression}': ${err.message}`);
    this.name = 'FilterSpecError';
    this.flag = flag;
    this.expression = expression;
    this.column = err.column;
  }
}

/** One predicate for all the --keep and --drop expressions: kept when it matches every keep and no drop. */
export function compileFilter(spec: FilterSpec): RowPredicate {
  const compile = (flag: string, src: string): RowPredicate => {
    try {
      return compileExpr(parseExpr(src));
    } catch (err) {
      if (err instanceof ExprError) throw new FilterSpecError(flag, src, err);
      throw err;
    }
  };
  const keep = (spec.keep ?? []).map((s) => compile('keep', s));
  const drop = (spec.drop ?? []).map((s) => compile('drop', s));
  return (row) => {
    for (const k of keep) if (!k(row)) return false;
    for (const d of drop) if (d(row)) return false;
    return true;
  };
}
