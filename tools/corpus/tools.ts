/**
 * The corpus server's tools, over any CorpusStore: OpenResearcher's three browser primitives —
 * `search`, `open` (a page of a document's numbered lines from a cursor) and `find` (an exact
 * piece of text in a document) — and the earlier `pubmed_search` / `read_document`, whose
 * result shapes existing configs rely on. Every result is one text part holding JSON, in the
 * shape each tool's description states (tests/tools/corpus-index.test.ts holds real results
 * to those descriptions). Results whose URL the leak guard blocks are dropped, and documents it
 * blocks are not opened; each strike is recorded in the result's `_meta`.
 *
 * The server is shared by every sample of a run, so it keeps no per-trajectory state: `open`
 * and `find` name their document, and `open`'s cursor is the line its page starts at.
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { LeakGuard, leakMeta, leakRefusal, type LeakStrike } from '../web/policy.js';
import { DEFAULT_PAGE_LINES, MAX_PAGE_LINES, MAX_PATTERN_CHARS, findInText, openPage, snippetOf } from './pages.js';
import { textTerms } from './fts.js';
import type { CorpusRecord } from './record.js';
import type { CorpusStore } from './store.js';

/** What the server does around every call: its fault switches, the call log, padding of results. */
export interface CallHooks {
  /** Runs first; `hang` means the call must never answer. */
  before(): Promise<{ n: number; hang: boolean }>;
  /** Runs before the answer is sent: stray output, the call log line. */
  after(n: number, what: string, log: Record<string, unknown>): void;
  /** The text of a document as results show it (`--huge-result` pads it). */
  pad(text: string): string;
}

/** Every tool this server can offer, in the order it lists them. */
export const CORPUS_TOOL_NAMES = ['pubmed_search', 'read_document', 'search', 'open', 'find'] as const;
export type CorpusToolName = (typeof CORPUS_TOOL_NAMES)[number];

export interface CorpusTools {
  readonly store: CorpusStore;
  /** The tools to offer (`--tools`). */
  readonly offer: ReadonlySet<CorpusToolName>;
  readonly guard: LeakGuard;
  readonly hooks: CallHooks;
  readonly pageLines?: number;
}

type Reply = { content: { type: 'text'; text: string }[]; isError?: boolean; _meta?: Record<string, unknown> };

const reply = (body: unknown, strikes: readonly LeakStrike[] = []): Reply => ({ content: [{ type: 'text', text: JSON.stringify(body) }], ...leakMeta(strikes) });
const failure = (text: string, strikes: readonly LeakStrike[] = []): Reply => ({ isError: true, content: [{ type: 'text', text }], ...leakMeta(strikes) });
const never = (): Promise<never> => new Promise<never>(() => {});

/** The error for an id the corpus does not hold, naming it, and the id it most likely meant when only its case differs. */
export function unknownId(store: CorpusStore, id: string, tool: string): string {
  const near = store.suggest(id);
  const hint = near === undefined ? ` Use an id (paperId) that ${tool} returned.` : ` Did you mean ${JSON.stringify(near)}?`;
  return `No document with id ${JSON.stringify(id)} in the corpus.${hint}`;
}

/** The document to open, or the reply that refuses it (unknown, or blocked by the leak guard). */
function lookup(t: CorpusTools, id: string, tool: string): { doc: CorpusRecord } | { refused: Reply } {
  const doc = t.store.get(id);
  if (doc === undefined) return { refused: failure(unknownId(t.store, id, tool)) };
  for (const url of [doc.url, /^[a-z]+:\/\//i.test(id.trim()) ? id.trim() : null]) {
    const rule = url ? t.guard.match(url) : undefined;
    if (url && rule !== undefined) return { refused: failure(leakRefusal(url, rule), [{ url, rule, where: 'fetch' }]) };
  }
  return { doc };
}

const urlPart = (d: CorpusRecord): { url?: string } => (d.url === null ? {} : { url: d.url });

/**
 * A call on one document (read_document, open, find): the fault hooks around it, the lookup
 * (refused when unknown or blocked), the call log line, then `answer` with the document.
 */
async function onDocument(t: CorpusTools, id: string, searchTool: string, log: { tool: string; what: string } & Record<string, unknown>, answer: (d: CorpusRecord) => Reply): Promise<Reply> {
  const { n, hang } = await t.hooks.before();
  if (hang) return never();
  const found = lookup(t, id, searchTool);
  const { what, ...line } = log;
  t.hooks.after(n, what, { ...line, found: 'doc' in found });
  return 'refused' in found ? found.refused : answer(found.doc);
}

export function registerCorpusTools(server: McpServer, t: CorpusTools): void {
  registerPubmedShaped(server, t);
  registerBrowser(server, t);
}

/** `pubmed_search` and `read_document`: the shapes of the first corpus server, kept for the configs and data made with it. */
function registerPubmedShaped(server: McpServer, t: CorpusTools): void {
  // Only the tools asked for are registered: a config that exposes every tool of a server sees these and no others.
  if (t.offer.has('pubmed_search')) {
    server.registerTool(
      'pubmed_search',
      {
        title: 'Search the local corpus',
        description:
          'Full-text search (BM25) over a local document corpus. Returns JSON ' +
          '{"total", "offset", "data": [{"paperId", "title", "authors", "abstract", "year", "venue"}]}, best match first.',
        inputSchema: {
          query: z.string().describe('Search words: keywords or a question in natural language'),
          limit: z.number().int().min(1).max(50).default(5).describe('Number of results to return (1-50)'),
          offset: z.number().int().min(0).default(0).describe('Number of ranked results to skip, for paging'),
        },
      },
      async ({ query, limit, offset }) => {
        const { n, hang } = await t.hooks.before();
        if (hang) return never();
        const found = t.store.search(query, limit, offset);
        const strikes: LeakStrike[] = [];
        const data = t.guard.filter(found.hits, (d) => d.url, strikes).map((d, i) => ({
          paperId: d.id,
          title: d.title,
          authors: d.authors,
          abstract: i === 0 ? t.hooks.pad(d.text) : d.text,
          year: d.year,
          venue: d.venue,
        }));
        t.hooks.after(n, query, { query, limit, offset, total: found.total });
        return reply({ total: found.total, offset, data }, strikes);
      },
    );
  }
  if (t.offer.has('read_document')) {
    server.registerTool(
      'read_document',
      {
        title: 'Read one document of the local corpus',
        description:
          'Reads one document of the local corpus whole, by its id: the paperId that pubmed_search returned. Returns JSON ' +
          '{"documents": [{"paperId", "title", "authors", "year", "venue", "text"}]} holding that one document, its full text in "text". ' +
          'An id the corpus does not hold is an error.',
        inputSchema: {
          id: z.string().describe('The document id, exactly as pubmed_search returned it (its paperId)'),
        },
      },
      async ({ id }) =>
        onDocument(t, id, 'pubmed_search', { tool: 'read_document', what: id, id }, (d) =>
          reply({ documents: [{ paperId: d.id, title: d.title, authors: d.authors, year: d.year, venue: d.venue, text: t.hooks.pad(d.text) }] }),
        ),
    );
  }
}

/** `search`, `open` and `find`: OpenResearcher's browsing primitives, stateless. */
function registerBrowser(server: McpServer, t: CorpusTools): void {
  const pageLines = t.pageLines ?? DEFAULT_PAGE_LINES;
  if (t.offer.has('search')) {
    server.registerTool(
      'search',
      {
        title: 'Search the corpus',
        description:
          'Full-text search (BM25) over the offline document corpus. Returns JSON ' +
          '{"query", "total", "results": [{"id", "url", "title", "snippet", "line"}]}, best match first: "total" counts every match, ' +
          '"url" is present when the document has one, "snippet" is text from the first line that holds a query word, and "line" is that line\'s number (a cursor for open).',
        inputSchema: {
          query: z.string().describe('Search words: keywords or a question in natural language'),
          k: z.number().int().min(1).max(50).default(10).describe('Number of results to return (1-50)'),
        },
      },
      async ({ query, k }) => {
        const { n, hang } = await t.hooks.before();
        if (hang) return never();
        const found = t.store.search(query, k, 0);
        const strikes: LeakStrike[] = [];
        const terms = textTerms(query);
        const results = t.guard.filter(found.hits, (d) => d.url, strikes).map((d) => ({ id: d.id, ...urlPart(d), title: d.title, ...snippetOf(t.hooks.pad(d.text), terms) }));
        t.hooks.after(n, query, { tool: 'search', query, k, total: found.total });
        return reply({ query, total: found.total, results }, strikes);
      },
    );
  }
  if (t.offer.has('open')) {
    server.registerTool(
      'open',
      {
        title: 'Open a document of the corpus',
        description:
          `Opens a document by its id (or its URL) and shows a page of its text: lines of at most 80 characters, each as "L<n>: ", from line "cursor" (default 0), ${pageLines} lines unless "lines" says. Returns JSON ` +
          '{"documents": [{"id", "url", "title", "text", "first_line", "last_line", "total_lines", "next_cursor"}]}: "text" starts with a header naming the lines shown and the next page\'s cursor, ' +
          '"next_cursor" is null on the last page, "url" is present when the document has one. An id the corpus does not hold, or a cursor past the end, is an error.',
        inputSchema: {
          id: z.string().describe('The document id as search returned it, or the document\'s URL'),
          cursor: z.number().int().min(0).default(0).describe('The line to start the page at: 0 for the start, next_cursor for the next page, a search result\'s or find match\'s line to go there'),
          lines: z.number().int().min(1).max(MAX_PAGE_LINES).optional().describe(`Lines to show (1-${MAX_PAGE_LINES}, default ${pageLines})`),
        },
      },
      async ({ id, cursor, lines }) =>
        onDocument(t, id, 'search', { tool: 'open', what: id, id, cursor }, (d) => {
          const page = openPage(t.hooks.pad(d.text), cursor, lines ?? pageLines);
          return typeof page === 'string' ? failure(page) : reply({ documents: [{ id: d.id, ...urlPart(d), title: d.title, ...page }] });
        }),
    );
  }
  if (t.offer.has('find')) {
    server.registerTool(
      'find',
      {
        title: 'Find text in a document of the corpus',
        description:
          'Finds an exact piece of text (case-insensitive; not a regular expression) in a document given by its id or URL, as open numbers its lines. Returns JSON ' +
          '{"documents": [{"id", "url", "title", "pattern", "matches", "lines", "text"}]}: "lines" holds the line number of each match (at most 50, each a cursor for open), "matches" their count, ' +
          '"text" a block per match ("match <i> at L<n>" and the lines from there) or a sentence saying there is none; "url" is present when the document has one.',
        inputSchema: {
          id: z.string().describe('The document to search in: its id as search returned it, or its URL'),
          pattern: z.string().min(1).max(MAX_PATTERN_CHARS).describe('The text to find, taken literally'),
        },
      },
      async ({ id, pattern }) =>
        onDocument(t, id, 'search', { tool: 'find', what: pattern, id, pattern }, (d) => {
          const m = findInText(t.hooks.pad(d.text), pattern);
          return reply({ documents: [{ id: d.id, ...urlPart(d), title: d.title, pattern, matches: m.lines.length, lines: m.lines, text: m.text }] });
        }),
    );
  }
}
