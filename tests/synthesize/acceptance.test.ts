/**
 * A synthesis run with every check on, the solvability rollouts included, against the sim (wrong
 * answers at a rate, so pass rates spread), and what its question bank must be: every kept
 * question's quotes verbatim in their documents, no kept question holding its answer, every kept
 * pass rate in the band, recounted from the rollouts' own run; `generate` reads the bank as it
 * is; `stats` and the report show the funnel, the pass rates and the cost.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { synthesize, type SynthesisSummary } from '../../pipeline/synthesize/run.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';
import { CORPUS, load, readRun, synthConfig } from './helpers.js';

const BAND = { min_pass: 0.25, max_pass: 0.75 };
const K = 4;

let sim: Sim;
let dir: string;
let summary: SynthesisSummary;

beforeAll(async () => {
  sim = await startSim({ seed: 5, misbehave: { wrong_answer: 0.3 }, plant: { bad_quote: 0.05, leak: 0.05, ambiguous: 0.05, easy: 0.05 } });
  dir = tempDir('tf-synth-accept-');
  const config = load(synthConfig(dir, sim.url, { seeds: 48, checks: { solvable: { k: K, ...BAND } } }, { concurrency: 16 }));
  summary = await synthesize({ config });
}, 240_000);
afterAll(() => sim.close());

/** The corpus's documents by id, read here on their own, not through synthesize's reader. */
function corpus(): Map<string, string> {
  const out = new Map<string, string>();
  for (const l of readFileSync(CORPUS, 'utf8').split('\n')) {
    if (l.trim() === '') continue;
    const d = JSON.parse(l) as { paperId: string; abstract: string };
    out.set(d.paperId, d.abstract);
  }
  return out;
}

describe('a synthesis run with rollouts', () => {
  it('accounts for every seed once, and keeps some and rejects some', () => {
    expect(summary.status, summary.failure ?? summary.fatal).toBe('completed');
    const { kept, rejected } = readRun(join(dir, 'run'));
    const seeds = [...kept, ...rejected].map((r) => r.source.seed);
    expect(seeds).toHaveLength(48);
    expect(new Set(seeds).size).toBe(48);
    expect(new Set(kept.map((q) => q.id)).size).toBe(kept.length);
    expect(kept.length).toBeGreaterThan(5);
    expect(rejected.filter((r) => r.rejected_by === 'solvable').length).toBeGreaterThan(0);
  });

  it("every kept question's quotes are verbatim in their documents (read from the corpus file here)", () => {
    const docs = corpus();
    const flat = (s: string): string => s.replace(/\s+/g, ' ').trim();
    const { kept } = readRun(join(dir, 'run'));
    for (const q of kept) {
      for (const e of q.evidence as { doc_id: string; quote: string }[]) {
        expect(q.source.docs, q.id).toContain(e.doc_id);
        expect(flat(docs.get(e.doc_id) ?? ''), `${q.id}: ${e.quote}`).toContain(flat(e.quote));
      }
    }
  });

  it('no kept question holds its answer or an alias, normalised (case, punctuation, spacing)', () => {
    const { kept, rejected } = readRun(join(dir, 'run'));
    // Words, numbers whole ("1.3" is not "1"), case and punctuation aside: this test's own view, not the check's.
    const tokens = (s: string): string => ` ${(s.normalize('NFKC').toLowerCase().match(/[\p{L}\p{N}]+(?:[.,]\d+)*/gu) ?? []).join(' ')} `;
    const holds = (text: string, value: string): boolean => tokens(text).includes(tokens(value));
    for (const q of kept) for (const a of [q.answer, ...(q.aliases ?? [])]) expect(holds(q.question, a), `${q.id}: "${q.question}" holds "${a}"`).toBe(false);
    // The check that keeps them out did reject some (the sim leaks now and then).
    expect(rejected.some((r) => r.rejected_by === 'no_leak' && holds(r.question!, r.answer!))).toBe(true);
  });

  it('every kept pass rate lies in the band, recounted from the rollouts in DIR/solve', () => {
    const solve = join(dir, 'run', 'solve');
    const roots = [...readJsonl(join(solve, 'trajectories.jsonl')), ...readJsonl(join(solve, 'failures.jsonl'))].filter((t) => t.parent_id === undefined);
    const { kept } = readRun(join(dir, 'run'));
    for (const q of kept) {
      const mine = roots.filter((t) => t.question_id === q.id);
      expect(new Set(mine.map((t) => t.id)).size, q.id).toBe(K);
      const correct = mine.filter((t) => t.status === 'ok' && (t.judgement === undefined || t.judgement.verdict === 'correct')).length;
      expect(q.difficulty.pass_rate, q.id).toBe(correct / K);
      expect(correct / K).toBeGreaterThanOrEqual(BAND.min_pass);
      expect(correct / K).toBeLessThanOrEqual(BAND.max_pass);
      expect(q.checks.solvable?.verdict).toBe('pass');
    }
  });

  it('generate reads questions.jsonl as it is: one rollout per kept question, its gold answer the question\'s', async () => {
    const { kept } = readRun(join(dir, 'run'));
    const gdir = tempDir('tf-synth-generate-');
    const bank = join(dir, 'run', 'questions.jsonl');
    const res = await runCli(['generate', '--config', writeConfig(gdir, sim.url), '--questions', bank, '--out', join(gdir, 'run')], { timeoutMs: 120_000 });
    expect(res.code, res.stderr).toBe(0);
    const rows = [...readJsonl(join(gdir, 'run', 'trajectories.jsonl')), ...readJsonl(join(gdir, 'run', 'failures.jsonl'))];
    expect(rows.map((t) => t.question_id).sort()).toEqual(kept.map((q) => q.id).sort());
    for (const t of rows) {
      const q = kept.find((x) => x.id === t.question_id)!;
      expect(t.question).toBe(q.question);
      expect(t.gold_answer).toBe(q.answer);
      expect(t.meta.evidence).toEqual(q.evidence);
    }
  });

  it('stats shows the funnel, the pass rates and the cost per kept question; the report shows them above the rollouts', async () => {
    const run = join(dir, 'run');
    const { kept, rejected } = readRun(run);
    const res = await runCli(['stats', run, '--json']);
    expect(res.code, res.stderr).toBe(0);
    const f = JSON.parse(res.stdout);
    expect(f.seeds).toBe(48);
    expect(f.kept).toBe(kept.length);
    const solvable = f.funnel.find((s: { step: string }) => s.step === 'solvable');
    expect(solvable.rejected).toBe(rejected.filter((r) => r.rejected_by === 'solvable').length);
    expect(Object.values(f.pass_rates.kept as Record<string, number>).reduce((a, b) => a + b, 0)).toBe(kept.length);
    const spent = [...kept, ...rejected].reduce((n, r) => n + r.cost.prompt_tokens + r.cost.completion_tokens, 0);
    expect(f.cost.per_kept.tokens).toBeCloseTo(spent / kept.length, 6);
    const text = await runCli(['stats', run]);
    expect(text.stdout).toMatch(/^solvable\s+\d+\s+\d+\s+\d+$/m);
    expect(text.stdout).toMatch(/per kept question: [\d.]+ requests, \d+ tokens/);
    const html = join(run, 'report.html');
    const rep = await runCli(['report', run, '--out', html]);
    expect(rep.code, rep.stderr).toBe(0);
    expect(existsSync(html)).toBe(true);
    const page = readFileSync(html, 'utf8');
    expect(page).toContain('id="chart-funnel"');
    expect(page).toContain('id="overview"');
  });
});
