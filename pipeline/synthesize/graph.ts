/**
 * Seeds from a knowledge graph (`synthesis.source.kind: graph`), as the Data Designer recipe
 * makes them from Wikidata: a JSONL of triples `{subject, relation, object}`, and random walks
 * of `hops` triples through it, each from the entity the step before reached, never back to an
 * entity the walk has seen. An optional JSONL of `{entity, description}` (`source.descriptions`)
 * says what obfuscation may call an entity instead of its name.
 *
 * The graph is held in memory as three columns of interned names; the walks are drawn one at a
 * time, walk i from its own generator (draws.ts), so a resumed run draws the same seeds.
 */
import type { SynthesisConfig, Triple } from '../../schemas/index.js';
import { inputError } from '../errors.js';
import { DEFAULT_DRAWN_SEEDS } from './documents.js';
import { drawsFor, pick, shortHash, type Draw } from './draws.js';
import { sourceRows, textField } from './read-jsonl.js';
import type { GraphSeed, SeedSource } from './seed.js';

const WALK_ATTEMPTS = 8;
const DRAWS_PER_SEED = 4;

interface Graph {
  readonly names: string[];
  readonly subject: Int32Array;
  readonly relation: Int32Array;
  readonly object: Int32Array;
  /** Edge indices by subject. */
  readonly out: Map<number, number[]>;
  readonly descriptions: Map<string, string>;
}

async function readGraph(cfg: SynthesisConfig): Promise<Graph> {
  const file = cfg.source.path;
  const names: string[] = [];
  const ids = new Map<string, number>();
  const intern = (name: string): number => {
    let id = ids.get(name);
    if (id === undefined) ids.set(name, (id = names.push(name) - 1));
    return id;
  };
  const s: number[] = [];
  const r: number[] = [];
  const o: number[] = [];
  for await (const row of sourceRows(file)) {
    s.push(intern(textField(file, row, ['subject'], 'subject')));
    r.push(intern(textField(file, row, ['relation', 'predicate'], 'relation')));
    o.push(intern(textField(file, row, ['object'], 'object')));
  }
  if (s.length === 0) throw inputError(file, undefined, undefined, 'no triples');
  const out = new Map<number, number[]>();
  s.forEach((subj, edge) => {
    const list = out.get(subj);
    if (list === undefined) out.set(subj, [edge]);
    else list.push(edge);
  });
  const descriptions = new Map<string, string>();
  const dfile = cfg.source.descriptions;
  if (dfile !== undefined) {
    for await (const row of sourceRows(dfile)) descriptions.set(textField(dfile, row, ['entity', 'subject', 'name'], 'entity'), textField(dfile, row, ['description'], 'description'));
  }
  return { names, subject: Int32Array.from(s), relation: Int32Array.from(r), object: Int32Array.from(o), out, descriptions };
}

export async function openGraph(cfg: SynthesisConfig, limit: number | undefined): Promise<SeedSource> {
  return new WalkSource(cfg, await readGraph(cfg), Math.min(cfg.seeds ?? DEFAULT_DRAWN_SEEDS, limit ?? Infinity));
}

class WalkSource implements SeedSource {
  readonly kind = 'graph';
  readonly path: string;
  readonly planned: number;
  shortfall: string | undefined;
  readonly #cfg: SynthesisConfig;
  readonly #g: Graph;

  constructor(cfg: SynthesisConfig, g: Graph, planned: number) {
    this.#cfg = cfg;
    this.#g = g;
    this.path = cfg.source.path;
    this.planned = planned;
  }

  *seeds(): Iterable<GraphSeed> {
    const drawn = new Set<string>();
    let n = 0;
    for (let i = 0; n < this.planned && i < this.planned * DRAWS_PER_SEED; i++) {
      const seed = this.#walk(drawsFor(`${this.#cfg.seed}\u0000walk\u0000${i}`));
      if (seed === undefined || drawn.has(seed.id)) continue;
      drawn.add(seed.id);
      n++;
      yield seed;
    }
    if (n < this.planned) this.shortfall = `${n} distinct walks of ${this.#cfg.hops} hops found in ${this.planned * DRAWS_PER_SEED} draws (of ${this.planned} planned): the graph has few paths that long`;
  }

  #walk(draw: Draw): GraphSeed | undefined {
    const g = this.#g;
    for (let attempt = 0; attempt < WALK_ATTEMPTS; attempt++) {
      // A random edge's subject: entities with more edges start more walks.
      const start = g.subject[Math.floor(draw() * g.subject.length)]!;
      const seen = [start];
      const edges: number[] = [];
      while (edges.length < this.#cfg.hops) {
        const edge = pick(draw, (g.out.get(seen.at(-1)!) ?? []).filter((e) => !seen.includes(g.object[e]!)));
        if (edge === undefined) break;
        edges.push(edge);
        seen.push(g.object[edge]!);
      }
      if (edges.length < this.#cfg.hops) continue;
      const triples: Triple[] = edges.map((e) => ({ subject: g.names[g.subject[e]!]!, relation: g.names[g.relation[e]!]!, object: g.names[g.object[e]!]! }));
      const descriptions = new Map(seen.flatMap((x) => (g.descriptions.has(g.names[x]!) ? [[g.names[x]!, g.descriptions.get(g.names[x]!)!] as const] : [])));
      return { kind: 'graph', id: `g:${shortHash(JSON.stringify(triples))}`, triples, descriptions };
    }
    return undefined;
  }
}
