/**
 * trajforge filter: the expression language (precedence, ranges, errors with columns), the
 * split into kept and rejected rows, `-` through the CLI, a shell pipe into stats, EPIPE,
 * and files that are whole or absent.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { SCHEMA_VERSION, Trajectory, type FailureReason, type RepairKind } from '../../schemas/index.js';
import { filterRows } from '../../pipeline/dataset/filter.js';
import { compileExpr, compileFilter, FilterSpecError } from '../../pipeline/dataset/filter-compile.js';
import { ExprError, parseExpr } from '../../pipeline/dataset/filter-expr.js';
import { JsonlWriter } from '../../pipeline/core/jsonl.js';
import { readDataset, type DatasetRow } from '../../pipeline/dataset/readers.js';
import { CLI, runCli, tempDir } from '../helpers.js';

interface Spec {
  id: string;
  status?: 'ok' | 'failed';
  reason?: FailureReason;
  calls?: string[];
  turns?: number;
  tokens?: number;
  repairs?: RepairKind[];
  issues?: [rule: string, severity: 'error' | 'warn'][];
  dialect?: 'tulu' | 'mcp-xml';
}

function traj(s: Spec): Trajectory {
  const now = '2025-01-01T00:00:00.000Z';
  const calls = (s.calls ?? []).map((name, i) => ({
    schema_version: SCHEMA_VERSION,
    call_id: `c${i}`,
    turn: i,
    tool_name: name,
    server: 's',
    mcp_tool: 't',
    parameters: {},
    query: 'q',
    arguments: {},
    result: null,
    output_text: '',
    snippet_ids: [],
    cached: false,
    duration_ms: 1,
    timestamp: now,
  }));
  const issues = (s.issues ?? []).map(([rule, severity]) => ({ rule, severity, message: rule }));
  return Trajectory.parse({
    schema_version: SCHEMA_VERSION,
    id: s.id,
    question_id: s.id,
    question: `question ${s.id}?`,
    dialect: s.dialect ?? 'tulu',
    model: 'm',
    status: s.status ?? 'ok',
    ...(s.reason ? { reason: s.reason } : {}),
    final_answer: 'a',
    interleaved_text: '<answer>a</answer>',
    messages: [],
    tool_calls: calls,
    total_tool_calls: calls.length,
    tools_used: [...new Set(calls.map((c) => c.tool_name))],
    cited_ids: [],
    unresolved_cited_ids: [],
    turns: s.turns ?? 1,
    repairs: (s.repairs ?? []).map((kind) => ({ turn: 0, kind, detail: '' })),
    rollbacks: [],
    validation: { passed: !issues.some((i) => i.severity === 'error'), issues },
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: s.tokens ?? 0, llm_calls: 1 },
    timing: { started_at: now, finished_at: now, duration_ms: 0, llm_ms: 0, tool_ms: 0 },
    attempt: 0,
    run_id: 'r',
  });
}

const SPECS: Spec[] = [
  { id: 'a', calls: ['pubmed_search', 'pubmed_search'], turns: 3, tokens: 5000, repairs: ['unclosed_call'] },
  { id: 'b', calls: ['browse_webpage'], turns: 2, tokens: 12_000, issues: [['citations.unresolved', 'warn']] },
  { id: 'c', status: 'failed', reason: 'max_turns', calls: ['pubmed_search', 'pubmed_search', 'pubmed_search', 'pubmed_search', 'pubmed_search', 'pubmed_search'], turns: 12, tokens: 20_000, issues: [['answer.missing', 'error']] },
  { id: 'd', status: 'failed', reason: 'truncated', turns: 1, tokens: 300, repairs: ['truncated', 'stop_ignored'], issues: [['citations.unresolved', 'error']] },
  { id: 'e', status: 'failed', reason: 'wrong_answer', calls: ['pubmed_search'], turns: 4, tokens: 7999, dialect: 'mcp-xml', issues: [['gold.mismatch', 'error']] },
];
const ROWS: DatasetRow[] = SPECS.map((s, i) => ({ file: 'mem', line: i + 1, format: 'trajforge', trajectory: traj(s) }));

const matching = (src: string): string => ROWS.filter(compileExpr(parseExpr(src))).map((r) => r.trajectory.id).join('');

describe('expressions: what each test matches', () => {
  const cases: [string, string][] = [
    ['status == ok', 'ab'],
    ['status = ok', 'ab'],
    ['status != ok', 'cde'],
    ['status == ok|failed', 'abcde'],
    ['reason in (max_turns, truncated)', 'cd'],
    ['reason == none', 'ab'],
    ['verdict == pass', 'ab'],
    ['verdict == fail', 'cde'],
    ['rule == citations.unresolved', 'bd'],
    ['rule:error == citations.unresolved', 'd'],
    ['rule:warn == citations.unresolved', 'b'],
    ['tool_calls >= 2', 'ac'],
    ['tool_calls in 1..5', 'abe'],
    ['tool_calls in (0, 6..)', 'cd'],
    ['tool_calls in ..1', 'bde'],
    ['tool_calls not in 1..5', 'cd'],
    ['turns <= 3', 'abd'],
    ['turns > 3', 'ce'],
    ['tokens < 8000', 'ade'],
    ['tokens < 8k', 'ade'],
    ['tokens == 7999', 'e'],
    ['tools has pubmed_search', 'ace'],
    ['tools == browse_webpage', 'b'],
    ['tools != pubmed_search', 'bd'],
    ['repair == unclosed_call', 'a'],
    ['repair in (truncated, unclosed_call)', 'ad'],
    ['repairs >= 2', 'd'],
    ['dialect == tulu', 'abcd'],
    ['dialect == "mcp-xml"', 'e'],
    ['format == trajforge', 'abcde'],
    ['id == c', 'c'],
    ['id in (a, "e")', 'ae'],
  ];
  for (const [src, ids] of cases) {
    it(`${src} → ${ids || 'none'}`, () => expect(matching(src)).toBe(ids));
  }
});

describe('expressions: combining', () => {
  it('binds not tighter than and, and and tighter than or', () => {
    // or(status == ok, and(tools has pubmed_search, turns > 10)): a, b, and c.
    expect(matching('status == ok or tools has pubmed_search and turns > 10')).toBe('abc');
    // Parenthesised the other way: (ok or pubmed) and turns > 10 → c only.
    expect(matching('(status == ok or tools has pubmed_search) and turns > 10')).toBe('c');
    // (not ok) and pubmed → c, e; not (ok and pubmed) → b, c, d, e.
    expect(matching('not status == ok and tools has pubmed_search')).toBe('ce');
    expect(matching('not (status == ok and tools has pubmed_search)')).toBe('bcde');
    expect(matching('not not status == ok')).toBe('ab');
    expect(matching('! status == ok && turns < 5 || id == a')).toBe('ade');
  });

  it('parses to the tree the grammar says', () => {
    expect(parseExpr('status == ok or turns > 1 and not tools has x')).toEqual({
      op: 'or',
      left: { op: 'eq', field: 'status', values: ['ok'] },
      right: {
        op: 'and',
        left: { op: 'cmp', field: 'turns', cmp: '>', value: 1 },
        right: { op: 'not', expr: { op: 'eq', field: 'tools', values: ['x'] } },
      },
    });
    expect(parseExpr('tool_calls in (0, 2..4)')).toEqual({ op: 'in', field: 'tool_calls', values: [0], ranges: [{ min: 2, max: 4 }] });
    expect(parseExpr('rule:error == c')).toEqual({ op: 'eq', field: 'rule', qualifier: 'error', values: ['c'] });
  });

  it('keeps a row that matches every --keep and no --drop', () => {
    const keep = compileFilter({ keep: ['tokens < 15000', 'tool_calls >= 1'], drop: ['dialect == mcp-xml', 'repair == unclosed_call'] });
    expect(ROWS.filter(keep).map((r) => r.trajectory.id)).toEqual(['b']);
    expect(ROWS.filter(compileFilter({})).length).toBe(5);
  });
});

describe('expressions: errors point at the column', () => {
  const cases: [string, number, RegExp][] = [
    ['tool_calls >=', 14, /^expected a number at column 14$/],
    ['tool_calls >= many', 15, /expected a number, got "many"/],
    ['foo == 1', 1, /unknown field "foo" at column 1; known fields: status, reason, verdict, rule, tool_calls/],
    ['toString == 1', 1, /unknown field "toString"/],
    ['__proto__ == 1', 1, /unknown field "__proto__"/],
    ['status == ok and', 17, /expected a field/],
    ['(status == ok', 14, /expected "\)" at column 14; the "\(" it closes is at column 1/],
    ['status == ok)', 13, /unbalanced "\)"/],
    ['status == ok turns > 1', 14, /expected "and", "or" or the end, got "turns"/],
    ['status < 3', 8, /"<" compares numbers, and status is not one/],
    ['status == accepted', 11, /status is never "accepted" at column 11; it is one of: ok, failed/],
    ['repair == unclosd_call', 11, /repair is never "unclosd_call"/],
    ['repairs == unclosed_call', 12, /repairs counts repairs; to test a kind, use repair == KIND/],
    ['turns has 3', 7, /"has" tests a list field/],
    ['tool_calls in 5..2', 15, /empty range/],
    ['tool_calls in (1, 2', 20, /expected "," or "\)"/],
    ['status in 1..2', 11, /expected "\(" and a list of values/],
    ['status == "ok', 11, /unterminated double-quoted value/],
    ['turns == 3 $', 12, /unexpected character "\$"/],
    ['rule:fatal == x', 5, /"rule:" takes error or warn/],
    ['turns:error == 1', 6, /"turns" takes no ":" qualifier/],
    ['', 1, /empty expression/],
    ['status', 7, /expected an operator after "status"/],
    ['status == and', 11, /expected a value for status, got "and"/],
  ];
  for (const [src, column, message] of cases) {
    it(`'${src}' → column ${column}`, () => {
      let err: unknown;
      try {
        parseExpr(src);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ExprError);
      expect((err as ExprError).column).toBe(column);
      expect((err as ExprError).message).toMatch(message);
    });
  }

  it('names the flag and the expression', () => {
    expect(() => compileFilter({ keep: ['status == ok'], drop: ['tool_calls >='] })).toThrow(FilterSpecError);
    expect(() => compileFilter({ drop: ['tool_calls >='] })).toThrow("--drop 'tool_calls >=': expected a number at column 14");
  });
});

describe('filterRows', () => {
  async function* rows(): AsyncGenerator<DatasetRow> {
    yield* ROWS;
  }

  it('writes every row to one side or the other, as it was read', async () => {
    const dir = tempDir('tf-filter-');
    const out = new JsonlWriter(join(dir, 'kept.jsonl'));
    const rej = new JsonlWriter(join(dir, 'rejects.jsonl'));
    const counts = await filterRows(rows(), compileFilter({ keep: ['verdict == pass or reason == truncated'] }), out, rej);
    await out.commit();
    await rej.commit();
    expect(counts).toEqual({ in: 5, kept: 3, rejected: 2, dropped_with_parent: 0, orphans: 0 });
    const read = (f: string) => readFileSync(join(dir, f), 'utf8').trim().split('\n').map((l) => Trajectory.parse(JSON.parse(l)));
    const kept = read('kept.jsonl');
    const rejected = read('rejects.jsonl');
    expect(kept.map((t) => t.id)).toEqual(['a', 'b', 'd']);
    expect(rejected.map((t) => t.id)).toEqual(['c', 'e']);
    expect(kept[0]).toEqual(ROWS[0]!.trajectory);
    expect(readdirSync(dir).sort()).toEqual(['kept.jsonl', 'rejects.jsonl']);
  });

  it('waits for a slow reader instead of buffering everything', async () => {
    const { Writable } = await import('node:stream');
    const slow = new Writable({
      highWaterMark: 1024,
      write(_chunk, _enc, cb) {
        setTimeout(cb, 1);
      },
    });
    const big = { ...ROWS[0]!, trajectory: { ...ROWS[0]!.trajectory, interleaved_text: 'x'.repeat(100_000) } };
    let maxQueued = 0;
    async function* many(): AsyncGenerator<DatasetRow> {
      for (let i = 0; i < 50; i++) {
        maxQueued = Math.max(maxQueued, slow.writableLength);
        yield big;
      }
    }
    const w = new JsonlWriter('-', { stdout: slow });
    const counts = await filterRows(many(), () => true, w);
    await w.commit();
    expect(counts.kept).toBe(50);
    // Without waiting for 'drain' all 5 MB would be queued in the stream at once.
    expect(maxQueued).toBeLessThan(300_000);
  });
});

describe('trajforge filter (CLI)', () => {
  let dir: string;
  let run: string;
  let file: string;
  beforeAll(() => {
    dir = tempDir('tf-filter-cli-');
    file = join(dir, 'rows.jsonl');
    writeFileSync(file, ROWS.map((r) => `${JSON.stringify(r.trajectory)}\n`).join(''));
    run = join(dir, 'run');
    // A run directory: a, b accepted; c, d, e failed, and an earlier failed attempt of a.
    mkdirSync(run);
    const all = ROWS.map((r) => r.trajectory);
    writeFileSync(join(run, 'trajectories.jsonl'), all.filter((t) => t.status === 'ok').map((t) => `${JSON.stringify({ ...t, attempt: 1 })}\n`).join(''));
    const earlierA = traj({ id: 'a', status: 'failed', reason: 'no_answer' });
    writeFileSync(join(run, 'failures.jsonl'), [earlierA, ...all.filter((t) => t.status === 'failed')].map((t) => `${JSON.stringify(t)}\n`).join(''));
  });

  it('writes kept rows to stdout with --out -, and the counts to stderr', async () => {
    const res = await runCli(['filter', file, '--keep', 'tools has pubmed_search', '--drop', 'status == ok', '--out', '-']);
    expect(res.code, res.stderr).toBe(0);
    const ids = res.stdout.trim().split('\n').map((l) => JSON.parse(l).id);
    expect(ids).toEqual(['c', 'e']);
    expect(res.stderr).toBe('filter: 5 rows in, 2 kept, 3 rejected\n');
  });

  it('splits a run into kept and rejects that add up to its rows', async () => {
    const out = join(dir, 'kept.jsonl');
    const rejects = join(dir, 'rejected.jsonl');
    const res = await runCli(['filter', run, '--keep', 'turns <= 3', '--out', out, '--rejects', rejects]);
    expect(res.code, res.stderr).toBe(0);
    const kept = readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l).id);
    const rejected = readFileSync(rejects, 'utf8').trim().split('\n').map((l) => JSON.parse(l).id);
    // Run order: trajectories.jsonl (a, b) then failures.jsonl (a's failed attempt, c, d, e).
    expect(kept).toEqual(['a', 'b', 'a', 'd']);
    expect(rejected).toEqual(['c', 'e']);
    expect(kept.length + rejected.length).toBe(6);
    expect(res.stderr).toContain('6 rows in, 4 kept, 2 rejected');
  });

  it('composes in a shell pipe: filter run --out - | stats - --json', async () => {
    const cmd = `"${process.execPath}" "${CLI}" filter "${run}" --keep 'status == ok' --out - | "${process.execPath}" "${CLI}" stats - --json`;
    const res = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn('/bin/sh', ['-c', cmd], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    expect(res.code, res.stderr).toBe(0);
    const stats = JSON.parse(res.stdout);
    expect(stats.rows.counted).toBe(2);
    expect(stats.status).toEqual({ ok: 2 });
    expect(stats.acceptance_rate).toBe(1);
    expect(stats.tools).toEqual({ pubmed_search: { trajectories: 1, calls: 2, skipped: 0, cached: 0 }, browse_webpage: { trajectories: 1, calls: 1, skipped: 0, cached: 0 } });
    expect(res.stderr).toContain('filter: 6 rows in, 2 kept, 4 rejected');
  });

  it('exits 2 on a bad expression, pointing at the column, and writes nothing', async () => {
    const out = join(dir, 'never.jsonl');
    const res = await runCli(['filter', file, '--keep', 'tool_calls >=', '--out', out]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain("error: --keep 'tool_calls >=': expected a number at column 14");
    expect(res.stderr).not.toMatch(/\n\s+at /);
    expect(existsSync(out)).toBe(false);
  });

  it('exits 2 on an unknown field, listing the known ones', async () => {
    const res = await runCli(['filter', file, '--drop', 'tokenz > 5', '--out', '-']);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/--drop 'tokenz > 5': unknown field "tokenz" at column 1; known fields: .*tokens/);
  });

  it('leaves no half file when the input breaks midway, and keeps the old file', async () => {
    const broken = join(dir, 'broken.jsonl');
    const lines = ROWS.map((r) => JSON.stringify(r.trajectory));
    writeFileSync(broken, `${lines[0]}\n${lines[1]}\n{"id": "half\n${lines[2]}\n`);
    const sub = tempDir('tf-filter-half-');
    const out = join(sub, 'kept.jsonl');
    writeFileSync(out, 'previous contents\n');
    const res = await runCli(['filter', broken, '--out', out, '--rejects', join(sub, 'rej.jsonl')]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('broken.jsonl:3');
    expect(readFileSync(out, 'utf8')).toBe('previous contents\n');
    expect(readdirSync(sub)).toEqual(['kept.jsonl']);
    // With skip, the bad row is counted and the rest goes through.
    const skip = await runCli(['filter', broken, '--out', out, '--on-bad-row', 'skip']);
    expect(skip.code, skip.stderr).toBe(0);
    expect(readFileSync(out, 'utf8').trim().split('\n')).toHaveLength(3);
    expect(skip.stderr).toContain('3 rows in, 3 kept, 0 rejected, 1 bad rows skipped');
  });

  it('stops quietly, exit 0, when the reader of stdout goes away', async () => {
    const big = join(dir, 'big.jsonl');
    const line = `${JSON.stringify({ ...ROWS[0]!.trajectory, interleaved_text: 'x'.repeat(10_000) })}\n`;
    writeFileSync(big, line.repeat(2000)); // 20 MB: far past any pipe buffer
    const rejects = join(dir, 'epipe-rejects.jsonl');
    const child = spawn(process.execPath, [CLI, 'filter', big, '--keep', 'status == ok', '--out', '-', '--rejects', rejects], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    // Read the first chunk, then hang up, as `head -1` does.
    await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    child.stdout.destroy();
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code).toBe(0);
    expect(stderr).toBe('');
    // The rejects file would be partial: it is not left behind, nor is its temp file.
    expect(existsSync(rejects)).toBe(false);
    expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });

  it('rejects usage errors with exit 2', async () => {
    for (const args of [
      ['filter', file, '--keep', 'status == ok'],
      ['filter', '--out', '-'],
      ['filter', file, '--out', join(dir, 'same.jsonl'), '--rejects', join(dir, 'same.jsonl')],
      ['filter', file, '--out', '-', '--on-bad-row', 'ignore'],
    ]) {
      const res = await runCli(args);
      expect(res.code, args.join(' ')).toBe(2);
      expect(res.stderr).toMatch(/^error: /);
    }
  });

  it('reads the rows back the same way readDataset reads them', async () => {
    const res = await runCli(['filter', file, '--out', '-']);
    const back = join(dir, 'back.jsonl');
    writeFileSync(back, res.stdout);
    const ids: string[] = [];
    for await (const row of readDataset(back).rows) ids.push(row.trajectory.id);
    expect(ids).toEqual(['a', 'b', 'c', 'd', 'e']);
  });
});
