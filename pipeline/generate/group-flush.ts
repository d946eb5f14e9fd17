/**
 * Flushes a run's files to the disk for every caller waiting at once (a group commit). Queue
 * mode flushes before each accept (worker.ts), so that an accepted record survives the machine;
 * a worker's samples settle in waves, and one fdatasync per file can serve a whole wave where
 * each accept made its own, of both files, before. A caller's flush is one that starts after
 * its lines were written: callers that arrive while a flush is under way share the next one. A
 * file nothing was written to since its last flush is not flushed again.
 */
import type { FileHandle } from 'node:fs/promises';

export interface FlushedFile {
  /** The open file; undefined once the store has closed it. */
  readonly handle: FileHandle | undefined;
  /** Bytes written to it so far, as the writer counts them: each flush makes this many durable. */
  readonly written: number;
}

interface Flush {
  /** Each file's `written` when the flush started: what it makes durable. */
  readonly upTo: readonly number[];
  readonly done: Promise<void>;
}

export class GroupFlush {
  /** The files, as they are now (the writer's counts move on between calls). */
  readonly #files: () => readonly FlushedFile[];
  /** Bytes of each file known to be on the disk: 0 at first, so the first flush covers what the file held when opened. */
  readonly #durable: number[];
  #running: Flush | undefined;
  #datasyncs = 0;

  constructor(files: () => readonly FlushedFile[]) {
    this.#files = files;
    this.#durable = files().map(() => 0);
  }

  /** fdatasync calls made so far (one per file a flush found written to). */
  get datasyncs(): number {
    return this.#datasyncs;
  }

  /** Resolves once every byte written before the call is on the disk; rejects with the fdatasync's error. */
  async flush(): Promise<void> {
    const want = this.#files().map((f) => f.written);
    for (;;) {
      if (want.every((w, i) => w <= this.#durable[i]!)) return;
      const running = this.#running;
      if (running === undefined) this.#running = this.#start();
      else if (want.every((w, i) => w <= running.upTo[i]!)) return running.done;
      // Started before this caller's lines were written: it may not cover them, whatever it ends with.
      else await running.done.catch(() => undefined);
    }
  }

  #start(): Flush {
    const files = this.#files();
    const upTo = files.map((f) => f.written);
    const syncs = files.map((f, i) => {
      if (upTo[i]! <= this.#durable[i]! || f.handle === undefined) return undefined;
      this.#datasyncs++;
      return f.handle.datasync();
    });
    const flush: Flush = {
      upTo,
      done: Promise.all(syncs)
        .then(() => upTo.forEach((b, i) => (this.#durable[i] = Math.max(this.#durable[i]!, b))))
        .finally(() => {
          if (this.#running === flush) this.#running = undefined;
        }),
    };
    return flush;
  }
}
