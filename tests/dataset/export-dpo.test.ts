/**
 * `export --format dpo` on runs the judge judged in the loop (the sim plays the model and the
 * judge): pairs of a judged-correct and a judged-incorrect rollout of one question, in TRL's
 * conversational preference shape, built from the training view; checked here against the
 * records, the messages export, and the way TRL renders a pair with a chat template (Qwen3's).
 */
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { QUESTIONS, QWEN3, readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

const K = 4;
let dir: string;
const sims: Sim[] = [];
const runs: Record<string, { dir: string; records: Record<string, any>[] }> = {};

async function makeRun(name: string, dialect: string, samples: number, limit: number): Promise<void> {
  const policy = await startSim({ port: 0, seed: 12, misbehave: { wrong_answer: 0.5 } });
  const judge = await startSim({ port: 0, seed: 2 });
  sims.push(policy, judge);
  const runDir = join(dir, name);
  mkdirSync(runDir, { recursive: true });
  const cfg = writeConfig(runDir, policy.url, {
    dialect,
    questions: { path: QUESTIONS, limit, samples },
    validation: { judge: { base_url: judge.url, model: 'trajforge-sim', api_key_env: 'none' } },
  });
  const r = await runCli(['generate', '--config', cfg], { env: { TRAJFORGE_CACHE_DIR: join(runDir, 'cache') } });
  expect(r.code, r.stderr).toBe(0);
  const out = join(runDir, 'run');
  runs[name] = { dir: out, records: [...readJsonl(join(out, 'trajectories.jsonl')), ...readJsonl(join(out, 'failures.jsonl'))] };
}

beforeAll(async () => {
  dir = tempDir('tf-dpo-');
  await makeRun('tulu', 'tulu', K, 10);
  await makeRun('native', 'native', 3, 6);
}, 120_000);
afterAll(async () => {
  for (const s of sims) await s.close();
});

async function dpo(input: string, ...args: string[]): Promise<{ rows: Record<string, any>[]; stderr: string; code: number | null; file: string }> {
  const file = join(dir, `dpo-${Math.random().toString(36).slice(2)}.jsonl`);
  const r = await runCli(['export', input, '--format', 'dpo', '--out', file, ...args]);
  return { rows: readJsonl(file), stderr: r.stderr, code: r.code, file };
}

const idx = (id: string): number => Number(id.split('#')[1]);
const chosenOk = (t: Record<string, any>): boolean => t.status === 'ok' && t.judgement?.verdict === 'correct';
const rejectedOk = (t: Record<string, any>): boolean => ['incorrect', 'not_attempted'].includes(t.judgement?.verdict) && (t.status === 'ok' || t.reason === 'wrong_answer');

function sides(records: Record<string, any>[]): Map<string, { chosen: string[]; rejected: string[] }> {
  const m = new Map<string, { chosen: string[]; rejected: string[] }>();
  for (const t of records) {
    const e = m.get(t.question_id) ?? { chosen: [], rejected: [] };
    if (chosenOk(t)) e.chosen.push(t.id);
    if (rejectedOk(t)) e.rejected.push(t.id);
    m.set(t.question_id, e);
  }
  for (const e of m.values()) {
    e.chosen.sort((a, b) => idx(a) - idx(b));
    e.rejected.sort((a, b) => idx(a) - idx(b));
  }
  return m;
}

describe('export --format dpo', () => {
  it('one pair per question that has both: its first correct rollout against its first incorrect one, as TRL reads them', async () => {
    const { records } = runs.tulu!;
    const { rows, code, stderr } = await dpo(runs.tulu!.dir);
    expect(code).toBe(0);
    const expected = [...sides(records)].filter(([, e]) => e.chosen.length && e.rejected.length);
    expect(expected.length).toBeGreaterThan(2);
    expect(rows.map((r) => [r.id, r.chosen_id, r.rejected_id])).toEqual(expected.map(([q, e]) => [q, e.chosen[0], e.rejected[0]]));
    expect(stderr).toContain(`${rows.length} pairs written from ${rows.length} questions`);
    const byId = new Map(records.map((t) => [t.id, t]));
    for (const r of rows) {
      expect(Object.keys(r).sort()).toEqual(['chosen', 'chosen_id', 'completion', 'id', 'prompt', 'rejected', 'rejected_id']);
      expect(r.completion).toBe('diverge');
      // TRL: the prompt ends with the turn the model answered; each completion is one turn the model wrote.
      expect(r.prompt.slice(0, 2).map((m: { role: string }) => m.role)).toEqual(['system', 'user']);
      expect(r.prompt[1].content).toBe(byId.get(r.chosen_id)!.question);
      expect(r.chosen.map((m: { role: string }) => m.role)).toEqual(['assistant']);
      expect(r.rejected.map((m: { role: string }) => m.role)).toEqual(['assistant']);
      expect(r.chosen[0]).not.toEqual(r.rejected[0]);
      for (const m of [...r.prompt, ...r.chosen, ...r.rejected]) expect(m).not.toHaveProperty('train');
    }
  });

  it('the messages are the training view: what the messages export shows for the same ids, past the prompt', async () => {
    const { rows } = await dpo(runs.tulu!.dir);
    const file = join(dir, 'messages.jsonl');
    expect((await runCli(['export', runs.tulu!.dir, '--format', 'messages', '--all', '--out', file])).code).toBe(0);
    const views = new Map(readJsonl(file).map((r) => [r.id, r.messages.map(({ train: _t, ...m }: Record<string, unknown>) => m)]));
    for (const r of rows) {
      // The shared conversation and the turn each rollout wrote after it: a prefix of each one's view.
      const c = views.get(r.chosen_id)!;
      const j = views.get(r.rejected_id)!;
      expect(c.slice(0, r.prompt.length + 1)).toEqual([...r.prompt, ...r.chosen]);
      expect(j.slice(0, r.prompt.length + 1)).toEqual([...r.prompt, ...r.rejected]);
    }
  });

  it("renders as TRL's apply_chat_template does with Qwen3's template: prompt + continuation starts with the prompt rendered for generation", async () => {
    const config = JSON.parse(readFileSync(join(QWEN3, 'tokenizer_config.json'), 'utf8'));
    const template = new Template(config.chat_template as string);
    const render = (messages: unknown[], generation: boolean): string => template.render({ messages, add_generation_prompt: generation, eos_token: config.eos_token, bos_token: config.bos_token });
    for (const name of ['tulu', 'native']) {
      const { rows } = await dpo(runs[name]!.dir);
      expect(rows.length, name).toBeGreaterThan(0);
      for (const r of rows) {
        const prompt = render(r.prompt, true);
        for (const side of ['chosen', 'rejected']) {
          const whole = render([...r.prompt, ...r[side]], false);
          // TRL raises "The chat template applied to the prompt + completion does not start with the chat template applied to the prompt alone" otherwise.
          expect(whole.startsWith(prompt), `${name} ${r.id} ${side}`).toBe(true);
          expect(whole.length).toBeGreaterThan(prompt.length);
        }
      }
    }
  });

  it('native rows keep tool_calls and the tools offered', async () => {
    const { rows } = await dpo(runs.native!.dir, '--dpo-turn', 'final');
    const r = rows[0]!;
    expect(r.tools.length).toBeGreaterThan(0);
    const call = r.prompt.find((m: Record<string, any>) => m.tool_calls)!;
    const answer = r.prompt.find((m: Record<string, any>) => m.role === 'tool')!;
    expect(answer.tool_call_id).toBe(call.tool_calls[0].id);
  });

  it('no completion holds a character of a tool output or a nudge: only model-written turns, in both --dpo-turn modes (#25 item 5)', async () => {
    const nudges = ['nudge', 'native-nudge', 'mcp-xml-nudge'].map((n) => readFileSync(join(PACKAGE_ROOT, 'prompts', `${n}.txt`), 'utf8').trim());
    let checked = 0;
    for (const name of ['tulu', 'native']) {
      const outputs = runs[name]!.records.flatMap((t) => (t.tool_calls as { output_text: string }[]).map((c) => c.output_text.replace(/^<tool_output>\n?|\n?<\/tool_output>$/g, '')));
      for (const turn of ['diverge', 'final']) {
        const { rows } = await dpo(runs[name]!.dir, '--dpo-turn', turn);
        for (const r of rows) {
          expect(r.completion).toBe(turn);
          for (const m of [...r.chosen, ...r.rejected]) {
            expect(m.role).toBe('assistant');
            const text = `${m.content}\n${m.reasoning_content ?? ''}`;
            for (const o of outputs) if (o.length > 20) expect(text.includes(o.slice(0, 200)), `${r.id}: a tool output in a completion`).toBe(false);
            for (const n of nudges) expect(text.includes(n.slice(0, 60)), `${r.id}: a nudge in a completion`).toBe(false);
            expect(text).not.toContain('<tool_output>');
            checked++;
          }
        }
      }
    }
    expect(checked).toBeGreaterThan(8);
  });

  it('--max-pairs all: every chosen × rejected combination, the diagonal first; --max-pairs N: the first N of that order', async () => {
    const expected = [...sides(runs.tulu!.records)].filter(([, e]) => e.chosen.length && e.rejected.length);
    const every = await dpo(runs.tulu!.dir, '--max-pairs', 'all');
    expect(every.rows).toHaveLength(expected.reduce((n, [, e]) => n + e.chosen.length * e.rejected.length, 0));
    for (const [q, e] of expected) {
      const pairs = every.rows.filter((r) => r.id === q).map((r) => `${r.chosen_id}>${r.rejected_id}`);
      const diagonal = e.chosen.slice(0, e.rejected.length).map((c, i) => `${c}>${e.rejected[i]}`);
      expect(pairs.slice(0, diagonal.length), q).toEqual(diagonal);
      expect(new Set(pairs).size).toBe(e.chosen.length * e.rejected.length);
    }
    const two = await dpo(runs.tulu!.dir, '--max-pairs', '2');
    expect(two.rows).toHaveLength(expected.reduce((n, [, e]) => n + Math.min(2, e.chosen.length * e.rejected.length), 0));
    const again = await dpo(runs.tulu!.dir, '--max-pairs', 'all');
    expect(readFileSync(again.file, 'utf8')).toBe(readFileSync(every.file, 'utf8'));
    const bad = await dpo(runs.tulu!.dir, '--max-pairs', '0');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--max-pairs');
  });

  it('--tool-role tool puts tool outputs in tool turns; --keep selects candidates first', async () => {
    const tool = await dpo(runs.tulu!.dir, '--tool-role', 'tool', '--dpo-turn', 'final');
    const roles = new Set(tool.rows.flatMap((r) => r.prompt.slice(2).map((m: { role: string }) => m.role)));
    expect([...roles].sort()).toEqual(['assistant', 'tool']);
    const none = await dpo(runs.tulu!.dir, '--keep', 'tool_calls >= 99');
    expect(none.rows).toEqual([]);
    expect(none.stderr).toContain(`${runs.tulu!.records.length} not selected`);
  });

  it('rollouts with different prompts are never paired (an attempt seeded by a failure sees another question turn)', async () => {
    const [q, e] = [...sides(runs.tulu!.records)].find(([, x]) => x.chosen.length && x.rejected.length)!;
    const rows = runs.tulu!.records.filter((t) => t.question_id === q && (e.chosen.includes(t.id) || e.rejected.includes(t.id)));
    const edited = rows.map((t) => (e.rejected.includes(t.id) ? { ...t, messages: t.messages.map((m: Record<string, any>, i: number) => (i === 1 ? { ...m, content: `Earlier attempt failed.\n${m.content}` } : m)) } : t));
    const file = join(dir, 'mismatch.jsonl');
    writeFileSync(file, edited.map((t) => JSON.stringify(t)).join('\n') + '\n');
    const out = await dpo(file);
    expect(out.code).toBe(0);
    expect(out.rows).toEqual([]);
    expect(out.stderr).toContain('1 with no chosen and rejected under the same prompt');
  });

  it('each sample id counts by its latest state, as stats and merge read a run: accepted beats failed, then the later attempt, then the later row', async () => {
    const [q, e] = [...sides(runs.tulu!.records)].find(([, x]) => x.chosen.length && x.rejected.length)!;
    const get = (id: string) => runs.tulu!.records.find((t) => t.id === id)!;
    const c = get(e.chosen[0]!);
    const r = get(e.rejected[0]!);
    const unjudged = (t: Record<string, any>) => ({ ...t, status: 'failed', reason: 'unjudged', judgement: { ...t.judgement, verdict: 'unjudged' } });
    const write = (name: string, list: Record<string, any>[]): string => {
      const file = join(dir, name);
      writeFileSync(file, list.map((t) => JSON.stringify(t)).join('\n') + '\n');
      return file;
    };
    // The rejected sample's unjudged record after its verdict: the later row wins, nothing to pair.
    const later = await dpo(write('later.jsonl', [c, unjudged(c), r, unjudged(r)]));
    expect(later.rows).toEqual([]);
    expect(later.stderr).toContain('2 rows superseded by a later state of their sample id');
    // Before it (as a run's failures.jsonl holds it when rerun judged it): the verdict wins; an accepted record beats its unjudged one anywhere.
    const before = await dpo(write('before.jsonl', [unjudged(c), c, unjudged(r), r, unjudged(c)]));
    expect(before.rows.map((x) => [x.id, x.chosen_id, x.rejected_id])).toEqual([[q, c.id, r.id]]);
    // A later attempt wins over an earlier one whatever the order.
    const retried = await dpo(write('retried.jsonl', [c, { ...r, attempt: 1, judgement: { ...r.judgement, verdict: 'unjudged' }, reason: 'unjudged' }, r]));
    expect(retried.rows).toEqual([]);
  });

  it('flags for the token formats are refused with dpo', async () => {
    for (const flag of [['--mask', 'train_on_last'], ['--all'], ['--max-tokens', '8k']]) {
      const r = await dpo(runs.tulu!.dir, ...flag);
      expect(r.code, flag.join(' ')).toBe(2);
      expect(r.stderr).toContain('not for --format dpo');
    }
  });
});
