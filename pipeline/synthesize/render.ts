/**
 * What a seed looks like in the prompts (prompts/synth-*.txt): its documents, the links of a
 * chain, a walk's triples and its entities' descriptions, a draft's quotes. Each is the text of
 * one data block (the judge's renderGrading puts it between `<<<` and `>>>`, escaped).
 * Triples, descriptions and quotes are one JSON value a line, so a name with `|` or a newline
 * in it cannot shift a field.
 */
import type { Triple } from '../../schemas/index.js';
import type { Doc, Seed } from './seed.js';
import type { Quote } from './draft.js';

export function documentsBlock(docs: readonly Doc[]): string {
  return docs
    .map((d, i) => [`Document ${i + 1}`, `id: ${d.id}`, ...(d.title === undefined ? [] : [`title: ${d.title}`]), ...(d.url === undefined ? [] : [`url: ${d.url}`]), 'text:', d.text].join('\n'))
    .join('\n\n');
}

export function linksBlock(links: readonly string[]): string {
  return links.length === 0 ? '(one document: no links)' : links.map((l, i) => `document ${i + 1} -> document ${i + 2}: ${l}`).join('\n');
}

export function triplesBlock(triples: readonly Triple[]): string {
  return triples.map((t) => JSON.stringify([t.subject, t.relation, t.object])).join('\n');
}

export function descriptionsBlock(descriptions: ReadonlyMap<string, string>): string {
  return descriptions.size === 0 ? '(none)' : [...descriptions].map(([entity, description]) => JSON.stringify({ entity, description })).join('\n');
}

/** Everything the seed holds: its documents, or its triples and descriptions. What the obfuscator and the uniqueness check read. */
export function seedBlock(seed: Seed): string {
  return seed.kind === 'documents' ? documentsBlock(seed.docs) : `${triplesBlock(seed.triples)}\n${descriptionsBlock(seed.descriptions)}`;
}

/** The draft's evidence: its quotes, or the walk's triples. What the entailment check reads. */
export function evidenceBlock(seed: Seed, quotes: readonly Quote[]): string {
  return seed.kind === 'documents' ? quotes.map((q) => JSON.stringify({ doc_id: q.doc_id, quote: q.quote })).join('\n') : triplesBlock(seed.triples);
}
