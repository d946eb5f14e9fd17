import { describe, expect, it } from 'vitest';
import { byteOffsets } from '../../pipeline/dataset/token-rows.js';

/** The definition the one-pass walk must agree with. */
const bytesBefore = (text: string, pos: number): number => Buffer.byteLength(text.slice(0, pos), 'utf8');

describe('byteOffsets', () => {
  // ASCII, two- and three-byte characters, and surrogate pairs (4 bytes) side by side.
  const text = 'ab é€ 😀😀 x👍🏽y <|im_end|>\nÿ😀';

  it('gives every position the byte count of the text before it, asked in order', () => {
    const at = byteOffsets(text);
    for (let pos = 0; pos <= text.length; pos++) expect(at(pos), `position ${pos}`).toBe(bytesBefore(text, pos));
  });

  it('counts a position inside a surrogate pair as the slice does, and the pair whole after it', () => {
    const inside = text.indexOf('😀') + 1;
    const at = byteOffsets(text);
    expect(at(inside)).toBe(bytesBefore(text, inside));
    expect(at(inside + 1)).toBe(bytesBefore(text, inside + 1));
    expect(at(text.length)).toBe(Buffer.byteLength(text, 'utf8'));
  });

  it('starts again for a position before the last one asked', () => {
    const at = byteOffsets(text);
    const order = [text.length, 3, 3, 9, 1, text.length - 1, 0, 12];
    for (const pos of order) expect(at(pos), `position ${pos}`).toBe(bytesBefore(text, pos));
  });

  it('skips positions in big steps as in small ones', () => {
    const long = text.repeat(500);
    const at = byteOffsets(long);
    for (let pos = 0; pos <= long.length; pos += 997) expect(at(pos)).toBe(bytesBefore(long, pos));
  });
});
