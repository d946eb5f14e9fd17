/**
 * `trajforge export` on a real run (sim + corpus server, misbehaving so some samples fail),
 * through the built CLI, and on the external fixtures. Every format must round-trip to the
 * trajectory it came from: masks re-parsed, train flags by role, counts printed.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Trajectory } from '../schemas/index.js';
import { loadConfig } from '../pipeline/config.js';
import { tulu } from '../pipeline/dialects/tulu.js';
import { mcpXml } from '../pipeline/dialects/mcp-xml.js';
import { stepsOf, toMessages, toShareGpt, toText, tokenCounter } from '../pipeline/dataset/export.js';
import { generate } from '../pipeline/generate/run.js';
import { readDataset } from '../pipeline/dataset/readers.js';
import { countTokens } from '../pipeline/tokens.js';
import { startSim } from '../sim/server.js';
import { FIXTURES, readJsonl, runCli, tempDir, writeConfig } from './helpers.js';

const MISBEHAVE = { no_action: 0.25, refusal: 0.2, unclosed_call: 0.2, multiple_calls: 0.2, hallucinated_output: 0.1, unclosed_answer: 0.1, length: 0.15 };

let dir: string;
let ok: Trajectory[];
let failed: Trajectory[];

beforeAll(async () => {
  const sim = await startSim({ port: 0, seed: 11, misbehave: MISBEHAVE });
  dir = tempDir('tf-export-');
  try {
    const config = loadConfig(writeConfig(dir, sim.url, { budgets: { max_turns: 4, max_tool_calls: 3, max_nudges: 1, forced_answer_attempts: 1 }, concurrency: 16 }), { limit: 40 });
    await generate({ config });
  } finally {
    await sim.close();
  }
  ok = readJsonl(join(dir, 'run', 'trajectories.jsonl')) as Trajectory[];
  failed = readJsonl(join(dir, 'run', 'failures.jsonl')) as Trajectory[];
}, 120_000);

const run = (): string => join(dir, 'run');

async function exportCli(args: string[]): Promise<{ rows: any[]; stderr: string; code: number | null }> {
  const out = join(dir, `out-${Math.random().toString(36).slice(2)}.jsonl`);
  const r = await runCli(['export', ...args, '--out', out]);
  return { rows: r.code === 0 ? readJsonl(out) : [], stderr: r.stderr, code: r.code };
}

/** The counts line: rows in, written, dropped over max tokens, failed skipped. */
function counts(stderr: string): { in: number; written: number; dropped: number; failed: number } {
  const m = /export: (\d+) rows in, (\d+) written, (\d+) dropped over [^,]*, (\d+) failed skipped/.exec(stderr);
  expect(m, stderr).not.toBeNull();
  return { in: Number(m![1]), written: Number(m![2]), dropped: Number(m![3]), failed: Number(m![4]) };
}

const byId = (rows: Trajectory[]): Map<string, Trajectory> => new Map(rows.map((t) => [t.id, t]));

describe('export of a real run', () => {
  it('has data worth testing: accepted and failed samples, think, calls, outputs, answers', () => {
    expect(ok.length).toBeGreaterThan(5);
    expect(failed.length).toBeGreaterThan(0);
    const kinds = new Set(ok.flatMap((t) => tulu.parseTrajectory(t.interleaved_text).segments.map((s) => s.kind)));
    for (const k of ['think', 'call', 'output', 'answer']) expect(kinds).toContain(k);
  });

  it('text: the mask spans are exactly the tool outputs, found again by re-parsing', async () => {
    const { rows, stderr, code } = await exportCli([run(), '--format', 'text']);
    expect(code, stderr).toBe(0);
    expect(counts(stderr)).toEqual({ in: ok.length + failed.length, written: ok.length, dropped: 0, failed: failed.length });
    const src = byId(ok);
    expect(rows.map((r) => r.id).sort()).toEqual([...src.keys()].sort());
    let masked = 0;
    for (const row of rows) {
      const t = src.get(row.id)!;
      expect(row.text).toBe(t.interleaved_text);
      expect(row.question).toBe(t.question);
      const outputs = tulu.parseTrajectory(row.text).segments.filter((s) => s.kind === 'output');
      expect(row.mask_spans).toEqual(outputs.map((o) => [o.offset, o.offset + o.text.length]));
      // The spans hold the outputs trajforge wrote, tags included, in order.
      expect(row.mask_spans.map(([s, e]: [number, number]) => row.text.slice(s, e))).toEqual(t.tool_calls.map((c) => c.output_text));
      // Outside the spans nothing is a tool output: the model's text only.
      let rest = '';
      let pos = 0;
      for (const [s, e] of row.mask_spans) {
        expect(s).toBeGreaterThanOrEqual(pos);
        rest += row.text.slice(pos, s);
        pos = e;
      }
      rest += row.text.slice(pos);
      expect(rest).not.toMatch(/<tool_output|<\/tool_output>|<snippet/);
      masked += row.mask_spans.length;
      expect(row.tokens).toBe(countTokens(row.question) + countTokens(row.text));
      expect(row.train_tokens).toBeGreaterThan(0);
      expect(row.train_tokens).toBeLessThan(row.tokens);
    }
    expect(masked).toBe(ok.reduce((n, t) => n + t.tool_calls.length, 0));
  });

  it('messages: train flags match roles, and the turns give back the interleaved text', async () => {
    const { rows, stderr, code } = await exportCli([run(), '--format', 'messages']);
    expect(code, stderr).toBe(0);
    expect(counts(stderr).written).toBe(ok.length);
    const src = byId(ok);
    for (const row of rows) {
      const t = src.get(row.id)!;
      const msgs = row.messages as { role: string; content: string; train: boolean }[];
      for (const m of msgs) expect(m.train, `${row.id} ${m.role}`).toBe(m.role === 'assistant');
      expect(msgs[0]).toEqual({ role: 'system', content: t.messages[0]!.content, train: false });
      expect(msgs[1]).toEqual({ role: 'user', content: t.question, train: false });
      const body = msgs.slice(2);
      expect(body.length).toBeGreaterThan(0);
      // XML dialects: tool results are user turns, exactly trajforge's outputs.
      expect(body.filter((m) => m.role === 'user').map((m) => m.content)).toEqual(t.tool_calls.map((c) => c.output_text));
      expect(body.map((m) => m.content).join('\n')).toBe(t.interleaved_text);
      // Turns alternate: a model turn, its output, the next turn…; the last is the model's.
      body.forEach((m, i) => expect(m.role).toBe(i % 2 === 0 ? 'assistant' : 'user'));
      expect(body.at(-1)!.role).toBe('assistant');
      for (const m of body.filter((x) => x.role === 'assistant')) expect(m.content).not.toContain('<tool_output');
      expect(row.tools).toBeUndefined();
      const all = msgs.reduce((n, m) => n + countTokens(m.content), 0);
      expect(row.tokens).toBe(all);
      expect(row.train_tokens).toBe(msgs.filter((m) => m.train).reduce((n, m) => n + countTokens(m.content), 0));
    }
  });

  it('sharegpt: calls as function_call (think kept with its call), outputs as observation, alternating', async () => {
    const { rows, stderr, code } = await exportCli([run(), '--format', 'sharegpt']);
    expect(code, stderr).toBe(0);
    const src = byId(ok);
    let withThinkAndCall = 0;
    for (const row of rows) {
      const t = src.get(row.id)!;
      expect(row.system).toBe(t.messages[0]!.content);
      const conv = row.conversations as { from: string; value: string }[];
      expect(conv[0]).toEqual({ from: 'human', value: t.question });
      conv.forEach((c, i) => expect(i % 2 === 0 ? ['human', 'observation'] : ['gpt', 'function_call'], `${row.id} #${i}`).toContain(c.from));
      expect(conv.filter((c) => c.from === 'observation').map((c) => c.value)).toEqual(t.tool_calls.map((c) => c.output_text));
      for (const c of conv) {
        const kinds = tulu.parseTrajectory(c.value).segments.map((s) => s.kind);
        if (c.from === 'function_call') {
          expect(kinds).toContain('call');
          expect(kinds).not.toContain('answer');
          if (kinds.includes('think')) withThinkAndCall++;
        }
        if (c.from === 'gpt') expect(kinds).not.toContain('call');
      }
      expect(conv.slice(1).map((c) => c.value).join('\n')).toBe(t.interleaved_text);
    }
    expect(withThinkAndCall).toBeGreaterThan(0);
  });

  it('--all adds the failed samples (latest attempt per id); --max-tokens drops and counts', async () => {
    const all = await exportCli([run(), '--format', 'text', '--all']);
    expect(all.code, all.stderr).toBe(0);
    expect(all.rows.length).toBe(ok.length + failed.length);
    expect(counts(all.stderr)).toMatchObject({ written: ok.length + failed.length, failed: 0 });

    const sizes = all.rows.map((r) => r.tokens as number).sort((a, b) => a - b);
    const limit = sizes[Math.floor(sizes.length / 2)]!;
    const over = sizes.filter((n) => n > limit).length;
    const capped = await exportCli([run(), '--format', 'text', '--all', '--max-tokens', String(limit)]);
    expect(capped.code, capped.stderr).toBe(0);
    expect(counts(capped.stderr)).toEqual({ in: ok.length + failed.length, written: sizes.length - over, dropped: over, failed: 0 });
    for (const r of capped.rows) expect(r.tokens).toBeLessThanOrEqual(limit);
  });

  it('--tokenizer cl100k_base counts with that vocabulary; an unknown one is exit 2 naming the known ones', async () => {
    const o200k = await exportCli([run(), '--format', 'messages']);
    const cl100k = await exportCli([run(), '--format', 'messages', '--tokenizer', 'cl100k_base']);
    expect(cl100k.code, cl100k.stderr).toBe(0);
    const enc = tokenCounter('cl100k_base');
    const row = cl100k.rows[0];
    expect(row.tokens).toBe(row.messages.reduce((n: number, m: { content: string }) => n + enc(m.content), 0));
    expect(row.tokens).not.toBe(o200k.rows.find((r) => r.id === row.id).tokens);

    const bad = await runCli(['export', run(), '--format', 'text', '--tokenizer', 'llama3', '--out', join(dir, 'never.jsonl')]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('o200k_base');
    expect(bad.stderr).toContain('cl100k_base');
    const noFormat = await runCli(['export', run(), '--format', 'alpaca', '--out', '-']);
    expect(noFormat.code).toBe(2);
    expect(noFormat.stderr).toMatch(/messages, sharegpt, text/);
  });

  it('streams stdin to stdout', async () => {
    const file = join(run(), 'trajectories.jsonl');
    const { spawn } = await import('node:child_process');
    const { CLI } = await import('./helpers.js');
    const child = spawn(process.execPath, [CLI, 'export', '-', '--format', 'sharegpt', '--out', '-'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.stdin.end(readFileSync(file));
    const code = await new Promise<number | null>((r) => child.on('close', r));
    expect(code, stderr).toBe(0);
    const lines = stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    expect(lines.length).toBe(ok.length);
    expect(counts(stderr)).toMatchObject({ in: ok.length, written: ok.length });
  });
});

describe('export of external rows', () => {
  const rowsOf = async (file: string): Promise<Trajectory[]> => {
    const out: Trajectory[] = [];
    for await (const r of readDataset(file).rows) out.push(r.trajectory);
    return out;
  };

  it('a MiroVerse chat row (mcp-xml): the system prompt kept, tool results as user turns', async () => {
    const [t] = await rowsOf(join(FIXTURES, 'miroverse-chat-row.jsonl'));
    const row = toMessages(t!, countTokens);
    expect(row.messages[0]!.role).toBe('system');
    expect(row.messages[1]).toEqual({ role: 'user', content: t!.question, train: false });
    const outputs = mcpXml.parseTrajectory(t!.interleaved_text).segments.filter((s) => s.kind === 'output');
    expect(outputs.length).toBeGreaterThan(0);
    expect(row.messages.filter((m, i) => i > 1 && m.role === 'user').map((m) => m.content)).toEqual(outputs.map((o) => o.text));
    expect(row.messages.slice(2).map((m) => m.content).join('\n')).toBe(t!.interleaved_text);
    const text = toText(t!, countTokens);
    expect(text.mask_spans).toEqual(outputs.map((o) => [o.offset, o.offset + o.text.length]));
  });

  it('DR Tulu generator rows: no transcript, so no system message; invented outputs are masked too', async () => {
    const rows = await rowsOf(join(FIXTURES, 'drtulu-generator-rows.jsonl'));
    for (const t of rows) {
      const m = toMessages(t, countTokens);
      expect(m.messages[0]).toEqual({ role: 'user', content: t.question, train: false });
      const s = toShareGpt(t, countTokens);
      expect(s.system).toBeUndefined();
      const x = toText(t, countTokens);
      const outputs = tulu.parseTrajectory(t.interleaved_text).segments.filter((seg) => seg.kind === 'output');
      expect(x.mask_spans).toEqual(outputs.map((o) => [o.offset, o.offset + o.text.length]));
    }
    // Row 3: three unclosed calls, none run, then an answer: one turn, and it ends in the answer.
    expect(toShareGpt(rows[2]!, countTokens).conversations.map((c) => c.from)).toEqual(['human', 'gpt']);
  });

  it('mask offsets count code points, so Python slices them exactly', () => {
    const emoji = '\u{1F600}';
    const text = `<think>${emoji} plan</think>\n<call_tool name="s">q</call_tool>\n<tool_output>\n${emoji}${emoji} found\n</tool_output>\n<answer>done ${emoji}</answer>`;
    const t = { id: 'e', question: 'q?', dialect: 'tulu', interleaved_text: text, messages: [], tool_calls: [] } as unknown as Trajectory;
    const row = toText(t, countTokens);
    const cps = [...text];
    const [[s, e]] = row.mask_spans as [[number, number]];
    expect(cps.slice(s, e).join('')).toBe(`<tool_output>\n${emoji}${emoji} found\n</tool_output>`);
    expect(row.text).toBe(text);
  });

  it('the training view: one newline dropped at each side of an output, whitespace-only regions are no turn', () => {
    const text = '\n<think>a</think>\n\n<call_tool name="s">q</call_tool>\n<tool_output>\nx\n</tool_output>\n\n<tool_output>\ny\n</tool_output>\n<answer>z</answer>\n';
    const steps = stepsOf(text, tulu.parseTrajectory(text).segments);
    expect(steps.map((s) => [s.kind, s.text])).toEqual([
      ['model', '\n<think>a</think>\n\n<call_tool name="s">q</call_tool>'],
      ['output', '<tool_output>\nx\n</tool_output>'],
      ['output', '<tool_output>\ny\n</tool_output>'],
      ['model', '<answer>z</answer>\n'],
    ]);
    expect(steps[0]).toMatchObject({ endsWithCall: true });
    expect(steps[3]).toMatchObject({ endsWithCall: false });
  });

  it('native rows: tool turns with tool_call_id, assistant turns with tool_calls, and tools', () => {
    const t = {
      id: 'n1',
      question: 'What is 2+2?',
      dialect: 'native',
      status: 'ok',
      interleaved_text: 'calling\nresult: 4\nIt is 4.',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'What is 2+2?' },
        { role: 'assistant', content: 'calling' },
        { role: 'tool', content: 'result: 4' },
        { role: 'assistant', content: 'It is 4.' },
      ],
      tool_calls: [{ call_id: 'c1', tool_name: 'calc', arguments: { expr: '2+2' }, output_text: 'result: 4' }],
    } as unknown as Trajectory;
    const m = toMessages(t, countTokens);
    expect(m.messages.map((x) => [x.role, x.train])).toEqual([['system', false], ['user', false], ['assistant', true], ['tool', false], ['assistant', true]]);
    expect(m.messages[2]!.tool_calls).toEqual([{ id: 'c1', type: 'function', function: { name: 'calc', arguments: '{"expr":"2+2"}' } }]);
    expect(m.messages[3]!.tool_call_id).toBe('c1');
    expect(m.tools).toEqual([{ type: 'function', function: { name: 'calc', parameters: { type: 'object' } } }]);
    const s = toShareGpt(t, countTokens);
    expect(s.conversations.map((c) => c.from)).toEqual(['human', 'function_call', 'observation', 'gpt']);
    expect(s.conversations[1]!.value).toBe('calling\n{"name":"calc","arguments":{"expr":"2+2"}}');
    expect(toText(t, countTokens).mask_spans).toEqual([[8, 17]]);
  });

  it('a row that cannot be exported stops with its place, or is counted with --on-bad-row skip', async () => {
    const d = tempDir('tf-export-bad-');
    const file = join(d, 'native.jsonl');
    const row = { schema_version: 1, id: 'n1', question: 'q', dialect: 'native', status: 'ok', interleaved_text: 'a\nb', messages: [], tool_calls: [{ call_id: 'c1', tool_name: 't', output_text: 'missing' }] };
    writeFileSync(file, `${JSON.stringify(row)}\n`);
    const stop = await runCli(['export', file, '--format', 'text', '--out', join(d, 'o.jsonl')]);
    expect(stop.code).toBe(2);
    expect(stop.stderr).toContain(`${file}:1: cannot export as text`);
    const skip = await runCli(['export', file, '--format', 'text', '--on-bad-row', 'skip', '--out', join(d, 'o.jsonl')]);
    expect(skip.code).toBe(0);
    expect(skip.stderr).toContain('1 not exportable as text');
  });
});
