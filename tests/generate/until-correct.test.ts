/**
 * `--samples k --until-correct` with the judge in the loop, against the sim (policy and judge),
 * through the CLI: fewer model calls than running all k, and pass@1 / pass@k in `stats` and the
 * report equal to a recount from the records, per run and per split.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { unbiasedPassAtK } from '../../pipeline/dataset/pass-at-k.js';
import { QUESTIONS, readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

const K = 4;
const rows = readFileSync(QUESTIONS, 'utf8')
  .trim()
  .split('\n')
  .slice(0, 12)
  .map((l, i) => ({ ...JSON.parse(l), split: i % 2 === 0 ? 'dev' : 'test' }));

let dir: string;
let questions: string;
let judge: Sim;
const sims: Sim[] = [];

beforeAll(async () => {
  dir = tempDir('tf-until-');
  questions = join(dir, 'questions.jsonl');
  writeFileSync(questions, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  judge = await startSim({ port: 0, seed: 1 });
  sims.push(judge);
});
afterAll(async () => {
  for (const s of sims) await s.close();
});

interface Run {
  dir: string;
  cfg: string;
  policy: Sim;
  code: number | null;
  stdout: string;
  stderr: string;
  records: Record<string, any>[];
}

/** A run on a policy sim of its own (its requests are the model calls), wrong half of the time. */
async function run(name: string, args: string[]): Promise<Run> {
  const policy = await startSim({ port: 0, seed: 5, misbehave: { wrong_answer: 0.5 } });
  sims.push(policy);
  const runDir = join(dir, name);
  mkdirSync(runDir, { recursive: true });
  const cfg = writeConfig(runDir, policy.url, {
    questions: { path: questions },
    validation: { judge: { base_url: judge.url, model: 'trajforge-sim', api_key_env: 'none' } },
  });
  const r = await runCli(['generate', '--config', cfg, '--samples', String(K), ...args], { env: { TRAJFORGE_CACHE_DIR: join(runDir, 'cache') } });
  const out = join(runDir, 'run');
  return { dir: out, cfg, policy, code: r.code, stdout: r.stdout, stderr: r.stderr, records: [...readJsonl(join(out, 'trajectories.jsonl')), ...readJsonl(join(out, 'failures.jsonl'))] };
}

const correct = (t: Record<string, any>): boolean => t.status === 'ok' && t.judgement?.verdict === 'correct';
const index = (t: Record<string, any>): number => Number(String(t.id).split('#')[1]);
const byQuestion = (records: Record<string, any>[]): Map<string, Record<string, any>[]> => {
  const m = new Map<string, Record<string, any>[]>();
  for (const t of records) m.set(t.question_id, [...(m.get(t.question_id) ?? []), t]);
  for (const list of m.values()) list.sort((a, b) => index(a) - index(b));
  return m;
};
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

/** C(n, k) exactly. */
function choose(n: number, k: number): bigint {
  if (k < 0 || k > n) return 0n;
  let r = 1n;
  for (let i = 0; i < k; i++) r = (r * BigInt(n - i)) / BigInt(i + 1);
  return r;
}

describe('--samples k --until-correct', () => {
  let all: Run;
  let until: Run;

  beforeAll(async () => {
    all = await run('all', []);
    until = await run('until', ['--until-correct']);
  }, 120_000);

  it('makes fewer model calls than running all k samples, and runs no sample after its question was judged correct', () => {
    expect(all.code).toBe(0);
    expect(until.code).toBe(0);
    expect(all.records).toHaveLength(rows.length * K);
    const fewer = until.policy.stats().chatRequests;
    expect(fewer).toBeLessThan(all.policy.stats().chatRequests);
    // Three model calls a sample (two searches, then the answer): the saving is the samples not run.
    const notRun = rows.length * K - until.records.length;
    expect(notRun).toBeGreaterThan(0);
    expect(until.stdout).toContain(`${notRun} samples not run: an earlier sample of their question was judged correct`);
    for (const [qid, list] of byQuestion(until.records)) {
      // In order from #0, none skipped, none after the first correct; all k when none was.
      expect(list.map(index), qid).toEqual(list.map((_, i) => i));
      const first = list.findIndex(correct);
      if (first === -1) expect(list, qid).toHaveLength(K);
      else expect(list, qid).toHaveLength(first + 1);
      for (const t of list) expect(t.sampling).toEqual({ index: index(t), k: K, until_correct: true });
    }
    // The samples a question did not need are no failures.
    expect(until.records.every((t) => t.status === 'ok' || t.reason === 'wrong_answer')).toBe(true);
  });

  it('stats gives pass@1 and pass@k from the first correct sample, per run and per split, as a recount from the records', async () => {
    const s = JSON.parse((await runCli(['stats', until.dir, '--json'])).stdout).pass_at_k;
    const recount = (split?: string) => {
      const qs = [...byQuestion(until.records).values()].filter((l) => split === undefined || l[0]!.meta.split === split);
      return {
        questions: qs.length,
        pass_at_1: mean(qs.map((l) => (correct(l[0]!) ? 1 : 0))),
        questions_at_k: qs.length,
        pass_at_k: mean(qs.map((l) => (l.some(correct) ? 1 : 0))),
      };
    };
    expect(s).toMatchObject({ k: K, method: 'first_correct', unjudged_questions: 0, samples: until.records.length });
    expect(s.overall).toEqual(recount());
    expect(s.by_split).toEqual({ dev: recount('dev'), test: recount('test') });
    expect(s.overall.pass_at_1).toBeLessThan(s.overall.pass_at_k);

    const text = (await runCli(['stats', until.dir])).stdout;
    expect(text).toContain(`pass@k (k = ${K}, first correct sample, --until-correct)`);
    expect(text).toMatch(/split dev/);
  });

  it('without --until-correct, pass@k is the unbiased estimator over all k samples (pass@1 = c/n), as a recount says', async () => {
    const s = JSON.parse((await runCli(['stats', all.dir, '--json'])).stdout).pass_at_k;
    const qs = [...byQuestion(all.records).values()];
    const exact = (n: number, c: number): number => 1 - Number(choose(n - c, K)) / Number(choose(n, K));
    expect(s).toMatchObject({ k: K, method: 'unbiased', samples: rows.length * K });
    expect(s.overall.pass_at_1).toBeCloseTo(mean(qs.map((l) => l.filter(correct).length / l.length)), 12);
    expect(s.overall.pass_at_k).toBeCloseTo(mean(qs.map((l) => exact(l.length, l.filter(correct).length))), 12);
    for (const split of ['dev', 'test']) {
      const sq = qs.filter((l) => l[0]!.meta.split === split);
      expect(s.by_split[split].pass_at_1).toBeCloseTo(mean(sq.map((l) => l.filter(correct).length / l.length)), 12);
    }
  });

  it('the report shows the same pass@1 and pass@k', async () => {
    const s = JSON.parse((await runCli(['stats', until.dir, '--json'])).stdout).pass_at_k;
    const html = join(dir, 'report.html');
    const r = await runCli(['report', until.dir, '--out', html]);
    expect(r.code).toBe(0);
    const page = readFileSync(html, 'utf8');
    expect(page).toContain(`<b>${(100 * s.overall.pass_at_1).toFixed(1)}%</b><span>pass@1 (${rows.length} questions)</span>`);
    expect(page).toContain(`<b>${(100 * s.overall.pass_at_k).toFixed(1)}%</b><span>pass@${K} (${rows.length} questions)</span>`);
    expect(page).toContain('first correct sample, --until-correct');
  });

  it('a resumed run runs no sample of a question already judged correct', async () => {
    const before = until.policy.stats().chatRequests;
    const r = await runCli(['generate', '--config', until.cfg, '--samples', String(K), '--until-correct'], { env: { TRAJFORGE_CACHE_DIR: join(dir, 'until', 'cache') } });
    expect(r.code).toBe(0);
    // Questions whose first correct sample came before the last have samples the sampler offers again.
    const pending = [...byQuestion(until.records).values()].reduce((n, l) => n + K - l.length, 0);
    expect(pending).toBeGreaterThan(0);
    expect(r.stdout).toContain(`${pending} samples not run`);
    expect(until.policy.stats().chatRequests).toBe(before);
    expect(readJsonl(join(until.dir, 'trajectories.jsonl')).length + readJsonl(join(until.dir, 'failures.jsonl')).length).toBe(until.records.length);
  });

  it('--until-correct without a judge is refused before anything runs', async () => {
    const runDir = join(dir, 'nojudge');
    mkdirSync(runDir, { recursive: true });
    const cfg = writeConfig(runDir, 'http://127.0.0.1:9/v1', { questions: { path: questions } });
    const r = await runCli(['generate', '--config', cfg, '--samples', '2', '--until-correct']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('needs a judge: set validation.judge');
  });
});

describe('the unbiased estimator', () => {
  it('equals 1 − C(n−c, k)/C(n, k) computed exactly', () => {
    for (let n = 1; n <= 30; n++) {
      for (let c = 0; c <= n; c++) {
        for (const k of [1, 2, 5, 10, n]) {
          if (k > n) continue;
          const exact = 1 - Number((choose(n - c, k) * 1_000_000_000_000n) / choose(n, k)) / 1e12;
          expect(unbiasedPassAtK(n, c, k), `n=${n} c=${c} k=${k}`).toBeCloseTo(exact, 10);
        }
      }
    }
  });
});
