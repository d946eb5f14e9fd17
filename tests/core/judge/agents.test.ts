/**
 * The judge in the loop with sub-agents (#15): only the main agent's session, the one that
 * carries the gold answer, is judged; a wrong answer fails its family as any failed root does,
 * and an unjudged one fails nothing below it. The sim plays the main agent, its browsing
 * sub-agent and the judge; data/configs/miroverse.yaml is the family's config.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../pipeline/paths.js';
import { startSim, type Sim } from '../../../sim/server.js';
import { readJsonl, runCli, tempDir } from '../../helpers.js';

const words = (s: string): string[] => s.replace(/<[^<>]*>/g, ' ').toLowerCase().match(/[\p{L}\p{N}]+(?:\.\d+)?/gu) ?? [];
const holds = (answer: string, gold: string): boolean => ` ${words(answer).join(' ')} `.includes(` ${words(gold).join(' ')} `);

let dir: string;
let policy: Sim;
const sims: Sim[] = [];

beforeAll(async () => {
  dir = tempDir('tf-judge-agents-');
  policy = await startSim({ port: 0, seed: 3, misbehave: { wrong_answer: 0.5 } });
  sims.push(policy);
});
afterAll(async () => {
  for (const s of sims) await s.close();
});

/** data/configs/miroverse.yaml with a judge in place of its gold rule. */
function config(name: string, judgeUrl: string, extra = ''): string {
  const text = readFileSync(join(PACKAGE_ROOT, 'data/configs/miroverse.yaml'), 'utf8').replace('  limit: 20\n', '  limit: 5\n  samples: 2\n').replace(
    'validation:\n  gold_match: boxed',
    `validation:\n  judge: { base_url: ${judgeUrl}, model: trajforge-sim, api_key_env: none, max_retries: 1, retry_base_ms: 10, cache: false${extra} }`,
  );
  expect(text).toContain('judge:');
  expect(text).toContain('samples: 2');
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, text);
  return file;
}

async function generate(name: string, judgeUrl: string) {
  const out = join(dir, name);
  mkdirSync(out, { recursive: true });
  const r = await runCli(['generate', '--config', config(name, judgeUrl), '--base-url', policy.url, '--out', out], { env: { TRAJFORGE_CACHE_DIR: join(dir, `${name}-cache`) } });
  return { r, out, records: [...readJsonl(join(out, 'trajectories.jsonl')), ...readJsonl(join(out, 'failures.jsonl'))] };
}

describe('the judge with sub-agents', () => {
  it("judges the main agent's sessions alone; a wrong answer fails its family, a right one keeps it", async () => {
    const judge = await startSim({ port: 0, seed: 1 });
    sims.push(judge);
    const { r, records } = await generate('judged', judge.url);
    expect(r.code, r.stderr).toBe(0);
    const mains = records.filter((t) => t.parent_id === undefined);
    const subs = records.filter((t) => t.parent_id !== undefined);
    expect(mains).toHaveLength(10);
    expect(subs.length).toBeGreaterThan(0);
    expect(judge.stats().judgeRequests).toBe(10);
    for (const t of subs) expect(t.judgement, t.id).toBeUndefined();
    for (const t of mains) {
      const right = holds(t.final_answer, t.gold_answer);
      expect(t.judgement, t.id).toMatchObject({ verdict: right ? 'correct' : 'incorrect', step: 'llm' });
      const below = subs.filter((s) => s.family_id === t.id && s.attempt === t.attempt);
      expect(below.length, t.id).toBeGreaterThan(0);
      if (right) {
        expect(t.status).toBe('ok');
        for (const s of below) expect(s.status, s.id).toBe('ok');
      } else {
        expect(t).toMatchObject({ status: 'failed', reason: 'wrong_answer' });
        for (const s of below) expect(s, s.id).toMatchObject({ status: 'failed', reason: 'parent_failed' });
      }
    }
    expect(mains.some((t) => t.status === 'ok')).toBe(true);
    expect(mains.some((t) => t.status === 'failed')).toBe(true);
  });

  it('an unjudged main session fails nothing below it; rerun --reason unjudged judges it with no new rollout', async () => {
    const s = createServer();
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const port = (s.address() as AddressInfo).port;
    await new Promise<void>((r) => s.close(() => r()));
    const { out, records } = await generate('unjudged', `http://127.0.0.1:${port}/v1`);
    const mains = records.filter((t) => t.parent_id === undefined);
    expect(mains.every((t) => t.reason === 'unjudged')).toBe(true);
    for (const t of records.filter((x) => x.parent_id !== undefined)) expect(t.status, t.id).toBe('ok');

    const judge = await startSim({ port: 0, seed: 1 });
    sims.push(judge);
    const before = policy.stats().chatRequests;
    const again = await runCli(['rerun', out, '--reason', 'unjudged', '--config', config('unjudged-up', judge.url)], { env: { TRAJFORGE_CACHE_DIR: join(dir, 'unjudged-cache') } });
    expect(again.code, again.stderr).toBe(0);
    expect(policy.stats().chatRequests).toBe(before);
    expect(judge.stats().judgeRequests).toBe(mains.length);
    const stats = JSON.parse((await runCli(['stats', out, '--json'])).stdout);
    expect(stats.judgement.verdicts.unjudged).toBeUndefined();
  });
});
