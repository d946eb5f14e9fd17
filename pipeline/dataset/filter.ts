/**
 * `trajforge filter`: keep or drop rows by a small expression language over a trajectory.
 *
 * Expressions are parsed by hand into a tree and compiled to closures: no eval, no
 * `new Function`, nothing from the expression ever runs as code. Every value is checked
 * against its field when the expression is parsed (a number where a number is expected, a
 * known status or repair kind…), so a typo fails at once with its column instead of
 * silently matching nothing over a million rows.
 *
 *   expr    = or
 *   or      = and { ("or" | "||") and }
 *   and     = unary { ("and" | "&&") unary }
 *   unary   = ("not" | "!") unary | "(" expr ")" | test
 *   test    = field ( ("==" | "!=") value { "|" value }
 *                   | ("<" | "<=" | ">" | ">=") number
 *                   | ["not"] "in" ( "(" item { "," item } ")" | range )
 *                   | "has" value )
 *   item    = value | range
 *   range   = [number] ".." [number]            inclusive; an end left out is open
 *   value   = word | number | 'quoted' | "quoted"
 *   number  = digits [ "." digits ] [ "k" | "m" ]   8k = 8000
 *
 * A test on a list field (tools, rule, repair, rollback) holds when any element matches;
 * `!=` and `not in` are the negation of `==` and `in`. A test on a value the row lacks
 * (no usage, no reason) is false, and its `!=` true.
 *
 * Families (records of a run with agents): by default a sub-agent session is kept only when it
 * matches and the session that called it is kept, so a filtered set never holds a child without
 * its parent (`FamilyMode`). Children come before their root in a run's files, so a child
 * waits for its parent's decision: held in memory until it comes (one family at a time in a
 * run's own order), written right after it.
 */
import { DialectName, FailureReason, JudgeStep, JudgeVerdict, RepairKind, RollbackCondition, Status, type Trajectory } from '../../schemas/index.js';
import { ROW_FORMATS, type DatasetRow } from './readers.js';
import type { JsonlWriter } from '../core/jsonl.js';
import { childIdsOf, familyOf, parentKeyOf, sessionKeyOf } from './families.js';

// ---------------------------------------------------------------------------------------
// Fields

type Getter<T> = (t: Trajectory, row: DatasetRow) => T | undefined;

interface NumberField {
  readonly kind: 'number';
  readonly doc: string;
  readonly get: Getter<number>;
}
interface WordField {
  readonly kind: 'word';
  readonly doc: string;
  /** The values it can take; a value outside them is a parse error. Free text when absent. */
  readonly values?: readonly string[];
  readonly get: Getter<string>;
}
interface ListField {
  readonly kind: 'list';
  readonly doc: string;
  readonly values?: readonly string[];
  /** A variant per qualifier after `:` (`rule:error`). */
  readonly qualifiers?: readonly string[];
  readonly get: (t: Trajectory, row: DatasetRow, qualifier: string | undefined) => readonly string[] | undefined;
}
type Field = NumberField | WordField | ListField;

const arr = <T>(v: unknown): T[] | undefined => (Array.isArray(v) ? (v as T[]) : undefined);
const len = (v: unknown): number | undefined => (Array.isArray(v) ? v.length : undefined);
const numberOr = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const strOr = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

/** Every field an expression can name, in the order `--help` and errors list them. */
export const FIELDS: Readonly<Record<string, Field>> = {
  status: { kind: 'word', doc: 'ok | failed', values: Status.options, get: (t) => strOr(t.status) },
  reason: {
    kind: 'word',
    doc: 'failure reason; `none` when there is none',
    values: [...FailureReason.options, 'none'],
    get: (t) => strOr(t.reason) ?? 'none',
  },
  verdict: {
    kind: 'word',
    doc: 'pass | fail (validation.passed)',
    values: ['pass', 'fail'],
    get: (t) => (typeof t.validation?.passed === 'boolean' ? (t.validation.passed ? 'pass' : 'fail') : undefined),
  },
  rule: {
    kind: 'list',
    doc: 'rules of the validation issues; rule:error, rule:warn for one severity',
    qualifiers: ['error', 'warn'],
    get: (t, _row, severity) => {
      const issues = arr<{ rule?: unknown; severity?: unknown }>(t.validation?.issues);
      if (!issues) return undefined;
      const out: string[] = [];
      for (const i of issues) if (typeof i?.rule === 'string' && (severity === undefined || i.severity === severity)) out.push(i.rule);
      return out;
    },
  },
  tool_calls: {
    kind: 'number',
    doc: 'tool calls made (total_tool_calls)',
    get: (t) => numberOr(t.total_tool_calls) ?? len(t.tool_calls),
  },
  turns: { kind: 'number', doc: 'model turns', get: (t) => numberOr(t.turns) },
  tokens: { kind: 'number', doc: 'usage.total_tokens', get: (t) => numberOr(t.usage?.total_tokens) },
  tools: {
    kind: 'list',
    doc: 'tool names used (tools_used)',
    get: (t) => arr<string>(t.tools_used),
  },
  repair: { kind: 'list', doc: 'repair kinds', values: RepairKind.options, get: (t) => arr<{ kind: string }>(t.repairs)?.map((r) => r?.kind) },
  repairs: { kind: 'number', doc: 'number of repairs', get: (t) => len(t.repairs) },
  rollback: {
    kind: 'list',
    doc: 'rollback conditions',
    values: RollbackCondition.options,
    get: (t) => arr<{ condition: string }>(t.rollbacks)?.map((r) => r?.condition),
  },
  rollbacks: { kind: 'number', doc: 'number of rollbacks', get: (t) => len(t.rollbacks) },
  cited: { kind: 'number', doc: 'cited ids', get: (t) => len(t.cited_ids) },
  unresolved: { kind: 'number', doc: 'cited ids no tool output showed', get: (t) => len(t.unresolved_cited_ids) },
  attempt: { kind: 'number', doc: 'attempt number (0 first)', get: (t) => numberOr(t.attempt) },
  dialect: { kind: 'word', doc: DialectName.options.join(' | '), values: DialectName.options, get: (t) => strOr(t.dialect) },
  format: { kind: 'word', doc: `the row shape read: ${ROW_FORMATS.join(' | ')}`, values: ROW_FORMATS, get: (_t, row) => row.format },
  model: { kind: 'word', doc: 'model name', get: (t) => strOr(t.model) },
  id: { kind: 'word', doc: 'sample id', get: (t) => strOr(t.id) },
  question_id: { kind: 'word', doc: 'question id', get: (t) => strOr(t.question_id) },
  judgement: {
    kind: 'word',
    doc: "the judge's verdict; `none` when the row was not judged",
    values: [...JudgeVerdict.options, 'none'],
    get: (t) => strOr(t.judgement?.verdict) ?? 'none',
  },
  agent: { kind: 'word', doc: '`main` or a sub-agent\'s name (runs with agents; MiroVerse rows: main | browsing); `none` without one', get: (t) => strOr(t.agent) ?? 'none' },
  depth: { kind: 'number', doc: 'how deep a session is in its family: 0 = main', get: (t) => numberOr(t.depth) },
  parent_id: { kind: 'word', doc: 'the id of the session that called this one; `none` for a root', get: (t) => strOr(t.parent_id) ?? 'none' },
  parent_call: { kind: 'number', doc: "the index of the parent's call this session answers", get: (t) => numberOr(t.parent_call) },
  family_id: { kind: 'word', doc: 'the id of the root session of its family', get: (t) => strOr(t.family_id) },
  sub_agent_calls: { kind: 'number', doc: 'calls to sub-agents (calls with a child_id)', get: (t) => (Array.isArray(t.tool_calls) ? childIdsOf(t).length : undefined) },
  judge_step: { kind: 'word', doc: `the cascade step that decided: ${JudgeStep.options.join(' | ')}`, values: JudgeStep.options, get: (t) => strOr(t.judgement?.step) },
  rubric_score: { kind: 'number', doc: 'the weighted rubric score, 0..1 (judgement.rubric_score)', get: (t) => numberOr(t.judgement?.rubric_score) },
};

/** Hints for the mistakes the similar names invite. */
const NUMBER_HINTS: Record<string, string> = {
  repairs: 'repairs counts repairs; to test a kind, use repair == KIND',
  rollbacks: 'rollbacks counts rollbacks; to test a condition, use rollback == CONDITION',
};

// ---------------------------------------------------------------------------------------
// Errors

/** A bad expression: `column` is 1-based; past the end it is the length + 1. */
export class ExprError extends Error {
  readonly column: number;
  /** `hint` follows the column, so the place stays next to the problem. */
  constructor(message: string, column: number, hint?: string) {
    super(`${message} at column ${column}${hint ? `; ${hint}` : ''}`);
    this.name = 'ExprError';
    this.column = column;
  }
}

// ---------------------------------------------------------------------------------------
// Tokens

type TokenType = 'word' | 'string' | 'op' | '(' | ')' | ',' | '|' | '..' | 'end';
interface Token {
  readonly type: TokenType;
  readonly text: string;
  /** 1-based. */
  readonly col: number;
}

const WORD_CHAR = /[A-Za-z0-9_\-./#@+:]/;

function tokenize(src: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i]!;
    const col = i + 1;
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r') {
      i++;
    } else if (c === '(' || c === ')' || c === ',') {
      out.push({ type: c, text: c, col });
      i++;
    } else if (c === '|' && src[i + 1] === '|') {
      out.push({ type: 'word', text: 'or', col });
      i += 2;
    } else if (c === '|') {
      out.push({ type: '|', text: c, col });
      i++;
    } else if (c === '&' && src[i + 1] === '&') {
      out.push({ type: 'word', text: 'and', col });
      i += 2;
    } else if (c === '=' || c === '!' || c === '<' || c === '>') {
      const two = src.slice(i, i + 2);
      if (two === '==' || two === '!=' || two === '<=' || two === '>=') {
        out.push({ type: 'op', text: two, col });
        i += 2;
      } else if (c === '=') {
        // A lone `=` is what people type for `==`.
        out.push({ type: 'op', text: '==', col });
        i++;
      } else if (c === '!') {
        out.push({ type: 'word', text: 'not', col });
        i++;
      } else {
        out.push({ type: 'op', text: c, col });
        i++;
      }
    } else if (c === '.' && src[i + 1] === '.') {
      out.push({ type: '..', text: '..', col });
      i += 2;
    } else if (c === '"' || c === "'") {
      const end = src.indexOf(c, i + 1);
      if (end < 0) throw new ExprError(`unterminated ${c === '"' ? 'double' : 'single'}-quoted value`, col);
      out.push({ type: 'string', text: src.slice(i + 1, end), col });
      i = end + 1;
    } else if (WORD_CHAR.test(c)) {
      let j = i;
      // `..` ends a word so that `1..5` is a range, while `citations.unresolved` stays one word.
      while (j < src.length && WORD_CHAR.test(src[j]!) && !(src[j] === '.' && src[j + 1] === '.')) j++;
      out.push({ type: 'word', text: src.slice(i, j), col });
      i = j;
    } else {
      throw new ExprError(`unexpected character "${c}"`, col);
    }
  }
  out.push({ type: 'end', text: '', col: src.length + 1 });
  return out;
}

// ---------------------------------------------------------------------------------------
// The tree

export type Expr =
  | { readonly op: 'and' | 'or'; readonly left: Expr; readonly right: Expr }
  | { readonly op: 'not'; readonly expr: Expr }
  | Test;

/** One comparison: `field` (with its `:qualifier`) against values. */
export type Test =
  | { readonly op: 'eq'; readonly field: string; readonly qualifier?: string; readonly values: readonly (string | number)[] }
  | { readonly op: 'cmp'; readonly field: string; readonly cmp: '<' | '<=' | '>' | '>='; readonly value: number }
  | { readonly op: 'in'; readonly field: string; readonly qualifier?: string; readonly values: readonly (string | number)[]; readonly ranges: readonly Range[] };

export interface Range {
  readonly min: number;
  readonly max: number;
}

const KEYWORDS = new Set(['and', 'or', 'not', 'in', 'has']);
const NUMBER = /^(\d+(?:\.\d+)?|\.\d+)([kKmM]?)$/;

function parseNumber(text: string): number | undefined {
  const m = NUMBER.exec(text);
  if (!m) return undefined;
  const scale = m[2] === '' ? 1 : m[2] === 'k' || m[2] === 'K' ? 1e3 : 1e6;
  return Number(m[1]) * scale;
}

class Parser {
  readonly #tokens: Token[];
  #pos = 0;

  constructor(src: string) {
    this.#tokens = tokenize(src);
  }

  parse(): Expr {
    if (this.#peek().type === 'end') throw new ExprError('empty expression', this.#peek().col);
    const e = this.#or();
    const t = this.#peek();
    if (t.type !== 'end') {
      throw new ExprError(t.type === ')' ? 'unbalanced ")"' : `expected "and", "or" or the end, got "${t.text}"`, t.col);
    }
    return e;
  }

  #peek(): Token {
    return this.#tokens[this.#pos]!;
  }
  #next(): Token {
    return this.#tokens[this.#pos++]!;
  }
  #isWord(t: Token, w: string): boolean {
    return t.type === 'word' && t.text.toLowerCase() === w;
  }

  #or(): Expr {
    let left = this.#and();
    while (this.#isWord(this.#peek(), 'or')) {
      this.#next();
      left = { op: 'or', left, right: this.#and() };
    }
    return left;
  }

  #and(): Expr {
    let left = this.#unary();
    while (this.#isWord(this.#peek(), 'and')) {
      this.#next();
      left = { op: 'and', left, right: this.#unary() };
    }
    return left;
  }

  #unary(): Expr {
    const t = this.#peek();
    if (this.#isWord(t, 'not')) {
      this.#next();
      return { op: 'not', expr: this.#unary() };
    }
    if (t.type === '(') {
      this.#next();
      const e = this.#or();
      const close = this.#next();
      if (close.type !== ')') throw new ExprError(`expected ")"`, close.col, `the "(" it closes is at column ${t.col}`);
      return e;
    }
    return this.#test();
  }

  #test(): Expr {
    const t = this.#next();
    if (t.type !== 'word' || KEYWORDS.has(t.text.toLowerCase())) {
      throw new ExprError(t.type === 'end' ? 'expected a field' : `expected a field, got "${t.text}"`, t.col);
    }
    const [name, qualifier, extra] = t.text.split(':');
    // Own keys only: `constructor` or `__proto__` must not reach Object.prototype.
    const field = Object.hasOwn(FIELDS, name!) ? FIELDS[name!] : undefined;
    if (!field) throw new ExprError(`unknown field "${name}"`, t.col, `known fields: ${Object.keys(FIELDS).join(', ')}`);
    if (qualifier !== undefined || extra !== undefined) {
      const allowed = field.kind === 'list' ? field.qualifiers : undefined;
      if (!allowed || extra !== undefined || !allowed.includes(qualifier!)) {
        throw new ExprError(allowed ? `"${name}:" takes ${allowed.join(' or ')}` : `"${name}" takes no ":" qualifier`, t.col + name!.length);
      }
    }
    const opTok = this.#next();
    const q = qualifier === undefined ? {} : { qualifier };
    if (opTok.type === 'op') {
      if (opTok.text === '==' || opTok.text === '!=') {
        const values = [this.#value(name!, field)];
        while (this.#peek().type === '|') {
          this.#next();
          values.push(this.#value(name!, field));
        }
        const eq: Test = { op: 'eq', field: name!, ...q, values };
        return opTok.text === '==' ? eq : { op: 'not', expr: eq };
      }
      if (field.kind !== 'number') {
        throw new ExprError(`"${opTok.text}" compares numbers, and ${name} is not one`, opTok.col, 'use ==, != or in');
      }
      return { op: 'cmp', field: name!, cmp: opTok.text as '<' | '<=' | '>' | '>=', value: this.#number(name!) };
    }
    if (this.#isWord(opTok, 'has')) {
      if (field.kind !== 'list') throw new ExprError(`"has" tests a list field, and ${name} is not one`, opTok.col, 'list fields: tools, rule, repair, rollback; use == here');
      return { op: 'eq', field: name!, ...q, values: [this.#value(name!, field)] };
    }
    let negate = false;
    let inTok = opTok;
    if (this.#isWord(opTok, 'not') && this.#isWord(this.#peek(), 'in')) {
      negate = true;
      inTok = this.#next();
    }
    if (this.#isWord(inTok, 'in')) {
      const test = this.#inSet(name!, field, q);
      return negate ? { op: 'not', expr: test } : test;
    }
    throw new ExprError(
      opTok.type === 'end' ? `expected an operator after "${name}" (==, !=, <, <=, >, >=, in, has)` : `expected an operator (==, !=, <, <=, >, >=, in, has), got "${opTok.text}"`,
      opTok.col,
    );
  }

  #inSet(name: string, field: Field, q: { qualifier?: string }): Test {
    const values: (string | number)[] = [];
    const ranges: Range[] = [];
    const item = (): void => {
      const t = this.#peek();
      const next = this.#tokens[this.#pos + 1];
      if (t.type === '..' || (t.type === 'word' && next?.type === '..')) {
        if (field.kind !== 'number') throw new ExprError(`a range needs a number field, and ${name} is not one`, t.col);
        ranges.push(this.#range(name));
      } else {
        values.push(this.#value(name, field));
      }
    };
    if (this.#peek().type === '(') {
      const open = this.#next();
      item();
      while (this.#peek().type === ',') {
        this.#next();
        item();
      }
      const close = this.#next();
      if (close.type !== ')') throw new ExprError(`expected "," or ")"`, close.col, `the "(" it closes is at column ${open.col}`);
    } else {
      const t = this.#peek();
      if (field.kind !== 'number') throw new ExprError(`expected "(" and a list of values`, t.col, `${name} in (a, b)`);
      ranges.push(this.#range(name));
    }
    return { op: 'in', field: name, ...q, values, ranges };
  }

  #range(name: string): Range {
    const start = this.#peek();
    const min = start.type === '..' ? -Infinity : this.#number(name);
    const dots = this.#next();
    if (dots.type !== '..') throw new ExprError('expected ".." in a range', dots.col, 'a range is written 1..5, 3.. or ..5');
    const end = this.#peek();
    const max = end.type === 'word' && !KEYWORDS.has(end.text.toLowerCase()) ? this.#number(name) : Infinity;
    if (min === -Infinity && max === Infinity) throw new ExprError('a range needs at least one end', dots.col);
    if (min > max) throw new ExprError(`empty range: ${min} is greater than ${max}`, start.col);
    return { min, max };
  }

  #number(name: string): number {
    const t = this.#next();
    const n = t.type === 'word' ? parseNumber(t.text) : undefined;
    if (n === undefined) throw new ExprError(`expected a number${t.type === 'end' ? '' : `, got "${t.text}"`}`, t.col, NUMBER_HINTS[name]);
    return n;
  }

  #value(name: string, field: Field): string | number {
    if (field.kind === 'number') return this.#number(name);
    const t = this.#next();
    if (t.type === 'string') return this.#known(name, field, t.text, t.col);
    if (t.type !== 'word' || KEYWORDS.has(t.text.toLowerCase())) {
      throw new ExprError(t.type === 'end' ? `expected a value for ${name}` : `expected a value for ${name}, got "${t.text}"`, t.col, t.type === 'word' ? 'quote it if it is one' : undefined);
    }
    return this.#known(name, field, t.text, t.col);
  }

  #known(name: string, field: WordField | ListField, value: string, col: number): string {
    if (field.values && !field.values.includes(value)) {
      throw new ExprError(`${name} is never "${value}"`, col, `it is one of: ${field.values.join(', ')}`);
    }
    return value;
  }
}

/** Parses an expression; throws `ExprError` with the column of the problem. */
export function parseExpr(src: string): Expr {
  return new Parser(src).parse();
}

// ---------------------------------------------------------------------------------------
// Compiling

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
export class FilterSpecError extends Error {
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

// ---------------------------------------------------------------------------------------
// Running

/**
 * How a filter treats families. `parent` (the default): a sub-agent session is kept when it
 * matches and its parent is kept, so a dropped root drops its family. `root`: the root's
 * match decides for its whole family, whatever the others'. `none`: every row on its own
 * (a child can be kept without its parent).
 */
export type FamilyMode = 'parent' | 'root' | 'none';
export const FAMILY_MODES: readonly FamilyMode[] = ['parent', 'root', 'none'];

export interface FilterCounts {
  in: number;
  kept: number;
  rejected: number;
  /** Rows that matched but were dropped because the session that called them was (`parent` mode). */
  dropped_with_parent: number;
  /** Sub-agent sessions whose parent is not in the input: dropped, except with `none`. */
  orphans: number;
}

/**
 * Writes each row's trajectory to `out` when `keep` holds, else to `rejects` (when given);
 * a family's sessions as `families` says. Waits on each writer's backpressure. A reader of
 * stdout that goes away ends it with the writer's `OutputClosedError` (cli/output.ts).
 */
export async function filterRows(rows: AsyncIterable<DatasetRow>, keep: RowPredicate, out: JsonlWriter, rejects?: JsonlWriter, families: FamilyMode = 'parent'): Promise<FilterCounts> {
  const counts: FilterCounts = { in: 0, kept: 0, rejected: 0, dropped_with_parent: 0, orphans: 0 };
  const write = async (row: DatasetRow, kept: boolean): Promise<void> => {
    const w = kept ? out : rejects;
    if (kept) counts.kept++;
    else counts.rejected++;
    const p = row.raw === undefined ? w?.write(row.trajectory) : w?.writeLine(row.raw);
    if (p) await p;
  };
  // Session key → kept, for every family session decided; children waiting for their parent's decision, by its key.
  const decided = new Map<string, boolean>();
  const waiting = new Map<string, DatasetRow[]>();
  const decide = async (row: DatasetRow, parentKept: boolean | undefined): Promise<void> => {
    const matches = keep(row);
    let kept = matches;
    if (parentKept !== undefined) {
      kept = families === 'root' ? parentKept : matches && parentKept;
      if (matches && !parentKept && families === 'parent') counts.dropped_with_parent++;
    }
    const self = sessionKeyOf(row.trajectory);
    if (self !== undefined) decided.set(self, kept);
    await write(row, kept);
    const children = self === undefined ? undefined : waiting.get(self);
    if (children !== undefined) {
      waiting.delete(self!);
      for (const c of children) await decide(c, kept);
    }
  };
  for await (const row of rows) {
    counts.in++;
    const t = row.trajectory;
    if (families === 'none' || familyOf(t) === undefined) {
      await write(row, keep(row));
      continue;
    }
    const parent = parentKeyOf(t);
    if (parent === undefined) await decide(row, undefined);
    else if (decided.has(parent)) await decide(row, decided.get(parent));
    else {
      const list = waiting.get(parent);
      if (list === undefined) waiting.set(parent, [row]);
      else list.push(row);
    }
  }
  // Never came: their parent is not in the input.
  for (const held of waiting.values()) {
    for (const row of held) {
      counts.orphans++;
      await write(row, false);
    }
  }
  return counts;
}
