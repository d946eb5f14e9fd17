/**
 * Rows of a JSON array file: parsed whole (JSON cannot be parsed in pieces), each element
 * reported by the line it starts on, invalid UTF-8 blamed on the elements that span it.
 */
import { constants as bufferConstants } from 'node:buffer';
import { inputError } from '../../errors.js';
import { bad, cap, fsMessage, typeName, utf8, type RawRow } from './rows.js';

interface ElementSpan {
  /** 1-based lines of the element's first and last character. */
  start: number;
  end: number;
  /** The element's text is `text.slice(from, to)`. */
  from: number;
  to: number;
}

/**
 * Where each top-level element of a JSON array sits, so that rows can be reported by line.
 * Tolerant: on text that is not valid JSON the spans are only a best guess.
 */
function arrayElementSpans(text: string): ElementSpan[] {
  const out: ElementSpan[] = [];
  let line = 1;
  let depth = 0;
  let inString = false;
  let expecting = false;
  let lastLine = 1;
  let lastIndex = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x0a) {
      line++;
      continue;
    }
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
      lastLine = line;
      lastIndex = i;
      continue;
    }
    if (c === 0x20 || c === 0x09 || c === 0x0d) continue;
    if (depth === 1 && (c === 0x2c || c === 0x5d)) {
      const current = out[out.length - 1];
      if (current && !expecting) {
        current.end = lastLine;
        current.to = lastIndex + 1;
      }
      if (c === 0x2c) expecting = true;
      else depth = 0;
      continue;
    }
    if (depth === 1 && expecting) {
      out.push({ start: line, end: line, from: i, to: text.length });
      expecting = false;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      depth++;
      if (depth === 1) expecting = true;
    } else if (c === 0x5d || c === 0x7d) depth--;
    lastLine = line;
    lastIndex = i;
  }
  return out;
}

/**
 * Node's JSON.parse errors carry no position, so the line of a syntax error is found by
 * parsing the array's elements one by one. The array stays unusable either way: once the
 * text is broken, element boundaries are guesses, and guessed rows must not reach a run.
 */
function lineOfJsonError(text: string): number | undefined {
  for (const span of arrayElementSpans(text)) {
    try {
      JSON.parse(text.slice(span.from, span.to));
    } catch {
      return span.start;
    }
  }
  return undefined;
}

async function readAll(src: AsyncIterable<Buffer>, file: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of src) {
    size += chunk.length;
    if (size > bufferConstants.MAX_STRING_LENGTH) {
      const mb = Math.floor(size / (1 << 20));
      throw inputError(file, undefined, undefined, `a JSON array this large (over ${mb} MB) cannot be parsed at once; convert it to JSONL`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
}

/**
 * A JSON array cannot be parsed in pieces, so invalid UTF-8 is decoded leniently, located by
 * line, and later blamed on the elements that span those lines.
 */
function decodeLocatingBadLines(bytes: Buffer): { text: string; badLines: Set<number> } {
  const badLines = new Set<number>();
  try {
    return { text: utf8.decode(bytes), badLines };
  } catch {
    let line = 1;
    for (let from = 0; ; line++) {
      const nl = bytes.indexOf(0x0a, from);
      try {
        utf8.decode(bytes.subarray(from, nl === -1 ? bytes.length : nl));
      } catch {
        badLines.add(line);
      }
      if (nl === -1) break;
      from = nl + 1;
    }
    return { text: new TextDecoder('utf-8').decode(bytes), badLines };
  }
}

function parseJsonArray(bytes: Buffer, file: string): { elements: unknown[]; spans: ElementSpan[]; badLines: Set<number> } {
  const { text, badLines } = decodeLocatingBadLines(bytes);
  if (/^\s*$/.test(text)) return { elements: [], spans: [], badLines };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw inputError(file, lineOfJsonError(text), undefined, `invalid JSON: ${cap(fsMessage(err))}`);
  }
  if (!Array.isArray(value)) {
    throw inputError(file, undefined, undefined, `expected a JSON array of question objects, got ${typeName(value)}`);
  }
  return { elements: value, spans: arrayElementSpans(text), badLines };
}

export async function* jsonArrayRows(src: AsyncIterable<Buffer>, file: string): AsyncGenerator<Iterable<RawRow>> {
  // Helpers own the raw bytes and the text, so neither stays alive while the rows are consumed.
  const { elements, spans, badLines } = parseJsonArray(await readAll(src, file), file);
  yield (function* (): Generator<RawRow> {
    for (let i = 0; i < elements.length; i++) {
      const span = spans[i] ?? { start: 1, end: 1 };
      let broken = false;
      for (const l of badLines) if (l >= span.start && l <= span.end) broken = true;
      if (broken) yield { line: span.start, ...bad(undefined, 'invalid UTF-8') };
      else yield { line: span.start, value: elements[i] };
    }
  })();
}
