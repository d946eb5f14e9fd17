/**
 * `trajforge decontaminate`: rows whose question, tool outputs or final answer overlap an eval
 * set, found by word n-grams, flagged with the eval item they overlap, optionally dropped. A
 * question bank (curate-rows.ts) is scanned by its questions and written back as read.
 *
 * The rule, as the GPT-3 report and later ones apply it: both sides are normalised the same way
 * (pipeline/dataset/shingles.ts: NFKC, lowercase, punctuation to spaces) and cut into words; a
 * row is contaminated by an eval item when a field of the row holds at least `min_ngrams` of
 * the item's distinct n-grams (n = 13 words by default). An item shorter than n words (but of at
 * least `min_words`) is one n-gram of its own length: the whole item must appear, in order. An
 * item under `min_words` words is not checked — "what is the capital of france" occurs in text
 * that never saw the benchmark — and the summary counts and names such items.
 *
 * One addition (`content_check`, on by default): the item's n-grams found in the field must
 * cover every content word of the item (every word outside dedup's list of function words).
 * Question banks are templated, and a template's fixed text can be 13 words long ("What is the
 * earliest version of Safari on iOS that supports the CSS property …"): two of its questions
 * share a 13-gram while neither holds the other. A leaked item brings its slot values, in
 * place; a sibling does not, nor does one whose slot holds another word inside it
 * (`EXT_color_buffer_float` / `EXT_color_buffer_half_float`).
 *
 * Eval files: JSONL, a JSON array or CSV with a header (read by the sampler, so the question and
 * id fields have the same aliases and can be named), or plain text, one item per line (`.txt`,
 * or `eval_format: lines`). The n-grams are kept as 64-bit hashes in an open-addressing table
 * (12 bytes a slot, at most half full) with 12 bytes per (item, position): a 10,000-item eval set
 * of 30-word questions is ~200,000 n-grams, under 10 MB. Rows stream through in one pass.
 *
 * Runs with agents: a family is one unit. A sub-agent's search results reach its caller only
 * through its report, so an eval item can leak into a child and not its root; and dropping one
 * session of a family leaves its caller pointing at nothing (or a child without its parent).
 * A family's rows are held until it is whole (families.ts `FamilyGroups`: one family at a time
 * in a run's order); each gets its own `matches` and `family_flagged`, and with `drop` the
 * family goes to the rejects whole when any of its sessions is flagged.
 */
import { extname } from 'node:path';
import { createReadStream } from 'node:fs';
import { QuestionsConfig, SCHEMA_VERSION, type ContaminationFlag, type ContaminationMatch, type DecontaminateOptions, type Decontamination, type Trajectory } from '../../schemas/index.js';
import { inputError, TrajforgeError } from '../errors.js';
import { readQuestions } from '../core/questions/read.js';
import type { JsonlWriter } from '../core/jsonl.js';
import type { ReadOptions } from './readers.js';
import { curateRows, type CurateRow } from './curate-rows.js';
import { lineProblem, maxLineBytes, readLines } from '../core/lines.js';
import { forEachNgram, hashWord, STOPWORDS, words } from './shingles.js';
import { familyOf, FamilyGroups } from './families.js';

/** Characters of an eval item's text kept for the report. */
const REPORT_TEXT_CHARS = 300;
/**
 * Bytes the rows are read in at a time: a chunk's lines live until the last is scanned, and at
 * the readers' 1 MiB that survivor load grew the young generation to its most (~35 MB more RSS)
 * for a pass that keeps nothing. 64 KiB: RSS stays by the eval index, and the pass is no slower
 * (bench/BENCHMARKS.md, "Curation").
 */
const READ_CHUNK_BYTES = 64 * 1024;
/** Items under `min_words` the summary names; the rest are only counted. */
const SHORT_EXAMPLES = 5;

export type EvalFormat = 'auto' | 'lines' | 'jsonl' | 'json' | 'csv';

function doubled(a: Int32Array<ArrayBuffer>): Int32Array<ArrayBuffer> {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}

/**
 * 64-bit n-gram keys → every (item, position) that holds them: keys in an open-addressing table
 * (at most half full), each pointing at a chain of entries. An n-gram that many items share
 * (template text) has a long chain; a row that holds it walks the chain once.
 */
class NgramIndex {
  #hi = new Int32Array(1 << 12);
  #lo = new Int32Array(1 << 12);
  /** Entry index + 1 of the key's most recent entry; 0 marks a free slot. */
  #head = new Int32Array(1 << 12);
  #mask = (1 << 12) - 1;
  /** Distinct keys. */
  size = 0;
  #item = new Int32Array(1 << 12);
  #pos = new Int32Array(1 << 12);
  /** The key's previous entry + 1; 0 ends the chain. */
  #next = new Int32Array(1 << 12);
  #entries = 0;

  /** The slot holding the key, or -1. */
  find(hi: number, lo: number): number {
    for (let s = (hi ^ Math.imul(lo, 0x9e3779b1)) & this.#mask; ; s = (s + 1) & this.#mask) {
      if (this.#head[s] === 0) return -1;
      if (this.#hi[s] === hi && this.#lo[s] === lo) return s;
    }
  }

  /** Calls `each(item, position)` for every entry of the key in `slot`. */
  forEachEntry(slot: number, each: (item: number, pos: number) => void): void {
    for (let e = this.#head[slot]! - 1; e >= 0; e = this.#next[e]! - 1) each(this.#item[e]!, this.#pos[e]!);
  }

  /**
   * Records that word `pos` of `item` starts this n-gram; returns whether the item had not held
   * it before. An item's n-grams are added together, so the key's latest entry tells.
   */
  add(hi: number, lo: number, item: number, pos: number): boolean {
    let s = this.find(hi, lo);
    const fresh = s < 0 || this.#item[this.#head[s]! - 1] !== item;
    if (s < 0) {
      if ((this.size + 1) * 2 > this.#mask + 1) this.#grow();
      s = this.#slotFor(hi, lo);
      this.#hi[s] = hi;
      this.#lo[s] = lo;
      this.size++;
    }
    const e = this.#entries++;
    if (e >= this.#item.length) {
      this.#item = doubled(this.#item);
      this.#pos = doubled(this.#pos);
      this.#next = doubled(this.#next);
    }
    this.#item[e] = item;
    this.#pos[e] = pos;
    this.#next[e] = this.#head[s]!;
    this.#head[s] = e + 1;
    return fresh;
  }

  #slotFor(hi: number, lo: number): number {
    let s = (hi ^ Math.imul(lo, 0x9e3779b1)) & this.#mask;
    while (this.#head[s] !== 0) s = (s + 1) & this.#mask;
    return s;
  }

  #grow(): void {
    const [hi, lo, head] = [this.#hi, this.#lo, this.#head];
    const cap = hi.length * 2;
    this.#hi = new Int32Array(cap);
    this.#lo = new Int32Array(cap);
    this.#head = new Int32Array(cap);
    this.#mask = cap - 1;
    for (let s = 0; s < hi.length; s++) {
      if (head[s] === 0) continue;
      const t = this.#slotFor(hi[s]!, lo[s]!);
      this.#hi[t] = hi[s]!;
      this.#lo[t] = lo[s]!;
      this.#head[t] = head[s]!;
    }
  }
}

export interface EvalItem {
  readonly file: string;
  readonly id: string;
  /** Cut at 300 characters. */
  readonly text: string;
  /** Distinct n-grams of the item (1 for an item matched whole). */
  readonly of: number;
  /** Words in the item, and the positions of its content words. */
  readonly words: number;
  readonly content: Int32Array;
}

export interface EvalSummary {
  files: string[];
  /** Items read, and of them those checked (at least `min_words` words). */
  items: number;
  checked: number;
  /** Distinct n-grams indexed. */
  ngrams: number;
  /** Items under `min_words` words: not checked. */
  too_short: number;
  too_short_examples: { file: string; id: string; text: string }[];
}

/** The n-grams of every eval item, and the items they belong to. */
export class EvalIndex {
  readonly items: EvalItem[] = [];
  readonly table = new NgramIndex();
  /** The window lengths a row must be scanned with: n, and the lengths of items matched whole. */
  readonly lengths: number[] = [];
  readonly summary: EvalSummary;
  readonly options: DecontaminateOptions;

  private constructor(options: DecontaminateOptions, files: string[]) {
    this.options = options;
    this.summary = { files, items: 0, checked: 0, ngrams: 0, too_short: 0, too_short_examples: [] };
  }

  static async load(files: readonly string[], options: DecontaminateOptions, format: EvalFormat = 'auto'): Promise<EvalIndex> {
    if (files.length === 0) throw new TrajforgeError('BAD_USAGE', 'decontaminate: no eval file given (--against FILE)');
    const index = new EvalIndex(options, [...files]);
    const lengths = new Set<number>();
    for (const file of files) {
      let count = 0;
      for await (const item of evalItems(file, options, format)) {
        count++;
        index.#add(file, item.id, item.text, lengths);
      }
      if (count === 0) throw inputError(file, undefined, undefined, 'no eval items found');
    }
    index.lengths.push(...[...lengths].sort((a, b) => b - a));
    index.summary.ngrams = index.table.size;
    return index;
  }

  #add(file: string, id: string, text: string, lengths: Set<number>): void {
    const { n, min_words } = this.options;
    this.summary.items++;
    const ws = words(text);
    const hashes = ws.map(hashWord);
    if (hashes.length < min_words) {
      this.summary.too_short++;
      if (this.summary.too_short_examples.length < SHORT_EXAMPLES) this.summary.too_short_examples.push({ file, id, text: text.slice(0, 120) });
      return;
    }
    const len = Math.min(n, hashes.length);
    lengths.add(len);
    const item = this.items.length;
    // Distinct n-grams counted in the table itself: a set of them per item was the load's largest garbage.
    let of = 0;
    let pos = 0;
    forEachNgram(hashes, len, (hi, lo) => {
      if (this.table.add(hi, lo, item, pos++)) of++;
    });
    const content: number[] = [];
    ws.forEach((w, i) => {
      if (!STOPWORDS.has(w)) content.push(i);
    });
    this.items.push({ file, id, text: text.slice(0, REPORT_TEXT_CHARS), of, words: ws.length, content: Int32Array.from(content) });
    this.summary.checked++;
  }
}

/** The items of one eval file: `{id, text}` in file order. */
async function* evalItems(file: string, options: DecontaminateOptions, format: EvalFormat): AsyncGenerator<{ id: string; text: string }> {
  const plain = format === 'lines' || (format === 'auto' && extname(file.replace(/\.gz$/i, '')).toLowerCase() === '.txt');
  if (plain) {
    if (file.endsWith('.gz')) throw new TrajforgeError('BAD_USAGE', `${file}: a compressed plain-text eval file; decompress it first`, { file });
    let stream;
    try {
      stream = createReadStream(file);
      const max = maxLineBytes();
      for await (const l of readLines(stream, { maxLineBytes: max })) {
        const problem = lineProblem(l, max);
        if (problem !== undefined) throw inputError(file, l.line, undefined, problem);
        yield { id: `line ${l.line}`, text: l.text };
      }
    } catch (err) {
      if (err instanceof TrajforgeError) throw err;
      throw inputError(file, undefined, undefined, `cannot read: ${(err as Error).message}`);
    }
    return;
  }
  const config = QuestionsConfig.parse({
    path: file,
    format,
    fields: { question: options.eval_fields.question, id: options.eval_fields.id },
  });
  // The first row of an id wins, as in the sampler.
  const seen = new Set<string>();
  for await (const batch of readQuestions({ path: file, config }, { rows: 0, badRows: [] })) {
    for (const q of batch) {
      if (seen.has(q.id)) continue;
      seen.add(q.id);
      yield { id: q.id, text: q.question };
    }
  }
}

// ---------------------------------------------------------------------------------------
// Scanning rows

interface FieldText {
  field: ContaminationMatch['field'];
  call?: number;
  text: string;
}

function fieldTexts(t: Partial<Trajectory>, fields: DecontaminateOptions['fields']): FieldText[] {
  const out: FieldText[] = [];
  for (const f of fields) {
    if (f === 'question') {
      if (typeof t.question === 'string') out.push({ field: 'question', text: t.question });
    } else if (f === 'answer') {
      if (typeof t.final_answer === 'string') out.push({ field: 'answer', text: t.final_answer });
    } else if (Array.isArray(t.tool_calls)) {
      t.tool_calls.forEach((c, i) => {
        const text = (c as { output_text?: unknown } | null)?.output_text;
        if (typeof text === 'string') out.push({ field: 'tool_output', call: i, text });
      });
    }
  }
  return out;
}

export interface ScanMatch {
  readonly match: ContaminationMatch;
  /** Index into `EvalIndex.items`. */
  readonly item: number;
}

/** Every eval item a row overlaps, per field (and call), in field order then item order. */
export function scanRow(t: Partial<Trajectory>, index: EvalIndex): ScanMatch[] {
  const matches: ScanMatch[] = [];
  if (index.table.size === 0) return matches;
  const { table, items, lengths } = index;
  const need = index.options.min_ngrams;
  for (const ft of fieldTexts(t, index.options.fields)) {
    const hashes = words(ft.text).map(hashWord);
    let slots: Set<number> | undefined;
    for (const len of lengths) {
      forEachNgram(hashes, len, (hi, lo) => {
        const s = table.find(hi, lo);
        if (s >= 0) (slots ??= new Set()).add(s);
      });
    }
    if (!slots) continue;
    // Per item: the distinct n-grams found, and where they start in the item.
    const perItem = new Map<number, { count: number; lastSlot: number; positions: number[] }>();
    for (const s of slots) {
      table.forEachEntry(s, (item, pos) => {
        let f = perItem.get(item);
        if (!f) perItem.set(item, (f = { count: 0, lastSlot: -1, positions: [] }));
        if (f.lastSlot !== s) {
          f.count++;
          f.lastSlot = s;
        }
        f.positions.push(pos);
      });
    }
    for (const [item, found] of [...perItem].sort((a, b) => a[0] - b[0])) {
      const it = items[item]!;
      const count = found.count;
      // An item of fewer n-grams than `min_ngrams` counts when all of them are there.
      if (count < Math.min(need, it.of)) continue;
      if (index.options.content_check && !covers(it, found.positions, Math.min(index.options.n, it.words))) continue;
      matches.push({ item, match: { eval_file: it.file, eval_id: it.id, field: ft.field, ...(ft.call !== undefined ? { call_index: ft.call } : {}), ngrams: count, of: it.of } });
    }
  }
  return matches;
}

/** Whether n-grams of `len` words starting at `positions` of `it` cover every content word of `it`. */
function covers(it: EvalItem, positions: readonly number[], len: number): boolean {
  if (it.content.length === 0) return true;
  const covered = new Uint8Array(it.words);
  for (const p of positions) covered.fill(1, p, p + len);
  for (const p of it.content) if (covered[p] === 0) return false;
  return true;
}

/** The row as a JSON line with its `decontamination` field set (replacing one written before). */
function withField(row: CurateRow, d: Decontamination): string {
  const t = row.trajectory as Trajectory;
  if (row.raw !== undefined && !Object.hasOwn(t, 'decontamination')) {
    // Splice the field in before the closing brace: re-serialising every row would cost more than the scan.
    const raw = row.raw.trimEnd();
    const body = raw.slice(0, -1).trimEnd();
    if (raw.endsWith('}') && !body.endsWith('{')) return `${body},"decontamination":${JSON.stringify(d)}}`;
  }
  return JSON.stringify({ ...t, decontamination: d });
}

export interface DecontaminateSummary {
  rows: number;
  bad: number;
  flagged: number;
  clean: number;
  /** Rows with a match in that field. */
  by_field: Record<string, number>;
  /** Rows with a match from that eval file. */
  by_eval_file: Record<string, number>;
  /** Runs with agents: families with a flagged session, and the rows of those families (flagged or not). */
  families_flagged: number;
  rows_in_flagged_families: number;
  eval: EvalSummary;
}

export interface DecontaminateWriters {
  /** Every row (or, with `drop`, the clean ones), each with its `decontamination` field. */
  readonly out?: JsonlWriter | undefined;
  /** With `drop`: the flagged rows. */
  readonly rejects?: JsonlWriter | undefined;
  /** One line per flagged row. */
  readonly report?: JsonlWriter | undefined;
  readonly drop: boolean;
}

interface Scanned {
  readonly row: CurateRow;
  readonly found: ScanMatch[];
}

/** One pass over `inputs`. A reader of stdout that goes away ends it with the writer's OutputClosedError (cli/output.ts). */
export async function decontaminate(inputs: readonly string[], read: ReadOptions, index: EvalIndex, writers: DecontaminateWriters, bank = false): Promise<DecontaminateSummary> {
  const summary: DecontaminateSummary = { rows: 0, bad: 0, flagged: 0, clean: 0, by_field: {}, by_eval_file: {}, families_flagged: 0, rows_in_flagged_families: 0, eval: index.summary };
  const against = index.summary.files;
  const n = index.options.n;
  const families = new FamilyGroups<Scanned>();

  const write = async ({ row, found }: Scanned, family: boolean | undefined): Promise<void> => {
    const t = row.trajectory as Partial<Trajectory>;
    const matches = found.map((f) => f.match);
    const flagged = matches.length > 0;
    const target = (family ?? flagged) && writers.drop ? writers.rejects : writers.out;
    if (target) {
      // A bank row is written as read: a bank of the shape it came in, its flags in the report.
      const p = target.writeLine(row.bank ? row.raw! : withField(row, { n, against, matches, ...(family === undefined ? {} : { family_flagged: family }) }));
      if (p) await p;
    }
    if (flagged && writers.report) {
      const flag: ContaminationFlag = {
        schema_version: SCHEMA_VERSION,
        input: row.file === '-' ? '<stdin>' : row.file,
        line: row.line,
        id: typeof t.id === 'string' ? t.id : '',
        matches: found.map((f) => ({ ...f.match, eval_text: index.items[f.item]!.text })),
      };
      const p = writers.report.write(flag);
      if (p) await p;
    }
  };
  const writeFamily = async (rows: readonly Scanned[]): Promise<void> => {
    const flagged = rows.some((s) => s.found.length > 0);
    if (flagged) {
      summary.families_flagged++;
      summary.rows_in_flagged_families += rows.length;
    }
    for (const s of rows) await write(s, flagged);
  };

  const bad = { count: 0 };
  for (const input of inputs) {
    for await (const row of curateRows(input, bank, { chunkBytes: READ_CHUNK_BYTES, ...read }, bad)) {
      summary.rows++;
      const t = row.trajectory as Partial<Trajectory>;
      const found = scanRow(t, index);
      const matches = found.map((f) => f.match);
      if (matches.length > 0) {
        summary.flagged++;
        for (const f of new Set(matches.map((m) => m.field))) summary.by_field[f] = (summary.by_field[f] ?? 0) + 1;
        for (const f of new Set(matches.map((m) => m.eval_file))) summary.by_eval_file[f] = (summary.by_eval_file[f] ?? 0) + 1;
      } else summary.clean++;
      // A row of a family already written (a scattered dataset) can only be judged alone.
      if (familyOf(t) === undefined || families.isClosed(t)) {
        await write({ row, found }, familyOf(t) === undefined ? undefined : found.length > 0);
        continue;
      }
      const whole = families.push(t, { row, found });
      if (whole !== undefined) await writeFamily(whole);
    }
  }
  summary.bad = bad.count;
  for (const rest of families.finish()) await writeFamily(rest);
  return summary;
}
