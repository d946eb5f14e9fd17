/**
 * Clean text: what trajforge keeps of the text a model or a tool hands it, so that every record
 * and every export encodes as UTF-8 anywhere and a trainee learns characters, not junk.
 *
 * Removed:
 * - NUL and the other C0 control characters except tab and line feed, DEL, and the C1 controls
 *   (U+0080–U+009F: mostly Windows-1252 text decoded as Latin-1). JSON escapes them, but
 *   tokenizers, terminals, C strings and Postgres `text` (no NUL) do not take them, and they
 *   carry no meaning a trainee should learn.
 * - Lone surrogates (half of a UTF-16 pair: a model's emoji cut between two tokens, a tool that
 *   slices a string by code units). JSON.stringify writes them as `\udXXX` escapes, valid JSON
 *   that Python's UTF-8 encoder, serde_json and Arrow reject. Removed rather than replaced with
 *   U+FFFD: the character is lost either way, and a replacement character in training data
 *   teaches the model to write one.
 *
 * A carriage return is a line end, not junk: `\r\n` and a lone `\r` become `\n`. Web pages and
 * some APIs send CRLF; keeping it would make one document tokenise two ways by its source and
 * put `\r` before every line the parsers split on `\n`. Nothing is lost, so this is not counted
 * as a removal.
 *
 * Tab and line feed stay. Other invisible characters (zero-width joiners, bidi marks, a BOM)
 * stay too: they are well-formed text, some of it meaningful (emoji sequences, right-to-left
 * scripts).
 */

/** `s` cut to its first `max` characters, with `…` after it when anything was cut. */
export function clip(s: string, max: number): string {
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/**
 * `s` on one line for a message (each run of white space one space, the ends trimmed), at most
 * `max` characters counting the `…` that says it was cut.
 */
export function clipLine(s: string, max: number): string {
  const one = s.replace(/\s+/g, ' ').trim();
  return one.length <= max ? one : `${one.slice(0, max - 1)}…`;
}

/** What cleaning removed, added up over any number of strings. */
export interface Removed {
  nul: number;
  /** Control characters other than NUL (CR is not one: it becomes a line feed). */
  control: number;
  /** Unpaired UTF-16 surrogates. */
  surrogate: number;
}

export function noneRemoved(): Removed {
  return { nul: 0, control: 0, surrogate: 0 };
}

/** Linear: one character class, no backtracking. A paired surrogate is one code point under `u`, so only a lone one is `\p{Cs}`. */
const UNCLEAN = /[\0-\x08\x0B-\x1F\x7F-\x9F]|\p{Cs}/u;
const UNCLEAN_ALL = new RegExp(UNCLEAN.source, 'gu');

/** `s` without control characters and lone surrogates, CR line ends made `\n`; what went is added to `removed`. */
export function cleanText(s: string, removed: Removed = noneRemoved()): string {
  if (!UNCLEAN.test(s)) return s;
  return s.replace(UNCLEAN_ALL, (ch: string, at: number, all: string) => {
    if (ch === '\r') return all[at + 1] === '\n' ? '' : '\n';
    if (ch === '\0') removed.nul++;
    else if (ch.length === 1 && ch.charCodeAt(0) >= 0xd800 && ch.charCodeAt(0) <= 0xdfff) removed.surrogate++;
    else removed.control++;
    return '';
  });
}

/**
 * A JSON value (a tool's raw result, a call's arguments) with every string and every key
 * cleaned. The value itself when nothing changed, so clean data costs no copy.
 */
export function cleanJson<T>(value: T, removed: Removed = noneRemoved()): T {
  return cleanValue(value, removed) as T;
}

function cleanValue(v: unknown, removed: Removed): unknown {
  if (typeof v === 'string') return cleanText(v, removed);
  if (typeof v !== 'object' || v === null) return v;
  if (Array.isArray(v)) {
    let out: unknown[] | undefined;
    for (let i = 0; i < v.length; i++) {
      const c = cleanValue(v[i], removed);
      if (c !== v[i]) (out ??= v.slice())[i] = c;
    }
    return out ?? v;
  }
  // The entries are built only from the first key or value that changes: clean data (nearly every
  // tool result) allocates nothing here.
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o);
  let entries: [string, unknown][] | undefined;
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    const x = o[k];
    const ck = cleanText(k, removed);
    const cx = cleanValue(x, removed);
    if (entries === undefined && (ck !== k || cx !== x)) entries = keys.slice(0, i).map((j): [string, unknown] => [j, o[j]]);
    entries?.push([ck, cx]);
  }
  // fromEntries, not assignment: a `__proto__` key stays data.
  return entries === undefined ? v : Object.fromEntries(entries);
}

/** Whether anything was removed. */
export function anyRemoved(r: Removed): boolean {
  return r.nul + r.control + r.surrogate > 0;
}

/** `removed 2 NUL, 1 lone surrogate and 3 other control characters`, for a repair's detail. */
export function describeRemoved(r: Removed): string {
  const parts: string[] = [];
  if (r.nul > 0) parts.push(`${r.nul} NUL`);
  if (r.surrogate > 0) parts.push(`${r.surrogate} lone surrogate${r.surrogate > 1 ? 's' : ''}`);
  if (r.control > 0) parts.push(`${r.control} ${r.nul > 0 ? 'other ' : ''}control character${r.control > 1 ? 's' : ''}`);
  if (parts.length === 0) return 'removed nothing';
  return `removed ${parts.length > 1 ? `${parts.slice(0, -1).join(', ')} and ${parts.at(-1)}` : parts[0]}`;
}

/**
 * Where the first ill-formed UTF-8 sequence in `bytes[start, end)` starts, or -1. Slow next to
 * `isUtf8` from node:buffer: for naming the place once that has said no.
 */
export function firstInvalidUtf8(bytes: Uint8Array, start = 0, end = bytes.length): number {
  let i = start;
  const cont = (at: number, lo = 0x80, hi = 0xbf): boolean => at < end && bytes[at]! >= lo && bytes[at]! <= hi;
  while (i < end) {
    const b = bytes[i]!;
    let n: number;
    // The well-formed sequences of Unicode's table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF.
    if (b < 0x80) n = 1;
    else if (b >= 0xc2 && b <= 0xdf) n = cont(i + 1) ? 2 : 0;
    else if (b === 0xe0) n = cont(i + 1, 0xa0) && cont(i + 2) ? 3 : 0;
    else if ((b >= 0xe1 && b <= 0xec) || b === 0xee || b === 0xef) n = cont(i + 1) && cont(i + 2) ? 3 : 0;
    else if (b === 0xed) n = cont(i + 1, 0x80, 0x9f) && cont(i + 2) ? 3 : 0;
    else if (b === 0xf0) n = cont(i + 1, 0x90) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    else if (b >= 0xf1 && b <= 0xf3) n = cont(i + 1) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    else if (b === 0xf4) n = cont(i + 1, 0x80, 0x8f) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    else n = 0;
    if (n === 0) return i;
    i += n;
  }
  return -1;
}

const LONE_SURROGATE = /\p{Cs}/u;

/**
 * The first lone surrogate in a JSON value (strings and keys, depth first): where it is (a
 * field path, `""` for the value itself) and at which character. Undefined when there is none.
 * Such a string cannot be written as UTF-8 at all, so input holding one is refused, not cleaned.
 */
export function findLoneSurrogate(value: unknown, path = ''): { path: string; index: number; code: number } | undefined {
  if (typeof value === 'string') {
    const index = value.search(LONE_SURROGATE);
    return index === -1 ? undefined : { path, index, code: value.charCodeAt(index) };
  }
  if (typeof value !== 'object' || value === null) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const hit = findLoneSurrogate(value[i], `${path}[${i}]`);
      if (hit) return hit;
    }
    return undefined;
  }
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    const at = path === '' ? k : `${path}.${k}`;
    const hit = findLoneSurrogate(k, at) ?? findLoneSurrogate(v, at);
    if (hit) return hit;
  }
  return undefined;
}
