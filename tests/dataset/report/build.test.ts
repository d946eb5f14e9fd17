/**
 * `trajforge report` without a browser: the page is self-contained, its figures are the
 * figures of `stats`, every trajectory is embedded once (latest state per id for a run),
 * and no text from a trajectory can end the data block early. The browser suite
 * (tests/browser/) checks that the page works.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Trajectory } from '../../../schemas/index.js';
import { loadConfig } from '../../../pipeline/core/config.js';
import { tulu } from '../../../pipeline/dialects/tulu.js';
import { generate } from '../../../pipeline/generate/run.js';
import { buildReport } from '../../../pipeline/dataset/report/build.js';
import { statsForInput, statsToJson } from '../../../pipeline/dataset/stats.js';
import { startSim } from '../../../sim/server.js';
import { FIXTURES, readJsonl, runCli, tempDir, writeConfig } from '../../helpers.js';

const OPEN = '<script type="application/x-ndjson" id="rows">';

/** The embedded rows: [summary, detail] per line, read the way the page reads them. */
function embedded(html: string): { s: any[]; d: any }[] {
  const start = html.indexOf(OPEN);
  expect(start).toBeGreaterThan(0);
  const end = html.indexOf('</script>', start);
  return html
    .slice(start + OPEN.length, end)
    .split('\n')
    .filter((l) => l.includes('\t'))
    .map((l) => {
      const tab = l.indexOf('\t');
      return { s: JSON.parse(l.slice(0, tab)), d: JSON.parse(l.slice(tab + 1)) };
    });
}

function baseTrajectory(id: string, over: Partial<Trajectory> = {}): Trajectory {
  return {
    schema_version: 1,
    id,
    question_id: id,
    question: `question ${id}`,
    dialect: 'tulu',
    model: 'm',
    status: 'ok',
    final_answer: 'a',
    interleaved_text: '<answer>a</answer>',
    messages: [],
    tool_calls: [],
    total_tool_calls: 0,
    tools_used: [],
    cited_ids: [],
    unresolved_cited_ids: [],
    turns: 1,
    repairs: [],
    rollbacks: [],
    validation: { passed: true, issues: [] },
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2, llm_calls: 1, estimated: false },
    timing: { started_at: '', finished_at: '', duration_ms: 0, llm_ms: 0, tool_ms: 0 },
    attempt: 0,
    run_id: 'r',
    ...over,
  };
}

const jsonl = (rows: unknown[]): string => rows.map((r) => `${JSON.stringify(r)}\n`).join('');

describe('report of a real run', () => {
  let dir: string;
  let html: string;
  let result: Awaited<ReturnType<typeof buildReport>>;

  beforeAll(async () => {
    const sim = await startSim({ port: 0, seed: 4, misbehave: { no_action: 0.25, refusal: 0.2, unclosed_call: 0.2, multiple_calls: 0.2, length: 0.15 } });
    dir = tempDir('tf-report-');
    try {
      const config = loadConfig(writeConfig(dir, sim.url, { budgets: { max_turns: 4, max_tool_calls: 3, max_nudges: 1, forced_answer_attempts: 1 }, concurrency: 16 }), { limit: 30 });
      await generate({ config });
    } finally {
      await sim.close();
    }
    result = await buildReport(join(dir, 'run'), join(dir, 'report.html'), { generatedAt: '2025-01-01T00:00:00Z' });
    html = readFileSync(join(dir, 'report.html'), 'utf8');
  }, 120_000);

  it('is one file that needs nothing from outside', () => {
    expect(html.startsWith('<!doctype html>')).toBe(true);
    expect(html.trimEnd().endsWith('</html>')).toBe(true);
    expect(html).not.toMatch(/<link\b|<img\b|<iframe\b|@import|url\(/i);
    expect(html).not.toMatch(/<script[^>]*\bsrc=/i);
    expect(result.bytes).toBe(Buffer.byteLength(html));
  });

  it('has the figures of stats, and each kind of chart', async () => {
    const stats = await statsForInput(join(dir, 'run'));
    expect(statsToJson(result.stats!)).toEqual(statsToJson(stats));
    expect(stats.status.failed).toBeGreaterThan(0);
    for (const id of ['chart-status', 'chart-reasons', 'chart-tool-calls', 'chart-turns', 'chart-tokens', 'chart-repairs', 'chart-rollbacks', 'chart-tools', 'chart-rules']) {
      expect(html).toContain(`id="${id}"`);
    }
    expect((html.match(/<svg class="chart/g) ?? []).length).toBeGreaterThanOrEqual(9);
    for (const reason of Object.keys(stats.reasons)) expect(html).toContain(`>${reason}</text>`);
    for (const kind of Object.keys(stats.repairs)) expect(html).toContain(`>${kind}</text>`);
  });

  it('embeds every trajectory of the run once, by its latest state, with segments that tile its text', () => {
    const ok = readJsonl(join(dir, 'run', 'trajectories.jsonl')) as Trajectory[];
    const failed = readJsonl(join(dir, 'run', 'failures.jsonl')) as Trajectory[];
    const rows = embedded(html);
    expect(rows.length).toBe(result.listed);
    expect(rows.length).toBe(result.stats!.rows.counted);
    const all = new Map([...failed, ...ok].map((t) => [t.id, t]));
    expect(new Set(rows.map((r) => r.s[0]))).toEqual(new Set(all.keys()));
    for (const { s, d } of rows) {
      const t = all.get(s[0])!;
      expect(s.slice(0, 3)).toEqual([t.id, t.status, t.reason ?? '']);
      expect(s[3]).toEqual([...new Set(t.validation.issues.map((i) => i.rule))]);
      expect(s.slice(4, 10)).toEqual([t.question, t.total_tool_calls, t.turns, t.usage.total_tokens, t.repairs.length, t.rollbacks.length]);
      const want = tulu.parseTrajectory(t.interleaved_text).segments.filter((x) => !(x.kind === 'text' && x.text.trim() === ''));
      expect(d.seg.map((x: [string, string, number?]) => x[0])).toEqual(want.map((x) => ({ think: 'k', call: 'c', output: 'o', answer: 'a', text: 't' })[x.kind]));
      d.seg.forEach((x: [string, string, number?], i: number) => expect(x[1] + (x[2] ? want[i]!.text.slice(x[1].length) : '')).toBe(want[i]!.text));
      expect(d.fa).toBe(t.final_answer);
    }
  });
});

describe('report: embedding and selection', () => {
  it('no text can end the data block: </script>, <!--<script> and U+2028 stay data', async () => {
    const d = tempDir('tf-report-esc-');
    const evil = '</script><script>window.pwned=1</script><!--<script>\u2028</SCRIPT >';
    const t = baseTrajectory('x</script>', {
      question: `q ${evil}`,
      interleaved_text: `<call_tool name="s">${evil}</call_tool>\n<tool_output>\n${evil}\n</tool_output>\n<answer>${evil}</answer>`,
      final_answer: evil,
    });
    writeFileSync(join(d, 'in.jsonl'), jsonl([t, baseTrajectory('y')]));
    await buildReport(join(d, 'in.jsonl'), join(d, 'r.html'));
    const html = readFileSync(join(d, 'r.html'), 'utf8');
    const start = html.indexOf(OPEN);
    const block = html.slice(start + OPEN.length, html.indexOf('</script>', start));
    expect(block).not.toMatch(/<\/?script|<!--/i);
    const rows = embedded(html);
    expect(rows.map((r) => r.s[0])).toEqual(['x</script>', 'y']);
    expect(rows[0]!.s[4]).toBe(`q ${evil}`);
    expect(rows[0]!.d.fa).toBe(evil);
    expect(rows[0]!.d.seg.find((x: string[]) => x[0] === 'o')[1]).toContain(evil);
  });

  it('a run directory lists each id once: accepted beats failed, the later attempt beats the earlier', async () => {
    const d = tempDir('tf-report-latest-');
    const run = join(d, 'run');
    mkdirSync(run);
    writeFileSync(join(run, 'trajectories.jsonl'), jsonl([baseTrajectory('a', { attempt: 1 })]));
    writeFileSync(
      join(run, 'failures.jsonl'),
      jsonl([
        baseTrajectory('a', { status: 'failed', reason: 'llm_error' }),
        baseTrajectory('b', { status: 'failed', reason: 'max_turns' }),
        baseTrajectory('b', { status: 'failed', reason: 'no_answer', attempt: 1 }),
      ]),
    );
    const r = await buildReport(run, join(d, 'r.html'));
    const rows = embedded(readFileSync(join(d, 'r.html'), 'utf8'));
    expect(rows.map((x) => x.s.slice(0, 3))).toEqual([
      ['a', 'ok', ''],
      ['b', 'failed', 'no_answer'],
    ]);
    expect(r.stats!.rows).toMatchObject({ counted: 2, superseded: 2 });
  });

  it('cuts long tool outputs in the viewer and says by how much', async () => {
    const d = tempDir('tf-report-cut-');
    const long = 'x'.repeat(5000);
    const text = `<call_tool name="s">q</call_tool>\n<tool_output>\n${long}\n</tool_output>\n<answer>a</answer>`;
    writeFileSync(join(d, 'in.jsonl'), jsonl([baseTrajectory('c', { interleaved_text: text })]));
    await buildReport(join(d, 'in.jsonl'), join(d, 'r.html'), { outputChars: 100 });
    const [row] = embedded(readFileSync(join(d, 'r.html'), 'utf8'));
    const out = row!.d.seg.find((x: unknown[]) => x[0] === 'o');
    const full = `<tool_output>\n${long}\n</tool_output>`;
    expect(out).toEqual(['o', full.slice(0, 100), full.length - 100]);
  });

  it('the CLI: DR Tulu rows to stdout; --out is required', async () => {
    const r = await runCli(['report', join(FIXTURES, 'drtulu-generator-rows.jsonl'), '--out', '-']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.startsWith('<!doctype html>')).toBe(true);
    expect(embedded(r.stdout).length).toBe(4);
    // Validated, not stamped: three of the four break a rule (`validate` agrees: tests/dataset/foreign.test.ts).
    expect(r.stderr).toMatch(/report: 4 trajectories \(1 ok, 3 failed\)/);
    const missing = await runCli(['report', join(FIXTURES, 'drtulu-generator-rows.jsonl')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('--out');
  });
});
