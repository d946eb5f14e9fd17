/**
 * The README's demo in each dialect, as a user runs it: `node dist/pipeline/cli/demo.js
 * --dialect D` (sim with its default misbehaviours, the corpus server, a real run
 * directory), then `trajforge validate` on what it wrote.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { readJsonl, runCli, runNode, tempDir } from '../helpers.js';

const DEMO = join(PACKAGE_ROOT, 'dist/pipeline/cli/demo.js');
const LIMIT = 30;

const runDemo = (args: string[]) => runNode([DEMO, ...args], { timeoutMs: 120_000 });

/** What each dialect's calls look like in the training view and in the transcript. */
const SHAPES = {
  tulu: { call: '<call_tool name="pubmed_search"', transcript: (m: any) => m.role === 'assistant' && m.content.includes('<call_tool') },
  'mcp-xml': { call: '<server_name>corpus</server_name>', transcript: (m: any) => m.role === 'assistant' && m.content.includes('<use_mcp_tool>') },
  native: { call: '<tool_call>\n{"name": "pubmed_search"', transcript: (m: any) => m.role === 'assistant' && Array.isArray(m.tool_calls) && m.tool_calls.length > 0 },
} as const;

describe.each(['mcp-xml', 'native', 'tulu'] as const)('npm run demo -- --dialect %s', (dialect) => {
  it('accounts for every sample, and every accepted trajectory passes validate', async () => {
    const out = join(tempDir('tf-demo-'), 'run');
    const r = await runDemo(['--dialect', dialect, '--limit', String(LIMIT), '--out', out]);
    expect(r.stderr).not.toMatch(/^error/m);
    expect(r.code).toBe(0);

    const ok = readJsonl(join(out, 'trajectories.jsonl'));
    const failed = readJsonl(join(out, 'failures.jsonl'));
    // Every question is accounted for: accepted or failed with a reason.
    expect(new Set([...ok, ...failed].map((t) => t.question_id)).size).toBe(LIMIT);
    for (const t of failed) expect(t.reason).toBeTruthy();
    expect(ok.length).toBeGreaterThanOrEqual(LIMIT * 0.6);

    for (const t of ok) {
      expect(t.dialect).toBe(dialect);
      expect(t.interleaved_text).toContain(SHAPES[dialect].call);
      expect(t.messages.some(SHAPES[dialect].transcript)).toBe(true);
      expect(t.final_answer.trim()).not.toBe('');
    }
    if (dialect === 'mcp-xml') for (const t of ok) expect(t.interleaved_text).toContain(`\\boxed{${t.final_answer}}`);
    if (dialect === 'native') {
      for (const t of ok) {
        const ids = t.messages.flatMap((m: any) => (m.tool_calls ?? []).map((c: any) => c.id));
        const answered = t.messages.filter((m: any) => m.role === 'tool').map((m: any) => m.tool_call_id);
        expect(answered).toEqual(ids);
      }
    }

    const v = await runCli(['validate', out, '--json']);
    expect(v.code).toBe(0);
    const lines = v.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines).toHaveLength(ok.length);
    for (const l of lines) expect(l.passed).toBe(true);
  });
});
