/**
 * The column types of exported rows, found from the rows themselves, and what follows from
 * them: the Parquet schema (nested columns as Parquet's LIST and groups, so `messages` is
 * list<struct> and `input_ids` list<int64>), each value in its column's form, and the
 * Hugging Face `features` of the dataset card. One description serves all three, so the file
 * and its card cannot disagree.
 *
 * Every JSON value takes a type; two rows that disagree widen it: int and float to float, a
 * missing or null value to an optional one, objects to a struct of every key seen. Where no
 * Parquet type holds both (a string here, an object there) the field is a JSON column: a
 * string holding the value's JSON text (Parquet's JSON type). Objects whose keys are the
 * data's own (a tool's arguments, a JSON Schema, ADP details, ATIF extra) are JSON columns
 * too, so a column set does not grow with every tool a run had.
 */
import type { SchemaElement } from 'hyparquet-writer';

export type ColumnType =
  | { readonly kind: 'null' | 'bool' | 'int' | 'float' | 'string' | 'json' }
  | { readonly kind: 'list'; readonly of: ColumnType }
  | { readonly kind: 'struct'; readonly fields: ReadonlyMap<string, ColumnType> };

/** Keys whose object values have keys of the data's own: stored as JSON text. */
const FREE_FORM = new Set(['tools', 'tool_definitions', 'arguments', 'kwargs', 'parameters', 'details', 'extra', 'meta']);

const NULL: ColumnType = { kind: 'null' };
const JSON_TEXT: ColumnType = { kind: 'json' };

/** The type of one value; `key` is the field it sits in. */
export function typeOf(value: unknown, key = ''): ColumnType {
  if (value === null || value === undefined) return NULL;
  if (typeof value === 'boolean') return { kind: 'bool' };
  if (typeof value === 'number') return { kind: Number.isSafeInteger(value) ? 'int' : 'float' };
  if (typeof value === 'string') return { kind: 'string' };
  if (FREE_FORM.has(key)) return JSON_TEXT;
  if (Array.isArray(value)) return { kind: 'list', of: value.reduce<ColumnType>((t, v) => widen(t, typeOf(v)), NULL) };
  const fields = new Map<string, ColumnType>();
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) fields.set(k, typeOf(v, k));
  return { kind: 'struct', fields };
}

/** The narrowest type that holds values of both. */
export function widen(a: ColumnType, b: ColumnType): ColumnType {
  if (a.kind === 'null') return b;
  if (b.kind === 'null') return a;
  if (a.kind === 'list' && b.kind === 'list') return { kind: 'list', of: widen(a.of, b.of) };
  if (a.kind === 'struct' && b.kind === 'struct') {
    const fields = new Map(a.fields);
    for (const [k, t] of b.fields) fields.set(k, widen(fields.get(k) ?? NULL, t));
    return { kind: 'struct', fields };
  }
  if (a.kind === b.kind) return a;
  if ((a.kind === 'int' && b.kind === 'float') || (a.kind === 'float' && b.kind === 'int')) return { kind: 'float' };
  return JSON_TEXT;
}

const LEAF: Record<string, Partial<SchemaElement>> = {
  null: { type: 'BYTE_ARRAY', converted_type: 'UTF8' },
  string: { type: 'BYTE_ARRAY', converted_type: 'UTF8' },
  json: { type: 'BYTE_ARRAY', converted_type: 'JSON' },
  bool: { type: 'BOOLEAN' },
  int: { type: 'INT64' },
  float: { type: 'DOUBLE' },
};

/** The Parquet schema elements of one column (every level optional: a missing value is null). */
export function schemaElements(name: string, t: ColumnType): SchemaElement[] {
  if (t.kind === 'list') {
    return [
      { name, repetition_type: 'OPTIONAL', converted_type: 'LIST', num_children: 1 },
      { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
      ...schemaElements('element', t.of),
    ];
  }
  if (t.kind === 'struct') {
    return [{ name, repetition_type: 'OPTIONAL', num_children: t.fields.size }, ...[...t.fields].flatMap(([k, f]) => schemaElements(k, f))];
  }
  return [{ name, repetition_type: 'OPTIONAL', ...LEAF[t.kind] } as SchemaElement];
}

/** A value in its column's form: int64 as bigint, every struct field present (JSON columns as the value: the writer writes its text). */
export function columnValue(t: ColumnType, v: unknown): unknown {
  if (v === null || v === undefined) return null;
  switch (t.kind) {
    case 'json':
      return v; // the writer turns a JSON column's value into its text
    case 'int':
      return BigInt(v as number);
    case 'list':
      return (v as unknown[]).map((x) => columnValue(t.of, x));
    case 'struct': {
      const out: Record<string, unknown> = {};
      for (const [k, f] of t.fields) out[k] = columnValue(f, (v as Record<string, unknown>)[k]);
      return out;
    }
    default:
      return v;
  }
}

const DTYPE: Record<string, string> = { null: 'string', string: 'string', json: 'string', bool: 'bool', int: 'int64', float: 'float64' };

/** The Hugging Face `features` entry of a column (the dataset card's `dataset_info.features`). */
export function feature(name: string | undefined, t: ColumnType): Record<string, unknown> {
  const named = name === undefined ? {} : { name };
  if (t.kind === 'list') {
    const inner = feature(undefined, t.of);
    return { ...named, list: 'dtype' in inner ? inner.dtype : inner.struct ?? inner };
  }
  if (t.kind === 'struct') return { ...named, struct: [...t.fields].map(([k, f]) => feature(k, f)) };
  return { ...named, dtype: DTYPE[t.kind] };
}
