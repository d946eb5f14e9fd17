/**
 * What queue mode records of an accepted sample, and how a record's line is fingerprinted: the
 * queue writes it (generate/queue.ts) and `merge --queue` keeps exactly the line it names.
 */
import { createHash } from 'node:crypto';

/** What Redis keeps of an accepted sample: which worker's record, and which line of it. */
export interface AcceptedMark {
  /** The worker whose run directory holds the record. */
  readonly w: string;
  /** sha256 of the root record's line as written (without its newline). */
  readonly sha: string;
  readonly attempt: number;
  readonly status: 'ok' | 'failed';
  readonly reason?: string | undefined;
}

/** sha256 of a record's line, as the store writes it (JSON, no newline). */
export function lineSha(line: string): string {
  return createHash('sha256').update(line, 'utf8').digest('hex');
}
