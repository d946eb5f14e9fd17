/**
 * What the sim's closed-book solver "knows": the documents and triples of the files it is
 * given (`knowledge`; default the bundled corpus), recalled only when a question names a thing
 * plainly: a document by its exact title, an entity by its exact name, in quotes. An obfuscated
 * question names neither, so the solver cannot answer it without searching; a question left as
 * drafted (the `easy` plant) is answered from memory.
 */
import { readFileSync } from 'node:fs';
import { fills, sentencesOf, type SimDoc, type SimTriple } from './synth-facts.js';

export class Memory {
  readonly titles = new Map<string, SimDoc>();
  readonly docs: SimDoc[] = [];
  readonly out = new Map<string, SimTriple[]>();

  static load(files: readonly string[]): Memory {
    const m = new Memory();
    for (const file of files) {
      for (const line of readFileSync(file, 'utf8').split('\n')) {
        if (line.trim() === '') continue;
        let row: Record<string, unknown>;
        try {
          row = JSON.parse(line) as Record<string, unknown>;
        } catch {
          continue;
        }
        m.#add(row);
      }
    }
    return m;
  }

  #add(row: Record<string, unknown>): void {
    const { subject, relation, object } = row;
    if (typeof subject === 'string' && typeof relation === 'string' && typeof object === 'string') {
      const list = this.out.get(subject);
      if (list === undefined) this.out.set(subject, [{ subject, relation, object }]);
      else list.push({ subject, relation, object });
      return;
    }
    const text = [row.text, row.abstract, row.content].find((v) => typeof v === 'string') as string | undefined;
    if (typeof row.title !== 'string' || text === undefined) return;
    const id = [row.id, row.paperId, row.doc_id].find((v) => typeof v === 'string') as string | undefined;
    const doc = { id: id ?? row.title, title: row.title, sentences: sentencesOf(text) };
    this.docs.push(doc);
    if (!this.titles.has(row.title)) this.titles.set(row.title, doc);
  }

  /** The value that fills the cloze in the most documents remembered, or undefined. */
  recallCloze(cloze: string, first?: SimDoc): string | undefined {
    const own = first === undefined ? new Set<string>() : fills(cloze, first.sentences);
    if (own.size > 0) return [...own][0];
    const votes = new Map<string, number>();
    for (const d of this.docs) for (const v of fills(cloze, d.sentences)) votes.set(v, (votes.get(v) ?? 0) + 1);
    return [...votes].sort((a, b) => b[1] - a[1])[0]?.[0];
  }

  /** Where following `relations` (first to last, spaces for underscores) from `entity` leads, or undefined. */
  follow(entity: string, relations: readonly string[]): string | undefined {
    let at = entity;
    for (const r of relations) {
      const edge = this.out.get(at)?.find((e) => e.relation.replace(/_/g, ' ') === r);
      if (edge === undefined) return undefined;
      at = edge.object;
    }
    return at;
  }
}
