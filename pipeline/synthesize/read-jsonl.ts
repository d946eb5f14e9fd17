/**
 * The rows of a source file (documents, triples, descriptions): JSONL, one object a line, each
 * handed over with its line number, a line that is not an object reported with file and line.
 */
import { createReadStream, existsSync } from 'node:fs';
import { inputError } from '../errors.js';
import { lineProblem, maxLineBytes, readLines } from '../core/lines.js';

export interface SourceRow {
  readonly line: number;
  readonly row: Record<string, unknown>;
}

export async function* sourceRows(file: string): AsyncGenerator<SourceRow> {
  if (!existsSync(file)) throw inputError(file, undefined, undefined, 'no such file');
  const max = maxLineBytes();
  for await (const l of readLines(createReadStream(file), { maxLineBytes: max })) {
    const { line, text } = l;
    const problem = lineProblem(l, max);
    if (problem !== undefined) throw inputError(file, line, undefined, problem);
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw inputError(file, line, undefined, 'not valid JSON');
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) throw inputError(file, line, undefined, 'expected a JSON object');
    yield { line, row: value as Record<string, unknown> };
  }
}

/** The first of `names` the row has, as text: a string, or a finite number written out. */
export function field(row: Record<string, unknown>, names: readonly string[]): { name: string; value: unknown } | undefined {
  const name = names.find((n) => Object.hasOwn(row, n) && row[n] !== null && row[n] !== undefined);
  return name === undefined ? undefined : { name, value: row[name] };
}

/** A row's field as a non-empty string, or the error naming file, line and field. */
export function textField(file: string, r: SourceRow, names: readonly string[], what: string): string {
  const f = field(r.row, names);
  if (f === undefined) throw inputError(file, r.line, what, `missing (looked for ${names.join(', ')})`);
  const v = typeof f.value === 'number' && Number.isFinite(f.value) ? String(f.value) : f.value;
  if (typeof v !== 'string') throw inputError(file, r.line, f.name, `expected a string, got ${Array.isArray(v) ? 'an array' : typeof v}`);
  if (v.trim() === '') throw inputError(file, r.line, f.name, 'empty');
  return v;
}
