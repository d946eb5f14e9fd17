/**
 * A run directory written by hand for the report's at-a-glance tests: every fact the page shows
 * is in it once, at a place the tests know (a call's latency, a repair at turn 1, a rollback's
 * discarded text, a truncated failure with no message, a family, three judged samples of one
 * question), and every string a record or the manifest holds that the page shows carries hostile
 * markup. The rows are whole trajectories as the schema has them.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Trajectory } from '../../schemas/index.js';

/** Markup that would run if any text reached the page as HTML. */
export const EVIL = '</script><script>window.pwned=1</script><!--<script><img src=x onerror="window.pwned=2">';
export const SECRET = 'sekrit-in-url';

type Row = Record<string, unknown>;

function row(id: string, patch: Row): Row {
  const t: Row = {
    schema_version: 1, id, question_id: id.split('#')[0], question: `question of ${id}`, gold_answer: '42', dialect: 'tulu', model: 'm-glance', status: 'ok', final_answer: '42',
    interleaved_text: '<answer>42</answer>', messages: [], tool_calls: [], total_tool_calls: 0, tools_used: [], cited_ids: [], unresolved_cited_ids: [], turns: 1, repairs: [], rollbacks: [],
    validation: { passed: true, issues: [] }, usage: { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120, llm_calls: 1, estimated: false },
    timing: { started_at: '2026-01-01T10:00:00Z', finished_at: '2026-01-01T10:00:05Z', duration_ms: 5000, llm_ms: 4000, tool_ms: 1000 }, attempt: 0, run_id: 'glance',
    ...patch,
  };
  return Trajectory.parse(t) as unknown as Row;
}

function call(turn: number, tool: string, args: Row, extra: Row = {}): Row {
  return {
    schema_version: 1, call_id: `c${turn}`, turn, tool_name: tool, server: 'corpus', mcp_tool: tool, parameters: args, query: String(args.query ?? ''), arguments: args, result: null,
    truncated: false, output_text: 'out', snippet_ids: [], skipped: false, cached: false, duration_ms: 10, timestamp: '2026-01-01T10:00:01Z', ...extra,
  };
}

const judged = (verdict: string, score: number): Row => ({
  verdict, step: 'rubric', rubric_score: score, reasoning: `because ${EVIL}`, judged_at: '2026-01-01T10:00:06Z',
  criteria: [{ criterion: 'c1', title: `names the answer ${EVIL}`, weight: 2, score }, { criterion: 'c2', weight: -1, score: 0 }],
});

/** The rows, by id: what the tests look for. */
export function glanceRows(): { ok: Row[]; failed: Row[] } {
  // q1#0: two turns of calls, a rollback and a repair at turn 1, then the answer at turn 2.
  const q10 = row('q1#0', {
    interleaved_text:
      '<think>first look</think>\n<call_tool name="search">alpha</call_tool>\n<tool_output>\nresult one\n</tool_output>\n' +
      '<think>second look</think>\n<call_tool name="browse">beta</call_tool>\n<tool_output>\nresult two\n</tool_output>\n<answer>42</answer>',
    tool_calls: [
      call(0, 'search', { query: 'alpha' }, { duration_ms: 1234, cached: true }),
      call(1, `browse${EVIL}`, { query: 'beta', note: EVIL }, { duration_ms: 56, error: `timeout ${EVIL}` }),
    ],
    total_tool_calls: 2, tools_used: ['search', 'browse'], turns: 3,
    repairs: [{ turn: 1, kind: 'unclosed_call', detail: `closed the call ${EVIL}` }],
    rollbacks: [{ turn: 1, condition: 'repeated_query', detail: 'the same query again', discarded: `<call_tool name="search">alpha</call_tool> ${EVIL}` }],
    sampling: { index: 0, k: 3, until_correct: false }, judgement: judged('correct', 0.95),
  });
  const q11 = row('q1#1', { sampling: { index: 1, k: 3, until_correct: false }, judgement: judged('incorrect', 0.3), final_answer: '41', interleaved_text: '<answer>41</answer>' });
  const q12 = row('q1#2', { sampling: { index: 2, k: 3, until_correct: false }, judgement: judged('correct', 0.75) });
  // A family: the main session calls a sub-agent whose session is written with it.
  const fam = row('fam1', {
    question_id: `fam-q${EVIL}`, agent: 'main', depth: 0, family_id: 'fam1',
    interleaved_text: '<call_tool name="browsing">look</call_tool>\n<tool_output>\nreport\n</tool_output>\n<answer>42</answer>',
    tool_calls: [call(0, 'browsing', { task: 'look' }, { child_id: 'fam1.browsing.0', duration_ms: 900 })], total_tool_calls: 1, turns: 2,
  });
  const child = row('fam1.browsing.0', { question_id: `fam-q${EVIL}`, agent: `browsing${EVIL}`, parent_id: 'fam1', parent_call: 0, depth: 1, family_id: 'fam1', final_answer: 'report' });
  // Rows after them in the file, so the tree has to move the child up under its parent.
  const plain = [0, 1, 2].map((i) => row(`p${i}`, { tool_calls: [], turns: 1 }));
  // A truncated failure with no message at all: the page still says what happened.
  const trunc = row('q2#0', { status: 'failed', reason: 'truncated', final_answer: '', interleaved_text: '<think>cut off', validation: { passed: false, issues: [] } });
  return { ok: [q10, q11, q12, child, ...plain, fam], failed: [trunc] };
}

/** Writes the run directory; `cost` absent writes a manifest without one. */
export function writeGlanceRun(dir: string, opts: { cost?: number | null } = {}): { ok: Row[]; failed: Row[] } {
  mkdirSync(dir, { recursive: true });
  const rows = glanceRows();
  writeFileSync(join(dir, 'trajectories.jsonl'), rows.ok.map((r) => `${JSON.stringify(r)}\n`).join(''));
  writeFileSync(join(dir, 'failures.jsonl'), rows.failed.map((r) => `${JSON.stringify(r)}\n`).join(''));
  const part = { prompt_tokens: 1, completion_tokens: 1, cached_tokens: 0, usd: null };
  const manifest = {
    schema_version: 1, run_id: `glance${EVIL}`, created_at: '2026-01-01T10:00:00Z', updated_at: '2026-01-01T11:00:00Z', status: 'completed', trajforge_version: '0', node_version: 'v20',
    model: `m-glance${EVIL}`, dialect: 'tulu', config: { endpoint: { model: 'm-glance', base_url: `http://user:${SECRET}@127.0.0.1:9/v1?key=${SECRET}` } }, config_fingerprint: 'x', fingerprint_fields: {},
    questions: { path: null, total: 4 }, counts: { accepted: 6, failed: 1, by_reason: { truncated: 1 } },
    // Two sessions, 100 s and 25 s: the pause between them is not wall time.
    sessions: [
      { started_at: '2026-01-01T10:00:00Z', finished_at: '2026-01-01T10:01:40Z', exit: 'interrupted' },
      { started_at: '2026-01-01T10:30:00Z', finished_at: '2026-01-01T10:30:25Z', exit: 'completed' },
    ],
    ...(opts.cost === undefined ? {} : { cost: { usd: opts.cost, by: { main: part, sub_agents: part, judge: part }, estimated: false } }),
  };
  writeFileSync(join(dir, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return rows;
}
