/**
 * JSONL rows: lines split from the bytes as they arrive by the one line reader (core/lines.ts),
 * one batch per chunk, never holding more than the longest allowed line; an overlong line,
 * invalid UTF-8 or JSON is a bad row.
 */
import { readLineBatches, type Line } from '../lines.js';
import { bad, cap, fsMessage, type RawRow } from './rows.js';

export function formatBytes(n: number): string {
  return n >= 1 << 20 && n % (1 << 20) === 0 ? `${n / (1 << 20)} MB` : `${n} bytes`;
}

function* parseJsonLines(lines: Line[], maxLine: number): Generator<RawRow> {
  for (const l of lines) {
    const { line } = l;
    if (l.tooLong !== undefined) {
      yield { line, ...bad(undefined, `line is longer than ${formatBytes(maxLine)}`) };
      continue;
    }
    if (l.invalidUtf8 !== undefined) {
      yield { line, ...bad(undefined, 'invalid UTF-8') };
      continue;
    }
    // A BOM at the start of any line, not only the file's: files made on Windows, concatenated.
    const text = l.text.charCodeAt(0) === 0xfeff ? l.text.slice(1) : l.text;
    if (/^\s*$/.test(text)) continue;
    try {
      yield { line, value: JSON.parse(text) };
    } catch (err) {
      yield { line, ...bad(undefined, `invalid JSON: ${cap(fsMessage(err))}`) };
    }
  }
}

export async function* jsonlRows(src: AsyncIterable<Buffer>, maxLine: number): AsyncGenerator<Iterable<RawRow>> {
  for await (const lines of readLineBatches(src, { maxLineBytes: maxLine })) yield parseJsonLines(lines, maxLine);
}
