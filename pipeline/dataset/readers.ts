/**
 * Readers: any trajectory dataset → a stream of Trajectory records, one per row.
 *
 * Row shapes, detected per file from its first non-empty row (or forced with `format`):
 * `trajforge` (our own records, trajectories.jsonl and failures.jsonl, passed through),
 * `drtulu` (DR Tulu generator rows, from-drtulu.ts) and `chat` (`{messages: [...]}` rows,
 * MiroVerse / MiroThinker style, from-chat.ts); row-shapes.ts tells them apart.
 *
 * An input is a JSONL file, `-` for stdin, or a run directory (its trajectories.jsonl then
 * failures.jsonl). Streams: one row in memory at a time, plus the set of ids of the
 * external rows read so far (ids must stay unique within a read, external-rows.ts).
 *
 * Lines come from the one line reader (core/lines.ts): a line too long to be a string, or not
 * UTF-8, is a bad row, and so is a row nested deeper than any walk can follow
 * (json-depth.ts). Rows get cheap structural checks only: `validate` and `stats` stream
 * gigabytes through here, zod would dominate the cost, and the validator checks what matters.
 */
import { createReadStream, existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { DialectName, Trajectory } from '../../schemas/index.js';
import { inputError, TrajforgeError } from '../errors.js';
import { statPath } from '../files.js';
import { lineProblem, maxLineBytes, readLineBatches } from '../core/lines.js';
import { ProgressLine, progressWanted } from '../core/progress-line.js';
import { MAX_RECORD_DEPTH, nestsDeeperThan } from '../json-depth.js';
import { printable } from '../printable.js';
import { FAILURES, TRAJECTORIES } from '../core/run-dir/names.js';
import { bad, BadRow, describe, detectRowFormat, fits, ROW_FORMATS, SHAPE, type Obj, type RowFormat } from './row-shapes.js';
import type { ReadContext } from './external-rows.js';
import { fromDrTulu } from './from-drtulu.js';
import { fromChat } from './from-chat.js';

export interface ReadOptions {
  readonly format?: RowFormat | 'auto' | undefined;
  /** `skip`: a bad row is counted in the report instead of stopping the read. */
  readonly onBadRow?: 'error' | 'skip' | undefined;
  readonly stdin?: NodeJS.ReadableStream | undefined;
  /**
   * Bytes of a file to read, by the path as `inputFiles` names it: the rest is not read. A run
   * that is still being written is read up to the end of its last whole line this way, the same
   * bytes in every pass (`report --serve`).
   */
  readonly until?: ReadonlyMap<string, number> | undefined;
  /** The longest line read, in bytes (core/lines.ts); default `maxLineBytes()`. A longer line is a bad row. */
  readonly maxLineBytes?: number | undefined;
  /** Levels of nesting a row may have (json-depth.ts); default `MAX_RECORD_DEPTH`. A deeper row is a bad row. */
  readonly maxDepth?: number | undefined;
  /**
   * Bytes read from a file at a time (default 1 MiB). A chunk's lines live until the last is
   * handed on, so a one-pass command that keeps nothing reads smaller ones: fewer survivors of
   * each young-generation GC, and the heap does not grow with the pass (decontaminate).
   */
  readonly chunkBytes?: number | undefined;
  /** The command's name: on a terminal, a progress line of the read (core/progress-line.ts). Default: none. */
  readonly progress?: string | undefined;
}

export interface DatasetRow {
  /** The file as named in the input (`-` for stdin; messages say `<stdin>`). */
  readonly file: string;
  /** 1-based line in `file`. */
  readonly line: number;
  readonly format: RowFormat;
  readonly trajectory: Trajectory;
  /** The line as read, for a trajforge row: written back as is, it needs no re-serialising. */
  readonly raw?: string | undefined;
}

export interface ReadReport {
  /** Non-empty lines read, bad ones included. */
  rows: number;
  bad: { file: string; line: number; message: string }[];
  /** Good rows per row shape. */
  formats: Partial<Record<RowFormat, number>>;
  /** Good rows per dialect. */
  dialects: Partial<Record<DialectName, number>>;
  /** External rows whose source id was already taken and got a `#n` suffix. */
  renamed: number;
  /** Bytes read so far (for the progress line). */
  bytes: number;
}

/** Bytes the files hold (up to `until`); undefined when one is stdin or cannot be looked at. */
function sizeOf(files: readonly string[], until: ReadonlyMap<string, number> | undefined): number | undefined {
  let total = 0;
  for (const f of files) {
    const size = f === '-' ? undefined : (until?.get(f) ?? statPath(f)?.size);
    if (size === undefined) return undefined;
    total += size;
  }
  return total;
}

/** The files an input names: a run directory holds two. */
export function inputFiles(input: string): string[] {
  if (input === '-') return ['-'];
  const st = statPath(input);
  if (!st) throw new TrajforgeError('BAD_INPUT', `${input}: no such file or run directory`, { file: input });
  if (st.isDirectory()) {
    const files = [TRAJECTORIES, FAILURES].map((f) => join(input, f)).filter((f) => existsSync(f));
    if (files.length === 0) throw new TrajforgeError('BAD_INPUT', `${input}: a directory with neither ${TRAJECTORIES} nor ${FAILURES}`, { file: input });
    return files;
  }
  return [input];
}

/** The bytes `input` holds when its files are regular files (not stdin, not a pipe); undefined otherwise, or when it cannot be read (the reader says why). */
export function inputBytes(input: string): number | undefined {
  try {
    let total = 0;
    for (const f of inputFiles(input)) {
      const st = f === '-' ? undefined : statSync(f);
      if (st === undefined || !st.isFile()) return undefined;
      total += st.size;
    }
    return total;
  } catch {
    return undefined;
  }
}

function convert(v: Obj, format: RowFormat, ctx: ReadContext): Trajectory {
  switch (format) {
    case 'trajforge':
      // Our own records pass through unchecked beyond `fits`: the validator reads them.
      return v as unknown as Trajectory;
    case 'drtulu':
      return fromDrTulu(v, ctx);
    case 'chat':
      return fromChat(v, ctx);
  }
}

// ---------------------------------------------------------------------------------------
// The reader

function checkFormat(format: unknown): RowFormat | 'auto' {
  if (format === undefined || format === 'auto') return 'auto';
  if (typeof format === 'string' && (ROW_FORMATS as readonly string[]).includes(format)) return format as RowFormat;
  throw new TrajforgeError('BAD_USAGE', `--input-format: expected auto, ${ROW_FORMATS.join(', ')}; got ${JSON.stringify(format)}`, { field: 'format' });
}

async function* nothing(): AsyncGenerator<Buffer> {}

export function readDataset(input: string, opts: ReadOptions = {}): { rows: AsyncIterable<DatasetRow>; report: ReadReport } {
  const report: ReadReport = { rows: 0, bad: [], formats: {}, dialects: {}, renamed: 0, bytes: 0 };
  const forced = checkFormat(opts.format);
  const files = inputFiles(input);
  const ctx: ReadContext = { ids: new Map(), renamed: 0 };
  const maxLine = opts.maxLineBytes ?? maxLineBytes();
  const maxDepth = opts.maxDepth ?? MAX_RECORD_DEPTH;
  async function* rows(): AsyncGenerator<DatasetRow> {
    const progress = opts.progress !== undefined && progressWanted() ? new ProgressLine(opts.progress, sizeOf(files, opts.until), () => report).start() : undefined;
    try {
      yield* fileRows();
    } finally {
      progress?.stop();
    }
  }
  async function* fileRows(): AsyncGenerator<DatasetRow> {
    let before = 0;
    for (const file of files) {
      const label = file === '-' ? '<stdin>' : file;
      const until = opts.until?.get(file);
      const stream: AsyncIterable<Buffer | string> =
        file === '-'
          ? ((opts.stdin ?? process.stdin) as AsyncIterable<Buffer | string>)
          : until === 0
            ? nothing()
            : createReadStream(file, { highWaterMark: opts.chunkBytes ?? 1 << 20, ...(until === undefined ? {} : { end: until - 1 }) });
      let format: RowFormat | undefined = forced === 'auto' ? undefined : forced;
      for await (const batch of readLineBatches(stream, { maxLineBytes: maxLine })) for (const l of batch) {
        const { line, text } = l;
        report.rows++;
        // Characters for bytes: close enough for a rate and an ETA, and no second pass over the line.
        report.bytes = before + l.offset + text.length + 1;
        let row: DatasetRow;
        try {
          // A line too long to be a string; or not UTF-8, which `generate` refuses in a questions file
          // too: a lenient decoding would carry U+FFFD into the data unseen.
          const problem = lineProblem(l, maxLine);
          if (problem !== undefined) bad(undefined, problem);
          let value: unknown;
          try {
            value = JSON.parse(text);
          } catch (err) {
            bad(undefined, `not valid JSON (${(err as Error).message})`);
          }
          if (nestsDeeperThan(value, maxDepth)) bad(undefined, `nested deeper than ${maxDepth} levels: not a record any command can walk`);
          if (format === undefined) {
            format =
              detectRowFormat(value) ??
              bad(undefined, `unknown row shape: expected ${SHAPE.trajforge} (with schema_version and tool_calls), ${SHAPE.drtulu}, or ${SHAPE.chat}; ${describe(value)}`);
          } else if (!fits(value, format)) {
            bad(undefined, `expected a ${format} row (${SHAPE[format]}); ${describe(value)}`);
          }
          row = { file, line, format, trajectory: convert(value as Obj, format, ctx), ...(format === 'trajforge' ? { raw: text } : {}) };
        } catch (err) {
          if (!(err instanceof BadRow)) throw err;
          // The message quotes the line (JSON.parse's excerpt, a key): it is printed, so no control character of the file goes with it.
          const e = inputError(printable(label, { oneLine: true }), line, err.field === undefined ? undefined : printable(err.field, { oneLine: true }), printable(err.message, { oneLine: true }));
          if (opts.onBadRow !== 'skip') throw e;
          report.bad.push({ file, line, message: e.message });
          continue;
        }
        report.formats[row.format] = (report.formats[row.format] ?? 0) + 1;
        report.dialects[row.trajectory.dialect] = (report.dialects[row.trajectory.dialect] ?? 0) + 1;
        report.renamed = ctx.renamed;
        yield row;
      }
      before = report.bytes;
    }
  }
  return { rows: rows(), report };
}
