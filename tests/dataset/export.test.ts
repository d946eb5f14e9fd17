/**
 * `trajforge export` on a real run (sim + corpus server, misbehaving so some samples fail and
 * some are nudged), through the built CLI, and on the external fixtures. Every format must
 * round-trip to the trajectory it came from: the transcript turn by turn (prompts included),
 * masks re-parsed and on token boundaries, train flags, counts printed. The chat-template
 * formats with real tokenizers are tests/dataset/export-tokens.test.ts.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Trajectory } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { tulu } from '../../pipeline/dialects/tulu.js';
import { Counter, toMessages, toShareGpt, toText } from '../../pipeline/dataset/export-formats.js';
import { stepsOf } from '../../pipeline/dataset/training-view.js';
import { loadPrompt } from '../../pipeline/prompts.js';
import { generate } from '../../pipeline/generate/run.js';
import { readDataset } from '../../pipeline/dataset/readers.js';
import { countTokens, O200K, tokenCounter } from '../../pipeline/core/tokens/count.js';
import { startSim } from '../../sim/server.js';
import { FIXTURES, QWEN3, readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

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

  it('text: the turns after the question as sent; the mask spans are exactly what the model did not write (outputs, prompts, nudged turns)', async () => {
    const { rows, stderr, code } = await exportCli([run(), '--format', 'text']);
    expect(code, stderr).toBe(0);
    expect(counts(stderr)).toEqual({ in: ok.length + failed.length, written: ok.length, dropped: 0, failed: failed.length });
    const src = byId(ok);
    expect(rows.map((r) => r.id).sort()).toEqual([...src.keys()].sort());
    let outputs = 0;
    for (const row of rows) {
      const t = src.get(row.id)!;
      const turns = t.messages.slice(2);
      expect(row.text).toBe(turns.map((m) => m.content).join('\n'));
      expect(row.question).toBe(t.question);
      // The turns the model did not write for this loss: every user turn, and each turn it was nudged for.
      const nudged = new Set(t.repairs.filter((r) => r.kind === 'no_action').map((r) => r.turn));
      let modelTurn = 0;
      let at = 0;
      const hidden: [number, number][] = [];
      for (const m of turns) {
        const own = m.role === 'assistant' && !nudged.has(modelTurn);
        if (m.role === 'assistant') modelTurn++;
        if (!own) hidden.push([at, at + m.content.length]);
        at += m.content.length + 1;
      }
      expect(row.mask_spans.length).toBe(hidden.length);
      // Each span holds its turn, widened to whole o200k tokens: at most the joining newline that
      // shares a token with a closing tag (`>\n`) is added.
      row.mask_spans.forEach(([s, e]: [number, number], i: number) => {
        const [hs, he] = hidden[i]!;
        expect(s).toBeLessThanOrEqual(hs);
        expect(row.text.slice(s, hs)).toMatch(/^\s*$/);
        expect(row.text.slice(he, e)).toMatch(/^\s*$/);
        // The end is a token boundary: the text cut there tokenises to the same tokens as a whole.
        expect(countTokens(row.text.slice(0, e)) + countTokens(row.text.slice(e))).toBe(countTokens(row.text));
      });
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
      for (const c of t.tool_calls) expect(row.mask_spans.some(([s, e]: [number, number]) => row.text.slice(s, e).includes(c.output_text))).toBe(true);
      outputs += t.tool_calls.length;
      expect(row.tokens).toBe(countTokens(row.question) + countTokens(row.text));
      expect(row.train_tokens).toBeGreaterThan(0);
      expect(row.train_tokens).toBeLessThan(row.tokens);
    }
    expect(outputs).toBeGreaterThan(0);
  });

  it('messages --untrained keep: the transcript turn by turn, prompts included; outputs in the role they were sent in; nudged turns untrained', async () => {
    const { rows, stderr, code } = await exportCli([run(), '--format', 'messages', '--untrained', 'keep']);
    expect(code, stderr).toBe(0);
    expect(counts(stderr).written).toBe(ok.length);
    const src = byId(ok);
    let prompts = 0;
    let nudged = 0;
    for (const row of rows) {
      const t = src.get(row.id)!;
      const msgs = row.messages as { role: string; content: string; train: boolean }[];
      // Every turn of the transcript, in order, nothing merged: roles mapped, contents as sent.
      expect(msgs.map((m) => m.content)).toEqual(t.messages.map((m) => m.content));
      // Tool results found by their records, each in the user turn that carried it (tulu sends them so).
      const outputs = t.tool_calls.map((c) => c.output_text);
      expect(t.tool_calls.map((c) => msgs[c.message_index!]!.content)).toEqual(outputs);
      expect(msgs.some((m) => m.role === 'tool')).toBe(false);
      msgs.forEach((m, i) => {
        const sent = t.messages[i]!;
        expect(m.role, `${row.id} #${i}`).toBe(sent.role);
        if (m.role !== 'assistant') expect(m.train).toBe(false);
        if (i > 1 && m.role === 'user' && !outputs.includes(m.content)) prompts++;
      });
      // The model's turns are trained but for the ones it was nudged for (a no_action repair at that turn).
      const noAction = new Set(t.repairs.filter((r) => r.kind === 'no_action').map((r) => r.turn));
      msgs.filter((m) => m.role === 'assistant').forEach((m, k) => {
        expect(m.train, `${row.id} turn ${k}`).toBe(!noAction.has(k));
        if (!m.train) nudged++;
      });
      expect(msgs.at(-1)!.role).toBe('assistant');
      expect(msgs.at(-1)!.train).toBe(true);
      expect(row.tools).toBeUndefined();
      const all = msgs.reduce((n, m) => n + countTokens(m.content), 0);
      expect(row.tokens).toBe(all);
      expect(row.train_tokens).toBe(msgs.filter((m) => m.train).reduce((n, m) => n + countTokens(m.content), 0));
    }
    // The misbehaving sim made the loop nudge and force answers: those prompts are in the rows.
    expect(prompts).toBeGreaterThan(0);
    expect(nudged).toBeGreaterThan(0);
  });

  it('messages --tool-role tool: the user turns that carried tool results become tool turns, and only they', async () => {
    const { rows, stderr, code } = await exportCli([run(), '--format', 'messages', '--tool-role', 'tool', '--untrained', 'keep']);
    expect(code, stderr).toBe(0);
    const src = byId(ok);
    for (const row of rows) {
      const t = src.get(row.id)!;
      const results = new Set(t.tool_calls.map((c) => c.message_index));
      expect(row.messages.map((m: { role: string }) => m.role)).toEqual(t.messages.map((m, i) => (results.has(i) ? 'tool' : m.role)));
    }
    const bad = await runCli(['export', run(), '--format', 'messages', '--tool-role', 'function', '--out', '-']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--tool-role: expected tool or user, got');
  });

  it('sharegpt: calls as function_call JSON after the think that led to them, alternating (LLaMA-Factory\'s rules: export-sharegpt.test.ts)', async () => {
    const { rows, stderr, code } = await exportCli([run(), '--format', 'sharegpt']);
    expect(code, stderr).toBe(0);
    const src = byId(ok);
    let withThinkAndCall = 0;
    for (const row of rows) {
      const t = src.get(row.id)!;
      expect(row.system).toBe(t.messages[0]!.content);
      const conv = row.conversations as { from: string; value: string }[];
      expect(conv[0]).toEqual({ from: 'human', value: t.messages[1]!.content });
      conv.forEach((c, i) => expect(i % 2 === 0 ? ['human', 'observation'] : ['gpt', 'function_call'], `${row.id} #${i}`).toContain(c.from));
      for (const c of conv) {
        if (c.from === 'function_call' && c.value.startsWith('<think>')) {
          withThinkAndCall++;
          expect(c.value).toMatch(/<\/think>[\s\S]*<tool_call>\{"name":"pubmed_search","arguments":\{/);
        }
        if (c.from === 'gpt') expect(tulu.parseTrajectory(c.value).segments.map((x) => x.kind)).not.toContain('call');
      }
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
    expect(row.tokens).toBe(row.messages.reduce((n: number, m: { content: string }) => n + enc.count(m.content), 0));
    expect(row.tokens).not.toBe(o200k.rows.find((r) => r.id === row.id).tokens);

    const bad = await runCli(['export', run(), '--format', 'text', '--tokenizer', 'llama3', '--out', join(dir, 'never.jsonl')]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('llama3: no such file or folder');
    expect(bad.stderr).toContain('o200k_base');
    expect(bad.stderr).toContain('cl100k_base');
    const noFormat = await runCli(['export', run(), '--format', 'alpaca', '--out', '-']);
    expect(noFormat.code).toBe(2);
    expect(noFormat.stderr).toMatch(/messages, sharegpt, text, tokens/);
    const noTokenizer = await runCli(['export', run(), '--format', 'tokens', '--out', '-']);
    expect(noTokenizer.code).toBe(2);
    expect(noTokenizer.stderr).toContain('--format tokens needs --tokenizer PATH');
  });

  it("a tokenizer.json that does not load: tokens export fails in its first worker before anything is read, stats at its first count; exit 2 naming the file, --out as it was", async () => {
    const bad = tempDir('tf-bad-tokenizer-');
    writeFileSync(join(bad, 'tokenizer.json'), '{"model": {"type": "BPE", "vocab": ');
    writeFileSync(join(bad, 'tokenizer_config.json'), '{}');
    const out = join(dir, 'kept-through-bad-tokenizer.jsonl');
    writeFileSync(out, 'written earlier\n');
    const tokens = await runCli(['export', run(), '--format', 'tokens', '--tokenizer', bad, '--out', out]);
    expect(tokens.code, tokens.stderr).toBe(2);
    expect(tokens.stderr).toContain(`--tokenizer: ${join(bad, 'tokenizer.json')} is not a tokenizer file`);
    expect(tokens.stderr).not.toContain('rows in');
    expect(readFileSync(out, 'utf8')).toBe('written earlier\n');
    const stats = await runCli(['stats', join(FIXTURES, 'drtulu-generator-rows.jsonl'), '--tokenizer', bad]);
    expect(stats.code, stats.stderr).toBe(2);
    expect(stats.stderr).toContain(`--tokenizer: ${join(bad, 'tokenizer.json')} is not a tokenizer file`);
  });

  it('streams stdin to stdout', async () => {
    const file = join(run(), 'trajectories.jsonl');
    const { spawn } = await import('node:child_process');
    const { CLI } = await import('../helpers.js');
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

  const count = new Counter(O200K);

  it('the MiroVerse chat row: every turn in order, nothing merged, the summary turn kept', async () => {
    const [t] = await rowsOf(join(FIXTURES, 'miroverse-chat-row.jsonl'));
    const source = readJsonl(join(FIXTURES, 'miroverse-chat-row.jsonl'))[0]!.messages as { role: string; content: string }[];
    const row = toMessages(t!, count);
    expect(row.messages.map((m) => m.content)).toEqual(source.map((m) => m.content));
    // The sub-agent's report is the tool result, a user turn as MiroThinker sent it; --tool-role tool makes it a tool turn.
    expect(row.messages.map((m) => [m.role, m.train])).toEqual([
      ['system', false],
      ['user', false],
      ['assistant', true],
      ['user', false],
      ['assistant', true],
      ['user', false],
      ['assistant', true],
    ]);
    expect(toMessages(t!, count, { toolRole: 'tool' }).messages.map((m) => m.role)).toEqual(source.map((m, i) => (i === 3 ? 'tool' : m.role)));
    // text: the turns after the question as MiroThinker sent them: no <tool_output> around its plain results, no <answer> it never wrote.
    const text = toText(t!, count);
    const after = source.slice(2).map((m) => m.content);
    expect(text.text).toBe(after.join('\n'));
    expect(text.text.includes('<tool_output>')).toBe(after.some((c) => c.includes('<tool_output>')));
    const starts = source.slice(2).map((_, i) => after.slice(0, i).reduce((n, c) => n + c.length + 1, 0));
    expect(text.mask_spans.map(([s]) => s)).toEqual(starts.filter((_, i) => source[i + 2]!.role === 'user'));
  });

  it('DR Tulu generator rows: every turn in order, nothing merged; the one that invented outputs fails validation', async () => {
    const rows = await rowsOf(join(FIXTURES, 'drtulu-generator-rows.jsonl'));
    for (const t of rows) {
      const m = toMessages(t, count);
      expect(m.messages[0]).toEqual({ role: 'user', content: t.question, train: false });
      // The turns and outputs, joined as the rollout joins them, give back the text: nothing dropped or merged.
      const steps = stepsOf(t.interleaved_text, tulu.parseTrajectory(t.interleaved_text).segments);
      expect(m.messages.slice(1).map((x) => [x.role, x.content])).toEqual(steps.map((s) => [s.kind === 'model' ? 'assistant' : 'user', s.text]));
      const s = toShareGpt(t, count);
      expect(s.system).toBeUndefined();
    }
    // Row 3: three unclosed calls, none run, then an answer: one turn, and it ends in the answer.
    expect(toShareGpt(rows[2]!, count).conversations.map((c) => c.from)).toEqual(['human', 'gpt']);
    // Row 2 ends in tool outputs the model never called for: export leaves it out as failed.
    const out = await runCli(['export', join(FIXTURES, 'drtulu-generator-rows.jsonl'), '--format', 'messages', '--out', '-']);
    expect(out.code, out.stderr).toBe(0);
    const ids = out.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l).id);
    expect(ids).not.toContain(rows[1]!.id);
    expect(out.stderr).toMatch(/4 rows in, \d written, 0 dropped over max tokens, [1-4] failed skipped/);
    for (const id of ids) {
      const row = JSON.parse(out.stdout.split('\n').find((l) => l.includes(`"id":${JSON.stringify(id)}`))!);
      expect(row.messages.at(-1).role).toBe('assistant');
    }
  });

  it('mask offsets count code points, so Python slices them exactly', () => {
    const emoji = '\u{1F600}';
    const text = `<think>${emoji} plan</think>\n<call_tool name="s">q</call_tool>\n<tool_output>\n${emoji}${emoji} found\n</tool_output>\n<answer>done ${emoji}</answer>`;
    const t = { id: 'e', question: 'q?', dialect: 'tulu', interleaved_text: text, messages: [], tool_calls: [] } as unknown as Trajectory;
    const row = toText(t, count);
    const cps = [...text];
    const [[s, e]] = row.mask_spans as [[number, number]];
    // The span ends after the newline that shares o200k's `>\n` token with the closing tag.
    expect(cps.slice(s, e).join('')).toBe(`<tool_output>\n${emoji}${emoji} found\n</tool_output>\n`);
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

  it('native rows: reasoning_content, tool_calls and tool_call_id kept; tools with their schemas', () => {
    const tools = [{ type: 'function', function: { name: 'calc', description: 'Evaluates arithmetic', parameters: { type: 'object', properties: { expr: { type: 'string' } }, required: ['expr'] } } }];
    const call = { id: 'c1', type: 'function', function: { name: 'calc', arguments: '{"expr":"2+2"}' } };
    const t = {
      id: 'n1',
      question: 'What is 2+2?',
      dialect: 'native',
      status: 'ok',
      interleaved_text: '<think>add</think>\n<tool_call>\n{"name": "calc", "arguments": {"expr":"2+2"}}\n</tool_call>\n<tool_output>result: 4</tool_output>\n<answer>It is 4.</answer>',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'What is 2+2?' },
        { role: 'assistant', content: '', reasoning_content: 'add', tool_calls: [call] },
        { role: 'tool', content: '<tool_output>result: 4</tool_output>', tool_call_id: 'c1' },
        { role: 'assistant', content: 'It is 4.', reasoning_content: 'done' },
      ],
      tool_calls: [{ call_id: 'c1', tool_name: 'calc', arguments: { expr: '2+2' }, output_text: '<tool_output>result: 4</tool_output>' }],
      repairs: [],
      tools,
    } as unknown as Trajectory;
    const m = toMessages(t, count);
    expect(m.messages.map((x) => [x.role, x.train])).toEqual([['system', false], ['user', false], ['assistant', true], ['tool', false], ['assistant', true]]);
    expect(m.messages[2]).toEqual({ role: 'assistant', content: '', reasoning_content: 'add', tool_calls: [call], train: true });
    expect(m.messages[3]!.tool_call_id).toBe('c1');
    expect(m.messages[4]!.reasoning_content).toBe('done');
    expect(m.tools).toEqual(tools);
    const s = toShareGpt(t, count);
    expect(s.conversations.map((c) => c.from)).toEqual(['human', 'function_call', 'observation', 'gpt']);
    expect(s.conversations[1]!.value).toBe('<think>\nadd\n</think>\n\n<tool_call>{"name":"calc","arguments":{"expr":"2+2"}}</tool_call>');
    // text: from the transcript, each turn as the model wrote it (reasoning as a think, calls as <tool_call> JSON), the result as sent, masked.
    const text = toText(t, count);
    expect(text.text).toBe('<think>add</think>\n<tool_call>\n{"name": "calc", "arguments": {"expr":"2+2"}}\n</tool_call>\n<tool_output>result: 4</tool_output>\n<think>done</think>\nIt is 4.');
    expect(text.mask_spans[0]![0]).toBe(text.text.indexOf('<tool_output>'));
    expect(text.text).not.toContain('<answer>');
  });

  it('--view sent shows the placeholders the last request showed; --view full every result', () => {
    const out = (i: number): string => `<tool_output>result ${i}</tool_output>`;
    const msgs = [
      { role: 'system', content: 's' },
      { role: 'user', content: 'q' },
      ...[0, 1, 2].flatMap((i) => [
        { role: 'assistant', content: `<call_tool name="s">q${i}</call_tool>` },
        { role: 'user', content: out(i) },
      ]),
      { role: 'assistant', content: '<answer>a</answer>' },
    ];
    const t = {
      id: 'k',
      question: 'q',
      dialect: 'tulu',
      interleaved_text: '',
      messages: msgs,
      tool_calls: [0, 1, 2].map((i) => ({ call_id: `c${i}`, tool_name: 's', output_text: out(i) })),
      repairs: [],
      context: { keep_tool_results: 2, omitted_results: 2, last_request_keep: 1 },
    } as unknown as Trajectory;
    const sent = toMessages(t, count, { toolRole: 'tool' }).messages.filter((m) => m.role === 'tool').map((m) => m.content);
    expect(sent).toEqual([
      '[Tool result 1 omitted to save context: only the last 1 results are shown in full.]',
      '[Tool result 2 omitted to save context: only the last 1 results are shown in full.]',
      out(2),
    ]);
    expect(toMessages(t, count, { view: 'full', toolRole: 'tool' }).messages.filter((m) => m.role === 'tool').map((m) => m.content)).toEqual([0, 1, 2].map(out));
    // A record from before last_request_keep: the configured K.
    const older = { ...t, context: { keep_tool_results: 2, omitted_results: 1 } } as unknown as Trajectory;
    expect(toMessages(older, count, { toolRole: 'tool' }).messages.filter((m) => m.role === 'tool').map((m) => m.content)[0]).toMatch(/^\[Tool result 1 omitted/);
  });

  it('--view sent shows MiroThinker\'s own placeholder for a session of the miroverse-v0.1 layout (#25)', () => {
    const out = (i: number): string => `result ${i}`;
    const system = loadPrompt('mcp-xml-miroverse-system').replace('{today}', '').replace('{tools}', '');
    const msgs = [
      { role: 'system', content: system },
      { role: 'user', content: 'q' },
      ...[0, 1, 2].flatMap((i) => [
        { role: 'assistant', content: `<use_mcp_tool>\n<server_name>s</server_name>\n<tool_name>t</tool_name>\n<arguments>{"i": ${i}}</arguments>\n</use_mcp_tool>` },
        { role: 'user', content: out(i) },
      ]),
      { role: 'assistant', content: '\\boxed{a}' },
    ];
    const t = {
      id: 'mv', question: 'q', dialect: 'mcp-xml', interleaved_text: '', messages: msgs, repairs: [],
      tool_calls: [0, 1, 2].map((i) => ({ call_id: `c${i}`, tool_name: 't', output_text: `<tool_output>\n${out(i)}\n</tool_output>`, message_index: 3 + 2 * i })),
      context: { keep_tool_results: 1, omitted_results: 2, last_request_keep: 1 },
    } as unknown as Trajectory;
    const results = (x: Trajectory): string[] => toMessages(x, count).messages.filter((m, i) => i > 1 && m.role === 'user').map((m) => m.content);
    // MiroThinker's text (apps/miroflow-agent/src/llm/provider_client_base.py at 73cb96f7), not trajforge's.
    expect(results(t)).toEqual(['Tool result is omitted to save tokens.', 'Tool result is omitted to save tokens.', out(2)]);
    // The same row under trajforge's own system prompt keeps trajforge's placeholder.
    const ours = { ...t, messages: [{ role: 'system', content: 'You are a research assistant.' }, ...msgs.slice(1)] } as unknown as Trajectory;
    expect(results(ours)[0]).toMatch(/^\[Tool result 1 omitted to save context/);
  });

  it('messages with --tokenizer: a template that refuses a row, or drops a think in every split, makes the row unexportable, never a row missing a think', async () => {
    const d = tempDir('tf-export-split-bad-');
    const refuse = join(d, 'refuse.jinja');
    writeFileSync(refuse, "{{ raise_exception('no tools here') }}");
    // Shows only user turns and thinkless assistant text: every trained think is lost, split or not.
    const thinkless = join(d, 'thinkless.jinja');
    writeFileSync(thinkless, '{% for m in messages %}<{{ m.role }}>{{ m.content.split("</think>")[-1] }}\n{% endfor %}');
    for (const [template, why] of [[refuse, 'refused the conversation: no tools here'], [thinkless, 'drops the think of message']] as const) {
      const stop = await runCli(['export', run(), '--format', 'messages', '--tokenizer', QWEN3, '--chat-template', template, '--out', join(d, 'o.jsonl')]);
      expect(stop.code, stop.stderr).toBe(2);
      expect(stop.stderr).toContain(why);
      const skip = await runCli(['export', run(), '--format', 'messages', '--tokenizer', QWEN3, '--chat-template', template, '--on-bad-row', 'skip', '--out', join(d, 'o.jsonl')]);
      expect(skip.code, skip.stderr).toBe(0);
      expect(skip.stderr).toMatch(/\d+ not exportable as messages/);
      // What is written has no trained turn with a think: a row with one was not exportable.
      for (const row of readJsonl(join(d, 'o.jsonl'))) {
        for (const m of row.messages) if (m.role === 'assistant' && m.train) expect(m.reasoning_content === undefined && !m.content.includes('</think>'), row.id).toBe(true);
      }
    }
    const wrong = await runCli(['export', run(), '--format', 'sharegpt', '--tokenizer', QWEN3, '--chat-template', refuse, '--out', join(d, 'o.jsonl')]);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('--chat-template is for --format tokens, and messages');
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
