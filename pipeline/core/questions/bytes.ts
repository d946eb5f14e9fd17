/**
 * A question file's bytes: from a file or stdin, gunzipped when the magic bytes say so, with a
 * look ahead (`peek`) that the format sniffer uses without losing what it read.
 */
import { open } from 'node:fs/promises';
import { Readable, pipeline } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { TrajforgeError, inputError } from '../../errors.js';
import { fsMessage } from './rows.js';

export async function* fileBytes(path: string, file: string): AsyncGenerator<Buffer> {
  let handle;
  try {
    handle = await open(path, 'r');
  } catch (err) {
    throw inputError(file, undefined, undefined, `cannot read: ${fsMessage(err)}`);
  }
  const stream = handle.createReadStream({ highWaterMark: 1 << 20 });
  try {
    for await (const chunk of stream) yield chunk as Buffer;
  } catch (err) {
    // EISDIR and friends only show up on the first read.
    throw inputError(file, undefined, undefined, `cannot read: ${fsMessage(err)}`);
  } finally {
    stream.destroy();
  }
}

export async function* streamBytes(stream: NodeJS.ReadableStream): AsyncGenerator<Buffer> {
  for await (const chunk of stream) yield typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : (chunk as Buffer);
}

/**
 * Reads up to the point where `enough(head)` holds (or the input ends) and hands back what it
 * read plus an iterable that replays it and then continues with the rest of the input.
 */
export async function peek(
  src: AsyncIterator<Buffer>,
  enough: (head: Buffer) => boolean,
): Promise<{ head: Buffer; ended: boolean; rest: AsyncIterable<Buffer> }> {
  const parts: Buffer[] = [];
  let head: Buffer = Buffer.alloc(0);
  let ended = false;
  while (!enough(head)) {
    const r = await src.next();
    if (r.done) {
      ended = true;
      break;
    }
    parts.push(r.value);
    head = parts.length === 1 ? r.value : Buffer.concat(parts);
  }
  async function* rest(first: Buffer): AsyncGenerator<Buffer> {
    let done = ended;
    try {
      if (first.length > 0) yield first;
      while (!done) {
        const r = await src.next();
        if (r.done) done = true;
        else yield r.value;
      }
    } finally {
      // Stopping early must reach the source so that it closes its file.
      if (!done) await src.return?.(undefined);
    }
  }
  return { head, ended, rest: rest(head) };
}

export function isSpace(byte: number): boolean {
  return byte === 0x20 || byte === 0x09 || byte === 0x0a || byte === 0x0d;
}

export function firstNonSpace(buf: Buffer, from: number): number {
  for (let i = from; i < buf.length; i++) if (!isSpace(buf[i]!)) return i;
  return -1;
}

export function countBreaks(buf: Buffer): number {
  let n = 0;
  for (let i = 0; i < buf.length; i++) {
    const c = buf[i];
    if (c === 0x0a || (c === 0x0d && buf[i + 1] !== 0x0a)) n++;
  }
  return n;
}

export async function* gunzip(src: AsyncIterable<Buffer>, file: string): AsyncGenerator<Buffer> {
  const input = Readable.from(src);
  const z = createGunzip();
  // Errors from either side reach us through z's iterator; the callback only keeps them from being unhandled.
  pipeline(input, z, () => {});
  try {
    for await (const chunk of z) yield chunk as Buffer;
  } catch (err) {
    if (err instanceof TrajforgeError) throw err;
    throw inputError(file, undefined, undefined, `cannot decompress: ${fsMessage(err)}`);
  } finally {
    z.destroy();
    input.destroy();
  }
}
