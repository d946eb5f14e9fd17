/**
 * A document as the browsing tools show it, OpenResearcher's way (the browser of gpt-oss that
 * it drives): the text wrapped into numbered lines of at most 80 characters, shown a page of
 * lines at a time (`open` with a cursor: the line a page starts at), and searched for an exact
 * piece of text, case-insensitively, each match shown with the lines after it (`find`).
 * `find` never runs the pattern as a regular expression: whatever a model sends, the search
 * is a plain substring scan (String.prototype.indexOf), with no backtracking.
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

/**
 * The text as lines of at most `width` characters, broken at spaces where there are some, blank
 * lines kept; and after each line what its break took out (a space, a newline, or nothing for
 * a word cut in two), so the lines can be searched as the text they came from.
 */
function wrap(text: string, width: number): { lines: string[]; breaks: string[] } {
  const lines: string[] = [];
  const breaks: string[] = [];
  for (const raw of text.replace(/\r\n?/g, '\n').split('\n')) {
    let line = raw;
    while (line.length > width) {
      const space = line.lastIndexOf(' ', width);
      const cut = space > 0 ? space : width;
      lines.push(line.slice(0, cut));
      breaks.push(space > 0 ? ' ' : '');
      line = line.slice(space > 0 ? cut + 1 : cut);
    }
    lines.push(line);
    breaks.push('\n');
  }
  return { lines, breaks };
}

/** The text as lines of at most `width` characters, broken at spaces where there are some; blank lines kept. */
export function wrapLines(text: string, width = LINE_WIDTH): string[] {
  return wrap(text, width).lines;
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

/**
 * Where `pattern` occurs (case-insensitive, literal, also across a line break), each match shown
 * from its first line on, as gpt-oss's find does; a match inside the lines already shown for
 * the one before is not shown again.
 */
export function findInText(text: string, pattern: string): FoundMatches {
  const { lines, breaks } = wrap(text, LINE_WIDTH);
  // Lower-cased line by line, so that offsets in the joined text map back to lines even where lower-casing changes a length.
  const starts: number[] = [];
  let flat = '';
  for (let i = 0; i < lines.length; i++) {
    starts.push(flat.length);
    flat += lines[i]!.toLowerCase() + breaks[i]!;
  }
  const needle = pattern.toLowerCase();
  const blocks: string[] = [];
  const found: number[] = [];
  let from = 0;
  while (found.length < MAX_FIND_MATCHES) {
    const at = flat.indexOf(needle, from);
    if (at < 0) break;
    const line = lineAt(starts, at);
    found.push(line);
    blocks.push(`match ${found.length - 1} at L${line}\n${numbered(lines.slice(line, line + FIND_CONTEXT_LINES), line)}`);
    const next = line + FIND_CONTEXT_LINES;
    if (next >= lines.length) break;
    from = starts[next]!;
  }
  if (found.length === 0) return { text: `No match for ${JSON.stringify(pattern)} in the document's ${lines.length} lines.`, lines: [] };
  return { text: blocks.join('\n\n'), lines: found };
}

/** The line an offset of the joined text falls in: the last start at or before it. */
function lineAt(starts: readonly number[], offset: number): number {
  let lo = 0;
  let hi = starts.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (starts[mid]! <= offset) lo = mid;
    else hi = mid - 1;
  }
  return lo;
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
