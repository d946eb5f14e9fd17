/**
 * dedup's line between a reworded question and a template's sibling, measured on a labelled set:
 * tests/fixtures/dedup-pairs.jsonl, built from the bundled bank's templates (data/questions.jsonl).
 * Positives: two adjacent words swapped (never two slot values), one word replaced by a synonym.
 * Negatives: the template with another browser (`Chrome` / `Firefox for Android`), another feature
 * of the same kind, another duration (`52` / `26 weeks`), and two lowercase slot values trading
 * places across other words (`compare A with B` / `compare B with A`). Each pair is deduplicated on its own (a
 * bank of two rows), so a pair is found only by its own similarity, never through a third row.
 * docs/curate.md quotes the figures this prints.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { DedupOptions } from '../../schemas/index.js';
import { indexNearDuplicates } from '../../pipeline/dataset/dedup.js';
import { tempDir } from '../helpers.js';

interface Pair {
  kind: 'swap' | 'synonym' | 'browser' | 'feature' | 'number' | 'trade';
  label: 0 | 1;
  a: string;
  b: string;
}

const PAIRS: Pair[] = readFileSync(join(import.meta.dirname, '..', 'fixtures', 'dedup-pairs.jsonl'), 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((l) => JSON.parse(l));

describe('dedup on the labelled pairs (tests/fixtures/dedup-pairs.jsonl), at the default threshold', () => {
  const dir = tempDir('tf-dedup-pairs-');
  const found = new Map<string, number>();
  const total = new Map<string, number>();

  beforeAll(async () => {
    const options = DedupOptions.parse({});
    let i = 0;
    for (const p of PAIRS) {
      const file = join(dir, `pair-${i++}.jsonl`);
      writeFileSync(file, `${JSON.stringify({ id: 'a', question: p.a })}\n${JSON.stringify({ id: 'b', question: p.b })}\n`);
      const index = await indexNearDuplicates([file], {}, options, true);
      total.set(p.kind, (total.get(p.kind) ?? 0) + 1);
      if (index.summary.clusters === 1) found.set(p.kind, (found.get(p.kind) ?? 0) + 1);
    }
    const positives = PAIRS.filter((p) => p.label === 1).length;
    const tp = (found.get('swap') ?? 0) + (found.get('synonym') ?? 0);
    const fp = (found.get('browser') ?? 0) + (found.get('feature') ?? 0) + (found.get('number') ?? 0) + (found.get('trade') ?? 0);
    process.stderr.write(
      `dedup pairs: ${[...total].map(([k, n]) => `${k} ${found.get(k) ?? 0}/${n}`).join(', ')}; precision ${(tp / Math.max(1, tp + fp)).toFixed(3)}, recall ${(tp / positives).toFixed(3)}\n`,
    );
  }, 120_000);

  it('holds enough pairs of every kind to measure', () => {
    expect(Object.fromEntries(total)).toEqual({ swap: 120, synonym: 120, browser: 120, feature: 245, number: 20, trade: 20 });
  });

  it('finds every question with two adjacent words swapped (before: 0 of 5)', () => {
    expect(found.get('swap') ?? 0).toBe(120);
  });

  it('keeps every template sibling apart: another browser, feature or number, or two slot values traded, is never a near-duplicate', () => {
    expect([found.get('browser') ?? 0, found.get('feature') ?? 0, found.get('number') ?? 0, found.get('trade') ?? 0]).toEqual([0, 0, 0, 0]);
  });
});
