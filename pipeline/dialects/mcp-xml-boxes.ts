/**
 * MiroThinker's final answer: the last `\boxed{…}` whose braces balance (nested braces allowed,
 * `\{` and `\}` not braces), found in one forward pass, as MiroThinker's own extractor takes it.
 * The mcp-xml dialect's answer, and `gold.match: boxed` in the validator.
 */
import { isSpace } from './tags.js';

const BOXED = '\\boxed';
const BACKSLASH = 92;
const LBRACE = 123;
const RBRACE = 125;

export interface Box {
  readonly start: number;
  readonly contentStart: number;
  /** End of the content: the closing brace, or the end of the scanned range when open. */
  readonly contentEnd: number;
  /** Just after the closing brace, or the end of the scanned range when open. */
  readonly end: number;
  readonly closed: boolean;
}

/** Index just after the `{` of a `\boxed{` at `at` (spaces allowed before the brace), or -1. */
function boxContentStart(text: string, at: number, to: number): number {
  let k = at + BOXED.length;
  // `\boxedx` is another macro.
  const c = k < to ? text.charCodeAt(k) : -1;
  if ((c >= 65 && c <= 90) || (c >= 97 && c <= 122)) return -1;
  while (k < to && isSpace(text.charCodeAt(k))) k++;
  return k < to && text.charCodeAt(k) === LBRACE ? k + 1 : -1;
}

/**
 * The last complete `\boxed{…}` in `text[from, to)`, and the outermost box still open at
 * `to` when it starts after that one. One forward pass: braces are counted only inside a
 * box, so a stray `}` in prose cannot close anything, and nested boxes close inner first
 * (an outer box that closes later is the later box).
 */
export function scanBoxes(text: string, from: number, to: number): { last: Box | undefined; open: Box | undefined } {
  const stack: { start: number; contentStart: number; depth: number }[] = [];
  let depth = 0;
  let last: Box | undefined;
  let i = from;
  while (i < to) {
    if (stack.length === 0) {
      // Searched within [i, to) only: an unbounded indexOf would read to the end of the text
      // for every region the parser hands in, which is quadratic over a whole trajectory.
      const rel = text.slice(i, to).indexOf(BOXED);
      if (rel === -1) break;
      const b = i + rel;
      const cs = boxContentStart(text, b, to);
      if (cs === -1) {
        i = b + BOXED.length;
        continue;
      }
      depth = 0;
      stack.push({ start: b, contentStart: cs, depth });
      depth++;
      i = cs;
      continue;
    }
    const c = text.charCodeAt(i);
    if (c === BACKSLASH) {
      const d = i + 1 < to ? text.charCodeAt(i + 1) : -1;
      if (d === LBRACE || d === RBRACE || d === BACKSLASH) {
        i += 2;
        continue;
      }
      if (text.startsWith(BOXED, i)) {
        const cs = boxContentStart(text, i, to);
        if (cs !== -1) {
          stack.push({ start: i, contentStart: cs, depth });
          depth++;
          i = cs;
          continue;
        }
      }
    } else if (c === LBRACE) {
      depth++;
    } else if (c === RBRACE) {
      depth--;
      const top = stack[stack.length - 1]!;
      if (depth === top.depth) {
        stack.pop();
        last = { start: top.start, contentStart: top.contentStart, contentEnd: i, end: i + 1, closed: true };
      }
    }
    i++;
  }
  const outer = stack[0];
  const open = outer !== undefined && (last === undefined || outer.start > last.start) ? { start: outer.start, contentStart: outer.contentStart, contentEnd: to, end: to, closed: false } : undefined;
  return { last, open };
}

/**
 * The content of the last `\boxed{…}` whose braces balance (nested braces allowed, `\{` and
 * `\}` are not braces), trimmed; undefined when there is none.
 */
export function extractBoxed(text: string): string | undefined {
  const { last } = scanBoxes(text, 0, text.length);
  return last === undefined ? undefined : text.slice(last.contentStart, last.contentEnd).trim();
}
