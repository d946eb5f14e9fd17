/**
 * The bounded reader of a stdio server's output (stdio-lines.ts): whole lines however the
 * bytes are cut into chunks, and an oversized message skipped and answered for its id, in the
 * field orders the TypeScript and Python SDKs write.
 */
import { describe, expect, it } from 'vitest';
import { BoundedLineReader, type OversizedMessage } from '../../pipeline/generate/stdio-lines.js';

function reader(max: number) {
  const oversized: OversizedMessage[] = [];
  const r = new BoundedLineReader<unknown>(max, (line) => JSON.parse(line), (m) => {
    oversized.push(m);
    return m.id === undefined ? undefined : { answered: m.id };
  });
  const read = (): unknown[] => {
    const out: unknown[] = [];
    for (;;) {
      let m: unknown;
      try {
        m = r.readMessage();
      } catch {
        out.push('junk');
        continue;
      }
      if (m === null) return out;
      out.push(m);
    }
  };
  return { r, read, oversized };
}

/** Feeds `text` in chunks of `size` bytes. */
function feed(r: BoundedLineReader<unknown>, text: string, size: number): void {
  const bytes = Buffer.from(text, 'utf8');
  for (let i = 0; i < bytes.length; i += size) r.append(bytes.subarray(i, i + size));
}

describe('BoundedLineReader', () => {
  it('gives whole messages whatever the chunks, multi-byte characters and CRLF included', () => {
    const lines = [{ id: 1, result: { text: 'héllo ✓ 𝄞' } }, { id: 2, result: {} }, { method: 'notifications/x' }];
    for (const size of [1, 2, 3, 7, 1000]) {
      const { r, read } = reader(1_000);
      feed(r, lines.map((l) => JSON.stringify(l)).join('\r\n') + '\n', size);
      expect(read(), `chunks of ${size}`).toEqual(lines);
    }
  });

  it('a line that is not a message throws once and the next is read', () => {
    const { r, read } = reader(1_000);
    feed(r, 'debug: not json\n{"id":3,"result":{}}\n', 5);
    expect(read()).toEqual(['junk', { id: 3, result: {} }]);
  });

  it('an oversized response is skipped and answered for its id, written last (TypeScript SDK) or first (Python SDK)', () => {
    const { r, read, oversized } = reader(100);
    const big = 'x'.repeat(10_000);
    // A nested "id" inside the result must not be taken for the message's.
    const ts = `{"result":{"content":[{"type":"text","text":"${big}","id":99}]},"jsonrpc":"2.0","id":7}`;
    const py = `{"jsonrpc":"2.0","id":"req-8","result":{"text":"${big}"}}`;
    feed(r, `${ts}\n`, 64);
    feed(r, `${py}\n`, 4096);
    feed(r, '{"id":9,"result":{}}\n', 3);
    expect(read()).toEqual([{ answered: 7 }, { answered: 'req-8' }, { id: 9, result: {} }]);
    expect(oversized.map((o) => o.bytes)).toEqual([ts.length, py.length]);
  });

  it('an oversized request or notification from the server gets no made-up answer', () => {
    const { r, read, oversized } = reader(100);
    feed(r, `{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":{"x":"${'y'.repeat(500)}"}}\n`, 50);
    feed(r, `{"jsonrpc":"2.0","method":"notifications/message","params":{"x":"${'y'.repeat(500)}"}}\n`, 50);
    feed(r, '{"id":5,"result":{}}\n', 50);
    expect(read()).toEqual([{ id: 5, result: {} }]);
    expect(oversized.map((o) => o.id)).toEqual([undefined, undefined]);
  });

  it('a message thousands of times the limit streams past and is still answered', () => {
    const { r, read, oversized } = reader(1_000);
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    r.append(Buffer.from('{"result":"'));
    for (let i = 0; i < 320; i++) r.append(chunk);
    r.append(Buffer.from('","jsonrpc":"2.0","id":11}\n{"id":12,"result":{}}\n'));
    expect(read()).toEqual([{ answered: 11 }, { id: 12, result: {} }]);
    expect(oversized[0]!.bytes).toBe(320 * 64 * 1024 + '{"result":"'.length + '","jsonrpc":"2.0","id":11}'.length);
  });
});
