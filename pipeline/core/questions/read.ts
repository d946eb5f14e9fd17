/**
 * Reading a question file: JSONL, a JSON array or CSV/TSV (sniffed from the extension and the
 * first byte, gzip or not, a path or stdin), each row mapped to a Question. Bad rows stop the
 * read or are collected, as `on_bad_row` says. Used by the sampler, and by every command that
 * reads a question bank (decontaminate's eval sets; dedup and decontaminate cleaning a bank,
 * which write each row back as it was: `readQuestionRows`).
 */
import { extname } from 'node:path';
import type { Question, QuestionsConfig } from '../../../schemas/index.js';
import { inputError } from '../../errors.js';
import { fileBytes, firstNonSpace, gunzip, peek, streamBytes, countBreaks } from './bytes.js';
import { csvRows } from './csv.js';
import { jsonArrayRows } from './json-array.js';
import { jsonlRows } from './jsonl.js';
import { mapRow } from './map-row.js';
import type { RawRow } from './rows.js';

export interface ReadQuestionsOptions {
  /** '-' reads stdin. */
  path: string;
  config: QuestionsConfig;
  /** Where '-' reads from; default process.stdin. */
  stdin?: NodeJS.ReadableStream;
  /** Longest JSONL line / CSV record accepted, in bytes; longer ones are bad rows. Default 64 MiB. */
  maxLineBytes?: number;
}

export interface BadRow {
  line: number;
  /** `field: message`, or just the message when the whole row is wrong. */
  message: string;
  field?: string;
}

/** What reading saw: every record (bad ones included) and the bad rows it skipped. */
export interface ReadReport {
  /** Records read: non-blank JSONL lines, CSV records, array elements — bad and duplicate ones included. */
  rows: number;
  badRows: BadRow[];
}

const DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024;
/** How far into the input the format sniffer looks for the first non-space byte. */
const SNIFF_BYTES = 64 * 1024;

type Format = 'jsonl' | 'json' | 'csv';

export function displayName(path: string): string {
  return path === '-' ? '<stdin>' : path;
}

/**
 * The file's valid questions, in batches (one per chunk read) mapped only when pulled: one
 * `await` per row costs more than parsing a short JSON line. Throws when the file holds no row,
 * or no valid one, once it has been read to the end.
 */
export async function* readQuestions(opts: ReadQuestionsOptions, report: ReadReport): AsyncGenerator<Iterable<Question>> {
  for await (const batch of readQuestionRows(opts, report)) yield questionsOf(batch);
}

function* questionsOf(batch: Iterable<QuestionRow>): Generator<Question> {
  for (const row of batch) yield row.question;
}

/** A valid row of a question file: where it is, the value read (a CSV record: an object of its header's fields), and its Question. */
export interface QuestionRow {
  readonly line: number;
  readonly value: unknown;
  readonly question: Question;
}

/** `readQuestions`, each Question with the row it was read from. */
export async function* readQuestionRows(opts: ReadQuestionsOptions, report: ReadReport): AsyncGenerator<Iterable<QuestionRow>> {
  const file = displayName(opts.path);
  const seen = { valid: 0 };
  for await (const batch of readRows(opts, file)) yield mapBatch(batch, opts.config, file, report, seen);
  if (report.rows === 0) throw inputError(file, undefined, undefined, 'no questions found');
  if (seen.valid === 0) {
    const first = report.badRows[0];
    throw inputError(
      file,
      undefined,
      undefined,
      `no valid questions: all ${report.rows} rows are bad` + (first ? ` (first, line ${first.line}: ${first.message})` : ''),
    );
  }
}

function* mapBatch(batch: Iterable<RawRow>, cfg: QuestionsConfig, file: string, report: ReadReport, seen: { valid: number }): Generator<QuestionRow> {
  for (const row of batch) {
    report.rows++;
    const mapped = 'bad' in row ? row : mapRow(row.value, cfg.fields);
    if ('bad' in mapped) {
      const { field, message } = mapped.bad;
      if (cfg.on_bad_row === 'error') throw inputError(file, row.line, field, message);
      report.badRows.push(field === undefined ? { line: row.line, message } : { line: row.line, field, message: `${field}: ${message}` });
      continue;
    }
    seen.valid++;
    yield { line: row.line, value: 'bad' in row ? undefined : row.value, question: mapped.question };
  }
}

/**
 * Rows come in batches (one per chunk read) whose rows are decoded only when pulled: one
 * `await` per row costs more than parsing a short JSON line, and a stop after `limit` rows
 * still parses no further than it must.
 */
async function* readRows(opts: ReadQuestionsOptions, file: string): AsyncGenerator<Iterable<RawRow>> {
  const maxLine = opts.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
  const source = opts.path === '-' ? streamBytes(opts.stdin ?? process.stdin) : fileBytes(opts.path, file);
  try {
    let bytes: AsyncIterable<Buffer> = source;
    const magic = await peek(source, (h) => h.length >= 2);
    bytes = magic.rest;
    if (magic.head[0] === 0x1f && magic.head[1] === 0x8b) bytes = gunzip(bytes, file);

    const it = bytes[Symbol.asyncIterator]();
    const sniff = await peek(it, (h) => h.length >= SNIFF_BYTES || firstNonSpace(h, 0) !== -1);
    let head = sniff.head;
    if ((head[0] === 0xff && head[1] === 0xfe) || (head[0] === 0xfe && head[1] === 0xff)) {
      throw inputError(file, undefined, undefined, 'the file is UTF-16; convert it to UTF-8');
    }
    let skip = 0;
    if (head[0] === 0xef && head[1] === 0xbb && head[2] === 0xbf) skip = 3;
    const first = firstNonSpace(head, skip);
    const { format, delimiter } = resolveFormat(opts.config.format, opts.path, first === -1 ? undefined : head[first]);
    // CSV is the guess for a file with no telling extension; a binary file would otherwise come
    // back as a CSV quoting error about bytes. Text never holds a NUL byte.
    const guessedCsv = format === 'csv' && opts.config.format === 'auto' && !/\.(csv|tsv)$/i.test(opts.path.replace(/\.gz$/i, ''));
    const nul = guessedCsv ? head.indexOf(0) : -1;
    if (nul !== -1) {
      const line = 1 + countBreaks(head.subarray(0, nul));
      throw inputError(file, line, undefined, `binary data (a NUL byte at offset ${nul}), not questions: expected JSONL, a JSON array or CSV text`);
    }
    head = head.subarray(skip);
    async function* body(): AsyncGenerator<Buffer> {
      let done = sniff.ended;
      try {
        if (head.length > 0) yield head;
        while (!done) {
          const r = await it.next();
          if (r.done) done = true;
          else yield r.value;
        }
      } finally {
        if (!done) await it.return?.(undefined);
      }
    }

    if (format === 'jsonl') yield* jsonlRows(body(), maxLine);
    else if (format === 'csv') yield* csvRows(body(), file, delimiter, maxLine);
    else yield* jsonArrayRows(body(), file);
  } finally {
    // Not awaited: a pipe on stdin may not deliver its next chunk for a long time, and the
    // consumer that stopped early should not wait for it.
    source.return(undefined).catch(() => {});
  }
}

function resolveFormat(
  configured: QuestionsConfig['format'],
  path: string,
  firstByte: number | undefined,
): { format: Format; delimiter: string } {
  const ext = extname(path.replace(/\.gz$/i, '')).toLowerCase();
  const delimiter = ext === '.tsv' ? '\t' : ',';
  if (configured !== 'auto') return { format: configured, delimiter };
  switch (ext) {
    case '.jsonl':
    case '.ndjson':
    case '.jsonlines':
      return { format: 'jsonl', delimiter };
    case '.json':
      // Hugging Face `datasets` writes JSON Lines under a .json name by default.
      return { format: firstByte === 0x7b ? 'jsonl' : 'json', delimiter };
    case '.csv':
    case '.tsv':
      return { format: 'csv', delimiter };
  }
  if (firstByte === 0x5b) return { format: 'json', delimiter };
  if (firstByte === 0x7b) return { format: 'jsonl', delimiter };
  return { format: 'csv', delimiter };
}
