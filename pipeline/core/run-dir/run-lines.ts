/**
 * The lines of a run's JSONL files, as everything that reads a run directory sees them: a
 * last line without its newline (a crash in the middle of a write, or a hand) and what makes
 * a line a record. The store repairs a tail when it opens a run; merge, which only reads,
 * takes the same view of it without changing the file.
 */
import { closeSync, existsSync, fstatSync, fsyncSync, ftruncateSync, openSync, readSync, renameSync, writeSync } from 'node:fs';
import { basename } from 'node:path';
import type { TailRepair } from '../../../schemas/index.js';
import { TrajforgeError } from '../../errors.js';
import { appendWhole } from '../jsonl.js';
import { MAX_LINE_BYTES } from '../lines.js';

/** The bytes of `fd` from `start` to `end`. */
function readRange(fd: number, start: number, end: number): Buffer {
  const buf = Buffer.alloc(end - start);
  for (let at = 0; at < buf.length; ) {
    const n = readSync(fd, buf, at, buf.length - at, start + at);
    if (n === 0) break;
    at += n;
  }
  return buf;
}

export interface Tail {
  /** The file's size when it was looked at. */
  readonly size: number;
  /** Bytes up to and including the last newline: the lines that are certainly whole. */
  readonly complete: number;
  /** What follows the last newline (empty when the file ends with one). */
  readonly bytes: Buffer;
  /** Whether those bytes are a whole line: JSON that parses (the record is checked later), or blanks. */
  readonly whole: boolean;
}

/** Where the last newline of the file open at `fd` is, and what follows it. */
export function tailOf(fd: number): Tail {
  const size = fstatSync(fd).size;
  const chunk = Buffer.alloc(Math.min(size, 1 << 16));
  let complete = 0;
  // Walk back to the last newline; a last line longer than one chunk takes several reads.
  for (let end = size; end > 0; ) {
    const start = Math.max(0, end - chunk.length);
    const n = readSync(fd, chunk, 0, end - start, start);
    const nl = chunk.subarray(0, n).lastIndexOf(0x0a);
    if (nl >= 0) {
      complete = start + nl + 1;
      break;
    }
    end = start;
  }
  const bytes = readRange(fd, complete, size);
  return { size, complete, bytes, whole: isWholeLine(bytes) };
}

function isWholeLine(tail: Buffer): boolean {
  // No string holds it, so no reader could take it as a record: a write cut short, as far as anyone can tell.
  if (tail.length > MAX_LINE_BYTES) return false;
  const text = tail.toString('utf8');
  if (text.trim() === '') return true;
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** A name beside `file` that nothing holds yet, for the bytes moved off its end. */
function sidecarName(file: string, kind = 'damaged'): string {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  for (let i = 0; ; i++) {
    const name = `${file}.${kind}-${stamp}${i ? `-${i}` : ''}`;
    if (!existsSync(name)) return name;
  }
}

/** Copies `bytes` to a new file `saved` and syncs it: a crash after this leaves the bytes twice, not nowhere. */
function saveAside(saved: string, bytes: Buffer): void {
  const out = openSync(saved, 'wx');
  try {
    appendWhole(out, bytes);
    fsyncSync(out);
  } finally {
    closeSync(out);
  }
}

/**
 * Makes `file` end at a newline, losing nothing. A last line without its newline is either
 * a whole record (the newline is added) or the part of one that a crash cut (those bytes are
 * moved to `FILE.damaged-TIME` beside it, and the sample is redone). A file that is nothing
 * but such a part is renamed aside whole, never truncated to zero. Undefined when the file
 * already ends at a newline.
 */
export function repairTail(file: string): TailRepair | undefined {
  if (!existsSync(file)) return undefined;
  const fd = openSync(file, 'r+');
  let aside: string | undefined;
  try {
    const tail = tailOf(fd);
    if (tail.bytes.length === 0) return undefined;
    if (tail.whole) {
      writeSync(fd, '\n', tail.size);
      return { file, action: 'newline_added', bytes: tail.bytes.length };
    }
    const saved = sidecarName(file);
    if (tail.complete === 0) {
      aside = saved;
    } else {
      // Saved (and synced) before the cut: a crash in between leaves the bytes twice, not nowhere.
      saveAside(saved, tail.bytes);
      ftruncateSync(fd, tail.complete);
    }
    return { file, action: 'moved_aside', bytes: tail.bytes.length, saved_to: saved };
  } finally {
    closeSync(fd);
    if (aside) renameSync(file, aside);
  }
}

/**
 * Moves the last lines of `file`, from byte `offset` on, to `FILE.orphaned-TIME` beside it:
 * the sub-agent sessions of a family whose root a crash kept from being written (the store
 * found them, store.ts `scanRun`). Checked first: `offset` starts a line, and the lines from
 * there are exactly `ids`; otherwise nothing is cut and the run is not opened.
 */
export function cutOrphans(file: string, offset: number, ids: readonly string[]): TailRepair {
  const fd = openSync(file, 'r+');
  try {
    const size = fstatSync(fd).size;
    const before = offset === 0 ? Buffer.from('\n') : readRange(fd, offset - 1, offset);
    const bytes = readRange(fd, offset, size);
    const found = bytes
      .toString('utf8')
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => {
        try {
          return (JSON.parse(l) as { id?: unknown }).id;
        } catch {
          return undefined;
        }
      });
    if (before[0] !== 0x0a || found.length !== ids.length || found.some((id, i) => id !== ids[i])) {
      throw new TrajforgeError('BAD_INPUT', `${file}: cannot find the ${ids.length} sub-agent lines without a family root at its end (byte ${offset}); the run directory was changed by hand?`, { file });
    }
    const saved = sidecarName(file, 'orphaned');
    saveAside(saved, bytes);
    ftruncateSync(fd, offset);
    return { file, action: 'orphans_moved_aside', bytes: bytes.length, saved_to: saved, records: ids.length };
  } finally {
    closeSync(fd);
  }
}

/** What `repairTail` or `cutOrphans` did, for the person who resumes the run. */
export function describeTailRepair(r: TailRepair): string {
  const name = basename(r.file);
  switch (r.action) {
    case 'newline_added':
      return `${name}: its last line was a whole record without a newline; the newline was added`;
    case 'moved_aside':
      return `${name}: ${r.bytes} bytes of a last line cut short (a crash in the middle of a write) were moved to ${basename(r.saved_to ?? '')}; that sample is redone`;
    case 'orphans_moved_aside':
      return `${name}: its last ${r.records} lines, sub-agent sessions of a family whose root was never written (a crash between them), were moved to ${basename(r.saved_to ?? '')}; that family is redone`;
  }
}

/** The fields of a run line that the store and merge read. */
export interface RunLine {
  readonly id: string;
  readonly attempt?: unknown;
  readonly reason?: unknown;
  readonly status?: unknown;
  readonly question_id?: unknown;
  readonly judgement?: unknown;
  /** Set on a sub-agent session (runs with agents). */
  readonly parent_id?: unknown;
  /** The root session's id (runs with agents). */
  readonly family_id?: unknown;
}

/** One line of trajectories.jsonl or failures.jsonl: an object with an id, or an error naming the file and line. */
export function parseRunLine(text: string, file: string, line: number): RunLine {
  let rec: unknown;
  try {
    rec = JSON.parse(text);
  } catch {
    throw new TrajforgeError('BAD_INPUT', `${file}:${line}: not valid JSON; the run directory was changed by hand?`, { file, line });
  }
  if (rec === null || typeof rec !== 'object' || Array.isArray(rec)) {
    throw new TrajforgeError('BAD_INPUT', `${file}:${line}: expected a record (a JSON object), got ${rec === null ? 'null' : Array.isArray(rec) ? 'an array' : typeof rec}`, { file, line });
  }
  if (typeof (rec as { id?: unknown }).id !== 'string') throw new TrajforgeError('BAD_INPUT', `${file}:${line}: id: missing`, { file, line, field: 'id' });
  return rec as RunLine;
}
