/**
 * The tag scanner the XML dialects read with (tulu's tags; mcp-xml's think, output and answer
 * tags): one pass over the text, jumping from `<` to `<` with indexOf and never looking past the
 * next `<` while reading a tag, so everything built on its tag list is linear in the text
 * however a model mangles it. A text of a million unterminated `<call_tool` tags is as cheap as
 * a clean one.
 *
 * Tag names are matched case-insensitively (ASCII only) and a tag ends at its first `>`. A `<`
 * before that `>` ends the tag "unterminated": a cut id like `<snippet id="3255 [...]</snippet>`
 * must not swallow the next tag. The tool-output escaper (tool-output.ts) is at least as broad as
 * this scanner, so tool text can never produce a tag it sees.
 */

export type TagName = 'call_tool' | 'call' | 'tool_output' | 'answer' | 'think' | 'snippet' | 'cite';

export interface Tag {
  readonly name: TagName;
  readonly close: boolean;
  /** Index of the `<`. */
  readonly start: number;
  /** Index just after the `>`, or of the `<`/end that cut an unterminated tag short. */
  readonly end: number;
  /** false when another `<` or the end of the text came before any `>`. */
  readonly terminated: boolean;
  /** `<… />`. */
  readonly selfClosing: boolean;
  /** The attribute source: after the name, before `>` (and before a self-closing `/`). */
  readonly attrStart: number;
  readonly attrEnd: number;
}

export const LT = 60;
export const GT = 62;
export const SLASH = 47;
const EQ = 61;
export const DQ = 34;
export const SQ = 39;
export const NL = 10;

const LONGEST_NAME = 11; // tool_output

export function isSpace(c: number): boolean {
  return c === 32 || c === 9 || c === 10 || c === 13 || c === 12 || c === 11;
}

function isNameChar(c: number): boolean {
  return (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 95;
}

/** `text[at…]` equals the lower-case ASCII `word`, ignoring ASCII case. Allocates nothing. */
export function startsWithCI(s: string, at: number, word: string): boolean {
  for (let k = 0; k < word.length; k++) {
    let c = s.charCodeAt(at + k);
    if (c >= 65 && c <= 90) c |= 32;
    if (c !== word.charCodeAt(k)) return false;
  }
  return true;
}

export function equalsCI(s: string, word: string): boolean {
  return s.length === word.length && startsWithCI(s, 0, word);
}

// By length, so that reading a tag name costs a few comparisons and no allocation.
const NAMES_BY_LENGTH: ReadonlyMap<number, readonly TagName[]> = new Map([
  [4, ['call', 'cite']],
  [5, ['think']],
  [6, ['answer']],
  [7, ['snippet']],
  [9, ['call_tool']],
  [11, ['tool_output']],
]);

function tagNameAt(text: string, at: number, len: number): TagName | undefined {
  const candidates = NAMES_BY_LENGTH.get(len);
  if (candidates === undefined) return undefined;
  for (const name of candidates) if (startsWithCI(text, at, name)) return name;
  return undefined;
}

/** Every dialect tag in `text`, in order. One pass; unknown `<…>` are text. */
export function scanTags(text: string): Tag[] {
  const tags: Tag[] = [];
  const n = text.length;
  // Next '>' at or after some earlier position; -1 once there is none left. Cached so that a
  // text with many '<' and few '>' is not rescanned for every tag.
  let gt = -2;
  let p = text.indexOf('<');
  while (p !== -1) {
    let j = p + 1;
    let close = false;
    if (j < n && text.charCodeAt(j) === SLASH) {
      close = true;
      j++;
    }
    const nameStart = j;
    while (j < n && j - nameStart <= LONGEST_NAME && isNameChar(text.charCodeAt(j))) j++;
    const boundary = j === n ? -1 : text.charCodeAt(j);
    const name =
      boundary === -1 || isSpace(boundary) || boundary === GT || boundary === SLASH || boundary === LT ? tagNameAt(text, nameStart, j - nameStart) : undefined;
    // `</call>` is a close some models write; `<call …>` as an opener is not in the grammar.
    if (name === undefined || (!close && name === 'call')) {
      p = text.indexOf('<', p + 1);
      continue;
    }
    if (gt !== -1 && gt < j) gt = text.indexOf('>', j);
    const lt = text.indexOf('<', j);
    const gtAt = gt === -1 ? n : gt;
    const ltAt = lt === -1 ? n : lt;
    const terminated = gtAt < ltAt;
    const k = terminated ? gtAt : ltAt;
    const selfClosing = terminated && k > j && text.charCodeAt(k - 1) === SLASH;
    tags.push({ name, close, start: p, end: terminated ? k + 1 : k, terminated, selfClosing, attrStart: j, attrEnd: selfClosing ? k - 1 : k });
    // No '<' lies between j and lt, so lt is the next candidate either way.
    p = lt;
  }
  return tags;
}

/** A tag that opens a turn's action or a tool output: a call, an answer, an output. */
export function isBlock(name: TagName): boolean {
  return name === 'call_tool' || name === 'answer' || name === 'tool_output';
}

export function opensBlockOrThink(t: Tag): boolean {
  return !t.close && (isBlock(t.name) || t.name === 'think');
}

export interface Attribute {
  readonly name: string;
  /** null for a bare attribute (`<cite ids=a b>`: `b` is bare). */
  readonly value: string | null;
  /** true when the value was in matching quotes. */
  readonly quoted: boolean;
}

/**
 * Attributes in double quotes, single quotes or unquoted. A quote that never closes (a
 * value cut short, as in `id="3255 [...]`) is read like an unquoted value, up to whitespace.
 * Linear: a failed search for a closing quote is remembered, so it is never repeated.
 */
export function parseAttributes(src: string): Attribute[] {
  const out: Attribute[] = [];
  const n = src.length;
  let noDqFrom = n + 1;
  let noSqFrom = n + 1;
  const findQuote = (q: number, from: number): number => {
    if (from >= (q === DQ ? noDqFrom : noSqFrom)) return -1;
    const r = src.indexOf(q === DQ ? '"' : "'", from);
    if (r === -1) {
      if (q === DQ) noDqFrom = from;
      else noSqFrom = from;
    }
    return r;
  };
  const toSpace = (from: number): number => {
    let e = from;
    while (e < n && !isSpace(src.charCodeAt(e))) e++;
    return e;
  };
  let i = 0;
  while (i < n) {
    let c = src.charCodeAt(i);
    if (isSpace(c)) {
      i++;
      continue;
    }
    const nameStart = i;
    while (i < n) {
      c = src.charCodeAt(i);
      if (isSpace(c) || c === EQ || c === DQ || c === SQ) break;
      i++;
    }
    if (i === nameStart) {
      // A quote or `=` where a name should be: skip the stray quoted chunk or character.
      if (c === DQ || c === SQ) {
        const closeAt = findQuote(c, i + 1);
        i = closeAt === -1 ? toSpace(i + 1) : closeAt + 1;
      } else {
        i++;
      }
      continue;
    }
    const name = src.slice(nameStart, i);
    let k = i;
    while (k < n && isSpace(src.charCodeAt(k))) k++;
    if (k < n && src.charCodeAt(k) === EQ) {
      k++;
      while (k < n && isSpace(src.charCodeAt(k))) k++;
      const q = k < n ? src.charCodeAt(k) : -1;
      let value: string;
      let quoted = false;
      if (q === DQ || q === SQ) {
        const closeAt = findQuote(q, k + 1);
        if (closeAt !== -1) {
          value = src.slice(k + 1, closeAt);
          quoted = true;
          i = closeAt + 1;
        } else {
          const e = toSpace(k + 1);
          value = src.slice(k + 1, e);
          i = e;
        }
      } else {
        const e = toSpace(k);
        value = src.slice(k, e);
        i = e;
      }
      out.push({ name, value: value.includes('&quot;') ? value.split('&quot;').join('"') : value, quoted });
    } else {
      out.push({ name, value: null, quoted: false });
    }
  }
  return out;
}

export function tagAttributes(text: string, tag: Tag): Attribute[] {
  return parseAttributes(text.slice(tag.attrStart, tag.attrEnd));
}

/** Whether `text[from, to)` holds anything but white space. */
export function hasNonSpace(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (!isSpace(text.charCodeAt(i))) return true;
  return false;
}

/**
 * For each item of a list of tags, the index of the next one of the same kind (-1 for none):
 * where a block closes when the next tag of its own name is its close. One pass, from the end.
 */
export function nextOfSameKind<T>(items: readonly T[], kind: (item: T) => string): Int32Array {
  const n = items.length;
  const next = new Int32Array(n);
  const last = new Map<string, number>();
  for (let k = n - 1; k >= 0; k--) {
    const key = kind(items[k]!);
    next[k] = last.get(key) ?? -1;
    last.set(key, k);
  }
  return next;
}

/** The index of the first item at or after `from` that `is` holds for; the list's length when there is none. */
export function nextWhere<T>(items: readonly T[], from: number, is: (item: T) => boolean): number {
  let k = from;
  while (k < items.length && !is(items[k]!)) k++;
  return k;
}

/**
 * The answer block opened by `items[i]`: an answer is final, so it runs to the first answer
 * close after it (`isAnswerClose`; nested opens are its content), or to the end of the text.
 * `innerEnd` ends its content, `end` its text; `next` is the item after it.
 */
export function answerBlock<T extends { readonly start: number; readonly end: number }>(
  items: readonly T[],
  i: number,
  isAnswerClose: (item: T) => boolean,
  textLength: number,
): { closed: boolean; innerEnd: number; end: number; next: number } {
  let j = i + 1;
  while (j < items.length && !isAnswerClose(items[j]!)) j++;
  const close = items[j];
  return close === undefined ? { closed: false, innerEnd: textLength, end: textLength, next: j + 1 } : { closed: true, innerEnd: close.start, end: close.end, next: j + 1 };
}
