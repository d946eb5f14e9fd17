/**
 * A run's JSONL files as `merge` reads them: the bytes each held when the merge started, so a
 * run still being written gives the same lines to both passes, and a last line that a write
 * left unfinished is left out (and said) rather than read as a record.
 */
import { closeSync, createReadStream, openSync } from 'node:fs';
import { inputError } from '../errors.js';
import { fsError } from '../files.js';
import { lineProblem, maxLineBytes, readLineBatches, type Line } from '../core/lines.js';
import { tailOf } from '../core/run-dir/run-lines.js';

export interface Snapshot {
  readonly path: string;
  /** Bytes read: the whole lines ending in a newline, and a last line without one when it is whole. */
  readonly end: number;
  /** Bytes of a last line left out because it is not whole. */
  readonly cut: number;
}

/** What `path` holds now; a file that does not exist holds nothing. */
export function snapshot(path: string): Snapshot {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { path, end: 0, cut: 0 };
    throw fsError(path, err, 'cannot read');
  }
  try {
    const tail = tailOf(fd);
    return tail.whole ? { path, end: tail.size, cut: 0 } : { path, end: tail.complete, cut: tail.bytes.length };
  } finally {
    closeSync(fd);
  }
}

/**
 * The non-blank lines of a snapshot, through the one line reader: a line too long to read or
 * not UTF-8 stops the merge with its file, line and byte (merge copies lines as they are, so
 * a lenient decoding would put U+FFFD into the merged run unseen).
 */
export async function* snapshotLines(snap: Snapshot): AsyncGenerator<Line> {
  if (snap.end === 0) return;
  const max = maxLineBytes();
  const stream = createReadStream(snap.path, { highWaterMark: 1 << 20, end: snap.end - 1 });
  for await (const batch of readLineBatches(stream, { maxLineBytes: max })) {
    for (const l of batch) {
      const problem = lineProblem(l, max);
      if (problem !== undefined) throw inputError(snap.path, l.line, undefined, problem);
      yield l;
    }
  }
}
