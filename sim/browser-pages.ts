/**
 * What a browsing agent reads in the corpus server's `open` and `find` pages (tools/corpus,
 * docs/tools.md): the text wrapped into numbered lines (`L3: …`) under a header
 * (`[lines 0-19 of 57; …]`, `match 1 at L3`). The sim reads them as prose, the wrapped lines of
 * one passage joined again, so a sentence cut by the wrap is one sentence; and it chooses what to
 * `find` in a page it opened as a reader would: the word of its subtask that names what it is
 * after (a browser, a vendor), not the words the title already matched.
 */
import { contentWords, parseSnippets, words } from './policy.js';
import type { Snippet } from './types.js';

const PAGE_HEADER = /^\[lines \d+-\d+ of \d+;[^\]]*\]$/;
const MATCH_HEADER = /^match \d+ at L\d+$/;
const NUMBERED = /^L\d+: ?/;

/** A page's text with its line numbers and headers taken out, each passage's lines joined into one. */
export function unpage(text: string): string {
  const out: string[] = [];
  let inPassage = false;
  for (const line of text.split('\n')) {
    if (PAGE_HEADER.test(line.trim()) || MATCH_HEADER.test(line.trim())) {
      inPassage = false;
      continue;
    }
    if (NUMBERED.test(line)) {
      const body = line.replace(NUMBERED, '');
      if (inPassage) out[out.length - 1] += ` ${body}`;
      else out.push(body);
      inPassage = true;
      continue;
    }
    inPassage = false;
    out.push(line);
  }
  return out.join('\n');
}

/** The snippets of a result that may hold pages (`open`, `find`), read as prose. */
export function pageSnippets(result: string): Snippet[] {
  return parseSnippets(unpage(result));
}

/**
 * What to `find` in a document opened for `focus`: a word of the focus that its title does not
 * hold and its text does, a capitalised one (a name) first; null when there is none.
 */
export function findPattern(focus: string, doc: Snippet): string | null {
  const title = new Set(words(doc.title ?? ''));
  const text = doc.sentences.join(' ').toLowerCase();
  const candidates = contentWords(focus).filter((w) => !words(w).every((p) => title.has(p)) && text.includes(w.toLowerCase()));
  return candidates.find((w) => /^\p{Lu}/u.test(w)) ?? candidates[0] ?? null;
}

/** One snippet per document, in first-seen order: the sentences of its pages and finds together, each once. */
export function byDocument(snippets: readonly Snippet[]): Snippet[] {
  const docs = new Map<string, { id: string; title: string | null; sentences: string[] }>();
  for (const s of snippets) {
    const doc = docs.get(s.id) ?? { id: s.id, title: s.title, sentences: [] };
    docs.set(s.id, doc);
    for (const sentence of s.sentences) if (!doc.sentences.includes(sentence)) doc.sentences.push(sentence);
  }
  return [...docs.values()];
}
