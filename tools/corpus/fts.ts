/**
 * The on-disk corpus index: one SQLite file (`corpus.sqlite`) holding the documents and an FTS5
 * full-text index over their titles and texts, which `trajforge corpus index` writes (build.ts)
 * and the corpus server searches (FtsStore). SQLite pages what a search needs from disk, so a
 * corpus of millions of documents is served in a few tens of MB of memory.
 *
 * Terms are made by the same tokenizer as the in-memory index (search.ts): a hyphenated or
 * dotted name is a term whole and in its parts, so `grid-template-columns` outranks its many
 * near-namesakes. FTS5 then only splits on spaces (its unicode61 tokenizer with every category
 * but separators as token characters), and every query term goes to FTS5 as a quoted string:
 * no character of a user's query is FTS5 syntax (`"`, `*`, `NEAR`, `-`, `:`, `^` are text).
 */
import type BetterSqlite3 from 'better-sqlite3';
import { TrajforgeError } from '../../pipeline/errors.js';
import { tokenize, DEFAULTS } from './search.js';
import type { CorpusRecord } from './record.js';

export const FTS_FORMAT = 'trajforge-corpus-fts/1';
/** The index file inside an index directory. */
export const INDEX_FILE = 'corpus.sqlite';
/** Documents per transaction of a build: what a kill can cost, against the cost of a commit. */
export const DEFAULT_BATCH_DOCS = 5_000;
/** Query terms past this many are left out: a page of text pasted as a query must not become a query of thousands of terms. */
export const MAX_QUERY_TERMS = 64;

export const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS docs (
  rowid INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  url TEXT,
  title TEXT NOT NULL,
  text TEXT NOT NULL,
  meta TEXT
);
CREATE INDEX IF NOT EXISTS docs_url ON docs(url) WHERE url IS NOT NULL;
CREATE INDEX IF NOT EXISTS docs_id_nocase ON docs(id COLLATE NOCASE);
CREATE VIRTUAL TABLE IF NOT EXISTS terms USING fts5(
  title, body, content='',
  tokenize="unicode61 remove_diacritics 0 categories 'L* N* M* P* S* C*'"
);
`;

/** The terms of a text as the index holds them: tokenize()'s terms, split where FTS5 would split them (space separators). */
export function textTerms(text: string): string[] {
  const out: string[] = [];
  for (const term of tokenize(text)) {
    for (const part of term.split(/\p{Z}+/u)) if (part !== '') out.push(part);
  }
  return out;
}

/** An FTS5 string literal: the term, quoted, its quotes doubled. Nothing inside it is query syntax. */
export function ftsLiteral(term: string): string {
  return `"${term.replaceAll('"', '""')}"`;
}

/** The FTS5 query for a user's words: each term that is not common, quoted, joined by OR; null when none is left. */
export function ftsQuery(query: string, common: ReadonlySet<string>): string | null {
  const terms = textTerms(query)
    .filter((t) => !common.has(t))
    .slice(0, MAX_QUERY_TERMS);
  return terms.length === 0 ? null : terms.map(ftsLiteral).join(' OR ');
}

export type Db = BetterSqlite3.Database;

export function readMeta(db: Db, key: string): string | undefined {
  const row = db.prepare('SELECT value FROM meta WHERE key = ?').get(key) as { value: string } | undefined;
  return row?.value;
}

export function writeMeta(db: Db, values: Record<string, string | number>): void {
  const put = db.prepare('INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value');
  for (const [key, value] of Object.entries(values)) put.run(key, String(value));
}

/** What a row of `docs` keeps besides id, url, title and text: only what a document has. */
export function docMeta(r: CorpusRecord): string | null {
  const m: Record<string, unknown> = {};
  if (r.authors.length) m.authors = r.authors;
  if (r.year !== null) m.year = r.year;
  if (r.venue !== '') m.venue = r.venue;
  return Object.keys(m).length ? JSON.stringify(m) : null;
}

interface DocRow {
  id: string;
  url: string | null;
  title: string;
  text: string;
  meta: string | null;
}

export function recordOf(row: DocRow): CorpusRecord {
  const m = row.meta === null ? {} : (JSON.parse(row.meta) as { authors?: string[]; year?: number; venue?: string });
  return { id: row.id, url: row.url, title: row.title, text: row.text, authors: m.authors ?? [], year: m.year ?? null, venue: m.venue ?? '' };
}

/** The title's weight against the text's in BM25, as in the in-memory index. */
export const TITLE_WEIGHT = DEFAULTS.titleBoost;

/**
 * Loads a module that needs better-sqlite3, an optional peer dependency (it compiles SQLite on
 * install where no prebuilt binary can be had, a cost only the on-disk index should bring):
 * when it is missing or was not built, says how to install it instead of a stack trace.
 */
export async function withSqlite<T>(load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const missing = (e.code === 'ERR_MODULE_NOT_FOUND' && /better-sqlite3/.test(e.message)) || /bindings file|better_sqlite3\.node/.test(e.message ?? '');
    if (!missing) throw err;
    throw new TrajforgeError(
      'BAD_USAGE',
      'the on-disk corpus index needs better-sqlite3, an optional dependency of trajforge: install it with `npm install better-sqlite3@12` (where no prebuilt binary can be downloaded it compiles SQLite: python3, make and a C++ compiler)',
      { cause: err },
    );
  }
}
