/**
 * `trajforge validate` and the rules behind it: on rows another generator wrote (read by the
 * reader, as the command reads them), on trajectories trajforge generated (sim + corpus
 * server, real run), through the CLI as a user runs it, and with the LLM judge over real HTTP.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Trajectory, Validation } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { getDialect } from '../../pipeline/dialects/index.js';
import { generate } from '../../pipeline/generate/run.js';
import { readDataset, type DatasetRow } from '../../pipeline/dataset/readers.js';
import { countTokens, TOKEN_ENCODING } from '../../pipeline/core/tokens/count.js';
import {
  compareGold,
  goldMatches,
  normalizeQuery,
  RULES,
  tokenF1,
  validateTrajectory,
  type ValidateOptions,
} from '../../pipeline/core/validator.js';
import { startSim } from '../../sim/server.js';
import { FIXTURES, readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

const DRTULU = join(FIXTURES, 'drtulu-generator-rows.jsonl');
const rawRows: any[] = readFileSync(DRTULU, 'utf8')
  .split('\n')
  .filter((l) => l.trim() !== '')
  .map((l) => JSON.parse(l));
const rawLines = readFileSync(DRTULU, 'utf8').split('\n').filter((l) => l.trim() !== '');

async function readAll(file: string): Promise<DatasetRow[]> {
  const out: DatasetRow[] = [];
  for await (const r of readDataset(file).rows) out.push(r);
  return out;
}

const check = (t: Trajectory, more: Partial<Omit<ValidateOptions, 'dialect'>> = {}): Validation => validateTrajectory(t, { dialect: getDialect(t.dialect), ...more });
const rulesOf = (v: Validation): string[] => v.issues.map((i) => i.rule).sort();
const offsetsOf = (text: string, needle: string): number[] => {
  const out: number[] = [];
  for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + 1)) out.push(at);
  return out;
};

// ---------------------------------------------------------------------------------------

describe('DR Tulu generator rows, through the reader, with the default rules', () => {
  let rows: DatasetRow[];
  beforeAll(async () => {
    rows = await readAll(DRTULU);
  });

  it('the reader gives the four rows as tulu trajectories with the generator records', () => {
    expect(rows.map((r) => [r.format, r.trajectory.dialect, r.trajectory.tool_calls.length])).toEqual([
      ['drtulu', 'tulu', 3],
      ['drtulu', 'tulu', 3],
      ['drtulu', 'tulu', 0],
      ['drtulu', 'tulu', 4],
    ]);
  });

  it("row 1 fails on one thing only: its first tool output shows the model `Error: None`, but the generator's record of that browse_webpage call holds the page it fetched (success: true)", () => {
    const raw = rawRows[0].trajectory;
    // The row itself: the record says the fetch worked, the text says it failed.
    expect(raw.tool_calls[0].tool_name).toBe('browse_webpage');
    expect(raw.tool_calls[0].result.preview).toContain('"success": true');
    expect(raw.tool_calls[0].result.error).toBeUndefined();
    expect(raw.interleaved_text).toContain('<tool_output>Error: None</tool_output>');

    const v = check(rows[0]!.trajectory);
    expect(v.passed).toBe(false);
    expect(v.issues).toEqual([
      expect.objectContaining({ rule: 'structure.output_mismatch', severity: 'error', call_index: 0, turn: 0, offset: raw.interleaved_text.indexOf('<tool_output>Error: None') }),
    ]);
    expect(v.issues[0]!.message).toContain('Error: None');
    expect(v.issues[0]!.message).toContain('browse_webpage');
  });

  it('row 2 is flagged for the outputs the model wrote itself: 6 outputs for 3 calls; the 3 right after the calls show snippets although every search timed out, the 3 real timeouts follow no call; and it never answers', () => {
    const raw = rawRows[1].trajectory;
    const text: string = raw.interleaved_text;
    expect(raw.tool_calls.map((c: any) => c.result.error)).toEqual(Array(3).fill(expect.stringContaining('Timed out')));
    expect(offsetsOf(text, '<tool_output>')).toHaveLength(6);
    expect(raw.final_answer).toBe('');

    const v = check(rows[1]!.trajectory);
    expect(v.passed).toBe(false);
    expect(rulesOf(v)).toEqual([
      'answer.missing',
      'structure.output_count',
      ...Array(3).fill('structure.output_mismatch'),
      ...Array(3).fill('structure.output_without_call'),
    ]);
    const invented = v.issues.filter((i) => i.rule === 'structure.output_mismatch');
    expect(invented.map((i) => i.call_index)).toEqual([0, 1, 2]);
    for (const i of invented) {
      expect(text.startsWith('<tool_output>\n<snippet', i.offset!)).toBe(true);
      expect(i.message).toContain('Timed out');
    }
    const orphans = v.issues.filter((i) => i.rule === 'structure.output_without_call');
    for (const i of orphans) expect(text.startsWith('<tool_output>Error: Timed out', i.offset!)).toBe(true);
    const count = v.issues.find((i) => i.rule === 'structure.output_count')!;
    expect(count.message).toBe('6 tool outputs in the text, 3 tool call records');
    // The place: the first output beyond the records.
    expect(count.offset).toBe(orphans[0]!.offset);
  });

  it('row 3 is flagged for three unclosed calls that never ran (no records, no outputs) and for citing 29196280, 30322862, 30449709, which no tool returned', () => {
    const raw = rawRows[2].trajectory;
    const text: string = raw.interleaved_text;
    expect(raw.tool_calls).toEqual([]);
    expect(offsetsOf(text, '</call_tool>')).toEqual([]);
    const callAt = offsetsOf(text, '<call_tool');
    expect(callAt).toHaveLength(3);

    const v = check(rows[2]!.trajectory);
    expect(v.passed).toBe(false);
    expect(rulesOf(v)).toEqual(['citations.unresolved', ...Array(3).fill('structure.call_without_output')]);
    const never = v.issues.filter((i) => i.rule === 'structure.call_without_output');
    expect(never.map((i) => [i.call_index, i.offset])).toEqual(callAt.map((at, k) => [k, at]));
    const cite = v.issues.find((i) => i.rule === 'citations.unresolved')!;
    expect(raw.pmids_cited).toEqual(['29196280', '30322862', '30449709']);
    for (const id of raw.pmids_cited) expect(cite.message).toContain(id);
    expect(cite.offset).toBe(text.indexOf('<answer>'));
  });

  it("row 4 passes with one warning: the generator's final_answer (cut off mid-sentence, 5 citations) is not the answer in the text (no citations at all); its last two searches differ by a word (remdesivir / trial), so calls.repeated stays quiet", () => {
    const raw = rawRows[3].trajectory;
    const text: string = raw.interleaved_text;
    const inText = text.slice(text.indexOf('<answer>'), text.indexOf('</answer>'));
    expect(inText).not.toContain('<cite');
    expect((raw.final_answer.match(/<cite /g) ?? []).length).toBe(5);
    expect(raw.final_answer.trimEnd().endsWith('11 days')).toBe(true);
    expect(text).not.toContain(raw.final_answer.slice(0, 200));
    const [q3, q4] = [raw.tool_calls[2].query, raw.tool_calls[3].query];
    expect(normalizeQuery(q3)).not.toBe(normalizeQuery(q4));

    const v = check(rows[3]!.trajectory);
    expect(v.passed).toBe(true);
    expect(v.issues).toEqual([expect.objectContaining({ rule: 'answer.final_mismatch', severity: 'warn', offset: text.indexOf('<answer>') })]);
  });

  it('row 4 with its last search rewritten as the third one in other order and case → calls.repeated (warn) on call 3, turn 3, at the call', () => {
    const t = structuredClone(rows[3]!.trajectory);
    const q3: string = rawRows[3].trajectory.tool_calls[2].query;
    const q4: string = rawRows[3].trajectory.tool_calls[3].query;
    const reworded = q3.split(' ').reverse().join('  ').toUpperCase();
    expect(t.interleaved_text.split(q4)).toHaveLength(2);
    t.interleaved_text = t.interleaved_text.replace(q4, reworded);
    const v = check(t);
    expect(v.passed).toBe(true);
    const rep = v.issues.filter((i) => i.rule === 'calls.repeated');
    expect(rep).toEqual([expect.objectContaining({ severity: 'warn', call_index: 3, turn: 3, offset: t.interleaved_text.lastIndexOf('<call_tool') })]);
    expect(rep[0]!.message).toContain('repeats call 2');
    // Raised to error by configuration, it rejects.
    expect(check(t, { severities: { 'calls.repeated': 'error' } }).passed).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------

describe('trajectories trajforge generated and accepted', () => {
  let dir: string;
  let runDir: string;
  let config: ReturnType<typeof loadConfig>;
  let ok: Trajectory[];
  let failedCount: number;

  beforeAll(async () => {
    const sim = await startSim({ port: 0, seed: 11 });
    try {
      dir = tempDir('tf-validate-');
      config = loadConfig(writeConfig(dir, sim.url), { limit: 8 });
      await generate({ config });
      runDir = config.output.dir;
      ok = (await readAll(join(runDir, 'trajectories.jsonl'))).map((r) => r.trajectory);
      failedCount = readJsonl(join(runDir, 'failures.jsonl')).length;
      if (ok.length < 4) throw new Error(`only ${ok.length} accepted`);
    } finally {
      await sim.close();
    }
  }, 120_000);

  it('pass unchanged: the rules give exactly the validation the rollout stored, and still pass with turn and token limits at the run budgets', () => {
    for (const t of ok) {
      const v = check(t, { limits: config.tools.limits, goldMatch: config.validation.gold_match, severities: config.validation.severities });
      expect(v, t.id).toEqual(t.validation);
      expect(v).toEqual({ passed: true, issues: [] });
      expect(check(t, { maxTurns: config.budgets.max_turns, maxTokens: 32_000, limits: config.tools.limits }), t.id).toEqual({ passed: true, issues: [] });
    }
  });

  it('`validate <run>` checks the accepted rows only and exits 0; --json gives one passing line per row and the summary on stderr', async () => {
    const r = await runCli(['validate', runDir, '--json']);
    expect(r.stderr).not.toContain('error:');
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((l) => l.id)).toEqual(ok.map((t) => t.id));
    for (const l of lines) expect(l).toMatchObject({ passed: true, issues: [], file: join(runDir, 'trajectories.jsonl') });
    const summary = JSON.parse(r.stderr.trim().split('\n').at(-1)!).summary;
    expect(summary).toMatchObject({ rows: ok.length, passed: ok.length, failed: 0, bad_rows: 0, rules: {} });
    // The failures, named, are checked too, and fail (every one was rejected for a reason).
    if (failedCount > 0) expect((await runCli(['validate', join(runDir, 'failures.jsonl')])).code).toBe(1);
  });

  it('tools.over_limit points at the first call past the limit', () => {
    const t = ok.find((x) => x.tool_calls.length >= 2)!;
    const n = t.tool_calls.length;
    const v = check(t, { limits: { pubmed_search: n - 1 } });
    expect(v.issues).toEqual([{ rule: 'tools.over_limit', severity: 'error', message: `pubmed_search ran ${n} times; the limit is ${n - 1}`, call_index: n - 1, turn: t.tool_calls[n - 1]!.turn }]);
  });

  it('limits.turns fires past the turn limit only', () => {
    const t = ok[0]!;
    expect(rulesOf(check(t, { maxTurns: t.turns }))).toEqual([]);
    const v = check(t, { maxTurns: t.turns - 1 });
    expect(v.issues).toEqual([expect.objectContaining({ rule: 'limits.turns', severity: 'error', turn: t.turns - 1 })]);
    expect(v.issues[0]!.message).toBe(`${t.turns} turns; the limit is ${t.turns - 1}`);
  });

  it(`limits.tokens counts interleaved_text with the ${TOKEN_ENCODING} BPE tokenizer: at the count it passes, one below it fails and says the count and the encoding`, () => {
    // A real BPE: known o200k_base counts, and a special-token string counted as plain text.
    expect(countTokens('hello world')).toBe(2);
    expect(countTokens('<|endoftext|>')).toBeGreaterThan(1);
    const t = ok[0]!;
    const n = countTokens(t.interleaved_text);
    // Not a characters-per-token estimate.
    expect(n).not.toBe(Math.ceil(t.interleaved_text.length / 4));
    expect(rulesOf(check(t, { maxTokens: n }))).toEqual([]);
    const v = check(t, { maxTokens: n - 1 });
    expect(v.issues).toEqual([expect.objectContaining({ rule: 'limits.tokens', severity: 'error' })]);
    expect(v.issues[0]!.message).toContain(`${n} tokens (o200k_base)`);
    // The place: near the end, where the last token starts.
    expect(v.issues[0]!.offset).toBeGreaterThan(t.interleaved_text.length - 20);
    expect(v.issues[0]!.offset).toBeLessThan(t.interleaved_text.length);
  });

  it('gold.mismatch names the mode: a box that holds another value fails boxed mode even when the text around it holds the gold', () => {
    const t = structuredClone(ok[0]!);
    const gold = t.gold_answer!;
    t.interleaved_text = t.interleaved_text.replace(/<\/answer>\s*$/, ` So: \\boxed{9999}</answer>`);
    expect(rulesOf(check(t, { goldMatch: 'contains' }))).toEqual([]);
    const v = check(t, { goldMatch: 'boxed' });
    expect(v.issues).toEqual([expect.objectContaining({ rule: 'gold.mismatch', severity: 'error' })]);
    expect(v.issues[0]!.message).toBe(`the answer's \\boxed{9999} does not equal the gold answer "${gold}"`);
    t.interleaved_text = t.interleaved_text.replace('\\boxed{9999}', `\\boxed{${gold}}`);
    expect(rulesOf(check(t, { goldMatch: 'boxed' }))).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------

describe('gold matching', () => {
  it('exact and contains are as they were; decimals stay whole', () => {
    expect(goldMatches('The answer.', 'answer', 'exact')).toBe(true);
    expect(goldMatches('version 52', '52', 'exact')).toBe(false);
    expect(goldMatches('version 52', '52', 'contains')).toBe(true);
    expect(goldMatches('It shipped in Firefox 3.5.', '3.5', 'contains')).toBe(true);
    expect(goldMatches('It shipped in Firefox 35.', '3.5', 'contains')).toBe(false);
  });

  it('boxed: the last box decides when there is one (nested braces included); without a box the answer is compared as contains', () => {
    expect(goldMatches('Firefox 3.5 had it, so \\boxed{12}', '3.5', 'boxed')).toBe(false);
    expect(goldMatches('first \\boxed{1}, then \\boxed{3.5}', '3.5', 'boxed')).toBe(true);
    expect(goldMatches('\\boxed{\\frac{1}{2}}', '\\frac{1}{2}', 'boxed')).toBe(true);
    expect(compareGold('Firefox 3.5', '3.5', 'boxed')).toEqual({ matched: true, mode: 'boxed' });
    expect(compareGold('x \\boxed{35}', '3.5', 'boxed')).toEqual({ matched: false, mode: 'boxed', boxed: '35' });
  });

  it('f1: SQuAD token F1 against the threshold, or containment', () => {
    expect(tokenF1(['chrome', 'for', 'android', '52'], ['chrome', '52'])).toBeCloseTo(2 / 3, 10);
    expect(tokenF1(['a'], ['b'])).toBe(0);
    // "Chrome for Android 52" vs "Chrome 52": F1 0.67, and not a contiguous run.
    expect(goldMatches('Chrome for Android 52', 'Chrome 52', 'f1')).toBe(false);
    expect(goldMatches('Chrome for Android 52', 'Chrome 52', 'f1', 0.6)).toBe(true);
    expect(goldMatches('version 52 of Chrome', 'Chrome version 52', 'f1')).toBe(true); // F1 0.86, order differs
    expect(compareGold('Chrome for Android 52', 'Chrome 52', 'f1').f1).toBeCloseTo(0.667, 3);
  });

  it('every rule has a stable id, a default severity and a description', () => {
    expect(Object.keys(RULES)).toEqual([
      'answer.missing',
      'answer.unclosed',
      'structure.output_without_call',
      'structure.call_without_output',
      'structure.output_count',
      'structure.output_mismatch',
      'citations.unresolved',
      'tools.over_limit',
      'gold.mismatch',
      'answer.final_mismatch',
      'calls.repeated',
      'limits.turns',
      'limits.tokens',
      'gold.judge',
      'agent.report_unusable',
      'agent.report_mismatch',
      'family.report_mismatch',
      'family.link',
      'family.duplicate',
    ]);
    expect(RULES['calls.repeated'].severity).toBe('warn');
  });
});

// ---------------------------------------------------------------------------------------

describe('trajforge validate (the CLI)', () => {
  let dir: string;
  beforeAll(() => {
    dir = tempDir('tf-validate-cli-');
  });
  const write = (name: string, text: string): string => {
    const f = join(dir, name);
    writeFileSync(f, text);
    return f;
  };

  it('exit 1 on the DR Tulu rows; --json: one line per row with its issues, the summary by rule on stderr', async () => {
    const r = await runCli(['validate', DRTULU, '--json']);
    expect(r.code).toBe(1);
    const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((l) => [l.id, l.line, l.passed])).toEqual([
      ['pubmed_traj_00002', 1, false],
      ['pubmed_traj_00001', 2, false],
      ['pubmed_traj_00001#2', 3, false],
      ['port8005_traj_00024', 4, true],
    ]);
    expect(lines[2].issues[0]).toEqual({ rule: 'structure.call_without_output', severity: 'error', message: 'call 0 (pubmed_search) has no tool output', call_index: 0, offset: rawRows[2].trajectory.interleaved_text.indexOf('<call_tool') });
    const summary = JSON.parse(r.stderr.trim().split('\n').at(-1)!).summary;
    expect(summary).toMatchObject({ rows: 4, passed: 1, failed: 3, warned: 1, bad_rows: 0 });
    expect(summary.rules).toEqual({
      'structure.output_mismatch': { error: 4, warn: 0, rows: 2 },
      'structure.output_without_call': { error: 3, warn: 0, rows: 1 },
      'structure.output_count': { error: 1, warn: 0, rows: 1 },
      'answer.missing': { error: 1, warn: 0, rows: 1 },
      'structure.call_without_output': { error: 3, warn: 0, rows: 1 },
      'citations.unresolved': { error: 1, warn: 0, rows: 1 },
      'answer.final_mismatch': { error: 0, warn: 1, rows: 1 },
    });
  });

  it('without --json: the failing rows with their issues and places, then the summary table', async () => {
    const r = await runCli(['validate', DRTULU]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`FAIL pubmed_traj_00002  (${DRTULU}:1)`);
    expect(r.stdout).toMatch(/error {2}structure\.output_mismatch {2}tool output 0 shows the model an error \("Error: None"\).*\[turn 0, call 0, offset 87\]/);
    expect(r.stdout).not.toContain('FAIL port8005_traj_00024');
    expect(r.stdout).toContain(`${DRTULU}: 4 rows, 1 passed (1 with warnings), 3 failed`);
    expect(r.stdout).toMatch(/structure\.output_mismatch +4 +0 +2/);
    expect(r.stdout.indexOf('FAIL')).toBeLessThan(r.stdout.indexOf('4 rows'));
  });

  it('--rules turning the one error of row 1 into a warning flips the exit code from 1 to 0', async () => {
    const row1 = write('row1.jsonl', `${rawLines[0]}\n`);
    expect((await runCli(['validate', row1])).code).toBe(1);
    const rules = write('warn.yaml', 'severities:\n  structure.output_mismatch: warn\n');
    const r = await runCli(['validate', row1, '--rules', rules, '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).issues).toEqual([expect.objectContaining({ rule: 'structure.output_mismatch', severity: 'warn' })]);
    // JSON rules files too, and `off` drops the issue.
    const off = write('off.json', JSON.stringify({ severities: { 'structure.output_mismatch': 'off' } }));
    expect(JSON.parse((await runCli(['validate', row1, '--rules', off, '--json'])).stdout)).toMatchObject({ passed: true, issues: [] });
  });

  it('--rules limits and gold mode reach the rules: turn and token limits below row 4, exact gold matching', async () => {
    const t = JSON.parse(rawLines[3]!);
    t.gold_answer = 'remdesivir shortens time to recovery';
    const row4 = write('row4.jsonl', `${JSON.stringify(t)}\n`);
    const rules = write('limits.yaml', 'limits:\n  turns: 2\n  tokens: 100\ngold:\n  mode: exact\n');
    const r = await runCli(['validate', row4, '--rules', rules, '--json']);
    expect(r.code).toBe(1);
    const rules4 = JSON.parse(r.stdout).issues.map((i: { rule: string }) => i.rule).sort();
    expect(rules4).toEqual(['answer.final_mismatch', 'gold.mismatch', 'limits.tokens', 'limits.turns']);
    expect(r.stdout).toContain('tokens (o200k_base); the limit is 100');
  });

  it('exit 2 with the field named: an unknown rule id, a bad limit, an unknown key, a rules file that is not YAML', async () => {
    const cases: [string, string, RegExp][] = [
      ['r1.yaml', 'severities:\n  calls.repeatd: warn\n', /r1\.yaml: severities\.calls\.repeatd: unknown rule/],
      ['r2.yaml', 'limits:\n  turns: -1\n', /r2\.yaml: limits\.turns: /],
      ['r3.yaml', 'gold:\n  mod: exact\n', /r3\.yaml: gold\.mod: unknown key/],
      ['r4.yaml', 'severities:\n  gold.mismatch: fatal\n', /r4\.yaml: severities\.gold\.mismatch: /],
      ['r5.yaml', 'severities: [\n', /r5\.yaml:\d+:\d+: not valid YAML/],
    ];
    for (const [name, text, message] of cases) {
      const r = await runCli(['validate', DRTULU, '--rules', write(name, text)]);
      expect(r.code, name).toBe(2);
      expect(r.stderr, name).toMatch(message);
      expect(r.stdout, name).toBe('');
    }
  });

  it('exit 2 on usage and input errors; --on-bad-row skip counts a bad row and goes on', async () => {
    expect((await runCli(['validate'])).code).toBe(2);
    expect((await runCli(['validate', DRTULU, DRTULU])).code).toBe(2);
    expect((await runCli(['validate', DRTULU, '--bogus'])).code).toBe(2);
    expect((await runCli(['validate', DRTULU, '--format', 'csv'])).code).toBe(2);
    expect((await runCli(['validate', join(dir, 'nope.jsonl')])).code).toBe(2);
    const judgeAlone = await runCli(['validate', DRTULU, '--judge']);
    expect(judgeAlone.code).toBe(2);
    expect(judgeAlone.stderr).toContain('--judge needs --config');

    const mixed = write('mixed.jsonl', `${rawLines[3]}\n{not json\n`);
    const bad = await runCli(['validate', mixed]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(`${mixed}:2`);
    const skipped = await runCli(['validate', mixed, '--on-bad-row', 'skip', '--json']);
    expect(skipped.code).toBe(0);
    expect(skipped.stdout.trim().split('\n')).toHaveLength(1);
    expect(JSON.parse(skipped.stderr.trim().split('\n').at(-1)!).summary).toMatchObject({ rows: 1, passed: 1, bad_rows: 1 });
  });
});

// ---------------------------------------------------------------------------------------

interface Grader {
  readonly url: string;
  readonly requests: any[];
  close(): Promise<void>;
}

/**
 * A real OpenAI-protocol server on loopback (streamed and not) whose replies are fixed by
 * the gold answer in the grading prompt: the judge is exercised over HTTP, end to end.
 */
async function startGrader(reply: (gold: string) => { status: number; body: unknown } | { text: string; delayMs?: number }): Promise<Grader> {
  const requests: any[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const json = JSON.parse(body);
      requests.push(json);
      const prompt: string = json.messages.at(-1).content;
      const gold = /Gold answer:\n<<<\n([\s\S]*?)\n>>>/.exec(prompt)?.[1] ?? '';
      const r = reply(gold);
      if ('status' in r) {
        res.writeHead(r.status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(r.body));
        return;
      }
      setTimeout(() => {
        const base = { id: 'g', created: 0, model: json.model };
        if (json.stream) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          const send = (v: unknown): boolean => res.write(`data: ${JSON.stringify(v)}\n\n`);
          send({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: { role: 'assistant', content: r.text }, finish_reason: null }] });
          send({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
          send({ ...base, object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 } });
          res.end('data: [DONE]\n\n');
        } else {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ ...base, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: r.text }, finish_reason: 'stop' }], usage: { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 } }));
        }
      }, r.delayMs ?? 0);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('trajforge validate --judge', () => {
  let dir: string;
  let ok: Trajectory[];
  let rowsFile: string;
  const GOLDS = ['alpha', 'bravo', 'charlie', 'delta'];
  const GRADINGS: Record<string, { text: string; delayMs?: number }> = {
    // The slowest reply comes first: rows must still come out in input order.
    alpha: { text: 'Verdict: CORRECT\nRationale: it names the same version.', delayMs: 400 },
    bravo: { text: '**Verdict:** INCORRECT\n**Rationale:** it names another version than the gold answer.' },
    charlie: { text: '{"verdict": "NOT_ATTEMPTED", "rationale": "it says it could not find it"}' },
    delta: { text: 'Looks fine to me.' },
  };

  beforeAll(async () => {
    dir = tempDir('tf-validate-judge-');
    const sim = await startSim({ port: 0, seed: 11 });
    try {
      const config = loadConfig(writeConfig(dir, sim.url), { limit: 6 });
      await generate({ config });
      ok = (await readAll(join(config.output.dir, 'trajectories.jsonl'))).map((r) => r.trajectory);
    } finally {
      await sim.close();
    }
    // Four accepted rows with made-up golds (the grader keys on them), and one without a gold.
    const rows = GOLDS.map((g, i) => ({ ...ok[i]!, id: `judged-${g}`, gold_answer: g }));
    const { gold_answer: _dropped, ...noGold } = ok[4]!;
    rowsFile = join(dir, 'judged.jsonl');
    writeFileSync(rowsFile, [...rows, { ...noGold, id: 'no-gold' }].map((r) => JSON.stringify(r)).join('\n') + '\n');
    // Gold matching off: only the judge speaks about correctness here.
    writeFileSync(join(dir, 'rules.yaml'), 'gold:\n  mode: off\njudge:\n  concurrency: 4\n');
  }, 120_000);

  it('stores verdict and rationale per row: INCORRECT is an error, NOT_ATTEMPTED and an unreadable grading are warnings; rows keep their order', async () => {
    const grader = await startGrader((gold) => GRADINGS[gold] ?? { text: 'Verdict: CORRECT' });
    try {
      const cfgDir = tempDir('tf-judge-cfg-');
      const cfg = writeConfig(cfgDir, grader.url, { endpoint: { base_url: grader.url, model: 'grader-1', api_key_env: 'none', temperature: 0.9 } });
      const r = await runCli(['validate', rowsFile, '--json', '--rules', join(dir, 'rules.yaml'), '--judge', '--config', cfg]);
      expect(r.code).toBe(1);
      const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
      expect(lines.map((l) => l.id)).toEqual(['judged-alpha', 'judged-bravo', 'judged-charlie', 'judged-delta', 'no-gold']);
      expect(lines.map((l) => l.judge?.verdict)).toEqual(['CORRECT', 'INCORRECT', 'NOT_ATTEMPTED', null, undefined]);
      expect(lines[0]).toMatchObject({ passed: true, issues: [], judge: { rationale: 'it names the same version.' } });
      expect(lines[1]).toMatchObject({ passed: false, issues: [{ rule: 'gold.judge', severity: 'error', message: 'judge: INCORRECT: it names another version than the gold answer.' }] });
      expect(lines[2]).toMatchObject({ passed: true, issues: [{ rule: 'gold.judge', severity: 'warn', message: 'judge: NOT_ATTEMPTED: it says it could not find it' }] });
      expect(lines[3]).toMatchObject({ passed: true, issues: [{ rule: 'gold.judge', severity: 'warn' }], judge: { raw: 'Looks fine to me.' } });
      expect(lines[3].issues[0].message).toContain('names no verdict');
      expect(lines[4]).toMatchObject({ passed: true, issues: [] });
      const summary = JSON.parse(r.stderr.trim().split('\n').at(-1)!).summary;
      expect(summary.judge).toEqual({ graded: 4, CORRECT: 1, INCORRECT: 1, NOT_ATTEMPTED: 1, unreadable: 1, failed: 0 });

      // What the grader was sent: the template filled with question, gold and the answer in the text; temperature 0.
      // The unreadable grading (delta) was asked twice (validation.judge.unreadable_retries, 1 by default).
      expect(grader.requests).toHaveLength(5);
      const sent = grader.requests.find((q) => q.messages[0].content.includes('<<<\nbravo\n>>>'))!;
      expect(sent).toMatchObject({ model: 'grader-1', temperature: 0 });
      expect(sent.messages[0].content).toContain(ok[1]!.question);
      expect(sent.messages[0].content).toContain(ok[1]!.final_answer);
      expect(sent.messages[0].content).toContain('Verdict: CORRECT or INCORRECT or NOT_ATTEMPTED');

      // The judge's rule can be lowered like any other: INCORRECT as a warning exits 0.
      writeFileSync(join(dir, 'warn.yaml'), 'gold:\n  mode: off\nseverities:\n  gold.judge: warn\n');
      const lowered = await runCli(['validate', rowsFile, '--json', '--rules', join(dir, 'warn.yaml'), '--judge', '--config', cfg]);
      expect(lowered.code).toBe(0);
      expect(JSON.parse(lowered.stdout.split('\n')[1]!).issues).toEqual([expect.objectContaining({ rule: 'gold.judge', severity: 'warn' })]);
    } finally {
      await grader.close();
    }
  });

  it('an endpoint that refuses the grading request (401) stops the command with exit 2 and its message', async () => {
    const grader = await startGrader(() => ({ status: 401, body: { error: { message: 'Incorrect API key provided', type: 'invalid_request_error', code: 'invalid_api_key' } } }));
    try {
      const cfgDir = tempDir('tf-judge-cfg-');
      const cfg = writeConfig(cfgDir, grader.url, { endpoint: { base_url: grader.url, model: 'grader-1', api_key_env: 'none', stream: false } });
      const r = await runCli(['validate', rowsFile, '--rules', join(dir, 'rules.yaml'), '--judge', '--config', cfg]);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain('judge:');
      expect(r.stderr).toContain('Incorrect API key provided');
    } finally {
      await grader.close();
    }
  });

  it('a config with validation.judge grades at its judge (the sim), not at its endpoint (a port nothing listens on)', async () => {
    const sim = await startSim({ port: 0, seed: 2 });
    try {
      const cfgDir = tempDir('tf-judge-cfg-');
      const cfg = writeConfig(cfgDir, 'http://127.0.0.1:9/v1', { validation: { judge: { base_url: sim.url, model: 'trajforge-sim', api_key_env: 'none' } } });
      const r = await runCli(['validate', rowsFile, '--json', '--rules', join(dir, 'rules.yaml'), '--judge', '--config', cfg]);
      // Made-up golds (alpha…delta) are in no answer: the sim finds each INCORRECT.
      expect(r.code).toBe(1);
      const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
      expect(lines.slice(0, 4).map((l) => l.judge.verdict)).toEqual(['INCORRECT', 'INCORRECT', 'INCORRECT', 'INCORRECT']);
      expect(sim.stats().judgeRequests).toBe(4);
    } finally {
      await sim.close();
    }
  });

  it("against the sim as a judge: a grading it makes unreadable (judge_unreadable) is a gold.judge warning, and the exit stays 0", async () => {
    const sim = await startSim({ port: 0, seed: 2, misbehave: { judge_unreadable: 1 } });
    try {
      const cfgDir = tempDir('tf-judge-cfg-');
      const cfg = writeConfig(cfgDir, sim.url);
      // A cache of its own: the test before graded the same rows with the same model, and a cached verdict is not asked again.
      const r = await runCli(['validate', rowsFile, '--json', '--rules', join(dir, 'rules.yaml'), '--judge', '--config', cfg], { env: { TRAJFORGE_CACHE_DIR: tempDir('tf-judge-cache-') } });
      expect(r.code, r.stderr).toBe(0);
      const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
      for (const l of lines.slice(0, 4)) {
        expect(l.judge.verdict).toBeNull();
        expect(l.issues).toEqual([expect.objectContaining({ rule: 'gold.judge', severity: 'warn', message: expect.stringContaining('names no verdict') })]);
      }
      expect(JSON.parse(r.stderr.trim().split('\n').at(-1)!).summary.judge).toMatchObject({ graded: 4, unreadable: 4 });
    } finally {
      await sim.close();
    }
  });
});
