/**
 * A repair keeps the text before it (`Repair.before`): held to what went over the wire. The sim
 * misbehaves (unclosed and invented output, several calls, stop strings ignored) behind the
 * logging proxy (tests/proxy.ts), and every repair's `before` must be the reply the proxy saw
 * for that turn, while the turn's kept text must be what the next request carried.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Trajectory, type ChatMessage } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { beforeOf, REPAIR_BEFORE_CHARS } from '../../pipeline/generate/repair-before.js';
import { startSim } from '../../sim/server.js';
import { readJsonl, tempDir, writeConfig } from '../helpers.js';
import { startProxy, type Exchange, type SentMessage } from '../proxy.js';

/** A reply as the client reads it: reasoning sent apart goes before the text in a think block, native calls after it as JSON. */
function sentText(m: SentMessage): string {
  const reasoning = m.reasoning_content ?? m.reasoning;
  const text = `${reasoning ? `<think>${reasoning}</think>\n` : ''}${m.content ?? ''}`;
  if (!m.tool_calls?.length) return text;
  return `${text}${text === '' ? '' : '\n'}[tool_calls] ${JSON.stringify(m.tool_calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments })))}`;
}

function readIfThere(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

/** The requests of one session (its system prompt and first user turn), in the order sent. */
function sessionOf(t: Trajectory, exchanges: readonly Exchange[]): Exchange[] {
  const head = JSON.stringify(t.messages.slice(0, 2).map((m) => m.content));
  return exchanges.filter((x) => JSON.stringify((x.body.messages ?? []).slice(0, 2).map((m) => m.content)) === head);
}

/** Where turn `turn` is in the messages: every kept turn left exactly one assistant message, in order. */
function assistantIndex(messages: readonly ChatMessage[], turn: number): number {
  let n = -1;
  for (let i = 0; i < messages.length; i++) if (messages[i]!.role === 'assistant' && ++n === turn) return i;
  return -1;
}

describe('repairs keep the completion before them', () => {
  const cases = [
    { dialect: 'tulu', misbehave: { unclosed_call: 0.25, hallucinated_output: 0.25, multiple_calls: 0.25, ignore_stop: 0.3, unclosed_answer: 0.3 }, kinds: ['unclosed_call', 'hallucinated_output', 'extra_calls', 'stop_ignored', 'unclosed_answer'] },
    { dialect: 'mcp-xml', misbehave: { hallucinated_output: 0.3, bad_arguments: 0.3, wrong_server: 0.3, ignore_stop: 0.3 }, kinds: ['stop_ignored', 'repaired_arguments', 'corrected_name'] },
    { dialect: 'native', misbehave: { hallucinated_output: 0.3, bad_arguments: 0.4, multiple_calls: 0.3 }, kinds: ['hallucinated_output', 'repaired_arguments'] },
  ] as const;
  it.each(cases)('$dialect against a misbehaving sim: each before is the reply the endpoint sent for its turn, and the kept text is what the next request carried', async ({ dialect, misbehave, kinds: expected }) => {
    const sim = await startSim({ port: 0, seed: 41, misbehave });
    const proxy = await startProxy(sim.url);
    const dir = tempDir('tf-before-');
    let rows: Trajectory[];
    try {
      const config = loadConfig(writeConfig(dir, proxy.url, { dialect, endpoint: { base_url: proxy.url, model: 'trajforge-sim', api_key_env: 'none', max_tokens: 1024, stream: false }, budgets: { max_turns: 6, max_tool_calls: 4, max_nudges: 1 }, rollback: { conditions: [] } }), { limit: 12 });
      await generate({ config });
      rows = [...readJsonl(join(config.output.dir, 'trajectories.jsonl')), ...readJsonl(join(config.output.dir, 'failures.jsonl'))].map((r) => Trajectory.parse(r));
    } finally {
      await proxy.close();
      await sim.close();
    }
    const kinds = new Set<string>();
    let changed = 0;
    let carried = 0;
    for (const t of rows) {
      const session = sessionOf(t, proxy.exchanges);
      for (const r of t.repairs) {
        if (r.kind === 'forced_answer' || r.kind === 'context_guard') {
          expect(r.before, `${t.id} ${r.kind}`).toBeUndefined();
          continue;
        }
        expect(r.before, `${t.id} turn ${r.turn} ${r.kind}`).toBeDefined();
        kinds.add(r.kind);
        const at = assistantIndex(t.messages, r.turn);
        expect(at, `${t.id} turn ${r.turn}`).toBeGreaterThan(0);
        // The request that turn answered: the last one with the messages before it (no rollbacks, so the only one).
        const asked = session.filter((x) => (x.body.messages ?? []).length === at);
        expect(asked, `${t.id} turn ${r.turn}: one request`).toHaveLength(1);
        expect(r.before).toBe(sentText(asked[0]!.reply!));
        expect(r.before_truncated).toBeUndefined();
        const kept = t.messages[at]!.content;
        if (kept !== r.before) changed++;
        const next = session.find((x) => (x.body.messages ?? []).length > at);
        if (next !== undefined) {
          expect(next.body.messages![at]!.content ?? '', `${t.id} turn ${r.turn}: the next request`).toBe(kept);
          carried++;
        }
      }
    }
    for (const kind of expected) expect([...kinds], `${kind} in ${[...kinds].join(', ')}`).toContain(kind);
    // The dropped part is there to see: most repaired turns were kept shorter or other than sent.
    expect(changed).toBeGreaterThan(5);
    expect(carried).toBeGreaterThan(5);
  }, 120_000);
});

describe('a completion the client cut for looping', () => {
  it('keeps in before what the endpoint sent, the loop too, bounded around where the kept text ends', async () => {
    const sim = await startSim({ port: 0, seed: 3, misbehave: { repetition: 1 } });
    const proxy = await startProxy(sim.url);
    const dir = tempDir('tf-before-loop-');
    let rows: Trajectory[];
    try {
      const endpoint = { base_url: proxy.url, model: 'trajforge-sim', api_key_env: 'none', max_tokens: 4096, stream: false, repetition_retries: 0, length_retries: 0 };
      const config = loadConfig(writeConfig(dir, proxy.url, { endpoint, budgets: { max_turns: 2, max_tool_calls: 1, max_nudges: 0 }, rollback: { conditions: [] } }), { limit: 2 });
      await generate({ config });
      rows = [...readJsonl(join(config.output.dir, 'trajectories.jsonl')), ...readJsonl(join(config.output.dir, 'failures.jsonl'))].map((r) => Trajectory.parse(r));
    } finally {
      await proxy.close();
      await sim.close();
    }
    const looped = rows.flatMap((t) => t.repairs.filter((r) => r.before_truncated).map((r) => ({ t, r })));
    expect(looped.length).toBeGreaterThan(0);
    for (const { t, r } of looped) {
      const at = assistantIndex(t.messages, r.turn);
      const asked = sessionOf(t, proxy.exchanges).filter((x) => (x.body.messages ?? []).length === at);
      const sent = sentText(asked[0]!.reply!);
      // The client kept one copy of the loop; before holds the loop as sent, cut to the limit around where the two part.
      expect(sent.length).toBeGreaterThan(REPAIR_BEFORE_CHARS);
      expect(r.before).toBe(beforeOf(sent, t.messages[at]!.content).before);
      expect(r.before!.length).toBeLessThan(REPAIR_BEFORE_CHARS + 200);
    }
  }, 120_000);
});

describe('before is scrubbed like the rest of the record', () => {
  it('a key the model echoes (it was in the question) is redacted in before too, and nowhere in the run in the clear', async () => {
    const key = 'sk-before-echo-9f3c2a7d1e';
    const sim = await startSim({ port: 0, seed: 7, misbehave: { unclosed_call: 1 } });
    const dir = tempDir('tf-before-secret-');
    const questions = join(dir, 'questions.jsonl');
    writeFileSync(questions, `${JSON.stringify({ id: 'q1', question: `Which Chrome version first supported the key ${key} in column-break-before?`, answer: '1' })}\n`);
    try {
      const config = loadConfig(writeConfig(dir, sim.url, { endpoint: { base_url: sim.url, model: 'trajforge-sim', api_key_env: 'TF_BEFORE_KEY', max_tokens: 1024 }, questions: { path: questions }, budgets: { max_turns: 3, max_tool_calls: 2 } }), { limit: 1 });
      await generate({ config, env: { ...process.env, TF_BEFORE_KEY: key } });
      const text = ['trajectories.jsonl', 'failures.jsonl'].map((f) => readIfThere(join(config.output.dir, f))).join('');
      const rows = text.split('\n').filter((l) => l !== '').map((l) => Trajectory.parse(JSON.parse(l)));
      const befores = rows.flatMap((t) => t.repairs.map((r) => r.before ?? ''));
      // The model wrote the key in its call (the sim searches with the question's words): before shows the marker where it was.
      expect(befores.some((b) => b.includes('[redacted:TF_BEFORE_KEY]')), befores.join('\n---\n')).toBe(true);
      expect(text).not.toContain(key);
    } finally {
      await sim.close();
    }
  }, 60_000);
});

describe('beforeOf: a long completion is kept around its repair point', () => {
  it('a 100 KB runaway keeps its head, the stretch where the kept text stops, and its tail, within the limit and marked', () => {
    const head = 'h'.repeat(30_000);
    const sent = `${head}<call_tool name="s">q</call_tool><tool_output>${'x'.repeat(70_000)}END`;
    const kept = `${head}<call_tool name="s">q</call_tool>`;
    const b = beforeOf(sent, kept);
    expect(b.before_truncated).toBe(true);
    expect(b.before.length).toBeLessThan(REPAIR_BEFORE_CHARS + 200);
    expect(b.before.startsWith('h'.repeat(1000))).toBe(true);
    expect(b.before.endsWith('xEND')).toBe(true);
    // The repair point, with what came either side of it.
    expect(b.before).toContain('q</call_tool><tool_output>xxx');
    expect(b.before).toMatch(/\[… [\d,]+ characters cut …\]/);
    // Each marker counts what it stands for: kept plus cut is the whole.
    const cut = [...b.before.matchAll(/\n\[… ([\d,]+) characters cut …\]\n/g)].reduce((n, m) => n + Number(m[1]!.replace(/,/g, '')), 0);
    expect(b.before.replace(/\n\[… [\d,]+ characters cut …\]\n/g, '').length + cut).toBe(sent.length);
  });

  it('short text is kept whole, and a cut never splits a surrogate pair', () => {
    expect(beforeOf('abc', 'ab')).toEqual({ before: 'abc' });
    const sent = '😀'.repeat(5000);
    const b = beforeOf(sent, '');
    expect(b.before_truncated).toBe(true);
    expect(b.before).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/);
  });
});
