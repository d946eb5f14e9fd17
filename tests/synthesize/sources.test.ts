/**
 * Where seeds come from: documents one by one in an order drawn from the seed, chains whose
 * documents each mention what links them to the next, walks through a graph that follow its
 * edges and never come back; the same seeds on every open of the same config (a resumed run
 * depends on it); and a source file's bad rows reported with file, line and field.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SynthesisConfig } from '../../schemas/index.js';
import { openDocuments } from '../../pipeline/synthesize/documents.js';
import { openGraph } from '../../pipeline/synthesize/graph.js';
import type { DocumentSeed, GraphSeed, SeedSource } from '../../pipeline/synthesize/seed.js';
import { TrajforgeError } from '../../pipeline/errors.js';
import { tempDir } from '../helpers.js';
import { CORPUS, writeGraph } from './helpers.js';

const cfg = (over: Record<string, unknown>): SynthesisConfig => SynthesisConfig.parse({ source: { kind: 'documents', path: CORPUS }, ...over });
const all = <T>(s: SeedSource): T[] => [...s.seeds()] as T[];

describe('documents', () => {
  it('one seed per document, in an order the seed draws: the same for the same seed, another for another', async () => {
    const a = all<DocumentSeed>(await openDocuments(cfg({ seeds: 50 }), undefined));
    const b = all<DocumentSeed>(await openDocuments(cfg({ seeds: 50 }), undefined));
    const c = all<DocumentSeed>(await openDocuments(cfg({ seeds: 50, seed: 1 }), undefined));
    expect(a).toHaveLength(50);
    expect(a.map((s) => s.id)).toEqual(b.map((s) => s.id));
    expect(a.map((s) => s.id)).not.toEqual(c.map((s) => s.id));
    expect(new Set(a.map((s) => s.id)).size).toBe(50);
    for (const s of a) expect(s.id).toBe(`d:${s.docs[0]!.id}`);
  });

  it('--limit takes the first seeds of the same order', async () => {
    const a = all<DocumentSeed>(await openDocuments(cfg({ seeds: 50 }), undefined));
    const limited = await openDocuments(cfg({ seeds: 50 }), 7);
    expect(limited.planned).toBe(7);
    expect(all<DocumentSeed>(limited).map((s) => s.id)).toEqual(a.slice(0, 7).map((s) => s.id));
  });

  it('chains of three: each document mentions the entity that links it to the next, and none comes twice', async () => {
    const seeds = all<DocumentSeed>(await openDocuments(cfg({ hops: 3, seeds: 40 }), undefined));
    expect(seeds.length).toBeGreaterThan(30);
    for (const s of seeds) {
      expect(s.docs).toHaveLength(3);
      expect(new Set(s.docs.map((d) => d.id)).size).toBe(3);
      s.links.forEach((l, i) => {
        expect(s.docs[i]!.text, s.id).toContain(l);
        expect(s.docs[i + 1]!.text, s.id).toContain(l);
      });
    }
  });

  it('follows a document\'s explicit links, reads {id, title, text, url}, and stops short when nothing links', async () => {
    const dir = tempDir('tf-synth-docs-');
    const file = join(dir, 'docs.jsonl');
    const rows = [
      { id: 'a', title: 'Alpha', text: 'Alpha was founded in 1901.', url: 'https://example.org/a', links: ['b'] },
      { id: 'b', title: 'Beta', text: 'Beta has 12 members.', links: ['a'] },
      { id: 'c', title: 'Gamma', text: 'Gamma stands alone.' },
    ];
    writeFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n'));
    const source = await openDocuments(SynthesisConfig.parse({ source: { kind: 'documents', path: file }, hops: 2, seeds: 5 }), undefined);
    const seeds = all<DocumentSeed>(source);
    expect(seeds.map((s) => s.id).sort()).toEqual(['c:a>b', 'c:b>a']);
    expect(seeds.find((s) => s.id === 'c:a>b')!.links).toEqual(['Beta']);
    expect(seeds[0]!.docs[0]!.url ?? seeds[1]!.docs[0]!.url).toBe('https://example.org/a');
    expect(source.shortfall).toMatch(/2 distinct chains/);
  });

  it.each([
    ['{"id": "a", "title": "A"}', 1, 'text: missing'],
    ['{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}', 2, 'id: "a" is already the id of the document on line 1'],
    ['{"id": "a", "text": 7}\nnot json', 2, 'not valid JSON'],
    ['{"id": "a", "text": ["x"]}', 1, 'text: expected a string'],
    ['{"id": "a", "text": "x", "links": "b"}', 1, 'links: expected a list of document ids'],
  ])('a bad row %#: BAD_INPUT naming file, line %i and what is wrong', async (text, line, message) => {
    const dir = tempDir('tf-synth-bad-');
    const file = join(dir, 'docs.jsonl');
    writeFileSync(file, text);
    const err = await openDocuments(SynthesisConfig.parse({ source: { kind: 'documents', path: file } }), undefined).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TrajforgeError);
    expect((err as TrajforgeError).code).toBe('BAD_INPUT');
    expect((err as Error).message).toContain(`${file}:${line}: ${message}`);
  });
});

describe('knowledge graph walks', () => {
  it('each step starts where the last ended, never revisits an entity, and is the same on every open', async () => {
    const dir = tempDir('tf-synth-walks-');
    const g = writeGraph(dir);
    const c = SynthesisConfig.parse({ source: { kind: 'graph', path: g.triples, descriptions: g.descriptions }, hops: 3, seeds: 30 });
    const walks = all<GraphSeed>(await openGraph(c, undefined));
    expect(walks.length).toBeGreaterThan(20);
    for (const w of walks) {
      expect(w.triples).toHaveLength(3);
      w.triples.slice(1).forEach((t, i) => expect(t.subject).toBe(w.triples[i]!.object));
      const seen = [w.triples[0]!.subject, ...w.triples.map((t) => t.object)];
      expect(new Set(seen).size).toBe(seen.length);
      expect(w.descriptions.get(w.triples[0]!.subject)).toMatch(/register/);
    }
    expect(all<GraphSeed>(await openGraph(c, undefined)).map((w) => w.id)).toEqual(walks.map((w) => w.id));
  });

  it('a triple without its object: BAD_INPUT naming file, line and field', async () => {
    const dir = tempDir('tf-synth-badgraph-');
    const file = join(dir, 'g.jsonl');
    writeFileSync(file, '{"subject": "a", "relation": "r", "object": "b"}\n{"subject": "b", "relation": "r"}\n');
    const err = await openGraph(SynthesisConfig.parse({ source: { kind: 'graph', path: file } }), undefined).catch((e: unknown) => e);
    expect((err as Error).message).toContain(`${file}:2: object: missing`);
  });
});
