/**
 * Documents in a tool result sent as the tool's own JSON (MiroThinker's form: the corpus
 * server's `{"total", "data": [...]}` or `{"documents": [...]}`, not trajforge's `<snippet>`
 * rendering), as the sim's snippets: what it quotes and cites.
 */
import type { Snippet } from './types.js';

const ID_FIELDS = ['paperId', 'id', 'docid', 'url'] as const;
const TEXT_FIELDS = ['text', 'abstract', 'snippet', 'content'] as const;

function field(o: Record<string, unknown>, keys: readonly string[]): string | undefined {
  for (const k of keys) if (typeof o[k] === 'string' && o[k] !== '') return o[k];
  return undefined;
}

/** The documents of a JSON tool result, or none when the text is not JSON holding some. */
export function jsonSnippets(text: string, split: (body: string) => { title: string | null; sentences: string[] }): Snippet[] {
  const t = text.trim();
  if (!t.startsWith('{') && !t.startsWith('[')) return [];
  let body: unknown;
  try {
    body = JSON.parse(t);
  } catch {
    return [];
  }
  const o = body as Record<string, unknown> | null;
  const list = Array.isArray(body) ? body : Array.isArray(o?.data) ? o.data : Array.isArray(o?.documents) ? o.documents : Array.isArray(o?.results) ? o.results : [body];
  const out: Snippet[] = [];
  for (const d of list) {
    if (d === null || typeof d !== 'object' || Array.isArray(d)) continue;
    const doc = d as Record<string, unknown>;
    const id = field(doc, ID_FIELDS);
    const content = field(doc, TEXT_FIELDS);
    if (id === undefined || content === undefined) continue;
    const title = typeof doc.title === 'string' ? doc.title : null;
    out.push({ id, title, sentences: split(content).sentences });
  }
  return out;
}
