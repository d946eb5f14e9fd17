/**
 * The validator's rules, one at a time: on a trajectory from a real run (sim + corpus server),
 * on tampered copies of it where exactly one rule must fire, and on rows other systems wrote.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { SCHEMA_VERSION, Trajectory } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { tulu } from '../../pipeline/dialects/tulu.js';
import { generate } from '../../pipeline/generate/run.js';
import { goldMatches, normalizeAnswer, validateTrajectory, type ValidateOptions } from '../../pipeline/core/validator.js';
import { startSim } from '../../sim/server.js';
import { FIXTURES, readJsonl, tempDir, writeConfig } from '../helpers.js';

const LIMITS = { pubmed_search: 5 };
const opts = (more: Partial<ValidateOptions> = {}): ValidateOptions => ({ dialect: tulu, limits: LIMITS, goldMatch: 'contains', ...more });
const rules = (t: Trajectory, o: ValidateOptions = opts()): string[] => [...new Set(validateTrajectory(t, o).issues.map((i) => i.rule))].sort();
const copy = (t: Trajectory, patch: Partial<Trajectory> = {}): Trajectory => ({ ...structuredClone(t), ...patch });

describe('validateTrajectory on a trajectory from a real run', () => {
  let good: Trajectory;

  beforeAll(async () => {
    const sim = await startSim({ port: 0, seed: 3 });
    try {
      const dir = tempDir('tf-val-');
      const config = loadConfig(writeConfig(dir, sim.url, { tools: { aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' } }, limits: LIMITS } }), { limit: 3 });
      await generate({ config });
      const ok = readJsonl(join(config.output.dir, 'trajectories.jsonl')).map((r) => Trajectory.parse(r));
      // The richest accepted one: at least two tool outputs and a citation, so every rule has something to check.
      const pick = ok.find((t) => t.tool_calls.length >= 2 && t.cited_ids.length > 0 && t.gold_answer !== undefined);
      if (!pick) throw new Error(`no accepted trajectory with 2+ calls and a citation among ${ok.length}`);
      good = pick;
    } finally {
      await sim.close();
    }
  });

  it('passes every rule as written, and the inline validation agrees', () => {
    const v = validateTrajectory(good, opts());
    expect(v).toEqual({ passed: true, issues: [] });
    expect(good.validation).toEqual(v);
  });

  it('one character changed inside a tool output → structure.output_mismatch, on that call', () => {
    const rec = good.tool_calls[1]!;
    // The second <tool_output> in the text (two searches can return the very same output text).
    const at = good.interleaved_text.indexOf('<tool_output>', good.interleaved_text.indexOf('<tool_output>') + 1);
    expect(good.interleaved_text.startsWith(rec.output_text, at)).toBe(true);
    // A letter in the header ("Found N results"), far from any tag.
    const inOutput = rec.output_text.indexOf('Found');
    expect(inOutput).toBeGreaterThan(0);
    const pos = at + inOutput;
    const text = good.interleaved_text.slice(0, pos) + 'B' + good.interleaved_text.slice(pos + 1);
    const v = validateTrajectory(copy(good, { interleaved_text: text }), opts());
    expect(v.passed).toBe(false);
    expect(v.issues.map((i) => [i.rule, i.call_index])).toEqual([['structure.output_mismatch', 1]]);
  });

  it('a <tool_output> the model wrote before the answer → structure.output_without_call and structure.output_count', () => {
    const at = good.interleaved_text.lastIndexOf('<answer>');
    const text = `${good.interleaved_text.slice(0, at)}<tool_output>x</tool_output>\n${good.interleaved_text.slice(at)}`;
    expect(rules(copy(good, { interleaved_text: text }))).toEqual(['structure.output_count', 'structure.output_without_call']);
  });

  it('a cited id that no tool output showed → citations.unresolved, naming the id', () => {
    const text = good.interleaved_text.replace(/<\/answer>\s*$/, ' <cite id="never-shown-42">made up</cite></answer>');
    expect(text).not.toBe(good.interleaved_text);
    const v = validateTrajectory(copy(good, { interleaved_text: text }), opts());
    expect(v.issues.map((i) => i.rule)).toEqual(['citations.unresolved']);
    expect(v.issues[0]!.message).toContain('never-shown-42');
    // The ids that were shown are not reported.
    for (const id of good.cited_ids) expect(v.issues[0]!.message).not.toContain(id);
  });

  it('</answer> removed → answer.unclosed', () => {
    const text = good.interleaved_text.replace(/<\/answer>\s*$/, '');
    expect(text).not.toBe(good.interleaved_text);
    expect(rules(copy(good, { interleaved_text: text }))).toEqual(['answer.unclosed']);
  });

  it('no answer at all → answer.missing', () => {
    const text = good.interleaved_text.slice(0, good.interleaved_text.lastIndexOf('<answer>'));
    expect(rules(copy(good, { interleaved_text: text, final_answer: '' }))).toEqual(['answer.missing']);
  });

  it('a gold answer the final answer does not contain → gold.mismatch; warn keeps it, off drops it', () => {
    const wrong = copy(good, { gold_answer: 'quetzalcoatl 9999' });
    const v = validateTrajectory(wrong, opts());
    expect(v.passed).toBe(false);
    expect(v.issues.map((i) => [i.rule, i.severity])).toEqual([['gold.mismatch', 'error']]);

    const warned = validateTrajectory(wrong, opts({ severities: { 'gold.mismatch': 'warn' } }));
    expect(warned.passed).toBe(true);
    expect(warned.issues.map((i) => [i.rule, i.severity])).toEqual([['gold.mismatch', 'warn']]);

    expect(validateTrajectory(wrong, opts({ severities: { 'gold.mismatch': 'off' } }))).toEqual({ passed: true, issues: [] });
    expect(validateTrajectory(wrong, opts({ goldMatch: 'off' }))).toEqual({ passed: true, issues: [] });
  });

  it('tools.over_limit counts the calls that ran: a lower limit fires, a refused (skipped) call does not count', () => {
    const n = good.tool_calls.length;
    expect(rules(good, opts({ limits: { pubmed_search: n - 1 } }))).toEqual(['tools.over_limit']);
    const refusedLast = copy(good);
    refusedLast.tool_calls[n - 1]!.skipped = true;
    expect(rules(refusedLast, opts({ limits: { pubmed_search: n - 1 } }))).toEqual([]);
  });

  it('a severity override applies to structure rules too: warn keeps the trajectory, flagged', () => {
    const text = good.interleaved_text.replace(/<\/answer>\s*$/, '');
    const v = validateTrajectory(copy(good, { interleaved_text: text }), opts({ severities: { 'answer.unclosed': 'warn' } }));
    expect(v).toEqual({ passed: true, issues: [expect.objectContaining({ rule: 'answer.unclosed', severity: 'warn' })] });
  });
});

describe('goldMatches and normalizeAnswer', () => {
  it('normalises case, punctuation, articles, tags and whitespace (SQuAD style)', () => {
    expect(normalizeAnswer('  The   Quick, brown FOX! ')).toEqual(['quick', 'brown', 'fox']);
    expect(normalizeAnswer('An apple and a pear')).toEqual(['apple', 'and', 'pear']);
    expect(normalizeAnswer('<cite id="x1">Chrome 52</cite>.')).toEqual(['chrome', '52']);
    expect(normalizeAnswer('ＣＨＲＯＭＥ')).toEqual(['chrome']); // NFKC: full-width letters
  });

  it('contains: the gold must appear as whole tokens, not inside a longer number', () => {
    expect(goldMatches('It shipped in version 52, in 2016.', '52', 'contains')).toBe(true);
    expect(goldMatches('It shipped in version 521.', '52', 'contains')).toBe(false);
    expect(goldMatches('It shipped in version 152.', '52', 'contains')).toBe(false);
    expect(goldMatches('Firefox 52 shipped it', 'firefox 52', 'contains')).toBe(true);
    // A contiguous run: the same tokens apart do not count.
    expect(goldMatches('Firefox shipped it in 52', 'Firefox 52', 'contains')).toBe(false);
  });

  it('exact: the whole normalised answer must equal the gold', () => {
    expect(goldMatches('The answer.', 'answer', 'exact')).toBe(true);
    expect(goldMatches('  52 ', '52', 'exact')).toBe(true);
    expect(goldMatches('version 52', '52', 'exact')).toBe(false);
    expect(goldMatches('version 52', '52', 'contains')).toBe(true);
  });

  it('an empty gold (nothing left after normalising) matches anything', () => {
    expect(goldMatches('whatever', 'the', 'exact')).toBe(true);
  });

  it('keeps a decimal point between digits: gold "3.5" is Firefox 3.5, not Firefox 35 (the question bank is full of such versions)', () => {
    expect(normalizeAnswer('Firefox 3.5.')).toEqual(['firefox', '3.5']);
    expect(goldMatches('It was first supported in Firefox 3.5.', '3.5', 'contains')).toBe(true);
    expect(goldMatches('It was first supported in Firefox 35.', '3.5', 'contains')).toBe(false);
    expect(goldMatches('Chrome 122 added it', '12.2', 'contains')).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------
// Rows written by another generator (see ../shared/fixtures/README.md)

interface FixtureRow {
  sample_id?: string;
  question: string;
  trajectory: { interleaved_text: string; final_answer?: string; tool_calls: unknown[]; total_tool_calls: number; pmids_cited: string[] };
}

const fixtureRows: FixtureRow[] = readFileSync(join(FIXTURES, 'drtulu-generator-rows.jsonl'), 'utf8')
  .split('\n')
  .filter((l) => l.trim() !== '')
  .map((l) => JSON.parse(l));

/** A Trajectory around a foreign row's text. It has no ToolCallRecords, so the record rules are turned off. */
function fromRow(row: FixtureRow, i: number): Trajectory {
  return {
    schema_version: SCHEMA_VERSION,
    id: row.sample_id ?? `row-${i}`,
    question_id: row.sample_id ?? `row-${i}`,
    question: row.question,
    dialect: 'tulu',
    model: 'unknown',
    status: 'ok',
    final_answer: row.trajectory.final_answer ?? '',
    interleaved_text: row.trajectory.interleaved_text,
    messages: [],
    tool_calls: [],
    total_tool_calls: 0,
    tools_used: [],
    cited_ids: [],
    unresolved_cited_ids: [],
    turns: 0,
    repairs: [],
    rollbacks: [],
    validation: { passed: true, issues: [] },
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: 0, estimated: false },
    timing: { started_at: '', finished_at: '', duration_ms: 0, llm_ms: 0, tool_ms: 0 },
    attempt: 0,
    run_id: 'fixture',
  };
}
const textOnly = opts({
  limits: undefined,
  goldMatch: 'off',
  severities: { 'structure.output_count': 'off', 'structure.output_mismatch': 'off', 'tools.over_limit': 'off' },
});
/** The rules these rows exercise; other rules (warnings about record fields) are not this suite's subject. */
const TEXT_RULES = new Set(['answer.missing', 'answer.unclosed', 'structure.output_without_call', 'structure.call_without_output', 'citations.unresolved']);
const textRules = (issues: readonly { rule: string }[]): string[] => issues.map((i) => i.rule).filter((r) => TEXT_RULES.has(r));
const occurrences = (s: string, needle: string): number => s.split(needle).length - 1;

describe('validateTrajectory on DR Tulu generator rows (text-only rules)', () => {
  it('has the four rows the fixture README describes', () => {
    expect(fixtureRows).toHaveLength(4);
  });

  it('row 1 (an ordinary GPT trajectory, Error: None output included) and row 4 (DR-Tulu-8B with <think>) pass the structure, answer and citation rules', () => {
    for (const i of [0, 3]) {
      const v = validateTrajectory(fromRow(fixtureRows[i]!, i), textOnly);
      expect(v.passed, `row ${i + 1}: ${JSON.stringify(v.issues)}`).toBe(true);
      expect(textRules(v.issues), `row ${i + 1}`).toEqual([]);
    }
  });

  it('row 2 gets structure.output_without_call for each tool output the model invented (6 outputs for 3 calls), and answer.missing', () => {
    const row = fixtureRows[1]!;
    const text = row.trajectory.interleaved_text;
    // Counted from the row itself: what the generator ran, and what the text holds.
    const ran = row.trajectory.tool_calls.length;
    const outputs = occurrences(text, '<tool_output>');
    expect([ran, outputs]).toEqual([3, 6]);
    const v = validateTrajectory(fromRow(row, 1), textOnly);
    expect(v.passed).toBe(false);
    const invented = v.issues.filter((i) => i.rule === 'structure.output_without_call');
    expect(invented).toHaveLength(outputs - ran);
    // The invented ones are the trailing outputs, each at its own offset in the text.
    for (const issue of invented) expect(text.startsWith('<tool_output>', issue.offset!)).toBe(true);
    expect(textRules(v.issues).filter((r) => r !== 'structure.output_without_call')).toEqual(['answer.missing']);
  });

  it('row 3 gets structure.call_without_output (3 unclosed calls that never ran) and citations.unresolved (it cites ids no output showed)', () => {
    const row = fixtureRows[2]!;
    const text = row.trajectory.interleaved_text;
    expect(row.trajectory.tool_calls).toHaveLength(0);
    expect(occurrences(text, '<tool_output')).toBe(0);
    const calls = occurrences(text, '<call_tool');
    expect(calls).toBe(3);
    const v = validateTrajectory(fromRow(row, 2), textOnly);
    expect(v.passed).toBe(false);
    expect(v.issues.filter((i) => i.rule === 'structure.call_without_output').map((i) => i.call_index)).toEqual([0, 1, 2]);
    const unresolved = v.issues.filter((i) => i.rule === 'citations.unresolved');
    expect(unresolved).toHaveLength(1);
    // Every id the generator recorded as cited is reported: none was ever shown.
    for (const id of row.trajectory.pmids_cited) expect(unresolved[0]!.message).toContain(id);
    expect(textRules(v.issues).sort()).toEqual([...Array(calls).fill('structure.call_without_output'), 'citations.unresolved'].sort());
  });
});
