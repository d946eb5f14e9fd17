/**
 * Loading and ranking for the offline corpus. Kept apart from server.ts so that it can be
 * imported (tests, benchmarks) without starting an MCP server on stdio.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import MiniSearch, { type AsPlainObject, type Options } from 'minisearch';

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

export class CorpusError extends Error {
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

const DEFAULTS: ResolvedOptions = { titleBoost: 3, commonTermShare: 0.5, commonTermMinDocs: 20 };

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

export class CorpusIndex {
  private constructor(
    readonly docs: readonly CorpusDoc[],
    /** Terms left out of the index because most documents have them. */
    readonly commonTerms: ReadonlySet<string>,
    readonly options: ResolvedOptions,
    private readonly index: MiniSearch<IndexedDoc>,
  ) {}

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
    return new CorpusIndex(docs, common, resolved, index);
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
      saved.minisearch?.documentCount !== docs.length
    ) {
      return null;
    }
    const common = new Set(saved.commonTerms);
    try {
      return new CorpusIndex(docs, common, resolved, MiniSearch.loadJS(saved.minisearch, miniSearchOptions(resolved, common)));
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
      minisearch: this.index.toJSON(),
    };
    return JSON.stringify(saved);
  }

  /** Every matching document, best first; ties broken by paperId so output is stable. */
  rank(query: string): CorpusDoc[] {
    if (query.trim() === '') return [];
    const hits = this.index.search(query);
    hits.sort((a, b) => b.score - a.score || compare(this.docs[a.id]!.paperId, this.docs[b.id]!.paperId));
    return hits.map((h) => this.docs[h.id as number]!);
  }

  search(query: string, limit = 5, offset = 0): SearchPage {
    const ranked = this.rank(query);
    return { total: ranked.length, offset, data: ranked.slice(offset, offset + limit) };
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
