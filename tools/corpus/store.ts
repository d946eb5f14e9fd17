/**
 * What the corpus server serves from: a ranked search and a lookup by id or URL, whichever
 * engine holds the documents. Two do: the in-memory BM25 index of a JSONL corpus (search.ts),
 * quick to start and fast for corpora that fit in memory (the bundled one), and the on-disk
 * SQLite FTS5 index that `trajforge corpus index` builds for millions of documents
 * (fts-store.ts). The tools (tools.ts) only see this interface.
 */
import type { CorpusDoc, CorpusIndex } from './search.js';
import type { CorpusRecord } from './record.js';

export interface SearchHits {
  /** How many documents match. */
  readonly total: number;
  /** The page asked for, best first. */
  readonly hits: readonly CorpusRecord[];
}

export interface CorpusStore {
  readonly engine: 'memory' | 'sqlite';
  /** Documents held. */
  readonly size: number;
  search(query: string, limit: number, offset: number): SearchHits;
  /** The document with this id, else the one at this URL; undefined when there is none. */
  get(idOrUrl: string): CorpusRecord | undefined;
  /** The id a missing one most likely meant (the same but for case), if any. */
  suggest(id: string): string | undefined;
  close(): void;
}

export function recordOfDoc(d: CorpusDoc): CorpusRecord {
  return { id: d.paperId, url: null, title: d.title, text: d.abstract, authors: d.authors, year: d.year, venue: d.venue };
}

/** The in-memory index behind the CorpusStore interface. Its documents have no URLs. */
export class MemoryStore implements CorpusStore {
  readonly engine = 'memory';
  #lowerIds: Map<string, string> | undefined;

  constructor(readonly index: CorpusIndex) {}

  get size(): number {
    return this.index.docs.length;
  }

  search(query: string, limit: number, offset: number): SearchHits {
    const page = this.index.search(query, limit, offset);
    return { total: page.total, hits: page.data.map(recordOfDoc) };
  }

  get(idOrUrl: string): CorpusRecord | undefined {
    const doc = this.index.document(idOrUrl) ?? this.index.document(idOrUrl.trim());
    return doc === undefined ? undefined : recordOfDoc(doc);
  }

  suggest(id: string): string | undefined {
    this.#lowerIds ??= new Map(this.index.docs.map((d) => [d.paperId.toLowerCase(), d.paperId]));
    const lower = id.trim().toLowerCase();
    return lower === '' ? undefined : this.#lowerIds.get(lower);
  }

  close(): void {}
}
