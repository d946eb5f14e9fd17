/**
 * A seed, the unit of work of a synthesis run: one document, a chain of k linked documents, or
 * a walk of k triples through a knowledge graph, with a stable id. The run writes exactly one
 * line per seed (a kept question or a rejected draft); its id is how a resumed run knows it.
 */
import type { Triple } from '../../schemas/index.js';

export interface Doc {
  readonly id: string;
  readonly title: string | undefined;
  readonly text: string;
  readonly url: string | undefined;
}

export interface DocumentSeed {
  readonly kind: 'documents';
  readonly id: string;
  /** In chain order: the question starts from the first, the answer is in the last. */
  readonly docs: readonly Doc[];
  /** What links docs[i] to docs[i+1] (an entity both mention, or the next one's title for an explicit link). */
  readonly links: readonly string[];
}

export interface GraphSeed {
  readonly kind: 'graph';
  readonly id: string;
  /** In walk order: each triple's subject is the object of the one before. */
  readonly triples: readonly Triple[];
  /** What is known of the walk's entities, by name. */
  readonly descriptions: ReadonlyMap<string, string>;
}

export type Seed = DocumentSeed | GraphSeed;

/** Where seeds come from: the documents or the graph, read once, and the seeds drawn from them in a fixed order. */
export interface SeedSource {
  readonly kind: Seed['kind'];
  /** The file, as the config names it. */
  readonly path: string;
  /** Seeds this run will draw at most (`synthesis.seeds`, capped by `limit`). */
  readonly planned: number;
  /** The seeds, in their fixed order; fewer than `planned` when the draws run dry (`shortfall` says why). */
  seeds(): Iterable<Seed>;
  /** Set once `seeds()` stopped short of `planned`: why. */
  readonly shortfall: string | undefined;
}
