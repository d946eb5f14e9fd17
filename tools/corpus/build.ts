/**
 * Builds an on-disk corpus index (fts.ts) from a JSONL file, gzipped or not, streaming: a batch
 * of documents at a time, each batch one transaction that also records how far the input has
 * been read. A build that is killed keeps every batch it committed, and the same command
 * started again reads past them (checking that those lines are still the same) and goes on, so
 * no document is indexed twice. Two builders on one directory cannot interleave: a batch
 * commits only where the last one ended.
 */
import { createHash, type Hash } from 'node:crypto';
import { closeSync, createReadStream, existsSync, mkdirSync, openSync, readdirSync, readSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { createGunzip } from 'node:zlib';
import Database from 'better-sqlite3';
import { TrajforgeError } from '../../pipeline/errors.js';
import { DEFAULT_BATCH_DOCS, FTS_FORMAT, INDEX_FILE, SCHEMA, docMeta, readMeta, textTerms, writeMeta, type Db } from './fts.js';
import { DEFAULTS } from './search.js';
import { recordFromRow, RowError, type CorpusRecord } from './record.js';

/** Bytes of the input's head that identify it, so a resume never continues another file. */
const HEAD_BYTES = 1 << 20;

export interface BuildProgress {
  readonly lines: number;
  readonly docs: number;
  readonly skipped: number;
  readonly bytesRead: number;
  readonly bytesTotal: number;
  /** Lines a resumed build found already indexed. */
  readonly resumedAt: number;
  readonly seconds: number;
}

export interface BuildOptions {
  readonly input: string;
  readonly outDir: string;
  readonly batchDocs?: number;
  /** `error` (default): a bad row stops the build, naming file, line and field; `skip`: counted and left out. */
  readonly onBadRow?: 'error' | 'skip';
  /** Called after every committed batch. */
  readonly onProgress?: (p: BuildProgress) => void;
}

export interface BuildSummary extends BuildProgress {
  /** The directory already held a finished index of this input: nothing was done. */
  readonly alreadyComplete: boolean;
  /** Size of the index file. */
  readonly bytesOnDisk: number;
  /** The first bad rows skipped (at most 10), as `file:line: field: message`. */
  readonly badRows: readonly string[];
}

interface SourceIdentity {
  path: string;
  size: number;
  head_sha256: string;
}

function identify(input: string): SourceIdentity {
  const fd = openSync(input, 'r');
  try {
    const buf = Buffer.alloc(HEAD_BYTES);
    const n = readSync(fd, buf, 0, HEAD_BYTES, 0);
    return { path: resolve(input), size: statSync(input).size, head_sha256: createHash('sha256').update(buf.subarray(0, n)).digest('hex') };
  } finally {
    closeSync(fd);
  }
}

function isGzip(input: string): boolean {
  const fd = openSync(input, 'r');
  try {
    const b = Buffer.alloc(2);
    return readSync(fd, b, 0, 2, 0) === 2 && b[0] === 0x1f && b[1] === 0x8b;
  } finally {
    closeSync(fd);
  }
}

/** Opens (creating when new) the index in `outDir`, refusing a directory that holds something else or an index of another input. */
function openForBuild(outDir: string, source: SourceIdentity): { db: Db; file: string } {
  if (existsSync(outDir) && !statSync(outDir).isDirectory()) throw new TrajforgeError('BAD_USAGE', `--out ${outDir}: exists and is not a directory`);
  const file = join(outDir, INDEX_FILE);
  if (existsSync(outDir) && !existsSync(file) && readdirSync(outDir).length > 0) {
    throw new TrajforgeError('BAD_USAGE', `--out ${outDir}: the directory holds other files; give a new or empty directory`);
  }
  mkdirSync(outDir, { recursive: true });
  const db = new Database(file);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('cache_size = -65536');
    const format = db.prepare("SELECT name FROM sqlite_master WHERE name = 'meta'").get() ? readMeta(db, 'format') : undefined;
    if (format === undefined) {
      db.exec(SCHEMA);
      writeMeta(db, { format: FTS_FORMAT, status: 'building', source: JSON.stringify(source), lines_done: 0, lines_sha256: '', docs: 0, skipped: 0 });
    } else if (format !== FTS_FORMAT) {
      throw new TrajforgeError('BAD_USAGE', `--out ${outDir}: holds an index of format ${format}; this trajforge writes ${FTS_FORMAT}: remove the directory and build again`);
    }
    const had = JSON.parse(readMeta(db, 'source') ?? '{}') as Partial<SourceIdentity>;
    if (had.size !== source.size || had.head_sha256 !== source.head_sha256) {
      throw new TrajforgeError('BAD_USAGE', `--out ${outDir}: holds an index of ${had.path ?? 'another file'} (${had.size} bytes), not of ${source.path} (${source.size} bytes): remove the directory or give another one`);
    }
    return { db, file };
  } catch (err) {
    db.close();
    throw err;
  }
}

/** Terms that most documents have are left out of queries, as in the in-memory index; then the index is merged into one b-tree for search speed. */
function finish(db: Db): void {
  const docs = Number(readMeta(db, 'docs'));
  let common: string[] = [];
  if (docs >= DEFAULTS.commonTermMinDocs) {
    db.exec("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab USING fts5vocab(main, terms, 'row')");
    common = db.prepare('SELECT term FROM temp.vocab WHERE doc > ? ORDER BY term').pluck().all(docs * DEFAULTS.commonTermShare) as string[];
  }
  db.exec("INSERT INTO terms(terms) VALUES ('optimize')");
  writeMeta(db, { common_terms: JSON.stringify(common), status: 'complete' });
  // One file, no -wal beside it: a finished index can be copied and opened read-only anywhere.
  db.pragma('journal_mode = DELETE');
}

/** Builds (or finishes) the index of `input` in `outDir`. Throws TrajforgeError for bad input, naming file, line and field. */
export async function buildIndex(o: BuildOptions): Promise<BuildSummary> {
  const started = performance.now();
  if (!existsSync(o.input) || !statSync(o.input).isFile()) throw new TrajforgeError('BAD_INPUT', `${o.input}: no such file`, { file: o.input });
  const source = identify(o.input);
  const { db, file } = openForBuild(o.outDir, source);
  try {
    const resumedAt = Number(readMeta(db, 'lines_done'));
    const base = { resumedAt, bytesTotal: source.size };
    if (readMeta(db, 'status') === 'complete') {
      return summary(db, file, { ...base, lines: resumedAt, bytesRead: source.size, seconds: 0 }, true, []);
    }
    const p = await indexLines(db, o, base, started);
    finish(db);
    return summary(db, file, { ...p, seconds: (performance.now() - started) / 1000 }, false, p.badRows);
  } catch (err) {
    // A write SQLite refused (a full disk, a lock held elsewhere): what was committed stays.
    if ((err as Error).name === 'SqliteError') throw new TrajforgeError('WRITE_FAILED', `${file}: ${(err as Error).message}; the index keeps what was committed: run the same command again to go on`, { cause: err });
    throw err;
  } finally {
    db.close();
  }
}

function summary(db: Db, file: string, p: Omit<BuildProgress, 'docs' | 'skipped'>, alreadyComplete: boolean, badRows: readonly string[]): BuildSummary {
  return { ...p, docs: Number(readMeta(db, 'docs')), skipped: Number(readMeta(db, 'skipped')), alreadyComplete, bytesOnDisk: statSync(file).size, badRows };
}

interface Pending {
  readonly line: number;
  readonly record: CorpusRecord;
}

/** Reads the input line by line, past what is already indexed, and commits it batch by batch. */
async function indexLines(db: Db, o: BuildOptions, base: { resumedAt: number; bytesTotal: number }, started: number): Promise<Omit<BuildProgress, 'seconds'> & { badRows: string[] }> {
  const batchDocs = o.batchDocs ?? DEFAULT_BATCH_DOCS;
  const skipBad = o.onBadRow === 'skip';
  const raw = createReadStream(o.input);
  const lines = createInterface({ input: isGzip(o.input) ? raw.pipe(createGunzip()) : raw, crlfDelay: Infinity });
  const hash = createHash('sha256');
  const committed = { lines: base.resumedAt, docs: Number(readMeta(db, 'docs')), skipped: Number(readMeta(db, 'skipped')) };
  const badRows: string[] = [];
  const bad = (line: number, err: RowError): void => {
    const where = `${o.input}:${line}: ${err.field === undefined ? '' : `${err.field}: `}${err.message}`;
    if (!skipBad) throw new TrajforgeError('BAD_INPUT', where, { file: o.input, line, field: err.field });
    if (badRows.length < 10) badRows.push(where);
  };
  const commit = commitBatch(db, o.input, committed, bad);
  let pending: Pending[] = [];
  let lineNo = 0;
  const flush = (): void => {
    commit(pending, lineNo, hash);
    pending = [];
    o.onProgress?.({ ...committed, ...base, bytesRead: raw.bytesRead, seconds: (performance.now() - started) / 1000 });
  };
  try {
    for await (const text of lines) {
      lineNo++;
      hash.update(text).update('\n');
      if (lineNo <= base.resumedAt) {
        if (lineNo === base.resumedAt) checkPrefix(db, o.input, lineNo, hash);
        continue;
      }
      if (text.trim() === '') continue;
      let record: CorpusRecord;
      try {
        record = recordFromRow(parseJson(text));
      } catch (err) {
        if (!(err instanceof RowError)) throw err;
        committed.skipped++;
        bad(lineNo, err);
        continue;
      }
      pending.push({ line: lineNo, record });
      if (pending.length >= batchDocs) flush();
    }
    if (lineNo < base.resumedAt) throw new TrajforgeError('BAD_INPUT', `${o.input}: has ${lineNo} lines, but ${base.resumedAt} were indexed already: the file changed`, { file: o.input });
    if (lineNo > committed.lines || pending.length > 0) flush();
  } finally {
    lines.close();
    raw.destroy();
  }
  if (committed.docs === 0) throw new TrajforgeError('BAD_INPUT', `${o.input}: holds no documents`, { file: o.input });
  return { ...committed, ...base, bytesRead: base.bytesTotal, badRows };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new RowError(undefined, `not valid JSON (${(err as Error).message})`);
  }
}

/** The lines a resumed build skips must be the ones it indexed: a changed file is refused, not continued. */
function checkPrefix(db: Db, input: string, line: number, hash: Hash): void {
  if (hash.copy().digest('hex') !== readMeta(db, 'lines_sha256')) {
    throw new TrajforgeError('BAD_INPUT', `${input}: its first ${line} lines are not the ones indexed before: the file changed since; remove the index directory and build again`, { file: input });
  }
}

/**
 * One batch, one transaction: the documents, their terms and how far the input was read. It
 * commits only if the index still ends where this builder last left it, so two builders on one
 * directory fail instead of indexing the same lines twice.
 */
function commitBatch(db: Db, input: string, committed: { lines: number; docs: number; skipped: number }, bad: (line: number, err: RowError) => void) {
  const insertDoc = db.prepare('INSERT OR IGNORE INTO docs(id, url, title, text, meta) VALUES (?, ?, ?, ?, ?)');
  const insertTerms = db.prepare('INSERT INTO terms(rowid, title, body) VALUES (?, ?, ?)');
  const write = db.transaction((rows: readonly Pending[], upTo: number, sha: string) => {
    const at = Number(readMeta(db, 'lines_done'));
    if (at !== committed.lines) throw new TrajforgeError('BAD_USAGE', `another \`trajforge corpus index\` is writing this index (it is at line ${at}, this one at ${committed.lines})`);
    let docs = committed.docs;
    let skipped = committed.skipped;
    for (const { line, record: r } of rows) {
      const done = insertDoc.run(r.id, r.url, r.title, r.text, docMeta(r));
      if (done.changes === 0) {
        skipped++;
        bad(line, new RowError('id', `duplicate document id ${JSON.stringify(r.id)}: an id names one document`));
        continue;
      }
      insertTerms.run(done.lastInsertRowid, textTerms(r.title).join(' '), textTerms(r.text).join(' '));
      docs++;
    }
    writeMeta(db, { lines_done: upTo, lines_sha256: sha, docs, skipped });
    return { docs, skipped };
  });
  return (rows: readonly Pending[], upTo: number, hash: Hash): void => {
    const done = write.immediate(rows, upTo, hash.copy().digest('hex'));
    committed.lines = upTo;
    committed.docs = done.docs;
    committed.skipped = done.skipped;
  };
}
