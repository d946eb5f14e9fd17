/**
 * The expression language of `filter` (and `export --keep/--drop`): text → a tree, with an
 * error that points at its column.
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
 */
import { FIELDS, NUMBER_HINTS, type Field, type ListField, type WordField } from './filter-fields.js';
import { UserError } from '../errors.js';

/** A bad expression: `column` is 1-based; past the end it is the length + 1. */
export class ExprError extends UserError {
  readonly column: number;
  /** `hint` follows the column, so the place stays next to the problem. */
  constructor(message: string, column: number, hint?: string) {
    super(`${message} at column ${column}${hint ? `; ${hint}` : ''}`);
    this.name = 'ExprError';
    this.column = column;
  }
}

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
