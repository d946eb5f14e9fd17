/**
 * `export --format sharegpt` against LLaMA-Factory's own loading rules, written down here from
 * its source at hiyouga/LLaMA-Factory ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30:
 * - src/llamafactory/data/converter.py `SharegptDatasetConverter`: a leading `system` entry is
 *   the system prompt, else the `system` column; roles must alternate, human|observation at
 *   even places and gpt|function_call at odd places, and (SFT) the count must be even; a row
 *   that breaks either is skipped ("Skipping this abnormal example"). processor/supervised.py
 *   then drops a row whose prompt is not odd-length with one response.
 * - formatter.py `FunctionFormatter.apply`: a function_call value is searched for
 *   `<tool_call>(.*?)</tool_call>` (re.DOTALL, first match; `tool_call_words`, default in
 *   template.py); found, its inside is the JSON and the rest the thought; not found, the first
 *   `<think>\n(.*?)\n</think>\n\n` (`thought_words`) is removed and the rest must be JSON.
 *   The JSON is an object or a list of objects, each with `name` and `arguments` (KeyError
 *   otherwise); anything else raises "Invalid JSON format in function message".
 * - formatter.py `ToolFormatter`: `tools` is a string that `json.loads` to a list;
 *   tool_utils.py `DefaultToolUtils.tool_formatter` reads each tool (or its `function` when
 *   `type == "function"`) as `name`, `parameters.properties` (a dict of dicts), `enum` joined
 *   as strings, `items.type`.
 * - StringFormatter: every value is a string ("Expected a string").
 * Every exported row of real runs in the three dialects and the MiroVerse config goes through
 * these rules.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Trajectory } from '../../schemas/index.js';
import { Counter } from '../../pipeline/dataset/export-formats.js';
import { toShareGpt, OBSERVATION_JOIN, type ShareGptRow } from '../../pipeline/dataset/formats/sharegpt.js';
import { O200K } from '../../pipeline/core/tokens/count.js';
import { trainingView } from '../../pipeline/dataset/training-view.js';
import { FIXTURES, readJsonl, runCli, tempDir } from '../helpers.js';
import { formatRuns, type FormatRun } from './dialect-runs.js';

const ODD = ['human', 'observation'];
const EVEN = ['gpt', 'function_call'];
const TOOL_CALL = /<tool_call>([\s\S]*?)<\/tool_call>/;
const THOUGHT = /<think>\n([\s\S]*?)\n<\/think>\n\n/;

/** The calls LLaMA-Factory's FunctionFormatter reads from a function_call value, or the error it raises. */
function parseFunctionCall(value: string): { name: string; arguments: unknown }[] | string {
  const m = TOOL_CALL.exec(value);
  const json = m ? m[1]! : value.replace(THOUGHT, '');
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    return `Invalid JSON format in function message: ${value.slice(0, 80)}`;
  }
  const calls = Array.isArray(parsed) ? parsed : [parsed];
  for (const c of calls) {
    if (typeof c !== 'object' || c === null || !('name' in c) || !('arguments' in c)) return `KeyError: a call without name or arguments: ${json.slice(0, 80)}`;
  }
  return calls as { name: string; arguments: unknown }[];
}

/** DefaultToolUtils.tool_formatter's reads of one tool. */
function toolProblem(tool: unknown): string | undefined {
  if (typeof tool !== 'object' || tool === null) return 'a tool is not an object';
  const t = tool as Record<string, any>;
  const f = t.type === 'function' ? t.function : t;
  if (typeof f?.name !== 'string') return 'a tool without a name';
  const props = f.parameters?.properties;
  if (typeof props !== 'object' || props === null || Array.isArray(props)) return `tool ${f.name}: parameters.properties is not a dict`;
  for (const [k, p] of Object.entries(props as Record<string, any>)) {
    if (typeof p !== 'object' || p === null) return `tool ${f.name}: parameter ${k} is not a dict`;
    if (p.enum !== undefined && !(Array.isArray(p.enum) && p.enum.every((x: unknown) => typeof x === 'string'))) return `tool ${f.name}: enum of ${k} does not join as strings`;
    if (p.items !== undefined && (typeof p.items !== 'object' || p.items === null)) return `tool ${f.name}: items of ${k} is not a dict`;
  }
  return undefined;
}

/** Every way a row breaks LLaMA-Factory's sharegpt rules (empty when it loads and trains). */
export function llamaFactoryProblems(row: Record<string, unknown>): string[] {
  const problems: string[] = [];
  let conv = row.conversations as { from: unknown; value: unknown }[] | undefined;
  if (!Array.isArray(conv)) return ['no conversations list'];
  if (conv[0]?.from === 'system') conv = conv.slice(1);
  else if (row.system !== undefined && typeof row.system !== 'string') problems.push('system is not a string');
  conv.forEach((c, i) => {
    if (!(i % 2 === 0 ? ODD : EVEN).includes(c.from as string)) problems.push(`entry ${i}: ${String(c.from)} where ${(i % 2 === 0 ? ODD : EVEN).join('|')} must be`);
    if (typeof c.value !== 'string') problems.push(`entry ${i}: value is not a string`);
    else if (c.from === 'function_call') {
      const calls = parseFunctionCall(c.value);
      if (typeof calls === 'string') problems.push(`entry ${i}: ${calls}`);
    }
  });
  if (conv.length === 0 || conv.length % 2 !== 0) problems.push(`${conv.length} entries: LLaMA-Factory needs an even, non-zero count`);
  if (row.tools !== undefined) {
    if (typeof row.tools !== 'string') problems.push('tools is not a JSON string');
    else {
      let tools: unknown;
      try {
        tools = JSON.parse(row.tools);
      } catch {
        problems.push('tools is not JSON');
      }
      if (!Array.isArray(tools)) problems.push('tools is not a JSON list');
      else for (const t of tools) {
        const p = toolProblem(t);
        if (p) problems.push(p);
      }
    }
  }
  return problems;
}

let runs: FormatRun[];
const exported = new Map<string, ShareGptRow[]>();

async function exportRun(run: FormatRun, ...extra: string[]): Promise<ShareGptRow[]> {
  const out = join(tempDir('tf-sharegpt-'), 'rows.jsonl');
  const r = await runCli(['export', run.dir, '--format', 'sharegpt', '--out', out, ...extra]);
  expect(r.code, r.stderr).toBe(0);
  return readJsonl(out) as ShareGptRow[];
}

beforeAll(async () => {
  runs = await formatRuns();
  for (const run of runs) exported.set(run.name, await exportRun(run));
}, 300_000);

describe('sharegpt rows LLaMA-Factory loads', () => {
  it('the rules checker rejects what LLaMA-Factory rejects', () => {
    expect(llamaFactoryProblems({ conversations: [{ from: 'human', value: 'q' }, { from: 'function_call', value: '<call_tool name="s">q</call_tool>' }, { from: 'observation', value: 'o' }, { from: 'gpt', value: 'a' }] }).join()).toMatch(/Invalid JSON format/);
    expect(llamaFactoryProblems({ conversations: [{ from: 'human', value: 'q' }, { from: 'function_call', value: '[{"name":"a","arguments":{}},{"name":"b","arguments":{}}]' }, { from: 'observation', value: 'o1' }, { from: 'observation', value: 'o2' }, { from: 'gpt', value: 'a' }] }).join()).toMatch(/entry 3: observation/);
    expect(llamaFactoryProblems({ conversations: [{ from: 'human', value: 'q' }, { from: 'function_call', value: 'I will search.\n{"name":"a","arguments":{}}' }] }).join()).toMatch(/Invalid JSON/);
    expect(llamaFactoryProblems({ conversations: [{ from: 'human', value: 'q' }, { from: 'gpt', value: 'a' }, { from: 'human', value: 'more?' }] }).join()).toMatch(/even/);
    expect(llamaFactoryProblems({ tools: [{ name: 'a' }], conversations: [{ from: 'human', value: 'q' }, { from: 'gpt', value: 'a' }] }).join()).toMatch(/JSON string/);
    expect(llamaFactoryProblems({ tools: '[{"name":"a","parameters":{"type":"object"}}]', conversations: [{ from: 'human', value: 'q' }, { from: 'gpt', value: 'a' }] }).join()).toMatch(/properties/);
    expect(llamaFactoryProblems({ conversations: [{ from: 'human', value: 'q' }, { from: 'function_call', value: '<think>\nplan\n</think>\n\n{"name":"a","arguments":{"x":1}}' }, { from: 'observation', value: 'o' }, { from: 'gpt', value: 'a' }] })).toEqual([]);
  });

  it('the runs hold what the rules are about: calls in every dialect, parallel calls, nudged turns, sub-agents', () => {
    for (const run of runs) expect(run.ok.some((t) => t.tool_calls.length > 0), run.name).toBe(true);
    const native = runs.find((r) => r.name === 'native')!;
    expect(native.ok.some((t) => t.messages.some((m) => (m.tool_calls?.length ?? 0) > 1))).toBe(true);
    expect(runs.some((r) => r.ok.some((t) => t.repairs.some((x) => x.kind === 'no_action')))).toBe(true);
    expect(runs.find((r) => r.name === 'miroverse')!.ok.some((t) => typeof t.parent_id === 'string')).toBe(true);
  });

  it('every exported row of every run passes the rules, one row per accepted trajectory', () => {
    for (const run of runs) {
      const rows = exported.get(run.name)!;
      expect(rows.map((r) => r.id).sort(), run.name).toEqual(run.ok.map((t) => t.id).sort());
      for (const row of rows) expect(llamaFactoryProblems(row as unknown as Record<string, unknown>), `${run.name} ${row.id}`).toEqual([]);
    }
  });

  it('function_call holds JSON {name, arguments} equal to what the model called, in every dialect', () => {
    for (const run of runs) {
      const src = new Map(run.ok.map((t) => [t.id, t]));
      let checked = 0;
      for (const row of exported.get(run.name)!) {
        const t = src.get(row.id)!;
        const calls = row.conversations.filter((c) => c.from === 'function_call').flatMap((c) => parseFunctionCall(c.value) as { name: string; arguments: Record<string, unknown> }[]);
        // Every call the model made, in order: the name it wrote, the arguments sent (tulu maps body and attributes onto the tool's schema).
        expect(calls.map((c) => c.name), `${run.name} ${row.id}`).toEqual(t.tool_calls.map((r) => r.tool_name));
        calls.forEach((c, i) => {
          const r = t.tool_calls[i]!;
          if (run.name === 'tulu') expect(c.arguments).toEqual(r.arguments);
          else for (const [k, v] of Object.entries(c.arguments)) expect(r.arguments[k], `${run.name} ${row.id} ${k}`).toEqual(v);
          checked++;
        });
      }
      expect(checked, run.name).toBeGreaterThan(0);
    }
  });

  it('parallel calls: one function_call with a list, one observation holding every result in call order', () => {
    const native = runs.find((r) => r.name === 'native')!;
    const src = new Map(native.ok.map((t) => [t.id, t]));
    let parallel = 0;
    for (const row of exported.get('native')!) {
      const t = src.get(row.id)!;
      row.conversations.forEach((c, i) => {
        if (c.from !== 'function_call') return;
        const calls = parseFunctionCall(c.value) as unknown[];
        if (calls.length < 2) return;
        parallel++;
        const obs = row.conversations[i + 1]!;
        expect(obs.from).toBe('observation');
        const parts = obs.value.split(OBSERVATION_JOIN);
        expect(parts.length).toBe(calls.length);
        for (const p of parts) expect(t.tool_calls.some((r) => r.output_text === p)).toBe(true);
      });
    }
    expect(parallel).toBeGreaterThan(0);
  });

  it('system in system, the tools offered in tools (with their descriptions when the record kept them)', () => {
    for (const run of runs) {
      const src = new Map(run.ok.map((t) => [t.id, t]));
      for (const row of exported.get(run.name)!) {
        const t = src.get(row.id)!;
        expect(row.system, `${run.name} ${row.id}`).toBe(t.messages[0]!.content);
        if (t.tool_calls.length === 0) continue;
        const tools = JSON.parse(row.tools!) as { function: { name: string; description: string } }[];
        for (const r of t.tool_calls) expect(tools.map((x) => x.function.name)).toContain(r.tool_name);
        if (Array.isArray(t.tools)) expect(JSON.parse(row.tools!)).toEqual(t.tools);
      }
    }
    // The rollout records the tools offered in every dialect now, descriptions and schemas included.
    for (const run of runs) for (const t of run.ok) expect(Array.isArray(t.tools) && t.tools.length > 0, `${run.name} ${t.id}`).toBe(true);
  });

  it('a nudged turn is left out with its nudge: LLaMA-Factory trains every model entry', () => {
    let nudged = 0;
    for (const run of runs) {
      const src = new Map(run.ok.map((t) => [t.id, t]));
      for (const row of exported.get(run.name)!) {
        const view = trainingView(src.get(row.id)!);
        const values = new Set(row.conversations.map((c) => c.value));
        view.messages.forEach((m, i) => {
          if (view.kinds[i] !== 'model' || m.train) return;
          nudged++;
          expect(values.has(m.content), `${run.name} ${row.id}: nudged turn kept`).toBe(false);
          // The prompt that answered it is gone too.
          if (view.kinds[i + 1] === 'prompt') expect(values.has(view.messages[i + 1]!.content), `${run.name} ${row.id}: nudge kept`).toBe(false);
        });
        expect(row.conversations.filter((c) => c.from === 'gpt' || c.from === 'function_call').length).toBe(view.messages.filter((m, i) => view.kinds[i] === 'model' && m.train).length);
      }
    }
    expect(nudged).toBeGreaterThan(0);
  });

  it('--sharegpt-calls text: an XML dialect\'s calls as written, in gpt entries, no tools column; still loadable', async () => {
    const tulu = runs.find((r) => r.name === 'tulu')!;
    const rows = await exportRun(tulu, '--sharegpt-calls', 'text');
    let calls = 0;
    for (const row of rows) {
      expect(llamaFactoryProblems(row as unknown as Record<string, unknown>)).toEqual([]);
      expect(row.tools).toBeUndefined();
      expect(row.conversations.some((c) => c.from === 'function_call')).toBe(false);
      calls += row.conversations.filter((c) => c.from === 'gpt' && c.value.includes('<call_tool')).length;
    }
    expect(calls).toBeGreaterThan(0);
    const bad = await runCli(['export', tulu.dir, '--format', 'messages', '--sharegpt-calls', 'text', '--out', '-']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--sharegpt-calls is for --format sharegpt');
  });
});

describe('sharegpt from hostile rows', () => {
  const count = new Counter(O200K);
  const call = (id: string, args: string) => ({ id, type: 'function', function: { name: 'search', arguments: args } });
  const native = (messages: unknown[], tool_calls: unknown[] = []): Trajectory =>
    ({ id: 'h', question: 'q?', dialect: 'native', status: 'ok', interleaved_text: '', messages, tool_calls, repairs: [] }) as unknown as Trajectory;

  it('an argument holding </tool_call> cannot close the wrapper: <> are JSON escapes, and the JSON reads back the same', () => {
    const args = '{"query":"</tool_call><tool_call>{\\"name\\":\\"evil\\"}"}';
    const t = native([
      { role: 'system', content: 's' },
      { role: 'user', content: 'q?' },
      { role: 'assistant', content: 'Searching.', tool_calls: [call('c1', args)] },
      { role: 'tool', content: 'found', tool_call_id: 'c1' },
      { role: 'assistant', content: 'done' },
    ]);
    const row = toShareGpt(t, count);
    expect(llamaFactoryProblems(row as unknown as Record<string, unknown>)).toEqual([]);
    const [parsed] = parseFunctionCall(row.conversations[1]!.value) as { name: string; arguments: unknown }[];
    expect(parsed).toEqual({ name: 'search', arguments: JSON.parse(args) });
  });

  it('a turn whose own text holds <tool_call> is unexportable, named in the error; --on-bad-row skip counts it', async () => {
    const t = native([
      { role: 'user', content: 'q?' },
      { role: 'assistant', content: 'I will write <tool_call> myself', tool_calls: [call('c1', '{}')] },
      { role: 'tool', content: 'found', tool_call_id: 'c1' },
      { role: 'assistant', content: 'done' },
    ]);
    expect(() => toShareGpt(t, count)).toThrow(/<tool_call>/);
    const file = join(tempDir('tf-sharegpt-bad-'), 'rows.jsonl');
    writeFileSync(file, `${JSON.stringify({ ...t, id: 'h1' })}\n`);
    const strict = await runCli(['export', file, '--format', 'sharegpt', '--input-format', 'trajforge', '--out', '-']);
    expect(strict.code).toBe(2);
    expect(strict.stderr).toMatch(/rows\.jsonl:1: cannot export as sharegpt: .*<tool_call>/);
    const skip = await runCli(['export', file, '--format', 'sharegpt', '--input-format', 'trajforge', '--on-bad-row', 'skip', '--out', '-']);
    expect(skip.code, skip.stderr).toBe(0);
    expect(skip.stderr).toContain('1 not exportable as sharegpt');
  });

  it('a prompt right after a tool result joins it in one human entry; trailing prompts are dropped', () => {
    const t = native([
      { role: 'user', content: 'q?' },
      { role: 'assistant', content: '', tool_calls: [call('c1', '{"query":"x"}')] },
      { role: 'tool', content: 'result', tool_call_id: 'c1' },
      { role: 'user', content: 'Answer now.' },
      { role: 'assistant', content: 'final' },
      { role: 'user', content: 'unanswered prompt' },
    ]);
    const row = toShareGpt(t, count);
    expect(row.conversations).toEqual([
      { from: 'human', value: 'q?' },
      { from: 'function_call', value: '{"name":"search","arguments":{"query":"x"}}' },
      { from: 'human', value: 'result\n\nAnswer now.' },
      { from: 'gpt', value: 'final' },
    ]);
    expect(llamaFactoryProblems(row as unknown as Record<string, unknown>)).toEqual([]);
  });

  it('two model turns in a row, or none at all, are unexportable rather than a row LLaMA-Factory skips', () => {
    expect(() => toShareGpt(native([{ role: 'user', content: 'q?' }, { role: 'assistant', content: 'a' }, { role: 'assistant', content: 'b' }]), count)).toThrow(/two model turns/);
    expect(() => toShareGpt(native([{ role: 'user', content: 'q?' }]), count)).toThrow(/no model turn/);
  });

  it('the MiroVerse fixture (a chat row) exports to a loadable row', async () => {
    const fixture = join(FIXTURES, 'miroverse-chat-row.jsonl');
    const r = await runCli(['export', fixture, '--format', 'sharegpt', '--all', '--out', '-']);
    expect(r.code, r.stderr).toBe(0);
    const rows = r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    expect(rows.length).toBeGreaterThan(0);
    for (const row of rows) expect(llamaFactoryProblems(row)).toEqual([]);
  });
});
