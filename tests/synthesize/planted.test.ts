/**
 * Each check against the defects the sim plants (sim/synth.ts): a quote not in its document
 * (verbatim), the answer in the question (no_leak), a question several answers fit (unique),
 * a question answerable without searching (closed_book). The sim records what it planted, at
 * most one defect per seed; each check must catch its defect with recall and precision ≥ 0.95,
 * measured on single documents, on chains of two documents and on knowledge-graph walks.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { synthesize } from '../../pipeline/synthesize/run.js';
import { tempDir } from '../helpers.js';
import { load, measure, readRun, synthConfig, writeGraph } from './helpers.js';

let sim: Sim | undefined;
afterEach(async () => {
  await sim?.close();
  sim = undefined;
});

/** Every check but the rollouts: the planted defects are all caught before them. */
const CHECKS = { solvable: false, near_duplicate: false };
const RATES = { bad_quote: 0.1, leak: 0.1, ambiguous: 0.1, easy: 0.1 };

async function plantedRun(synthesis: Record<string, unknown>, knowledge?: string[], patch: Record<string, unknown> = {}) {
  sim = await startSim({ seed: 3, plant: RATES, ...(knowledge ? { knowledge } : {}) });
  const dir = tempDir('tf-synth-planted-');
  const config = load(synthConfig(dir, sim.url, { checks: CHECKS, ...synthesis }, { concurrency: 16, ...patch }));
  const summary = await synthesize({ config });
  expect(summary.status, summary.failure ?? summary.fatal).toBe('completed');
  const { kept, rejected } = readRun(join(dir, 'run'));
  return { summary, rows: [...kept, ...rejected], measured: measure([...kept, ...rejected], sim.planted()), planted: sim.planted() };
}

function expectCaught(measured: ReturnType<typeof measure>, defects: readonly (keyof typeof RATES)[], atLeast: number): void {
  for (const d of defects) {
    const m = measured[d];
    expect(m.planted, `${d}: planted`).toBeGreaterThanOrEqual(atLeast);
    expect(m.recall, `${d}: recall ${m.caught}/${m.planted}`).toBeGreaterThanOrEqual(0.95);
    expect(m.precision, `${d}: precision (${m.flagged} rejected by its check)`).toBeGreaterThanOrEqual(0.95);
  }
}

describe('planted defects, caught by their checks', () => {
  it('single documents: each defect at recall and precision ≥ 0.95, every seed one line', async () => {
    const { summary, rows, measured } = await plantedRun({ seeds: 320 });
    expect(rows).toHaveLength(320);
    expect(new Set(rows.map((r) => r.source.seed)).size).toBe(320);
    expectCaught(measured, ['bad_quote', 'leak', 'ambiguous', 'easy'], 20);
    // What nothing planted is kept: the four checks reject only their defects.
    expect(summary.kept).toBeGreaterThan(150);
  });

  it('chains of two documents linked by a shared entity', async () => {
    const { rows, measured } = await plantedRun({ seeds: 200, hops: 2 });
    expect(rows.length).toBeGreaterThan(150);
    for (const r of rows) expect(r.source.docs).toHaveLength(2);
    expectCaught(measured, ['bad_quote', 'leak', 'ambiguous', 'easy'], 10);
  });

  it('walks of two hops through a knowledge graph (a walk has no quotes: no bad_quote)', async () => {
    const dir = tempDir('tf-synth-graph-');
    const g = writeGraph(dir);
    const { rows, measured, planted } = await plantedRun({ source: { kind: 'graph', path: g.triples, descriptions: g.descriptions }, hops: 2, seeds: 150 }, [g.triples]);
    expect(rows.length).toBeGreaterThan(100);
    expect(planted.some((p) => p.defect === 'bad_quote')).toBe(false);
    expectCaught(measured, ['leak', 'ambiguous', 'easy'], 8);
  });
});
