/**
 * trajforge dedup: the shingling and MinHash pieces against independent computations, then the
 * real CLI on files built from real question banks (data/questions.jsonl, DR Tulu's bank, the
 * MDN corpus): planted near-duplicates are clustered with their source, distinct questions of
 * one template never are, the documented one-word boundary holds on both sides, and the keep
 * rules, shards, run directories, foreign rows and bad input behave as docs/curate.md says.
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { DedupCluster, DedupOptions } from '../../schemas/index.js';
import { indexNearDuplicates, writeDeduplicated } from '../../pipeline/dataset/dedup.js';
import { banding, candidateProbability, jaccard, LSH_RECALL, MinHasher } from '../../pipeline/dataset/minhash.js';
import { clauseWords, normalise, textShingles } from '../../pipeline/dataset/shingles.js';
import { JsonlWriter } from '../../pipeline/core/jsonl.js';
import { BCD_QUESTIONS, CORPUS, DRTULU_QUESTIONS, normalisedWords, trajRow, writeRows } from '../curate-fixtures.js';
import { FIXTURES, readJsonl, runCli, tempDir } from '../helpers.js';

const SOURCES = [...BCD_QUESTIONS, ...DRTULU_QUESTIONS];

// ---------------------------------------------------------------------------------------
// The pieces

describe('normalisation and clauses', () => {
  it('folds case, punctuation, quotes, spacing and full-width forms; keeps digits and symbols', () => {
    expect(normalise('  What’s the ＧＤＰ of the U.S.  in "2019"?? ')).toBe('what s the gdp of the u s in 2019');
    expect(normalise('C++ costs $5 — or 5°C?')).toBe('c++ costs $5 or 5°c');
    expect(normalise('?!…')).toBe('');
  });

  it('cuts clauses at , ; : . ? ! followed by a space, and at line breaks, but not inside 3.5 or U.S.A', () => {
    expect(clauseWords('In phase III trials, how does X compare? Dose: 3.5 mg\nin the U.S.A')).toEqual([
      ['in', 'phase', 'iii', 'trials'],
      ['how', 'does', 'x', 'compare'],
      ['dose'],
      ['3', '5', 'mg'],
      ['in', 'the', 'u', 's', 'a'],
    ]);
  });
});

/** Jaccard of two plain sets, counted the slow way. */
function setJaccard(a: Set<number>, b: Set<number>): number {
  let both = 0;
  for (const x of a) if (b.has(x)) both++;
  const union = a.size + b.size - both;
  return union === 0 ? 0 : both / union;
}

function sorted(s: Set<number>): Int32Array {
  return Int32Array.from(s).sort();
}

describe('jaccard over stored sets', () => {
  it('is the exact Jaccard when both sets are whole, whatever their sizes', () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { maxLength: 300 }), fc.uniqueArray(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { maxLength: 300 }), fc.nat(300), (xs, ys, shared) => {
        const a = new Set(xs);
        const b = new Set([...ys, ...xs.slice(0, shared)]);
        const sa = sorted(a);
        const sb = sorted(b);
        const got = jaccard(sa, 0, sa.length, true, sb, 0, sb.length, true, 16);
        const want = a.size && b.size ? setJaccard(a, b) : 0;
        expect(got).toBeCloseTo(want, 12);
      }),
    );
  });

  it('estimates a large set from its bottom-k sketch within a few points', () => {
    // Two sets of 4,000 hashes sharing 3,000: J = 3000 / 5000 = 0.6.
    const rnd = (i: number) => (Math.imul(i + 1, 0x9e3779b1) ^ Math.imul(i >>> 3, 0x85ebca6b)) | 0;
    const shared = Array.from({ length: 3000 }, (_, i) => rnd(i));
    const a = new Set([...shared, ...Array.from({ length: 1000 }, (_, i) => rnd(10_000 + i))]);
    const b = new Set([...shared, ...Array.from({ length: 1000 }, (_, i) => rnd(20_000 + i))]);
    const k = 512;
    const sa = sorted(a).slice(0, k);
    const sb = sorted(b).slice(0, k);
    const est = jaccard(sa, 0, k, false, sb, 0, k, false, k);
    // Standard error sqrt(J(1−J)/k) = 0.022; four of them.
    expect(Math.abs(est - setJaccard(a, b))).toBeLessThan(0.09);
  });
});

describe('LSH banding', () => {
  it('reaches the recall at the threshold within the hash budget, and a wider band would not fit', () => {
    for (const t of [0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95]) {
      for (const h of [16, 64, 128, 256]) {
        const b = banding(t, h)!;
        expect(b.bands * b.rows).toBeLessThanOrEqual(h);
        expect(candidateProbability(t, b)).toBeGreaterThanOrEqual(LSH_RECALL);
        // r + 1 rows would need more bands than the budget holds.
        const r = b.rows + 1;
        const needed = Math.ceil(Math.log(1 - LSH_RECALL) / Math.log(1 - t ** r));
        expect(needed * r).toBeGreaterThan(h);
      }
    }
    expect(banding(0.8, 2)).toBeUndefined();
  });

  it('makes pairs at the threshold candidates as often as it promises, and pairs far below it rarely', () => {
    const opts = DedupOptions.parse({});
    const hasher = new MinHasher(banding(opts.threshold, opts.max_hashes)!);
    const shares = (j: number, pairs: number): number => {
      let hit = 0;
      for (let p = 0; p < pairs; p++) {
        // 100 elements in the union, 100·j of them shared.
        const both = Math.round(100 * j);
        const half = (100 - both) / 2;
        const base = p * 1000;
        const a = sorted(new Set(Array.from({ length: both + half }, (_, i) => Math.imul(base + i + 1, 0x2545f491))));
        const b = sorted(new Set([...Array.from({ length: both }, (_, i) => Math.imul(base + i + 1, 0x2545f491)), ...Array.from({ length: half }, (_, i) => Math.imul(base + 500 + i, 0x2545f491))]));
        for (let band = 0; band < hasher.banding.bands; band++) {
          if (hasher.bandKey(a, 0, a.length, band) === hasher.bandKey(b, 0, b.length, band)) {
            hit++;
            break;
          }
        }
      }
      return hit / pairs;
    };
    // Promised: ≥ 0.99 at the threshold. 2,000 pairs: a binomial standard error of 0.002.
    expect(shares(0.8, 2000)).toBeGreaterThan(0.98);
    // 1 − (1 − 0.3^5)^12 = 0.029.
    expect(shares(0.3, 2000)).toBeLessThan(0.06);
  });
});

// ---------------------------------------------------------------------------------------
// The CLI on real questions

/** A clause at the front moved to the back: "In X, how does Y?" → "How does Y, in X?". */
function clauseMoved(q: string): string | undefined {
  const m = /^([^,]+),\s*(.+?)([?.!]?)$/u.exec(q);
  if (!m) return undefined;
  return `${m[2]![0]!.toUpperCase()}${m[2]!.slice(1)}, ${m[1]![0]!.toLowerCase()}${m[1]!.slice(1)}${m[3]}`;
}

/** One function word changed, the way a rewrite does it; the first of these that applies. */
const REWORDINGS: [RegExp, string][] = [
  [/\bcompare with\b/, 'compare to'],
  [/\bhow does\b/i, 'how do'],
  [/\bwhat is\b/i, "what's"],
  [/\bthe\b/, 'a'],
];

function reworded(q: string): string | undefined {
  for (const [from, to] of REWORDINGS) if (from.test(q)) return q.replace(from, to);
  return undefined;
}

const fullWidth = (q: string): string => q.replace(/[A-Za-z0-9]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 0xfee0));

/** Planted near-duplicates: name → variant of a source question (undefined: does not apply). */
const VARIANTS: Record<string, (q: string) => string | undefined> = {
  upper: (q) => q.toUpperCase(),
  lower: (q) => q.toLowerCase(),
  'title case': (q) => q.replace(/\b\p{L}/gu, (c) => c.toUpperCase()),
  'quotes, spacing, no question mark': (q) => `"${q.replace(/\?\s*$/, '')}"`.replace(/ /g, '   '),
  'full-width letters': fullWidth,
  'commas dropped': (q) => (q.includes(',') ? q.replace(/,/g, '') : undefined),
  'clause moved': clauseMoved,
  'clause moved, upper case, no question mark': (q) => clauseMoved(q)?.toUpperCase().replace(/\?$/, ''),
  // One word of 25 or more: (L − 1)/(L + 5) ≥ 0.8 (docs/curate.md, "dedup").
  'one word reworded (25+ words)': (q) => (normalisedWords(q).length >= 25 ? reworded(q) : undefined),
};

describe('trajforge dedup on real question banks', () => {
  const dir = tempDir('tf-dedup-');
  const planted: { id: string; source: number; kind: string }[] = [];
  let clusters: DedupCluster[];
  let kept: Record<string, any>[];
  let stderr: string;

  beforeAll(async () => {
    const rows = SOURCES.map((q, i) => trajRow({ id: `src-${i}`, question: q }));
    SOURCES.forEach((q, i) => {
      for (const [kind, make] of Object.entries(VARIANTS)) {
        const v = make(q);
        if (v === undefined) continue;
        const id = `dup-${planted.length}`;
        planted.push({ id, source: i, kind });
        rows.push(trajRow({ id, question: v }));
      }
    });
    const input = writeRows(join(dir, 'in.jsonl'), rows);
    const r = await runCli(['dedup', input, '--out', join(dir, 'kept.jsonl'), '--rejects', join(dir, 'dropped.jsonl'), '--clusters', join(dir, 'clusters.jsonl')]);
    expect(r.stderr).toMatch(/^dedup: /);
    expect(r.code).toBe(0);
    stderr = r.stderr;
    clusters = readJsonl(join(dir, 'clusters.jsonl')).map((c) => DedupCluster.parse(c));
    kept = readJsonl(join(dir, 'kept.jsonl'));
  });

  it('plants every kind of variant it claims to find', () => {
    const kinds = new Map<string, number>();
    for (const p of planted) kinds.set(p.kind, (kinds.get(p.kind) ?? 0) + 1);
    for (const kind of Object.keys(VARIANTS)) expect(kinds.get(kind) ?? 0, kind).toBeGreaterThan(kind.includes('25+') ? 15 : 30);
  });

  it('clusters every planted near-duplicate with its source question', () => {
    const clusterOf = new Map<string, number>();
    for (const c of clusters) for (const m of c.members) clusterOf.set(m.id, c.cluster);
    const missed = planted.filter((p) => clusterOf.get(p.id) === undefined || clusterOf.get(p.id) !== clusterOf.get(`src-${p.source}`));
    expect(missed.map((p) => `${p.kind}: ${SOURCES[p.source]}`)).toEqual([]);
  });

  it('never puts two distinct source questions in one cluster', () => {
    for (const c of clusters) expect(c.members.filter((m) => m.id.startsWith('src-')).length).toBe(1);
    expect(clusters.length).toBe(new Set(planted.map((p) => p.source)).size);
  });

  it('keeps the first row of each cluster: every source, no variant', () => {
    expect(kept.map((r) => r.id).sort()).toEqual(SOURCES.map((_, i) => `src-${i}`).sort());
    for (const c of clusters) {
      const k = c.members.filter((m) => m.kept);
      expect(k).toHaveLength(1);
      expect(k[0]!.id).toMatch(/^src-/);
      expect(k[0]!.similarity).toBe(1);
    }
  });

  it('writes every row once: kept plus dropped is the input, line for line', () => {
    const lines = (f: string) => readFileSync(join(dir, f), 'utf8').split('\n').filter(Boolean);
    expect([...lines('kept.jsonl'), ...lines('dropped.jsonl')].sort()).toEqual(lines('in.jsonl').sort());
    expect(stderr).toContain(`${SOURCES.length + planted.length} rows in, ${SOURCES.length} kept, ${planted.length} dropped`);
  });

  it('reports each member with its file, line, id, text and similarity to the kept row', () => {
    const c = clusters.find((x) => x.members.some((m) => m.id.startsWith('dup-') && planted[Number(m.id.slice(4))]!.kind === 'upper'))!;
    const dup = c.members.find((m) => m.id.startsWith('dup-'))!;
    expect(dup.input).toBe(join(dir, 'in.jsonl'));
    const line = readFileSync(join(dir, 'in.jsonl'), 'utf8').split('\n')[dup.line - 1]!;
    expect(JSON.parse(line).id).toBe(dup.id);
    expect(dup.text).toBe(JSON.parse(line).question.slice(0, 300));
    expect(c.members.every((m) => m.similarity >= 0 && m.similarity <= 1)).toBe(true);
  });

  it('gives the same output, byte for byte, on a second run', async () => {
    const r = await runCli(['dedup', join(dir, 'in.jsonl'), '--out', join(dir, 'kept2.jsonl'), '--clusters', join(dir, 'clusters2.jsonl')]);
    expect(r.code).toBe(0);
    expect(readFileSync(join(dir, 'kept2.jsonl'), 'utf8')).toBe(readFileSync(join(dir, 'kept.jsonl'), 'utf8'));
    expect(readFileSync(join(dir, 'clusters2.jsonl'), 'utf8')).toBe(readFileSync(join(dir, 'clusters.jsonl'), 'utf8'));
  });
});

describe('trajforge dedup: questions of one template stay apart', () => {
  it('keeps 9,000 templated questions from the MDN corpus apart, clustering only those with identical words', async () => {
    const dir = tempDir('tf-dedup-tpl-');
    const browsers = ['Chrome', 'Chrome Android', 'Firefox'];
    const templates = [(b: string, f: string) => `In which version of ${b} was the ${f} first supported?`, (b: string, f: string) => `What is the earliest version of ${b} that supports the ${f}?`];
    const features = CORPUS.slice(0, 1500).map((d) => d.title.replace(':', ''));
    const questions: string[] = [];
    for (const f of features) for (const b of browsers) for (const t of templates) questions.push(t(b, f));
    const input = writeRows(join(dir, 'tpl.jsonl'), questions.map((q, i) => trajRow({ id: `t${i}`, question: q })));
    const r = await runCli(['dedup', input, '--out', join(dir, 'kept.jsonl'), '--clusters', join(dir, 'clusters.jsonl'), '--json']);
    expect(r.code).toBe(0);
    // The expected clusters: questions whose normalised words are identical (features whose names differ only in punctuation).
    const byWords = new Map<string, string[]>();
    questions.forEach((q, i) => {
      const key = normalisedWords(q).join(' ');
      byWords.set(key, [...(byWords.get(key) ?? []), `t${i}`]);
    });
    const expected = [...byWords.values()].filter((ids) => ids.length > 1).map((ids) => ids.sort().join(','));
    const got = readJsonl(join(dir, 'clusters.jsonl')).map((c) => c.members.map((m: { id: string }) => m.id).sort().join(','));
    expect(got.sort()).toEqual(expected.sort());
    const summary = JSON.parse(r.stdout);
    expect(summary.rows).toBe(questions.length);
    // Bands keyed by content words: siblings never share a bucket, so almost nothing is compared.
    expect(summary.pairs_compared).toBeLessThan(questions.length / 10);
    // Jaccard alone keeps these short siblings apart too, comparing many more pairs to do so.
    const loose = await runCli(['dedup', input, '--out', join(dir, 'kept-loose.jsonl'), '--clusters', join(dir, 'clusters-loose.jsonl'), '--json', '--slots-may-differ']);
    const looseGot = readJsonl(join(dir, 'clusters-loose.jsonl')).map((c) => c.members.map((m: { id: string }) => m.id).sort().join(','));
    expect(looseGot.sort()).toEqual(expected.sort());
    expect(JSON.parse(loose.stdout).pairs_compared).toBeGreaterThan(questions.length);
  });

  it('keeps 3,000 long templated questions apart (25+ words, one slot word apart from their neighbours)', async () => {
    const dir = tempDir('tf-dedup-long-');
    const drugs = ['semaglutide', 'dulaglutide', 'liraglutide', 'tirzepatide', 'empagliflozin', 'dapagliflozin', 'sitagliptin', 'metformin', 'apixaban', 'rivaroxaban'];
    const pops = ['adults with type 2 diabetes', 'older adults with atrial fibrillation', 'patients with chronic kidney disease', 'adults with obesity', 'patients with heart failure'];
    const outcomes = ['HbA1c', 'body weight', 'major bleeding', 'hospitalization for heart failure', 'systolic blood pressure', 'cardiovascular death'];
    const qs: string[] = [];
    for (const p of pops) for (const a of drugs) for (const b of drugs) for (const o of outcomes) if (a !== b && qs.length < 3000) qs.push(`In phase III trials in ${p}, how does ${a} compare with ${b} in reducing ${o} over at least 52 weeks?`);
    const input = writeRows(join(dir, 'in.jsonl'), qs.map((q, i) => trajRow({ id: `l${i}`, question: q })));
    const r = await runCli(['dedup', input, '--out', join(dir, 'kept.jsonl'), '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ rows: qs.length, kept: qs.length, clusters: 0 });
    // Without the slot guard the one-drug-apart pairs (J = 0.82) would be merged.
    const loose = await runCli(['dedup', input, '--out', join(dir, 'kept-loose.jsonl'), '--json', '--slots-may-differ']);
    expect(JSON.parse(loose.stdout).kept).toBeLessThan(qs.length / 2);
  });

  it('keeps countries apart: "What is the capital of France?" is not "… of Peru?"', async () => {
    const dir = tempDir('tf-dedup-cap-');
    const countries = ['France', 'Peru', 'Chile', 'Japan', 'Kenya', 'Norway', 'Egypt', 'Brazil', 'Canada', 'India', 'South Korea', 'New Zealand', 'Sri Lanka', 'Costa Rica'];
    const qs = countries.flatMap((c) => [`What is the capital of ${c}?`, `Which currency is used in ${c} today?`, `What is the official language of ${c}?`]);
    const input = writeRows(join(dir, 'in.jsonl'), qs.map((q, i) => trajRow({ id: `c${i}`, question: q })));
    const r = await runCli(['dedup', input, '--out', join(dir, 'kept.jsonl'), '--clusters', join(dir, 'clusters.jsonl')]);
    expect(r.code).toBe(0);
    expect(readJsonl(join(dir, 'clusters.jsonl'))).toEqual([]);
    expect(readJsonl(join(dir, 'kept.jsonl'))).toHaveLength(qs.length);
  });

  it('draws the one-word line where docs/curate.md says: a rewording clusters from 25 words, a slot value never', async () => {
    const dir = tempDir('tf-dedup-line-');
    const short = BCD_QUESTIONS.find((q) => normalisedWords(q).length === 15 && /\bwhich\b/i.test(q))!;
    const long = DRTULU_QUESTIONS.find((q) => normalisedWords(q).length >= 30 && /\bthe\b/.test(q) && /\breduced ejection\b/.test(q))!;
    const rows = [
      trajRow({ id: 'short', question: short }),
      trajRow({ id: 'short-reworded', question: short.replace(/\bwhich\b/i, 'what') }),
      trajRow({ id: 'long', question: long }),
      trajRow({ id: 'long-reworded', question: long.replace(/\bthe\b/, 'a') }),
      trajRow({ id: 'long-other-slot', question: long.replace(/\breduced ejection\b/, 'preserved ejection') }),
      trajRow({ id: 'long-added-word', question: long.replace(/\bstandard therapy\b/, 'standard oral therapy') }),
    ];
    const input = writeRows(join(dir, 'in.jsonl'), rows);
    const clustersWith = async (...flags: string[]): Promise<string[][]> => {
      const file = join(dir, `clusters${flags.join('')}.jsonl`);
      const r = await runCli(['dedup', input, '--out', join(dir, 'kept.jsonl'), '--clusters', file, ...flags]);
      expect(r.code, r.stderr).toBe(0);
      return readJsonl(file).map((c) => c.members.map((m: { id: string }) => m.id));
    };
    // 15 words: (15 − 1)/(15 + 5) = 0.7 < 0.8. 30+ words: above. Another slot value, or a
    // content word added: the content words differ, so the slot guard keeps it apart at any length.
    expect(await clustersWith()).toEqual([['long', 'long-reworded']]);
    expect(await clustersWith('--slots-may-differ')).toEqual([['long', 'long-reworded', 'long-other-slot', 'long-added-word']]);
  });

  it('never clusters questions whose numbers differ, whether a number is changed or added (numbers are content words)', async () => {
    const dir = tempDir('tf-dedup-num-');
    const long = DRTULU_QUESTIONS.find((q) => normalisedWords(q).length >= 30 && /\?$/.test(q))!;
    const base = DRTULU_QUESTIONS.find((q) => /\b52 weeks\b/.test(q))!;
    const qs = [...[52, 26, 104].map((n) => base.replace('52 weeks', `${n} weeks`)), long, long.replace(/\?$/, ' in 2023?')];
    const input = writeRows(join(dir, 'in.jsonl'), qs.map((q, i) => trajRow({ id: `n${i}`, question: q })));
    const kept = async (...flags: string[]): Promise<string[]> => {
      const out = join(dir, `kept${flags.join('')}.jsonl`);
      const r = await runCli(['dedup', input, '--out', out, ...flags]);
      expect(r.code, r.stderr).toBe(0);
      return readJsonl(out).map((x) => x.id);
    };
    expect(await kept()).toEqual(['n0', 'n1', 'n2', 'n3', 'n4']);
    // Jaccard alone: one word in 25 is 0.8, an added year in 34 words 0.85.
    expect(await kept('--slots-may-differ', '--threshold', '0.75')).toEqual(['n0', 'n3']);
  });
});

describe('trajforge dedup: keep rules, shards, run directories, foreign rows', () => {
  const q = DRTULU_QUESTIONS[0]!;

  it('keeps the first row by default, the accepted one with --prefer accepted, the busiest with --prefer most-calls', async () => {
    const dir = tempDir('tf-dedup-keep-');
    const input = writeRows(join(dir, 'in.jsonl'), [
      trajRow({ id: 'a', question: q, status: 'failed' }),
      trajRow({ id: 'b', question: q.toUpperCase(), outputs: ['one', 'two'] }),
      trajRow({ id: 'c', question: q.toLowerCase(), outputs: ['one', 'two', 'three'] }),
      trajRow({ id: 'd', question: `${q} `, outputs: [] }),
    ]);
    const keptBy = async (...rule: string[]): Promise<string[]> => {
      const out = join(dir, `kept-${rule.join('') || 'default'}.jsonl`);
      const r = await runCli(['dedup', input, '--out', out, ...rule]);
      expect(r.code, r.stderr).toBe(0);
      return readJsonl(out).map((x) => x.id);
    };
    expect(await keptBy()).toEqual(['a']);
    expect(await keptBy('--prefer', 'accepted')).toEqual(['b']);
    expect(await keptBy('--prefer', 'most-calls')).toEqual(['c']);
    expect(await keptBy('--prefer', 'fewest-calls')).toEqual(['a']);
    expect(await keptBy('--prefer', 'longest')).toEqual(['c']);
  });

  it('reads several shards as one dataset: a duplicate across files is found, the earlier file keeps its row', async () => {
    const dir = tempDir('tf-dedup-shards-');
    const s0 = writeRows(join(dir, 'shard0.jsonl'), [trajRow({ id: 'x', question: DRTULU_QUESTIONS[1]! }), trajRow({ id: 'y', question: DRTULU_QUESTIONS[2]! })]);
    const s1 = writeRows(join(dir, 'shard1.jsonl'), [trajRow({ id: 'y', question: DRTULU_QUESTIONS[3]! }), trajRow({ id: 'z', question: clauseMoved(DRTULU_QUESTIONS[1]!)! })]);
    const r = await runCli(['dedup', s0, s1, '--out', join(dir, 'kept.jsonl'), '--clusters', join(dir, 'clusters.jsonl')]);
    expect(r.code, r.stderr).toBe(0);
    expect(readJsonl(join(dir, 'kept.jsonl')).map((x) => x.question)).toEqual([DRTULU_QUESTIONS[1], DRTULU_QUESTIONS[2], DRTULU_QUESTIONS[3]]);
    const [c] = readJsonl(join(dir, 'clusters.jsonl'));
    expect(c.members.map((m: any) => [m.input, m.line, m.id, m.kept])).toEqual([
      [s0, 1, 'x', true],
      [s1, 2, 'z', false],
    ]);
  });

  it('reads a run directory (trajectories, then failures) and DR Tulu generator rows', async () => {
    const dir = tempDir('tf-dedup-run-');
    mkdirSync(join(dir, 'run'));
    writeRows(join(dir, 'run', 'trajectories.jsonl'), [trajRow({ id: 'ok', question: DRTULU_QUESTIONS[5]! })]);
    writeRows(join(dir, 'run', 'failures.jsonl'), [trajRow({ id: 'bad', question: DRTULU_QUESTIONS[5]!.toUpperCase(), status: 'failed' })]);
    const fixture = readFileSync(join(FIXTURES, 'drtulu-generator-rows.jsonl'), 'utf8').split('\n').filter(Boolean);
    const copy = JSON.parse(fixture[0]!);
    copy.sample_id = 'copied';
    copy.question = `  ${String(copy.question).toLowerCase()} `;
    const foreign = join(dir, 'drtulu.jsonl');
    writeFileSync(foreign, [...fixture, JSON.stringify(copy)].join('\n') + '\n');
    const r = await runCli(['dedup', join(dir, 'run'), foreign, '--out', join(dir, 'kept.jsonl'), '--rejects', join(dir, 'dropped.jsonl')]);
    expect(r.code, r.stderr).toBe(0);
    const dropped = readJsonl(join(dir, 'dropped.jsonl'));
    expect(dropped.map((x) => x.id).sort()).toEqual(['bad', 'copied']);
    // A foreign row is written as the trajforge record it was read as.
    expect(dropped.find((x) => x.id === 'copied')!.meta.source_format).toBe('drtulu');
    expect(readJsonl(join(dir, 'kept.jsonl'))).toHaveLength(1 + fixture.length);
  });

  it('never clusters rows with nothing to compare', async () => {
    const dir = tempDir('tf-dedup-empty-');
    const input = writeRows(join(dir, 'in.jsonl'), [trajRow({ id: 'e1', question: '???' }), trajRow({ id: 'e2', question: '¿?' })]);
    const r = await runCli(['dedup', input, '--out', join(dir, 'kept.jsonl'), '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ rows: 2, kept: 2, empty: 2 });
  });

  it('with --by both, rollouts of one question with different answers are all kept', async () => {
    const dir = tempDir('tf-dedup-both-');
    const input = writeRows(join(dir, 'in.jsonl'), [
      trajRow({ id: 'q#0', question: q, answer: 'Semaglutide lowered HbA1c by 1.8 points against 1.4 for dulaglutide in SUSTAIN 7.' }),
      trajRow({ id: 'q#1', question: q, answer: 'The trials found no difference in body weight between the two drugs after a year.' }),
      trajRow({ id: 'q#2', question: q, answer: 'Semaglutide lowered HbA1c by 1.8 points against 1.4 for dulaglutide in SUSTAIN 7!' }),
    ]);
    const both = await runCli(['dedup', input, '--by', 'both', '--out', join(dir, 'kept.jsonl')]);
    expect(both.code, both.stderr).toBe(0);
    expect(readJsonl(join(dir, 'kept.jsonl')).map((x) => x.id)).toEqual(['q#0', 'q#1']);
    const question = await runCli(['dedup', input, '--out', join(dir, 'kept-q.jsonl')]);
    expect(readJsonl(join(dir, 'kept-q.jsonl')).map((x) => x.id)).toEqual(['q#0']);
  });
});

describe('trajforge dedup: bad input and usage', () => {
  const dir = tempDir('tf-dedup-err-');
  const good = writeRows(join(dir, 'good.jsonl'), [trajRow({ id: 'a', question: 'What is the capital of France?' })]);

  it.each([
    [['-', '--out', 'x.jsonl'], /not - \(stdin\)/],
    [[good], /--out F is required/],
    [[good, '--out', join(dir, 'o.jsonl'), '--threshold', '1.5'], /--threshold: .*1/],
    [[good, '--out', join(dir, 'o.jsonl'), '--threshold', 'high'], /--threshold: expected a number/],
    [[good, '--out', join(dir, 'o.jsonl'), '--prefer', 'best'], /--prefer: /],
    [[good, '--out', join(dir, 'o.jsonl'), '--shingle', '0'], /--shingle: /],
    [[good, '--out', join(dir, 'o.jsonl'), '--max-hashes', '2'], /--max-hashes 2 is too few for --threshold 0.8: LSH needs at least 3/],
    [[good, '--out', good], /is also an input/],
    [[good, '--out', join(dir, 'same.jsonl'), '--rejects', join(dir, 'same.jsonl')], /name the same place/],
    [[join(dir, 'missing.jsonl'), '--out', join(dir, 'o.jsonl')], /missing\.jsonl: no such file/],
  ])('%j exits 2: %s', async (args, message) => {
    const r = await runCli(['dedup', ...args]);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.code).toBe(2);
    expect(existsSync(join(dir, 'o.jsonl'))).toBe(false);
  });

  it('names the file and line of a bad row, or counts it with --on-bad-row skip', async () => {
    const input = join(dir, 'bad.jsonl');
    writeFileSync(input, `${JSON.stringify(trajRow({ id: 'a', question: 'Q one?' }))}\n{"id": "b", oops\n${JSON.stringify(trajRow({ id: 'c', question: 'Q one?' }))}\n`);
    const strict = await runCli(['dedup', input, '--out', join(dir, 'o1.jsonl')]);
    expect(strict.code).toBe(2);
    expect(strict.stderr).toContain(`${input}:2: not valid JSON`);
    expect(existsSync(join(dir, 'o1.jsonl'))).toBe(false);
    const skip = await runCli(['dedup', input, '--out', join(dir, 'o2.jsonl'), '--on-bad-row', 'skip', '--json']);
    expect(skip.code).toBe(0);
    expect(JSON.parse(skip.stdout)).toMatchObject({ rows: 2, bad: 1, kept: 1, dropped: 1 });
    expect(readJsonl(join(dir, 'o2.jsonl')).map((r) => r.id)).toEqual(['a']);
  });

  it('refuses to write when the input changed between its two passes', async () => {
    const input = writeRows(join(dir, 'growing.jsonl'), [trajRow({ id: 'a', question: 'Q one?' }), trajRow({ id: 'b', question: 'Q one?' })]);
    const index = await indexNearDuplicates([input], {}, DedupOptions.parse({}));
    appendFileSync(input, `${JSON.stringify(trajRow({ id: 'c', question: 'Q two?' }))}\n`);
    const out = new JsonlWriter(join(dir, 'growing-out.jsonl'));
    await expect(writeDeduplicated(index, { out })).rejects.toThrow(/changed while dedup was reading it/);
    out.abort();
    expect(existsSync(join(dir, 'growing-out.jsonl'))).toBe(false);
  });
});
