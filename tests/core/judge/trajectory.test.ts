/**
 * The judge in the loop, end to end through the CLI: the sim plays the model, a second sim
 * plays the judge (sim/judge.ts), the bundled corpus server the tools. Verdicts are recounted
 * here from the records (does the answer hold the gold answer?), not taken from the code.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../../sim/server.js';
import { QUESTIONS, readJsonl, runCli, tempDir, writeConfig } from '../../helpers.js';

/** Word runs as the test reads them: the answer's tags dropped, lower case. */
const words = (s: string): string[] => s.replace(/<[^<>]*>/g, ' ').toLowerCase().match(/[\p{L}\p{N}]+(?:\.\d+)?/gu) ?? [];
function holds(answer: string, gold: string): boolean {
  const a = words(answer).join(' ');
  return ` ${a} `.includes(` ${words(gold).join(' ')} `);
}

const questionRows = readFileSync(QUESTIONS, 'utf8').trim().split('\n').slice(0, 8).map((l) => JSON.parse(l));

function writeQuestions(dir: string, rows: Record<string, unknown>[]): string {
  const file = join(dir, 'questions.jsonl');
  writeFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return file;
}

function judgeConfig(url: string, patch: Record<string, unknown> = {}): Record<string, unknown> {
  return { base_url: url, model: 'trajforge-sim', api_key_env: 'none', max_retries: 1, retry_base_ms: 10, retry_max_ms: 50, ...patch };
}

/** A port nothing listens on: bound, then closed. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

let policy: Sim;
let dir: string;
const sims: Sim[] = [];

beforeAll(async () => {
  dir = tempDir('tf-judge-loop-');
  policy = await startSim({ port: 0, seed: 7, misbehave: { wrong_answer: 0.5 } });
});
afterAll(async () => {
  await policy.close();
  for (const s of sims) await s.close();
});

async function judgeSim(opts: Parameters<typeof startSim>[0] = {}): Promise<Sim> {
  const s = await startSim({ port: 0, ...opts });
  sims.push(s);
  return s;
}

/** generate through the CLI, with a cache directory of the run's own (verdicts cached by another test are no hits here). */
async function generate(name: string, patch: Record<string, unknown>, args: string[] = []) {
  const runDir = join(dir, name);
  mkdirSync(runDir, { recursive: true });
  const cfg = writeConfig(runDir, policy.url, { output: { dir: join(runDir, 'run') }, ...patch });
  const r = await runCli(['generate', '--config', cfg, ...args], { env: { TRAJFORGE_CACHE_DIR: join(runDir, 'cache') } });
  const run = join(runDir, 'run');
  return { r, run, cfg, ok: readJsonl(join(run, 'trajectories.jsonl')), failed: readJsonl(join(run, 'failures.jsonl')), cache: join(runDir, 'cache') };
}

describe('the judge in the loop', () => {
  it('judges every answered sample before it is written: right answers accepted, wrong ones failed as wrong_answer, each with the verdict and the reasons', async () => {
    const judge = await judgeSim({ seed: 1 });
    const questions = writeQuestions(dir, questionRows);
    // No verdict cache: two samples with one answer would otherwise share a grading, as it happened to come.
    const { r, ok, failed } = await generate('verdicts', { questions: { path: questions, samples: 2 }, validation: { judge: judgeConfig(judge.url, { cache: false }) } });
    expect(r.stderr).not.toContain('error');
    const all = [...ok, ...failed];
    expect(all).toHaveLength(16);
    expect(ok.length).toBeGreaterThan(0);
    expect(failed.length).toBeGreaterThan(0);
    for (const t of all) {
      const right = holds(t.final_answer, t.gold_answer);
      expect(t.judgement, t.id).toMatchObject({ verdict: right ? 'correct' : 'incorrect', step: 'llm', judge_model: 'trajforge-sim', prompt: expect.stringMatching(/^judge-simpleqa@[0-9a-f]{8}$/) });
      expect(t.judgement.reasoning).toContain(`"${t.gold_answer}"`);
      expect(t.judgement.f1).toBeGreaterThanOrEqual(0);
      expect(t.sampling).toEqual({ index: Number(t.id.split('#')[1]), k: 2, until_correct: false });
      if (right) {
        expect(t.status).toBe('ok');
        expect(t.validation.issues.filter((i: { rule: string }) => i.rule.startsWith('gold.'))).toEqual([]);
      } else {
        expect(t).toMatchObject({ status: 'failed', reason: 'wrong_answer' });
        expect(t.validation.issues).toContainEqual({ rule: 'gold.judge', severity: 'error', message: expect.stringMatching(/^judge: INCORRECT: /) });
      }
    }
    // One grading per sample: none of these answers is the gold answer's words alone, so the cheap steps decide none.
    expect(judge.stats().judgeRequests).toBe(16);
    expect(judge.stats().chatRequests).toBe(16);
    // What each grading cost is on its verdict, and the run's spend counts the judge apart.
    for (const t of all) expect(t.judgement.usage, t.id).toMatchObject({ requests: 1, prompt_tokens: expect.any(Number), completion_tokens: expect.any(Number) });
    const judged = all.reduce((n, t) => n + t.judgement.usage.prompt_tokens + t.judgement.usage.completion_tokens, 0);
    const cost = JSON.parse(readFileSync(join(dir, 'verdicts', 'run', 'manifest.json'), 'utf8')).cost;
    expect(judged).toBeGreaterThan(0);
    expect(cost.by.judge.prompt_tokens + cost.by.judge.completion_tokens).toBe(judged);
  });

  it('a judge that quotes every answer it grades, before and after its verdict (judge_quotes), gives each sample the verdict its answer earns', async () => {
    const judge = await judgeSim({ seed: 1, misbehave: { judge_quotes: 1 } });
    const questions = writeQuestions(dir, questionRows.slice(0, 6));
    const { ok, failed } = await generate('quotes', { questions: { path: questions }, validation: { judge: judgeConfig(judge.url, { cache: false }) } });
    const all = [...ok, ...failed];
    expect(all).toHaveLength(6);
    for (const t of all) expect(t.judgement.verdict, t.id).toBe(holds(t.final_answer, t.gold_answer) ? 'correct' : 'incorrect');
    expect(judge.stats().judgeRequests).toBeGreaterThan(0);
    expect(judge.stats().misbehaviours.judge_quotes).toBe(judge.stats().judgeRequests);
  });

  it('the cheap steps decide what they can without a request: exact, normalised, F1 ≥ threshold; the LLM only the rest', async () => {
    // The answers of a run without a judge (the same sim seed gives the same answers in a fresh sim).
    const probe = await startSim({ port: 0, seed: 3 });
    const plain = join(dir, 'cheap-probe');
    mkdirSync(plain, { recursive: true });
    const rows = questionRows.slice(0, 4);
    const qfile = writeQuestions(plain, rows);
    const r0 = await runCli(['generate', '--config', writeConfig(plain, probe.url, { questions: { path: qfile }, validation: { gold_match: 'off' } })]);
    await probe.close();
    expect(r0.code).toBe(0);
    const answers = new Map(readJsonl(join(plain, 'run', 'trajectories.jsonl')).map((t) => [t.id, t.final_answer as string]));
    expect(answers.size).toBe(4);
    const [a, b, c, d] = rows.map((q) => answers.get(q.id)!);
    const strip = (s: string): string => s.replace(/<[^<>]*>/g, ' ');
    const golds = [
      a, // exact
      strip(b!).toUpperCase(), // normalised: the same words, tags gone, another case
      strip(c!).split(' ').slice(0, -2).join(' '), // F1 0.8 or more: the last words left out
      'Netscape Navigator 2', // the LLM
    ];
    const crafted = rows.map((q, i) => ({ ...q, answer: golds[i] }));
    const judge = await judgeSim();
    const p2 = await startSim({ port: 0, seed: 3 });
    sims.push(p2);
    const runDir = join(dir, 'cheap');
    mkdirSync(runDir, { recursive: true });
    const cfg = writeConfig(runDir, p2.url, { questions: { path: writeQuestions(runDir, crafted) }, validation: { f1_threshold: 0.8, judge: judgeConfig(judge.url) } });
    const r = await runCli(['generate', '--config', cfg], { env: { TRAJFORGE_CACHE_DIR: join(runDir, 'cache') } });
    const all = [...readJsonl(join(runDir, 'run', 'trajectories.jsonl')), ...readJsonl(join(runDir, 'run', 'failures.jsonl'))];
    const byId = new Map(all.map((t) => [t.id, t]));
    expect(rows.map((q) => byId.get(q.id)?.final_answer)).toEqual([a, b, c, d]);
    expect(rows.map((q) => byId.get(q.id)?.judgement?.step)).toEqual(['exact', 'normalised', 'f1', 'llm']);
    expect(rows.map((q) => byId.get(q.id)?.judgement?.verdict)).toEqual(['correct', 'correct', 'correct', 'incorrect']);
    expect(byId.get(rows[2]!.id).judgement.f1).toBeGreaterThanOrEqual(0.8);
    // Only the fourth was asked, and a cheap verdict names no judge model.
    expect(judge.stats().judgeRequests).toBe(1);
    expect(byId.get(rows[0]!.id).judgement.judge_model).toBeUndefined();
    expect(r.code).toBe(0);
  });

  it('a judge that is down fails no sample: each is kept unjudged with its whole rollout, and rerun --reason unjudged judges the recorded answers with no new rollout', async () => {
    const port = await closedPort();
    const questions = writeQuestions(dir, questionRows.slice(0, 5));
    const down = await generate('down', { questions: { path: questions }, validation: { judge: judgeConfig(`http://127.0.0.1:${port}/v1`) } });
    // Every sample waits for its verdict: the session says so and exits 1, with what to do.
    expect(down.r.code).toBe(1);
    expect(down.r.stderr).toContain('main reason: unjudged');
    expect(down.r.stderr).toContain('--reason unjudged');
    expect(down.ok).toEqual([]);
    expect(down.failed).toHaveLength(5);
    for (const t of down.failed) {
      expect(t).toMatchObject({ status: 'failed', reason: 'unjudged', judgement: { verdict: 'unjudged', step: 'llm', error: expect.stringContaining('ECONNREFUSED') } });
      // The rollout is all there: what the judge would have read.
      expect(t.final_answer).not.toBe('');
      expect(t.tool_calls.length).toBeGreaterThan(0);
      expect(t.interleaved_text).toContain('<answer>');
    }

    // rerun with the judge still down: one probe of the judge, exit 1, nothing run.
    const still = await runCli(['rerun', down.run, '--reason', 'unjudged', '--config', writeConfig(join(dir, 'down'), policy.url, { output: { dir: down.run }, questions: { path: questions }, validation: { judge: judgeConfig(`http://127.0.0.1:${port}/v1`) } })]);
    expect(still.code).toBe(1);
    expect(still.stderr).toContain('the judge does not answer');
    expect(readJsonl(join(down.run, 'failures.jsonl'))).toHaveLength(5);

    // The judge is back (where it is may change: it is not part of what a sample is). The model
    // is not needed, and not asked: its endpoint here is a port nothing listens on.
    const judge = await judgeSim({ seed: 4 });
    const policyBefore = policy.stats().chatRequests;
    const cfgUp = writeConfig(join(dir, 'down'), `http://127.0.0.1:${port}/v1`, { output: { dir: down.run }, questions: { path: questions }, validation: { judge: judgeConfig(judge.url) } });
    const again = await runCli(['rerun', down.run, '--reason', 'unjudged', '--config', cfgUp], { env: { TRAJFORGE_CACHE_DIR: down.cache } });
    expect(again.code).toBe(0);
    expect(policy.stats().chatRequests).toBe(policyBefore);
    expect(judge.stats().judgeRequests).toBe(5);
    const stats = JSON.parse((await runCli(['stats', down.run, '--json'])).stdout);
    // The latest state of each id: judged now, none unjudged.
    expect(stats.judgement.verdicts.unjudged).toBeUndefined();
    expect(stats.rows.counted).toBe(5);
    const latest = [...readJsonl(join(down.run, 'trajectories.jsonl')), ...readJsonl(join(down.run, 'failures.jsonl')).filter((t) => t.reason !== 'unjudged')];
    expect(latest).toHaveLength(5);
    for (const t of latest) {
      expect(t.judgement.verdict).toBe(holds(t.final_answer, t.gold_answer) ? 'correct' : 'incorrect');
      // The same rollout, the same attempt: only its verdict is new.
      expect(t.attempt).toBe(0);
      expect(t.final_answer).toBe(down.failed.find((f) => f.id === t.id)!.final_answer);
    }
  });

  it('an unreadable grading is asked again (unreadable_retries), then the sample is unjudged with the reply kept', async () => {
    const judge = await judgeSim({ misbehave: { judge_unreadable: 1 } });
    const questions = writeQuestions(dir, questionRows.slice(0, 3));
    const { failed } = await generate('unreadable', { questions: { path: questions }, validation: { judge: judgeConfig(judge.url, { unreadable_retries: 2 }) } });
    expect(failed).toHaveLength(3);
    for (const t of failed) {
      expect(t).toMatchObject({ reason: 'unjudged', judgement: { verdict: 'unjudged', error: 'no readable verdict in 3 replies', raw: expect.stringContaining('seems reasonable') } });
    }
    expect(judge.stats().judgeRequests).toBe(9);
  });

  it('a judge that refuses its key stops the run after fail_fast_after refusals; the samples are kept unjudged, and the key is in no file and no output', async () => {
    const KEY = 'sk-judge-0123456789abcdef';
    const requests: string[] = [];
    const refuser: Server = createServer((req, res) => {
      requests.push(String(req.headers.authorization));
      req.resume();
      req.on('end', () => {
        res.writeHead(401, { 'content-type': 'application/json' });
        // A server that echoes the key it was sent, as some proxies do.
        res.end(JSON.stringify({ error: { message: `Incorrect API key provided: ${KEY}`, type: 'invalid_request_error', code: 'invalid_api_key' } }));
      });
    });
    await new Promise<void>((r) => refuser.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(refuser.address() as AddressInfo).port}/v1`;
      const questions = writeQuestions(dir, questionRows);
      const runDir = join(dir, 'refused');
      mkdirSync(runDir, { recursive: true });
      const cfg = writeConfig(runDir, policy.url, { concurrency: 1, questions: { path: questions }, validation: { judge: judgeConfig(url, { api_key_env: 'TF_JUDGE_KEY', fail_fast_after: 3 }) } });
      const r = await runCli(['generate', '--config', cfg], { env: { TF_JUDGE_KEY: KEY, TRAJFORGE_CACHE_DIR: join(runDir, 'cache') } });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('refused 3 grading requests in a row');
      expect(requests[0]).toBe(`Bearer ${KEY}`);
      const failed = readJsonl(join(runDir, 'run', 'failures.jsonl'));
      expect(failed.length).toBeGreaterThanOrEqual(3);
      expect(failed.length).toBeLessThan(8);
      for (const t of failed) expect(t).toMatchObject({ reason: 'unjudged', judgement: { error: expect.stringContaining('(fatal)') } });
      expect(`${r.stdout}${r.stderr}`).not.toContain(KEY);
      for (const f of readdirSync(join(runDir, 'run'))) {
        if (f.endsWith('.jsonl') || f.endsWith('.json')) expect(readFileSync(join(runDir, 'run', f), 'utf8'), f).not.toContain(KEY);
      }
    } finally {
      await new Promise<void>((r) => refuser.close(() => r()));
    }
  });

  it("a judge that writes its key into its rationale: the key is a run secret, redacted in every record", async () => {
    const KEY = 'sk-judge-echo-fedcba9876543210';
    const echo: Server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        const content = `Verdict: INCORRECT\nRationale: checked with ${String(req.headers.authorization).slice('Bearer '.length)}`;
        res.end(JSON.stringify({ id: 'j', object: 'chat.completion', created: 0, model: 'echo', choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }], usage: { prompt_tokens: 9, completion_tokens: 9, total_tokens: 18 } }));
      });
    });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(echo.address() as AddressInfo).port}/v1`;
      const runDir = join(dir, 'echo');
      mkdirSync(runDir, { recursive: true });
      const cfg = writeConfig(runDir, policy.url, { questions: { path: writeQuestions(runDir, questionRows.slice(0, 2)) }, validation: { judge: judgeConfig(url, { api_key_env: 'TF_ECHO_JUDGE_KEY', cache: false }) } });
      const r = await runCli(['generate', '--config', cfg], { env: { TF_ECHO_JUDGE_KEY: KEY, TRAJFORGE_CACHE_DIR: join(runDir, 'cache') } });
      const failed = readJsonl(join(runDir, 'run', 'failures.jsonl'));
      expect(failed).toHaveLength(2);
      for (const t of failed) expect(t.judgement.reasoning).toBe('checked with [redacted:TF_ECHO_JUDGE_KEY]');
      for (const f of readdirSync(join(runDir, 'run'))) {
        if (f.endsWith('.jsonl') || f.endsWith('.json')) expect(readFileSync(join(runDir, 'run', f), 'utf8'), f).not.toContain(KEY);
      }
      expect(`${r.stdout}${r.stderr}`).not.toContain(KEY);
    } finally {
      await new Promise<void>((r) => echo.close(() => r()));
    }
  });

  it('a missing judge key stops generate before anything starts (exit 2), naming the field', async () => {
    const questions = writeQuestions(dir, questionRows.slice(0, 1));
    const { r, run } = await generate('nokey', { questions: { path: questions }, validation: { judge: judgeConfig('https://judge.invalid/v1', { api_key_env: 'TF_NOT_SET_JUDGE_KEY' }) } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('validation.judge.api_key_env');
    expect(readJsonl(join(run, 'trajectories.jsonl'))).toEqual([]);
  });

  it('verdicts are cached: the same answers judged again make no request, and say cached', async () => {
    const judge = await judgeSim();
    const questions = writeQuestions(dir, questionRows.slice(0, 3));
    const cache = join(dir, 'cached-cache');
    // Two fresh policy sims of one seed give the same answers.
    const runOnce = async (name: string) => {
      const p = await startSim({ port: 0, seed: 9, misbehave: { wrong_answer: 0.5 } });
      sims.push(p);
      const runDir = join(dir, name);
      mkdirSync(runDir, { recursive: true });
      const cfg = writeConfig(runDir, p.url, { questions: { path: questions }, validation: { judge: judgeConfig(judge.url) } });
      await runCli(['generate', '--config', cfg], { env: { TRAJFORGE_CACHE_DIR: cache } });
      return [...readJsonl(join(runDir, 'run', 'trajectories.jsonl')), ...readJsonl(join(runDir, 'run', 'failures.jsonl'))];
    };
    const first = await runOnce('cached1');
    expect(judge.stats().judgeRequests).toBe(3);
    expect(first.every((t) => t.judgement.cached === undefined)).toBe(true);
    const second = await runOnce('cached2');
    expect(second.map((t) => t.final_answer).sort()).toEqual(first.map((t) => t.final_answer).sort());
    expect(judge.stats().judgeRequests).toBe(3);
    for (const t of second) {
      expect(t.judgement, t.id).toMatchObject({ cached: true, verdict: first.find((f) => f.id === t.id)!.judgement.verdict });
    }
  });
});

describe('trajforge check with a judge', () => {
  it('grades one plainly right answer at the judge: ok against the sim, FAIL at a closed port, FAIL for --until-correct without a judge', async () => {
    const judge = await judgeSim();
    const runDir = join(dir, 'check');
    mkdirSync(runDir, { recursive: true });
    const questions = writeQuestions(runDir, questionRows.slice(0, 1));
    const ok = await runCli(['check', '--config', writeConfig(runDir, policy.url, { questions: { path: questions }, validation: { judge: judgeConfig(judge.url) } })]);
    expect(ok.stdout).toMatch(/ok\s+judge\s+trajforge-sim at .* graded a plainly right test answer CORRECT/);
    expect(judge.stats().judgeRequests).toBe(1);

    const port = await closedPort();
    const down = await runCli(['check', '--config', writeConfig(runDir, policy.url, { questions: { path: questions }, validation: { judge: judgeConfig(`http://127.0.0.1:${port}/v1`) } })]);
    expect(down.code).toBe(1);
    expect(down.stdout).toMatch(/FAIL\s+judge\s+connection refused at http:\/\/127\.0\.0\.1:\d+\/v1/);

    const unreadable = await judgeSim({ misbehave: { judge_unreadable: 1 } });
    const warn = await runCli(['check', '--config', writeConfig(runDir, policy.url, { questions: { path: questions }, validation: { judge: judgeConfig(unreadable.url) } })]);
    expect(warn.stdout).toMatch(/warn\s+judge\s+.*no readable verdict/);

    const noJudge = await runCli(['check', '--config', writeConfig(runDir, policy.url, { questions: { path: questions, samples: 2, until_correct: true } })]);
    expect(noJudge.code).toBe(1);
    expect(noJudge.stdout).toMatch(/FAIL\s+judge\s+questions.until_correct .* needs a judge/);
    // Four `check`s, each starting the corpus server and asking the model: over a minute on a loaded machine.
  }, 240_000);
});

describe('rubrics', () => {
  const rubrics = [
    { title: 'Version', description: 'States the version in which support first arrived', weight: 3 },
    { description: 'Mentions the zebra giraffe elephant', weight: 1 },
    { description: 'Claims support was removed later', weight: -1 },
  ];

  it('a question with rubrics gets each criterion scored and the weighted rubric_score; filter and export select on it', async () => {
    const judge = await judgeSim();
    const rows = questionRows.slice(0, 6).map(({ answer: _gold, ...q }) => ({ ...q, rubrics }));
    const questions = writeQuestions(dir, rows);
    const { r, ok, failed, run } = await generate('rubrics', { questions: { path: questions }, validation: { judge: judgeConfig(judge.url, { rubric_pass: 0.7 }) } });
    expect(r.code).toBe(0);
    // A rubric score fails no sample: it is for selection.
    expect(failed).toEqual([]);
    expect(ok).toHaveLength(6);
    for (const t of ok) {
      const j = t.judgement;
      expect(j.step).toBe('rubric');
      expect(j.criteria.map((c: { criterion: string; weight: number }) => [c.criterion, c.weight])).toEqual(rubrics.map((c) => [c.description, c.weight]));
      // Weighted as docs/curate.md says: Σ score·weight over the positive weights.
      const scores = j.criteria.map((c: { score: number }) => c.score);
      const want = Math.min(1, Math.max(0, (3 * scores[0] + scores[1] - scores[2]) / 4));
      expect(j.rubric_score).toBeCloseTo(want, 4);
      // Nothing in an answer about a browser version mentions zebras.
      expect(scores[1]).toBe(0);
      expect(j.verdict).toBe(j.rubric_score >= 0.7 ? 'correct' : 'incorrect');
    }
    expect(judge.stats().judgeRequests).toBe(6);

    const high = ok.filter((t) => t.judgement.rubric_score >= 0.7).map((t) => t.id).sort();
    const kept = join(dir, 'rubric-kept.jsonl');
    const f = await runCli(['filter', run, '--keep', 'rubric_score >= 0.7', '--out', kept]);
    expect(f.code).toBe(0);
    expect(readJsonl(kept).map((t) => t.id).sort()).toEqual(high);
    const exported = join(dir, 'rubric-sft.jsonl');
    const e = await runCli(['export', run, '--format', 'messages', '--keep', 'rubric_score >= 0.7', '--out', exported]);
    expect(e.code).toBe(0);
    expect(readJsonl(exported).map((t) => t.id).sort()).toEqual(high);
    const bad = await runCli(['filter', run, '--keep', 'rubric_score >= high', '--out', kept]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('expected a number');
  });

  it('a rubric that is not one is a bad question row: generate stops before it starts, naming the line and the field', async () => {
    const rows = [{ ...questionRows[0], rubrics }, { ...questionRows[1], rubrics: [{ description: 'ok', weight: 'heavy' }] }];
    const questions = writeQuestions(dir, rows);
    const judge = await judgeSim();
    const { r, run } = await generate('badrubric', { questions: { path: questions }, validation: { judge: judgeConfig(judge.url) } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(':2');
    expect(r.stderr).toContain('rubrics[0].weight');
    expect(readJsonl(join(run, 'trajectories.jsonl'))).toEqual([]);
  });
});
