/**
 * The `<tool_output>` block every dialect shows a tool result in (tulu's form: a header line,
 * then one `<snippet id="…">` per document), and the escaping that keeps tool text inert: only
 * trajforge writes structure, so a web page can forge no dialect's tags. mcp-xml and native
 * render with this and escape their own call tags on top (`escapeTagNamed`).
 */
import type { RenderedOutput, ToolDocument, ToolResultView } from './types.js';
import { SLASH, startsWithCI } from './tags.js';

/**
 * `s` with the `<` of every tag that `escapes(s, at)` names made `&lt;` (`at`: where the name
 * starts, after `<` or `</`), and how many were. One pass from `<` to `<`.
 */
function escapeTags(s: string, escapes: (s: string, at: number, close: boolean) => boolean): { text: string; count: number } {
  let p = s.indexOf('<');
  if (p === -1) return { text: s, count: 0 };
  let out = '';
  let last = 0;
  let count = 0;
  while (p !== -1) {
    const close = s.charCodeAt(p + 1) === SLASH;
    if (escapes(s, close ? p + 2 : p + 1, close)) {
      out += `${s.slice(last, p)}&lt;`;
      last = p + 1;
      count++;
    }
    p = s.indexOf('<', p + 1);
  }
  return { text: out + s.slice(last), count };
}

const ESCAPED_OPEN = ['tool_output', 'call_tool', 'answer', 'snippet', 'cite', 'think'];
// `</call>` too: the parsers accept it as a call's close.
const ESCAPED_CLOSE = [...ESCAPED_OPEN, 'call'];

/**
 * Makes tool text inert: every `<` that starts one of the tulu dialect's tag names (open or
 * close, any case, as a prefix — broader than what the scanner accepts) becomes `&lt;`.
 */
export function escapeToolText(s: string): string {
  return escapeTags(s, isTuluTag).text;
}

function isTuluTag(s: string, at: number, close: boolean): boolean {
  return (close ? ESCAPED_CLOSE : ESCAPED_OPEN).some((w) => startsWithCI(s, at, w));
}

/**
 * Escapes `<tool_output`/`</tool_output` left in text the repairer keeps: mentioned inside a
 * closed think, inside an answer, or in forms the scanner does not take as tags
 * (`<tool_outputs>`). Only trajforge writes tool output, so the kept model text must not
 * contain it in any form a reader (ours or a naive one) could take for structure.
 */
export function neutraliseToolOutput(s: string): { text: string; count: number } {
  return escapeTags(s, isToolOutputTag);
}

function isToolOutputTag(s: string, at: number): boolean {
  return startsWithCI(s, at, 'tool_output');
}

/** Escapes `<name` / `</name` in any case (`&lt;`); the rest is already escaped text. */
export function escapeTagNamed(s: string, name: string): string {
  return escapeTags(s, (text, at) => text.slice(at, at + name.length).toLowerCase() === name).text;
}

/**
 * An id goes inside `id="…"` and into `<cite id="a,b">` lists, so quotes, angle brackets and
 * the list separators cannot appear in it; they become `_`. The returned snippet ids are the
 * sanitised ones, i.e. exactly what the model can cite.
 */
export function sanitizeSnippetId(id: string): string {
  return id.trim().replace(/[\s"'<>,;&]/g, '_');
}

function renderSnippet(id: string, body: string): string {
  return `<snippet id="${id}">${body}</snippet>`;
}

function documentBody(doc: ToolDocument): string {
  const lines: string[] = [];
  if (doc.title !== undefined && doc.title.trim() !== '') lines.push(`Title: ${escapeToolText(doc.title.trim())}`);
  if (doc.meta !== undefined && doc.meta.trim() !== '') lines.push(escapeToolText(doc.meta.trim()));
  if (doc.text.trim() !== '') lines.push(escapeToolText(doc.text.trim()));
  return lines.join('\n');
}

/** A tool result as a `<tool_output>` block: its error, or its header and documents (or text), tool text escaped. */
export function renderToolOutput(view: ToolResultView): RenderedOutput {
  if (view.error !== undefined) {
    const msg = escapeToolText(view.error.trim());
    return { text: `<tool_output>${/^error\b/i.test(msg) ? msg : `Error: ${msg}`}</tool_output>`, snippetIds: [] };
  }
  const lines = ['<tool_output>'];
  const ids: string[] = [];
  if (view.header !== undefined && view.header.trim() !== '') lines.push(escapeToolText(view.header.trim()));
  if (view.documents !== undefined && view.documents.length > 0) {
    for (const doc of view.documents) {
      const id = sanitizeSnippetId(doc.id);
      ids.push(id);
      lines.push(renderSnippet(id, documentBody(doc)));
    }
  } else if (view.text !== undefined && view.text.trim() !== '') {
    const body = escapeToolText(view.text.trim());
    if (view.textId !== undefined) {
      const id = sanitizeSnippetId(view.textId);
      ids.push(id);
      lines.push(renderSnippet(id, body));
    } else {
      lines.push(body);
    }
  } else if (lines.length === 1) {
    lines.push('No results found.');
  }
  lines.push('</tool_output>');
  return { text: lines.join('\n'), snippetIds: ids };
}
