/**
 * The writing end every dataset command shares (filter, export, report, dedup, decontaminate):
 * its outputs are checked before anything is read (core/output-paths.ts: not a directory, not
 * the same place twice, never a file the command reads), opened, written by the command's own
 * work, and committed together. Or all dropped: on an error, on Ctrl-C or SIGTERM (exit 130),
 * and when the reader of stdout or of a FIFO goes away (`| head`: a quiet end, exit 0, and no
 * file half-written).
 */
import { abortAllWriters, isOutputClosed, JsonlWriter } from '../core/jsonl.js';
import { checkOutputs } from '../core/output-paths.js';

/**
 * Until `off()`: Ctrl-C or SIGTERM aborts every output being written (each is a temporary file
 * until its commit, so nothing half-written is left at the output) and exits 130.
 */
export function abortWritersOnInterrupt(): { off(): void } {
  const onSignal = (): void => {
    abortAllWriters();
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return {
    off() {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

/** A command's outputs by flag (`out`, `rejects`, …); an output not asked for is absent. */
export type Writers<K extends string> = Partial<Record<K, JsonlWriter>>;

export class Outputs<K extends string> {
  readonly #paths: readonly (readonly [K, string])[];

  private constructor(paths: readonly (readonly [K, string])[]) {
    this.#paths = paths;
  }

  /**
   * The outputs of `command`, by flag, checked now, before anything is read. `inputs`: every
   * path it will read (inputs, run directories, eval sets, a tokenizer file); undefined ones are
   * left out.
   */
  static check<K extends string>(command: string, paths: Readonly<Record<K, string | undefined>>, inputs: readonly (string | undefined)[]): Outputs<K> {
    const given = (Object.entries(paths) as [K, string | undefined][]).filter((e): e is [K, string] => e[1] !== undefined);
    checkOutputs(command, given, inputs.filter((i): i is string => i !== undefined));
    return new Outputs(given);
  }

  /**
   * The same outputs with `flag` written to `path` instead: a file the command made beside the
   * checked one (the JSONL a Parquet file is made from).
   */
  through(flag: K, path: string): Outputs<K> {
    return new Outputs(this.#paths.map(([f, p]) => [f, f === flag ? path : p] as const));
  }

  /**
   * Opens the outputs (in the order they were given), runs `work` with them, commits them all
   * and hands its result to `done` (which prints the counts). Returns the exit code: 0, also when
   * a reader went away.
   */
  async write<C>(work: (writers: Writers<K>) => Promise<C>, done: (result: C) => void): Promise<number> {
    const opened: JsonlWriter[] = [];
    const interrupt = abortWritersOnInterrupt();
    try {
      const writers: Writers<K> = {};
      for (const [flag, path] of this.#paths) {
        const w = new JsonlWriter(path);
        opened.push(w);
        writers[flag] = w;
      }
      const result = await work(writers);
      for (const w of opened) await w.commit();
      done(result);
      return 0;
    } catch (err) {
      // A reader that went away read what it wanted; a file written alongside would be partial, so it is dropped too.
      for (const w of opened) w.abort();
      if (isOutputClosed(err)) return 0;
      throw err;
    } finally {
      interrupt.off();
    }
  }
}
