/**
 * Seeds from documents (`synthesis.source.kind: documents`): a JSONL of `{id, title?, text,
 * url?}` (field names as `source.fields` say; the bundled corpus's `paperId` and `abstract` are
 * among the defaults). With `hops: 1` each document is a seed, in an order drawn from the run's
 * seed. With `hops: k` a seed is a chain of k documents, each reached from the one before by a
 * link: an entity both mention (an ISO date, a name of several capitalised words) that between
 * `link.min_docs` and `link.max_docs` documents mention (a commoner one leads anywhere), or an
 * id the document lists in its `links` field.
 *
 * The documents are held in memory (the chains need them all); the seeds are drawn one at a
 * time, seed i from its own generator (draws.ts), so a resumed run draws the same seeds.
 */
import type { SynthesisConfig } from '../../schemas/index.js';
import { inputError } from '../errors.js';
import { drawsFor, permutation, pick, type Draw } from './draws.js';
import { field, sourceRows, textField } from './read-jsonl.js';
import type { Doc, DocumentSeed, SeedSource } from './seed.js';

/** Draws of a chain before seed i is given up as a dead end. */
const CHAIN_ATTEMPTS = 8;
/** Seed numbers tried per seed planned, before the draws count as run dry (chains repeat, or lead nowhere). */
const DRAWS_PER_SEED = 4;
/** Chains and walks drawn when `synthesis.seeds` is not set. */
export const DEFAULT_DRAWN_SEEDS = 1000;

/** ISO dates and names of two or more capitalised words: what links documents. */
const ENTITY = /\b\d{4}-\d{2}-\d{2}\b|\b\p{Lu}[\p{L}\p{N}]+(?:\s+\p{Lu}[\p{L}\p{N}]+)+\b/gu;

interface LinkedDoc extends Doc {
  /** Explicit links, as ids (resolved once every document is read). */
  readonly linkIds: readonly string[];
}

export async function readDocuments(cfg: SynthesisConfig): Promise<LinkedDoc[]> {
  const { path, fields } = cfg.source;
  const docs: LinkedDoc[] = [];
  const seen = new Map<string, number>();
  for await (const r of sourceRows(path)) {
    const id = textField(path, r, fields.id, 'id');
    const before = seen.get(id);
    if (before !== undefined) throw inputError(path, r.line, 'id', `"${id}" is already the id of the document on line ${before}`);
    seen.set(id, r.line);
    const title = field(r.row, fields.title) === undefined ? undefined : textField(path, r, fields.title, 'title');
    const url = field(r.row, fields.url) === undefined ? undefined : textField(path, r, fields.url, 'url');
    const links = field(r.row, fields.links)?.value;
    if (links !== undefined && !(Array.isArray(links) && links.every((l) => typeof l === 'string'))) throw inputError(path, r.line, 'links', 'expected a list of document ids');
    // What the writer is shown is what its quotes are checked against.
    const text = textField(path, r, fields.text, 'text').slice(0, cfg.max_document_chars);
    docs.push({ id, title, text, url, linkIds: (links as string[] | undefined) ?? [] });
  }
  if (docs.length === 0) throw inputError(path, undefined, undefined, 'no documents');
  return docs;
}

export async function openDocuments(cfg: SynthesisConfig, limit: number | undefined): Promise<SeedSource> {
  const docs = await readDocuments(cfg);
  const cap = limit ?? Infinity;
  if (cfg.hops === 1) {
    const planned = Math.min(docs.length, cfg.seeds ?? docs.length, cap);
    const order = permutation(docs.length, `${cfg.seed}\u0000documents`);
    return {
      kind: 'documents',
      path: cfg.source.path,
      planned,
      shortfall: undefined,
      *seeds() {
        for (let i = 0; i < planned; i++) {
          const doc = docs[order[i]!]!;
          yield { kind: 'documents', id: `d:${doc.id}`, docs: [doc], links: [] } satisfies DocumentSeed;
        }
      },
    };
  }
  return new ChainSource(cfg, docs, Math.min(cfg.seeds ?? DEFAULT_DRAWN_SEEDS, cap));
}

/** Chains of `hops` documents, each seed drawn on its own; a chain drawn twice is one seed. */
class ChainSource implements SeedSource {
  readonly kind = 'documents';
  readonly path: string;
  readonly planned: number;
  shortfall: string | undefined;
  readonly #cfg: SynthesisConfig;
  readonly #docs: readonly LinkedDoc[];
  /** Per document: the entities it shares with between min_docs and max_docs documents, and the documents it links to. */
  readonly #entities: readonly (readonly string[])[];
  readonly #holders = new Map<string, number[]>();
  readonly #linked: readonly (readonly number[])[];

  constructor(cfg: SynthesisConfig, docs: readonly LinkedDoc[], planned: number) {
    this.#cfg = cfg;
    this.#docs = docs;
    this.path = cfg.source.path;
    this.planned = planned;
    const byId = new Map(docs.map((d, i) => [d.id, i]));
    this.#linked = docs.map((d) => d.linkIds.flatMap((id) => (byId.has(id) ? [byId.get(id)!] : [])));
    const per = docs.map((d) => [...new Set(d.text.match(ENTITY) ?? [])]);
    per.forEach((es, i) => {
      for (const e of es) {
        const list = this.#holders.get(e);
        if (list === undefined) this.#holders.set(e, [i]);
        else list.push(i);
      }
    });
    const { min_docs, max_docs } = cfg.link;
    this.#entities = per.map((es) => es.filter((e) => this.#holders.get(e)!.length >= min_docs && this.#holders.get(e)!.length <= max_docs));
  }

  *seeds(): Iterable<DocumentSeed> {
    const drawn = new Set<string>();
    let n = 0;
    for (let i = 0; n < this.planned && i < this.planned * DRAWS_PER_SEED; i++) {
      const seed = this.#chain(drawsFor(`${this.#cfg.seed}\u0000chain\u0000${i}`));
      if (seed === undefined || drawn.has(seed.id)) continue;
      drawn.add(seed.id);
      n++;
      yield seed;
    }
    if (n < this.planned) this.shortfall = `${n} distinct chains of ${this.#cfg.hops} documents found in ${this.planned * DRAWS_PER_SEED} draws (of ${this.planned} planned): few links between documents (synthesis.link)`;
  }

  #chain(draw: Draw): DocumentSeed | undefined {
    for (let attempt = 0; attempt < CHAIN_ATTEMPTS; attempt++) {
      const path = [Math.floor(draw() * this.#docs.length)];
      const links: string[] = [];
      while (path.length < this.#cfg.hops) {
        const step = this.#next(path, draw);
        if (step === undefined) break;
        path.push(step.doc);
        links.push(step.via);
      }
      if (path.length < this.#cfg.hops) continue;
      const docs = path.map((i) => this.#docs[i]!);
      return { kind: 'documents', id: `c:${docs.map((d) => d.id).join('>')}`, docs: docs.map(({ linkIds: _l, ...d }) => d), links };
    }
    return undefined;
  }

  /** A document not yet in the chain, linked to its last one, and what links them. */
  #next(path: readonly number[], draw: Draw): { doc: number; via: string } | undefined {
    const at = path.at(-1)!;
    const explicit = this.#linked[at]!.filter((d) => !path.includes(d)).map((doc) => ({ doc, via: this.#docs[doc]!.title ?? this.#docs[doc]!.id }));
    const shared = this.#entities[at]!.filter((e) => this.#holders.get(e)!.some((d) => !path.includes(d)));
    const choice = pick(draw, [...explicit.map((x) => ({ explicit: x })), ...shared.map((entity) => ({ entity }))]);
    if (choice === undefined) return undefined;
    if ('explicit' in choice) return choice.explicit;
    const doc = pick(draw, this.#holders.get(choice.entity)!.filter((d) => !path.includes(d)))!;
    return { doc, via: choice.entity };
  }
}
