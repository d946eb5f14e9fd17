import { mkdtempSync, writeSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { GroupFlush } from '../../pipeline/generate/group-flush.js';

/** Two real files and a GroupFlush over them; `write(i)` appends a line to file i and counts its bytes. */
async function twoFiles(): Promise<{ flush: GroupFlush; write: (i: number) => void; handles: FileHandle[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'tf-group-flush-'));
  const handles = [await open(join(dir, 'a'), 'a'), await open(join(dir, 'b'), 'a')];
  const written = [0, 0];
  const flush = new GroupFlush(() => handles.map((handle, i) => ({ handle, written: written[i]! })));
  const write = (i: number): void => void (written[i]! += writeSync(handles[i]!.fd, 'a line\n'));
  opened.push(...handles);
  return { flush, write, handles };
}
const opened: FileHandle[] = [];
afterEach(async () => {
  for (const h of opened.splice(0)) await h.close();
});

describe('group flush', () => {
  it('does not let a flush that started before a write serve it: the caller waits for one that starts after', async () => {
    const { flush, write } = await twoFiles();
    write(0);
    const first = flush.flush();
    write(0);
    await Promise.all([first, flush.flush()]);
    expect(flush.datasyncs).toBe(2);
  });

  it('serves every caller that arrives while a flush runs with one more flush, of the files written to only', async () => {
    const { flush, write } = await twoFiles();
    write(0);
    const first = flush.flush();
    for (let i = 0; i < 5; i++) write(0);
    await Promise.all([first, ...Array.from({ length: 5 }, () => flush.flush())]);
    // One for the first line, one for the five after it; file b was never written to.
    expect(flush.datasyncs).toBe(2);
    write(1);
    await flush.flush();
    expect(flush.datasyncs).toBe(3);
  });

  it('makes no fdatasync when nothing was written since the last flush', async () => {
    const { flush, write } = await twoFiles();
    await flush.flush();
    expect(flush.datasyncs).toBe(0);
    write(1);
    await flush.flush();
    await flush.flush();
    expect(flush.datasyncs).toBe(1);
  });

  it('hands a failed fdatasync to the callers it was to serve, and the next call flushes again', async () => {
    const { flush, write, handles } = await twoFiles();
    write(0);
    await handles[0]!.close();
    await expect(flush.flush()).rejects.toThrow();
    // Nothing counted as durable: a later call tries again (and fails again on the closed file).
    await expect(flush.flush()).rejects.toThrow();
    expect(flush.datasyncs).toBe(2);
    opened.splice(opened.indexOf(handles[0]!), 1);
  });
});
