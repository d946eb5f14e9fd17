/**
 * What every question-file reader hands on: a row with its line number and parsed value, or
 * the reason the row is bad. The readers (jsonl.ts, csv.ts, json-array.ts) share these helpers.
 */
import { printable } from '../../printable.js';

export type Bad = { bad: { field?: string | undefined; message: string } };
export type RawRow = { line: number; value: unknown } | ({ line: number } & Bad);

/** Decodes UTF-8 and throws on invalid bytes, so a bad row is named rather than garbled. */
export const utf8 = new TextDecoder('utf-8', { fatal: true });

export function bad(field: string | undefined, message: string): Bad {
  return { bad: { field, message } };
}

export function typeName(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
}

export function fsMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A parser's message, at most 200 characters, its control characters escaped: it quotes the file's bytes, and is printed. */
export function cap(message: string): string {
  const short = message.length > 200 ? message.slice(0, 200) + '…' : message;
  return printable(short, { oneLine: true });
}
