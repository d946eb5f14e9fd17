/**
 * A document as the browsing tools show it, OpenResearcher's way (the browser of gpt-oss that
 * it drives): the text wrapped into numbered lines of at most 80 characters, shown a page of
 * lines at a time (`open` with a cursor: the line a page starts at), and searched for an exact
 * piece of text, case-insensitively, each match shown with the lines after it (`find`).
 * `find` never runs the pattern as a regular expression: whatever a model sends, the search
 * is a plain substring scan, linear in the document.
 */

/** Characters per line, as gpt-oss wraps pages. */
export const LINE_WIDTH = 80;
/** Lines `open` shows when the call does not say. */
export const DEFAULT_PAGE_LINES = 20;
export const MAX_PAGE_LINES = 200;
/** `find`: matches shown at most, and lines shown from each (gpt-oss's 50 and 4). */
export const MAX_FIND_MATCHES = 50;
export const FIND_CONTEXT_LINES = 4;
/** Longest `find` pattern accepted. */
export const MAX_PATTERN_CHARS = 500;
/** Characters of a search result's snippet. */
export const SNIPPET_CHARS = 300;

/** The text as lines of at most `width` characters, broken at spaces where there are some; blank lines kept. */
export function wrapLines(text: string, width = LINE_WIDTH): string[] {
  const out: string[] = [];
  for (const raw of text.replace(/\r\n?/g, '\n').split('\n')) {
    let line = raw;
    if (line === '') out.push('');
    while (line !== '') {
      if (line.length <= width) {
        out.push(line);
        break;
      }
      const space = line.lastIndexOf(' ', width);
      const cut = space > 0 ? space : width;
      out.push(line.slice(0, cut));
      line = line.slice(space > 0 ? cut + 1 : cut);
    }
  }
  return out;
}

const numbered = (lines: readonly string[], from: number): string => lines.map((l, i) => `L${from + i}: ${l}`).join('\n');

export interface OpenedPage {
  /** A header saying which lines these are and where the next page starts, then the lines, each as `L<n>: `. */
  readonly text: string;
  readonly first_line: number;
  readonly last_line: number;
  readonly total_lines: number;
  /** The cursor of the next page, or null when this page reaches the end. */
  readonly next_cursor: number | null;
}

/** Lines [cursor, cursor + lines) of the document; a cursor past the end is an error message. */
export function openPage(text: string, cursor: number, lines: number): OpenedPage | string {
  const all = wrapLines(text);
  const total = all.length;
  if (cursor >= total) return `cursor ${cursor} is past the end: the document has ${total} lines (0-${total - 1}).`;
  const end = Math.min(total, cursor + lines);
  const next = end < total ? end : null;
  const header = `[lines ${cursor}-${end - 1} of ${total}${next === null ? '; end of document' : `; next page: cursor=${next}`}]`;
  return { text: `${header}\n${numbered(all.slice(cursor, end), cursor)}`, first_line: cursor, last_line: end - 1, total_lines: total, next_cursor: next };
}

export interface FoundMatches {
  /** One block per match: `match <i> at L<n>`, then that line and the ones after it; or a sentence saying there is none. */
  readonly text: string;
  /** The line number of each match shown. */
  readonly lines: readonly number[];
}

/** The lines holding `pattern` (case-insensitive, literal), each shown with the lines after it, as gpt-oss's find does. */
export function findInText(text: string, pattern: string): FoundMatches {
  const needle = pattern.toLowerCase();
  const all = wrapLines(text);
  const blocks: string[] = [];
  const found: number[] = [];
  for (let i = 0; i < all.length && found.length < MAX_FIND_MATCHES; i++) {
    if (!all[i]!.toLowerCase().includes(needle)) continue;
    found.push(i);
    blocks.push(`match ${found.length - 1} at L${i}\n${numbered(all.slice(i, i + FIND_CONTEXT_LINES), i)}`);
    i += FIND_CONTEXT_LINES - 1;
  }
  if (found.length === 0) return { text: `No match for ${JSON.stringify(pattern)} in the document's ${all.length} lines.`, lines: [] };
  return { text: blocks.join('\n\n'), lines: found };
}

/**
 * A search result's snippet: from the first line that holds one of the query's terms (the
 * start of the text when none does), about SNIPPET_CHARS characters; and that line's number,
 * for `open` to start at.
 */
export function snippetOf(text: string, terms: readonly string[]): { snippet: string; line: number } {
  const all = wrapLines(text);
  const wanted = terms.filter((t) => t.length >= 3);
  let line = all.findIndex((l) => {
    const lower = l.toLowerCase();
    return wanted.some((t) => lower.includes(t));
  });
  if (line < 0) line = 0;
  let snippet = '';
  for (let i = line; i < all.length && snippet.length < SNIPPET_CHARS; i++) snippet += (snippet === '' ? '' : ' ') + all[i];
  return { snippet: snippet.length > SNIPPET_CHARS ? `${snippet.slice(0, SNIPPET_CHARS)}…` : snippet, line };
}
