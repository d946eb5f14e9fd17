/**
 * CSV and TSV rows through csv-parse, with line numbers that CRLF files do not throw off and
 * each field checked for invalid UTF-8 on its own. The first record is the header.
 */
import { Readable, pipeline } from 'node:stream';
import { parse as parseCsv, type InfoRecord, type Options as CsvOptions } from 'csv-parse';
import { TrajforgeError, inputError } from '../../errors.js';
import { countBreaks, firstNonSpace } from './bytes.js';
import { bad, cap, utf8, type RawRow } from './rows.js';

/**
 * Line numbers for CSV. csv-parse's own `info.lines` counts CR and LF separately, so a CRLF
 * file reports line 2n for line n. This watches the bytes on their way into the parser and
 * remembers where CR and LF sit, but only between the last record handed out and what the
 * parser has read ahead, so memory stays bounded.
 */
class CsvLines {
  private offsets: number[] = [];
  private breaks: boolean[] = [];
  private head = 0;
  private seen = 0;
  private pendingCr = -1;
  private passedBreaks = 0;
  private lastBreak = -1;

  async *watch(src: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    for await (const chunk of src) {
      for (let i = 0; i < chunk.length; i++) {
        const c = chunk[i];
        if (this.pendingCr >= 0) {
          this.push(this.pendingCr, c !== 0x0a);
          this.pendingCr = -1;
        }
        if (c === 0x0a) this.push(this.seen + i, true);
        else if (c === 0x0d) this.pendingCr = this.seen + i;
      }
      this.seen += chunk.length;
      yield chunk;
    }
    if (this.pendingCr >= 0) this.push(this.pendingCr, true);
  }

  /**
   * The line a record starts on, from `info.bytes` (where the parser stood when it closed
   * the record: on or just past its delimiter) and the line breaks inside its fields.
   */
  recordStart(bytes: number, innerBreaks: number): number {
    this.advance((offset) => offset < bytes);
    const endLine = 1 + this.passedBreaks - (this.lastBreak === bytes - 1 ? 1 : 0);
    return endLine - innerBreaks;
  }

  /**
   * The line of the record that failed to parse: the first line after `bytes` (the end of the
   * last record the parser completed) that is not empty. csv-parse's own error line is off.
   */
  failedRecordStart(bytes: number): number {
    this.advance((offset) => offset < bytes);
    // Then past the delimiter and any empty lines in front of the failing record.
    let next = bytes;
    this.advance((offset) => {
      if (offset !== next) return false;
      next++;
      return true;
    });
    return 1 + this.passedBreaks;
  }

  private push(offset: number, isBreak: boolean): void {
    this.offsets.push(offset);
    this.breaks.push(isBreak);
  }

  private advance(more: (offset: number) => boolean): void {
    while (this.head < this.offsets.length && more(this.offsets[this.head]!)) {
      if (this.breaks[this.head]) {
        this.passedBreaks++;
        this.lastBreak = this.offsets[this.head]!;
      }
      this.head++;
    }
    if (this.head > 4096 && this.head * 2 > this.offsets.length) {
      this.offsets.splice(0, this.head);
      this.breaks.splice(0, this.head);
      this.head = 0;
    }
  }
}

export async function* csvRows(
  src: AsyncIterable<Buffer>,
  file: string,
  delimiter: string,
  maxRecord: number,
): AsyncGenerator<Iterable<RawRow>> {
  // Fields come back as bytes so each can be checked for invalid UTF-8 on its own.
  const parser = parseCsv({
    encoding: null,
    delimiter,
    relax_column_count: true,
    skip_empty_lines: true,
    max_record_size: maxRecord,
    // Returning more than the record is allowed at runtime; the typings only know string[].
    on_record: ((record: Buffer[], context: InfoRecord) => {
      parsedUpTo = context.bytes;
      return { record, bytes: context.bytes };
    }) as unknown as CsvOptions['on_record'],
  });
  let parsedUpTo = 0;
  const lines = new CsvLines();
  const input = Readable.from(lines.watch(src));
  pipeline(input, parser, () => {});
  let header: string[] | undefined;
  try {
    for await (const item of parser) {
      const { record, bytes } = item as { record: Buffer[]; bytes: number };
      // A quoted field can span lines; the user wants to be sent to where the record starts.
      let inner = 0;
      for (const f of record) inner += countBreaks(f);
      const line = lines.recordStart(bytes, inner);
      if (header === undefined) {
        header = [];
        for (const f of record) {
          let name: string;
          try {
            name = utf8.decode(f).trim();
          } catch {
            throw inputError(file, line, undefined, 'invalid UTF-8 in the header row');
          }
          if (header.includes(name)) throw inputError(file, line, name, 'column appears twice in the header row');
          header.push(name);
        }
        continue;
      }
      // Spreadsheets pad the end of a sheet with rows of empty cells (",,,").
      if (record.every((f) => firstNonSpace(f, 0) === -1)) continue;
      if (record.length !== header.length) {
        yield [{ line, ...bad(undefined, `has ${record.length} fields, the header has ${header.length}`) }];
        continue;
      }
      const entries: [string, string][] = [];
      let badField: string | undefined;
      for (let i = 0; i < record.length; i++) {
        try {
          entries.push([header[i]!, utf8.decode(record[i]!)]);
        } catch {
          badField = header[i]!;
          break;
        }
      }
      yield [badField === undefined ? { line, value: Object.fromEntries(entries) } : { line, ...bad(badField, 'invalid UTF-8') }];
    }
  } catch (err) {
    if (err instanceof TrajforgeError) throw err;
    const e = err as { code?: unknown; message?: unknown };
    if (typeof e.code === 'string' && /^(CSV_|INVALID_)/.test(e.code)) {
      // Fatal even with on_bad_row: skip — after a quoting error csv-parse does not find its
      // way back to the next record and silently swallows the rest of the file.
      const line = lines.failedRecordStart(parsedUpTo);
      // csv-parse's message names its own line count, which CRLF line ends throw off, and
      // shows a field as a JSON dump of its bytes (fields are read as bytes): show the text.
      const message = String(e.message)
        .replace(/,? (at|on) line \d+/, '')
        .replace(/\{"type":"Buffer","data":\[([\d,]*)\]\}/g, (_m, bytes: string) =>
          JSON.stringify(cap(Buffer.from(bytes === '' ? [] : bytes.split(',').map(Number)).toString('utf8'))),
        );
      throw inputError(file, line, undefined, `CSV: ${cap(message)}`);
    }
    throw err;
  } finally {
    parser.destroy();
    input.destroy();
  }
}
