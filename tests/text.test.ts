/**
 * pipeline/text.ts on its own: what cleaning removes and keeps, for any string, and where the
 * first ill-formed UTF-8 sequence starts, for any bytes. The oracles are written here (the
 * Unicode definitions) or are Node's own (TextDecoder with `fatal`, `isUtf8`).
 */
import { isUtf8 } from 'node:buffer';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cleanJson, cleanText, clip, clipLine, describeRemoved, findLoneSurrogate, firstInvalidUtf8, noneRemoved } from '../pipeline/text.js';

/** Any sequence of UTF-16 code units: lone surrogates and every control character included. */
const codeUnits = fc.array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 300 }).map((units) => String.fromCharCode(...units));
const anyString = fc.oneof(codeUnits, fc.string({ unit: 'binary', maxLength: 300 }), fc.string({ unit: 'grapheme', maxLength: 100 }));

/** Clean by definition: no C0 control but tab and LF, no DEL or C1 control, no unpaired surrogate. */
function isClean(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (!(d >= 0xdc00 && d <= 0xdfff)) return false;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) return false;
    else if ((c < 0x20 && c !== 0x09 && c !== 0x0a) || (c >= 0x7f && c <= 0x9f)) return false;
  }
  return true;
}

describe('cleanText', () => {
  it('removes NUL, the other controls, DEL, C1 controls and lone surrogates, and counts each', () => {
    const removed = noneRemoved();
    expect(cleanText('a\u0000b\u0007c\u001bd\u007fe\u0085f\u009fg\ud800h\udc00i', removed)).toBe('abcdefghi');
    expect(removed).toEqual({ nul: 1, control: 5, surrogate: 2 });
    expect(describeRemoved(removed)).toBe('removed 1 NUL, 2 lone surrogates and 5 other control characters');
  });

  it('keeps tab, line feed, surrogate pairs and other invisible characters; makes CR and CRLF line ends \\n without counting them', () => {
    const removed = noneRemoved();
    const kept = 'tab\there\nemoji 😀 zwj 👩‍💻 bom \ufeff rtl \u200f nbsp\u00a0 é';
    expect(cleanText(kept, removed)).toBe(kept);
    expect(cleanText('one\r\ntwo\rthree\n\rfour', removed)).toBe('one\ntwo\nthree\n\nfour');
    expect(removed).toEqual({ nul: 0, control: 0, surrogate: 0 });
  });

  it('for any string: the result is clean, survives a UTF-8 round trip, and cleaning it again changes nothing', () => {
    fc.assert(
      fc.property(anyString, (s) => {
        const out = cleanText(s);
        expect(isClean(out)).toBe(true);
        expect(new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(Buffer.from(out, 'utf8'))).toBe(out);
        expect(cleanText(out)).toBe(out);
        if (isClean(s) && !s.includes('\r')) expect(out).toBe(s);
      }),
      { numRuns: 500 },
    );
  });
});

describe('cleanJson', () => {
  it('cleans every string and key, deep, and hands back the same object when nothing changed', () => {
    const clean = { a: ['x', 1, null, { b: 'y' }], c: true };
    expect(cleanJson(clean)).toBe(clean);
    const removed = noneRemoved();
    const dirty = { 'k\u0000': ['x\ud800', 1, { b: 'y\u0007', n: null }], ok: 'fine' };
    const out = cleanJson(dirty, removed);
    expect(out).toEqual({ k: ['x', 1, { b: 'y', n: null }], ok: 'fine' });
    expect(removed).toEqual({ nul: 1, control: 1, surrogate: 1 });
    // The input is not changed in place: it may be a cached result another call shares.
    expect(dirty['k\u0000'][0]).toBe('x\ud800');
  });

  it('a change after clean keys keeps every key, in order, the clean values the same objects', () => {
    const inner = { x: 1 };
    const removed = noneRemoved();
    const out = cleanJson({ first: 'a', second: inner, 'late\u0001': 'b', last: 'c\u0000', after: 'd' }, removed) as Record<string, unknown>;
    expect(Object.keys(out)).toEqual(['first', 'second', 'late', 'last', 'after']);
    expect(out).toEqual({ first: 'a', second: { x: 1 }, late: 'b', last: 'c', after: 'd' });
    expect(out.second).toBe(inner);
    expect(removed).toEqual({ nul: 1, control: 1, surrogate: 0 });
  });

  it('keeps a __proto__ key as data', () => {
    const v = JSON.parse('{"__proto__": {"polluted": "x\\u0000"}}');
    const out = cleanJson(v) as Record<string, unknown>;
    expect(Object.hasOwn(out, '__proto__')).toBe(true);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});

describe('firstInvalidUtf8', () => {
  it('names where the first ill-formed sequence starts', () => {
    const b = (...xs: number[]) => Uint8Array.from(xs);
    expect(firstInvalidUtf8(Buffer.from('plain é 😀 text'))).toBe(-1);
    expect(firstInvalidUtf8(b(0x61, 0xff, 0x62))).toBe(1);
    expect(firstInvalidUtf8(b(0x61, 0xe2, 0x28, 0xa1))).toBe(1); // a lead byte without its continuation
    expect(firstInvalidUtf8(b(0xc0, 0xaf))).toBe(0); // overlong '/'
    expect(firstInvalidUtf8(b(0x61, 0xed, 0xa0, 0x80))).toBe(1); // an encoded surrogate (CESU-8)
    expect(firstInvalidUtf8(b(0xf4, 0x90, 0x80, 0x80))).toBe(0); // past U+10FFFF
    expect(firstInvalidUtf8(b(0x61, 0x62, 0xe2, 0x82))).toBe(2); // cut at the end
    expect(firstInvalidUtf8(b(0x80, 0x61), 1)).toBe(-1); // only the range asked about
  });

  it('for any bytes: -1 exactly when Node says UTF-8, and otherwise everything before it is UTF-8 and it is not', () => {
    const strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
    const bytes = fc.oneof(
      fc.uint8Array({ maxLength: 64 }),
      // Mostly valid text with a few bytes changed: the interesting case.
      fc.tuple(fc.string({ unit: 'binary', maxLength: 40 }), fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 3 })).map(([s, edits]) => {
        const buf = Buffer.from(s, 'utf8');
        for (const [at, v] of edits) if (buf.length > 0) buf[at % buf.length] = v;
        return new Uint8Array(buf);
      }),
    );
    fc.assert(
      fc.property(bytes, (buf) => {
        const at = firstInvalidUtf8(buf);
        expect(at === -1).toBe(isUtf8(buf));
        if (at !== -1) {
          expect(() => strict.decode(buf.subarray(0, at))).not.toThrow();
          // A sequence starting there, of any length, is not UTF-8.
          for (let n = 1; n <= 4 && at + n <= buf.length; n++) expect(isUtf8(buf.subarray(at, at + n))).toBe(false);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('findLoneSurrogate', () => {
  it('finds the first one, in a value, a key or a list, with its path; a pair is not one', () => {
    expect(findLoneSurrogate({ q: 'emoji 😀 fine', meta: { tags: ['a', 'b'] } })).toBeUndefined();
    expect(findLoneSurrogate({ q: 'ok', meta: { tags: ['a', 'x\udc00y'] } })).toEqual({ path: 'meta.tags[1]', index: 1, code: 0xdc00 });
    expect(findLoneSurrogate({ ['k\ud800']: 1 })).toEqual({ path: 'k\ud800', index: 1, code: 0xd800 });
    expect(findLoneSurrogate('\ud83d')).toEqual({ path: '', index: 0, code: 0xd83d });
  });
});

describe('clip and clipLine: text cut for a message', () => {
  it('clip keeps the first max characters and marks a cut with …, whatever the string', () => {
    fc.assert(
      fc.property(anyString, fc.integer({ min: 0, max: 400 }), (s, max) => {
        const out = clip(s, max);
        if (s.length <= max) expect(out).toBe(s);
        else expect(out).toBe(`${s.slice(0, max)}…`);
      }),
    );
    expect(clip('abcdef', 3)).toBe('abc…');
    expect(clip('a\n b', 10)).toBe('a\n b');
  });

  it('clipLine is one line, trimmed, and never longer than max with its …', () => {
    fc.assert(
      fc.property(anyString, fc.integer({ min: 1, max: 400 }), (s, max) => {
        const out = clipLine(s, max);
        expect(out.length).toBeLessThanOrEqual(max);
        expect(out).not.toMatch(/\s\s|^\s|\s$|[\n\r\t]/);
        const one = s.replace(/\s+/g, ' ').trim();
        if (one.length <= max) expect(out).toBe(one);
        else expect(out).toBe(`${one.slice(0, max - 1)}…`);
      }),
    );
    expect(clipLine('  a \n\t b  ', 10)).toBe('a b');
    expect(clipLine('abcdef', 4)).toBe('abc…');
    expect(clipLine('abcd', 4)).toBe('abcd');
  });
});
