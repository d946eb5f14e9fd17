/**
 * JSONL rows: lines split from the bytes as they arrive, one batch per chunk, never holding
 * more than the longest allowed line; an overlong line, invalid UTF-8 or JSON is a bad row.
 */
import { bad, cap, fsMessage, utf8, type RawRow } from './rows.js';

type Line = { line: number; bytes: Buffer | null };

export function formatBytes(n: number): string {
  return n >= 1 << 20 && n % (1 << 20) === 0 ? `${n / (1 << 20)} MB` : `${n} bytes`;
}

/**
 * Splits bytes into lines, one batch per chunk, without ever holding more than `maxBytes` of
 * one line: the bytes of an overlong line are dropped as they arrive and it comes out as `null`.
 */
async function* splitLines(src: AsyncIterable<Buffer>, maxBytes: number): AsyncGenerator<Line[]> {
  let parts: Buffer[] = [];
  let size = 0;
  let over = false;
  let line = 1;
  for await (const chunk of src) {
    const batch: Line[] = [];
    let pos = 0;
    while (pos < chunk.length) {
      const nl = chunk.indexOf(0x0a, pos);
      const end = nl === -1 ? chunk.length : nl;
      if (!over && end > pos) {
        if (size + (end - pos) > maxBytes) {
          over = true;
          parts = [];
          size = 0;
        } else {
          parts.push(chunk.subarray(pos, end));
          size += end - pos;
        }
      }
      if (nl === -1) break;
      batch.push({ line, bytes: over ? null : parts.length === 1 ? parts[0]! : Buffer.concat(parts, size) });
      line++;
      parts = [];
      size = 0;
      over = false;
      pos = nl + 1;
    }
    if (batch.length > 0) yield batch;
  }
  if (over || size > 0) yield [{ line, bytes: over ? null : Buffer.concat(parts, size) }];
}

function* parseJsonLines(lines: Line[], maxLine: number): Generator<RawRow> {
  for (const { line, bytes } of lines) {
    if (bytes === null) {
      yield { line, ...bad(undefined, `line is longer than ${formatBytes(maxLine)}`) };
      continue;
    }
    let text: string;
    try {
      text = utf8.decode(bytes);
    } catch {
      yield { line, ...bad(undefined, 'invalid UTF-8') };
      continue;
    }
    if (/^\s*$/.test(text)) continue;
    try {
      yield { line, value: JSON.parse(text) };
    } catch (err) {
      yield { line, ...bad(undefined, `invalid JSON: ${cap(fsMessage(err))}`) };
    }
  }
}

export async function* jsonlRows(src: AsyncIterable<Buffer>, maxLine: number): AsyncGenerator<Iterable<RawRow>> {
  for await (const lines of splitLines(src, maxLine)) yield parseJsonLines(lines, maxLine);
}
