/**
 * The rows `dedup` and `decontaminate` clean: a trajectory dataset (readers.ts: our records, DR
 * Tulu rows, chat rows, run directories), or a question bank in any form the sampler reads
 * (core/questions/: JSONL, a JSON array, CSV/TSV, gzip), so that a bank, synthesized or bought,
 * is cleaned before a run spends money on it.
 *
 * A file is a bank when it is gzip, CSV/TSV (by its extension), a JSON array, or JSON Lines whose
 * first row is none of the dataset shapes and has a question field (`question`, `query`, …:
 * the sampler's aliases); `--input-format bank` says so outright (and is how stdin is read as one).
 * A bank row goes on as `{id, question}` to compare and scan, and is written back as the object
 * it was read as, one JSON line: a bank of the same row shape, which `generate` reads as it did
 * the input (a CSV record becomes the object of its header's fields).
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { extname } from 'node:path';
import { QuestionsConfig, type Trajectory } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import { statPath } from '../files.js';
import { readQuestionRows, type ReadReport as BankReport } from '../core/questions/read.js';
import { readDataset, type ReadOptions } from './readers.js';
import { detectRowFormat, isObj } from './row-shapes.js';

/** `--input-format` of dedup and decontaminate: a dataset row shape, `bank`, or auto. */
export type CurateFormat = NonNullable<ReadOptions['format']> | 'bank';

export interface CurateRow {
  readonly file: string;
  readonly line: number;
  /** What is compared and scanned: a bank row's `{id, question}`. */
  readonly trajectory: Partial<Trajectory>;
  /** The line to write back as it is, when there is one. */
  readonly raw?: string | undefined;
  /** A bank row: written back as read, never given fields. */
  readonly bank?: boolean | undefined;
}

/** How far into a file the sniffer looks for its first row; a longer first line is no bank's. */
const SNIFF_BYTES = 1 << 20;
const QUESTION_FIELDS = QuestionsConfig.parse({ path: '-' }).fields.question;

/** Whether `input` is a question bank (see the file comment). */
export function isQuestionBank(input: string, format: CurateFormat | undefined): boolean {
  if (format === 'bank') return true;
  if ((format !== undefined && format !== 'auto') || input === '-') return false;
  const st = statPath(input);
  if (!st?.isFile()) return false;
  if (/\.(csv|tsv)(\.gz)?$/i.test(input)) return true;
  const head = Buffer.alloc(Math.min(SNIFF_BYTES, st.size));
  const fd = openSync(input, 'r');
  try {
    readSync(fd, head, 0, head.length, 0);
  } finally {
    closeSync(fd);
  }
  if (head[0] === 0x1f && head[1] === 0x8b) return true;
  const text = head.toString('utf8').replace(/^\uFEFF/, '').trimStart();
  if (text.startsWith('[')) return true;
  const end = text.indexOf('\n');
  if (end < 0 && head.length < st.size) return false;
  let first: unknown;
  try {
    first = JSON.parse(end < 0 ? text : text.slice(0, end));
  } catch {
    // Not ours to judge: the dataset reader names the line.
    return false;
  }
  return detectRowFormat(first) === undefined && isObj(first) && QUESTION_FIELDS.some((f) => typeof first[f] === 'string');
}

/**
 * Whether `inputs` are banks (all of them or none: what is written is one shape), and the row
 * format left for the dataset reader. A bank is written as JSON Lines, so an output named as
 * another format (`rows` maps flag → path), which `generate` would read as that format, is refused.
 */
export function curateInputs(command: string, inputs: readonly string[], format: string | undefined, rowOutputs: Record<string, string | undefined>): { bank: boolean; format: string | undefined } {
  const banks = inputs.filter((i) => isQuestionBank(i, format as CurateFormat | undefined));
  if (banks.length > 0 && banks.length < inputs.length) {
    const other = inputs.find((i) => !banks.includes(i))!;
    throw new TrajforgeError('BAD_USAGE', `${command}: ${banks[0]} is a question bank and ${other} is not; clean banks and trajectories in separate runs (each writes one shape)`);
  }
  const bank = banks.length > 0;
  for (const [flag, path] of Object.entries(rowOutputs)) {
    if (bank && path !== undefined && ['.csv', '.tsv', '.gz'].includes(extname(path).toLowerCase())) {
      throw new TrajforgeError('BAD_USAGE', `${command}: ${flag} ${path}: a cleaned bank is written as JSON Lines (one row object a line); name it .jsonl`);
    }
  }
  return { bank, format: format === 'bank' ? undefined : format };
}

/** The rows of `input`, a bank or a dataset; bad rows skipped under `--on-bad-row skip` are added to `bad.count`. */
export async function* curateRows(input: string, bank: boolean, read: ReadOptions, bad: { count: number }): AsyncGenerator<CurateRow> {
  if (!bank) {
    const { rows, report } = readDataset(input, read);
    yield* rows;
    bad.count += report.bad.length;
    return;
  }
  const report: BankReport = { rows: 0, badRows: [] };
  const config = QuestionsConfig.parse({ path: input, on_bad_row: read.onBadRow ?? 'error' });
  const options = { path: input, config, ...(read.stdin ? { stdin: read.stdin } : {}), ...(read.maxLineBytes ? { maxLineBytes: read.maxLineBytes } : {}) };
  for await (const batch of readQuestionRows(options, report)) {
    for (const { line, value, question } of batch) {
      yield { file: input, line, trajectory: { id: question.id, question: question.question }, raw: JSON.stringify(value), bank: true };
    }
  }
  bad.count += report.badRows.length;
}
