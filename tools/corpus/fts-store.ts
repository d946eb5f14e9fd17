/**
 * The corpus server's view of an on-disk index (fts.ts): opened read-only, checked before the
 * first call (its format, and that its build finished), then searched with FTS5's BM25.
 * A damaged page found later fails that call, not the server.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { CorpusError } from './search.js';
import { FTS_FORMAT, INDEX_FILE, TITLE_WEIGHT, ftsQuery, readMeta, recordOf, type Db } from './fts.js';
import type { CorpusRecord } from './record.js';
import type { CorpusStore, SearchHits } from './store.js';

/** SQLite's page cache for a server, in MiB (the rest of the index stays on disk). */
export const DEFAULT_CACHE_MB = 64;

const DOC_COLUMNS = 'd.id, d.url, d.title, d.text, d.meta';

export class FtsStore implements CorpusStore {
  readonly engine = 'sqlite';
  readonly #db: Db;
  readonly #common: ReadonlySet<string>;
  readonly #page: Database.Statement;
  readonly #count: Database.Statement;
  readonly #byId: Database.Statement;
  readonly #byUrl: Database.Statement;
  readonly #nocase: Database.Statement;

  private constructor(
    db: Db,
    readonly size: number,
    common: ReadonlySet<string>,
  ) {
    this.#db = db;
    this.#common = common;
    // Ties go to the earlier document, so a page is the same every time.
    this.#page = db.prepare(
      `SELECT ${DOC_COLUMNS} FROM (SELECT rowid, bm25(terms, ${TITLE_WEIGHT}, 1.0) AS s FROM terms WHERE terms MATCH ? ORDER BY s, rowid LIMIT ? OFFSET ?) h ` +
        'JOIN docs d ON d.rowid = h.rowid ORDER BY h.s, h.rowid',
    );
    this.#count = db.prepare('SELECT count(*) AS n FROM terms WHERE terms MATCH ?');
    this.#byId = db.prepare(`SELECT ${DOC_COLUMNS} FROM docs d WHERE d.id = ?`);
    this.#byUrl = db.prepare(`SELECT ${DOC_COLUMNS} FROM docs d WHERE d.url = ? ORDER BY d.rowid LIMIT 1`);
    this.#nocase = db.prepare('SELECT id FROM docs WHERE id = ? COLLATE NOCASE ORDER BY rowid LIMIT 1');
  }

  /** Opens `dir` (a directory `corpus index` wrote, or its corpus.sqlite). Throws CorpusError naming the file when it is not a finished index. */
  static open(dir: string, cacheMb = DEFAULT_CACHE_MB): FtsStore {
    const file = existsSync(dir) && statSync(dir).isDirectory() ? join(dir, INDEX_FILE) : dir;
    if (!existsSync(file)) throw new CorpusError(file, null, 'no corpus index here (build one with `trajforge corpus index DOCS.jsonl --out DIR`)');
    let db: Db | undefined;
    try {
      db = new Database(file, { readonly: true, fileMustExist: true });
      db.pragma(`cache_size = -${cacheMb * 1024}`);
      if (!db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'meta'").get()) throw new Error('not a corpus index');
      const format = readMeta(db, 'format');
      if (format !== FTS_FORMAT) throw new Error(format === undefined ? 'not a corpus index' : `index format ${format}, this trajforge reads ${FTS_FORMAT}: build it again`);
      if (readMeta(db, 'status') !== 'complete') {
        throw new Error('its build did not finish: run the same `trajforge corpus index` command again to finish it');
      }
      const size = Number(readMeta(db, 'docs'));
      const common = new Set(JSON.parse(readMeta(db, 'common_terms') ?? '[]') as string[]);
      // The last row is read now, so a file cut short is refused at start, not at some later call.
      const last = db.prepare('SELECT max(rowid) AS n FROM docs').get() as { n: number | null };
      if ((last.n ?? 0) < size) throw new Error(`it holds ${last.n ?? 0} documents, its record says ${size}`);
      return new FtsStore(db, size, common);
    } catch (err) {
      db?.close();
      if (err instanceof CorpusError) throw err;
      throw new CorpusError(file, null, `cannot serve this corpus index: ${(err as Error).message}`);
    }
  }

  search(query: string, limit: number, offset: number): SearchHits {
    const match = ftsQuery(query, this.#common);
    if (match === null) return { total: 0, hits: [] };
    const rows = this.#page.all(match, limit, offset) as Parameters<typeof recordOf>[0][];
    const total = (this.#count.get(match) as { n: number }).n;
    return { total, hits: rows.map(recordOf) };
  }

  get(idOrUrl: string): CorpusRecord | undefined {
    const trimmed = idOrUrl.trim();
    for (const key of trimmed === idOrUrl ? [idOrUrl] : [idOrUrl, trimmed]) {
      const row = this.#byId.get(key) ?? this.#byUrl.get(key);
      if (row) return recordOf(row as Parameters<typeof recordOf>[0]);
    }
    // A URL with or without its trailing slash is the same page.
    if (/^https?:\/\//i.test(trimmed)) {
      const other = trimmed.endsWith('/') ? trimmed.slice(0, -1) : `${trimmed}/`;
      const row = this.#byUrl.get(other);
      if (row) return recordOf(row as Parameters<typeof recordOf>[0]);
    }
    return undefined;
  }

  suggest(id: string): string | undefined {
    const trimmed = id.trim();
    if (trimmed === '') return undefined;
    return (this.#nocase.get(trimmed) as { id: string } | undefined)?.id;
  }

  close(): void {
    this.#db.close();
  }
}
