/**
 * Loading and ranking for the offline corpus. Kept apart from server.ts so that it can be
 * imported (tests, benchmarks) without starting an MCP server on stdio.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import MiniSearch, { type AsPlainObject, type Options } from 'minisearch';
import { UserError } from '../../pipeline/errors.js';

export interface CorpusDoc {
  paperId: string;
  title: string;
  authors: string[];
  abstract: string;
  year: number | null;
  venue: string;
}

/** The PubMed-shaped page `pubmed_search` returns. */
export interface SearchPage {
  total: number;
  offset: number;
  data: CorpusDoc[];
}

export class CorpusError extends UserError {
  constructor(
    readonly file: string,
    readonly line: number | null,
    detail: string,
  ) {
    super(line === null ? `${file}: ${detail}` : `${file}:${line}: ${detail}`);
    this.name = 'CorpusError';
  }
}

function parseDoc(file: string, lineNo: number, text: string): CorpusDoc {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new CorpusError(file, lineNo, `not valid JSON (${(err as Error).message})`);
  }
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw new CorpusError(file, lineNo, 'not a JSON object');
  const r = raw as Record<string, unknown>;
  const id = typeof r.paperId === 'number' ? String(r.paperId) : r.paperId;
  if (typeof id !== 'string' || id === '') throw new CorpusError(file, lineNo, 'missing string field "paperId"');
  if (typeof r.title !== 'string') throw new CorpusError(file, lineNo, 'missing string field "title"');
  if (r.abstract !== undefined && r.abstract !== null && typeof r.abstract !== 'string') {
    throw new CorpusError(file, lineNo, '"abstract" must be a string');
  }
  const authors = Array.isArray(r.authors) ? r.authors.filter((a): a is string => typeof a === 'string') : [];
  const year = typeof r.year === 'number' && Number.isFinite(r.year) ? r.year : null;
  return {
    paperId: id,
    title: r.title,
    authors,
    abstract: typeof r.abstract === 'string' ? r.abstract : '',
    year,
    venue: typeof r.venue === 'string' ? r.venue : '',
  };
}

/** Reads a JSONL corpus; blank lines are allowed. Throws CorpusError naming file and line. */
export function loadCorpus(file: string): CorpusDoc[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new CorpusError(file, null, `cannot read corpus (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return parseCorpus(file, text);
}

/** Parses JSONL corpus text; `file` is only used in error messages. */
export function parseCorpus(file: string, text: string): CorpusDoc[] {
  const docs: CorpusDoc[] = [];
  const seen = new Set<string>();
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '') continue;
    const doc = parseDoc(file, i + 1, line);
    // Snippet ids are paper ids, and a citation must resolve to exactly one snippet.
    if (seen.has(doc.paperId)) throw new CorpusError(file, i + 1, `duplicate paperId "${doc.paperId}"`);
    seen.add(doc.paperId);
    docs.push(doc);
  }
  if (docs.length === 0) throw new CorpusError(file, null, 'corpus holds no documents');
  return docs;
}

const WORD_CHAR = /[\p{L}\p{N}\p{M}]/u;

/** Letters and digits of any script; surrogate halves count as word characters so that astral letters stay whole. */
function isWordChar(code: number): boolean {
  if (code < 128) return (code >= 48 && code <= 57) || (code >= 97 && code <= 122) || (code >= 65 && code <= 90);
  if (code >= 0xd800 && code <= 0xdfff) return true;
  return WORD_CHAR.test(String.fromCharCode(code));
}

function isSpace(code: number): boolean {
  return code === 32 || (code >= 9 && code <= 13) || code === 0xa0 || code === 0x2028 || code === 0x2029 || code === 0xfeff;
}

/**
 * Lower-cased whitespace chunks, trimmed of edge punctuation, plus their alphanumeric parts
 * when they contain letters.
 * Keeping the whole chunk ("grid-template-columns", "array.map") as a term lets an exact name
 * outrank the many near-duplicates that share its parts, while the parts still match looser
 * queries. A hand-written scan rather than regular expressions: the server tokenizes its whole
 * corpus at every start, and this is several times faster.
 */
export function tokenize(text: string): string[] {
  const lower = text.toLowerCase();
  const out: string[] = [];
  const n = lower.length;
  let i = 0;
  while (i < n) {
    while (i < n && isSpace(lower.charCodeAt(i))) i++;
    let end = i;
    while (end < n && !isSpace(lower.charCodeAt(end))) end++;
    let start = i;
    let stop = end;
    i = end;
    while (start < stop && !isWordChar(lower.charCodeAt(start))) start++;
    while (stop > start && !isWordChar(lower.charCodeAt(stop - 1))) stop--;
    if (start === stop) continue;
    let inner = start;
    let letters = false;
    for (let k = start; k < stop; k++) {
      const code = lower.charCodeAt(k);
      if (inner === k && isWordChar(code)) inner++;
      if (code > 57 && isWordChar(code)) letters = true;
    }
    out.push(lower.slice(start, stop));
    // Dates and version numbers ("2017-03-09", "10.1") stay atoms: their parts would match
    // unrelated numbers everywhere and make up most of the index.
    if (inner === stop || !letters) continue;
    let partStart = start;
    for (let k = inner; k <= stop; k++) {
      if (k === stop || !isWordChar(lower.charCodeAt(k))) {
        if (k > partStart) out.push(lower.slice(partStart, k));
        partStart = k + 1;
      }
    }
  }
  return out;
}

export interface CorpusIndexOptions {
  /** Weight of title matches relative to abstract matches. */
  titleBoost?: number;
  /**
   * Terms found in more than this share of documents are neither indexed nor searched for.
   * Per-field IDF would otherwise score a boilerplate word ("first", "supported") highly in the
   * one title it happens to appear in; dropping such terms also halves the index build time.
   */
  commonTermShare?: number;
  /** Below this many documents every term counts: in a tiny corpus, "common" means nothing. */
  commonTermMinDocs?: number;
}

type ResolvedOptions = Required<CorpusIndexOptions>;

/** The ranking's defaults; the on-disk index (fts.ts) weighs titles and drops common terms by the same numbers. */
export const DEFAULTS: ResolvedOptions = { titleBoost: 3, commonTermShare: 0.5, commonTermMinDocs: 20 };

/**
 * Bumped whenever tokenize() or the way documents are fed to MiniSearch changes, so that a
 * prebuilt index made by older code is rebuilt rather than trusted.
 */
export const INDEX_FORMAT = 'trajforge-corpus-index/2';

interface IndexedDoc {
  id: number;
  title: string;
  abstract: string;
}

interface SerializedIndex {
  format: string;
  corpusSha256: string;
  options: ResolvedOptions;
  commonTerms: string[];
  minisearch: AsPlainObject;
}

function miniSearchOptions(options: ResolvedOptions, common: ReadonlySet<string>): Options<IndexedDoc> {
  return {
    fields: ['title', 'abstract'],
    // Documents arrive already tokenized (terms joined by single spaces), so indexing only
    // splits; queries go through the real tokenizer.
    tokenize: (text) => (text === '' ? [] : text.split(' ')),
    processTerm: (term) => term,
    searchOptions: {
      tokenize,
      processTerm: (term) => (common.has(term) ? null : term),
      boost: { title: options.titleBoost },
      combineWith: 'OR',
      prefix: false,
      fuzzy: false,
    },
  };
}

export function sha256(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** One term's postings in one field: document ids and term frequencies, side by side. */
interface Postings {
  readonly docs: Uint32Array;
  readonly freqs: Uint32Array;
}

/** MiniSearch's default BM25 parameters and its `calcBM25Score`. */
const BM25 = { k: 1.2, b: 0.7, d: 0.5 } as const;

function bm25(termFreq: number, matching: number, total: number, fieldLength: number, avgFieldLength: number): number {
  const { k, b, d } = BM25;
  const invDocFreq = Math.log(1 + (total - matching + 0.5) / (matching + 0.5));
  return invDocFreq * (d + (termFreq * (k + 1)) / (termFreq + k * (1 - b + (b * fieldLength) / avgFieldLength)));
}

/**
 * MiniSearch's ranking, computed over flat postings built once from its serialised form
 * (`toJSON()`, serialization version 2). MiniSearch's own search builds a result object, a
 * terms array and a match map for every matching document of every query term, and a common
 * query matches a fifth of the corpus: one search cost milliseconds, and the corpus server, one
 * process answering calls in turn, became the queue of a run at hundreds of calls a second.
 * The scores here are the same numbers, summed in the same order, so the ranking is the same.
 */
class Scorer {
  readonly #fields: readonly { readonly boost: number; readonly avgLength: number; readonly lengths: Uint32Array; readonly postings: Map<string, Postings> }[];
  readonly #count: number;
  readonly #scores: Float64Array;
  /** The last query (by number) that touched each document, and how many distinct terms it matched. */
  readonly #seenIn: Int32Array;
  readonly #lastTerm: Int32Array;
  readonly #quality: Int32Array;
  #query = 0;
  /** One term's score per document while the term is scored, stamped so nothing is cleared between terms. */
  readonly #termScore: Float64Array;
  readonly #termSeen: Int32Array;
  #termStamp = 0;

  constructor(plain: AsPlainObject, fieldBoosts: Readonly<Record<string, number>>) {
    const count = plain.documentCount;
    this.#count = count;
    const fields: { boost: number; avgLength: number; lengths: Uint32Array; postings: Map<string, Postings> }[] = [];
    for (const [name, boost] of Object.entries(fieldBoosts)) {
      const fieldId = plain.fieldIds[name]!;
      const lengths = new Uint32Array(plain.nextId);
      for (const [docId, byField] of Object.entries(plain.fieldLength)) lengths[Number(docId)] = byField[fieldId] ?? 0;
      fields.push({ boost, avgLength: plain.averageFieldLength[fieldId]!, lengths, postings: new Map() });
      const postings = fields.at(-1)!.postings;
      for (const [term, byField] of plain.index) {
        const freqs = byField[String(fieldId)];
        if (!freqs) continue;
        const ids = Object.keys(freqs);
        const p = { docs: new Uint32Array(ids.length), freqs: new Uint32Array(ids.length) };
        for (let i = 0; i < ids.length; i++) {
          p.docs[i] = Number(ids[i]);
          p.freqs[i] = freqs[ids[i]!]!;
        }
        postings.set(term, p);
      }
    }
    this.#fields = fields;
    this.#scores = new Float64Array(plain.nextId);
    this.#seenIn = new Int32Array(plain.nextId);
    this.#lastTerm = new Int32Array(plain.nextId).fill(-1);
    this.#quality = new Int32Array(plain.nextId);
    this.#termScore = new Float64Array(plain.nextId);
    this.#termSeen = new Int32Array(plain.nextId);
  }

  /** Document ids that match any term, with MiniSearch's score (BM25 sum × distinct terms matched). */
  score(terms: readonly string[]): { id: number; score: number }[] {
    const query = ++this.#query;
    const scores = this.#scores;
    const touched: number[] = [];
    const distinct = new Map<string, number>();
    for (const term of terms) {
      if (!distinct.has(term)) distinct.set(term, distinct.size);
      const termIndex = distinct.get(term)!;
      // A term's score in one document is its title part plus its abstract part, added to
      // what earlier terms gave: MiniSearch's order of additions, so the same floating-point sums.
      const stamp = ++this.#termStamp;
      const termDocs: number[] = [];
      for (const field of this.#fields) {
        const p = field.postings.get(term);
        if (!p) continue;
        const matching = p.docs.length;
        for (let i = 0; i < matching; i++) {
          const doc = p.docs[i]!;
          const s = field.boost * bm25(p.freqs[i]!, matching, this.#count, field.lengths[doc]!, field.avgLength);
          if (this.#termSeen[doc] !== stamp) {
            this.#termSeen[doc] = stamp;
            this.#termScore[doc] = s;
            termDocs.push(doc);
          } else {
            this.#termScore[doc] = this.#termScore[doc]! + s;
          }
        }
      }
      for (const doc of termDocs) {
        const s = this.#termScore[doc]!;
        if (this.#seenIn[doc] !== query) {
          this.#seenIn[doc] = query;
          this.#lastTerm[doc] = -1;
          this.#quality[doc] = 0;
          scores[doc] = s;
          touched.push(doc);
        } else {
          scores[doc] = scores[doc]! + s;
        }
        // Terms are numbered in first-seen order: a repeat of an earlier term adds to the
        // score but not to the count of distinct terms matched.
        if (this.#lastTerm[doc]! < termIndex) {
          this.#quality[doc]!++;
          this.#lastTerm[doc] = termIndex;
        }
      }
    }
    return touched.map((id) => ({ id, score: scores[id]! * (this.#quality[id]! || 1) }));
  }
}

/** Pages that end past this rank are cut from a full sort. */
const TOP_K_MAX = 100;

export class CorpusIndex {
  readonly #scorer: Scorer;
  /** MiniSearch's own index: only serialize() and rankWithMiniSearch() use it, so a restored one is loaded on first use (a server's start-up skips it). */
  #index: MiniSearch<IndexedDoc> | undefined;
  readonly #plain: AsPlainObject | undefined;
  /** paperId → document, built on the first lookup (a search-only server never needs it). */
  #byId: Map<string, CorpusDoc> | undefined;

  private constructor(
    readonly docs: readonly CorpusDoc[],
    /** Terms left out of the index because most documents have them. */
    readonly commonTerms: ReadonlySet<string>,
    readonly options: ResolvedOptions,
    source: { readonly index: MiniSearch<IndexedDoc> } | { readonly plain: AsPlainObject },
  ) {
    this.#index = 'index' in source ? source.index : undefined;
    this.#plain = 'plain' in source ? source.plain : undefined;
    this.#scorer = new Scorer(this.#plain ?? this.#index!.toJSON(), { title: options.titleBoost, abstract: 1 });
  }

  get #miniSearch(): MiniSearch<IndexedDoc> {
    this.#index ??= MiniSearch.loadJS(this.#plain!, miniSearchOptions(this.options, this.commonTerms));
    return this.#index;
  }

  static build(docs: readonly CorpusDoc[], options: CorpusIndexOptions = {}): CorpusIndex {
    const resolved = { ...DEFAULTS, ...options };
    const titles = docs.map((d) => tokenize(d.title));
    const abstracts = docs.map((d) => tokenize(d.abstract));
    const docFreq = new Map<string, number>();
    const lastSeenIn = new Map<string, number>();
    const count = (terms: string[], doc: number): void => {
      for (const term of terms) {
        if (lastSeenIn.get(term) === doc) continue;
        lastSeenIn.set(term, doc);
        docFreq.set(term, (docFreq.get(term) ?? 0) + 1);
      }
    };
    for (let i = 0; i < docs.length; i++) {
      count(titles[i]!, i);
      count(abstracts[i]!, i);
    }
    const common = new Set<string>();
    if (docs.length >= resolved.commonTermMinDocs) {
      const cutoff = docs.length * resolved.commonTermShare;
      for (const [term, n] of docFreq) if (n > cutoff) common.add(term);
    }
    const keep = (terms: string[]): string => terms.filter((t) => !common.has(t)).join(' ');
    const index = new MiniSearch<IndexedDoc>(miniSearchOptions(resolved, common));
    // Array positions as ids: nothing is stored twice and results map back in O(1).
    index.addAll(docs.map((_, id) => ({ id, title: keep(titles[id]!), abstract: keep(abstracts[id]!) })));
    return new CorpusIndex(docs, common, resolved, { index });
  }

  /**
   * Restores an index written by serialize() for the same corpus bytes. Returns null when the
   * file was made from another corpus, by another index format or with other options: the
   * caller then builds afresh instead of searching a stale index.
   */
  static fromSerialized(
    docs: readonly CorpusDoc[],
    corpusSha256: string,
    json: string,
    options: CorpusIndexOptions = {},
  ): CorpusIndex | null {
    const resolved = { ...DEFAULTS, ...options };
    let saved: SerializedIndex;
    try {
      saved = JSON.parse(json) as SerializedIndex;
    } catch {
      return null;
    }
    if (
      saved?.format !== INDEX_FORMAT ||
      saved.corpusSha256 !== corpusSha256 ||
      JSON.stringify(saved.options) !== JSON.stringify(resolved) ||
      !Array.isArray(saved.commonTerms) ||
      saved.minisearch?.documentCount !== docs.length ||
      // The scorer reads this version's layout (MiniSearch.loadJS is not run at start-up to check it).
      saved.minisearch.serializationVersion !== 2
    ) {
      return null;
    }
    const common = new Set(saved.commonTerms);
    try {
      return new CorpusIndex(docs, common, resolved, { plain: saved.minisearch });
    } catch {
      return null;
    }
  }

  /** Deterministic for a given corpus: the build script ships this next to the bundled corpus. */
  serialize(corpusSha256: string): string {
    const saved: SerializedIndex = {
      format: INDEX_FORMAT,
      corpusSha256,
      options: this.options,
      commonTerms: [...this.commonTerms].sort(),
      minisearch: this.#plain ?? this.#miniSearch.toJSON(),
    };
    return JSON.stringify(saved);
  }

  /** The document with this paperId, exactly as search returns it; undefined when there is none. */
  document(id: string): CorpusDoc | undefined {
    this.#byId ??= new Map(this.docs.map((d) => [d.paperId, d]));
    return this.#byId.get(id);
  }

  /** Every matching document, best first; ties broken by paperId so output is stable. */
  rank(query: string): CorpusDoc[] {
    if (query.trim() === '') return [];
    const hits = this.#scorer.score(this.#queryTerms(query));
    hits.sort((a, b) => b.score - a.score || compare(this.docs[a.id]!.paperId, this.docs[b.id]!.paperId));
    return hits.map((h) => this.docs[h.id]!);
  }

  /** The query as MiniSearch would search it: tokenized, common terms dropped, repeats kept. */
  #queryTerms(query: string): string[] {
    return tokenize(query).filter((t) => t !== '' && !this.commonTerms.has(t));
  }

  /** MiniSearch's own ranking, for tests that hold the fast scorer to it. */
  rankWithMiniSearch(query: string): CorpusDoc[] {
    if (query.trim() === '') return [];
    const hits = this.#miniSearch.search(query);
    hits.sort((a, b) => b.score - a.score || compare(this.docs[a.id]!.paperId, this.docs[b.id]!.paperId));
    return hits.map((h) => this.docs[h.id as number]!);
  }

  search(query: string, limit = 5, offset = 0): SearchPage {
    if (query.trim() === '') return { total: 0, offset, data: [] };
    const hits = this.#scorer.score(this.#queryTerms(query));
    const want = offset + limit;
    const before = (a: { id: number; score: number }, b: { id: number; score: number }): boolean =>
      a.score > b.score || (a.score === b.score && compare(this.docs[a.id]!.paperId, this.docs[b.id]!.paperId) < 0);
    if (want > TOP_K_MAX) {
      hits.sort((a, b) => (before(a, b) ? -1 : before(b, a) ? 1 : 0));
      return { total: hits.length, offset, data: hits.slice(offset, want).map((h) => this.docs[h.id]!) };
    }
    // A page near the top needs only the best few: kept in order while the hits stream past,
    // instead of sorting every matching document (a common query matches a fifth of the corpus).
    const top: { id: number; score: number }[] = [];
    for (const h of hits) {
      if (top.length === want) {
        if (!before(h, top[want - 1]!)) continue;
        top.pop();
      }
      let at = top.length;
      while (at > 0 && before(h, top[at - 1]!)) at--;
      top.splice(at, 0, h);
    }
    return { total: hits.length, offset, data: top.slice(offset, want).map((h) => this.docs[h.id]!) };
  }
}

/** Where a prebuilt index for `corpusPath` lives: `corpus.jsonl` → `corpus.index.json`. */
export function indexPathFor(corpusPath: string): string {
  return corpusPath.replace(/\.jsonl$/i, '') + '.index.json';
}

export interface OpenedCorpus {
  index: CorpusIndex;
  /** `prebuilt` when a matching index file was found next to the corpus. */
  source: 'prebuilt' | 'built';
}

/**
 * Loads a corpus and its index: the prebuilt one next to it when it matches the corpus bytes,
 * otherwise one built in memory. Throws CorpusError for an unreadable or invalid corpus.
 */
export function openCorpus(corpusPath: string, options: CorpusIndexOptions = {}): OpenedCorpus {
  let bytes: Buffer;
  try {
    bytes = readFileSync(corpusPath);
  } catch (err) {
    throw new CorpusError(corpusPath, null, `cannot read corpus (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  const docs = parseCorpus(corpusPath, bytes.toString('utf8'));
  const digest = sha256(bytes);
  let saved: string | null = null;
  try {
    saved = readFileSync(indexPathFor(corpusPath), 'utf8');
  } catch {
    // No prebuilt index: the usual case for a user's own corpus.
  }
  const prebuilt = saved === null ? null : CorpusIndex.fromSerialized(docs, digest, saved, options);
  return prebuilt ? { index: prebuilt, source: 'prebuilt' } : { index: CorpusIndex.build(docs, options), source: 'built' };
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
