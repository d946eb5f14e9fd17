/**
 * dedup and decontaminate on question banks: every form the sampler reads (JSONL, a JSON array,
 * CSV, TSV, gzip), cleaned into a bank of the same rows, which `generate` then runs on; bad
 * banks and outputs refused with the file and line.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { beforeAll, describe, expect, it } from 'vitest';
import { ContaminationFlag } from '../../schemas/index.js';
import { QUESTIONS, readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';
import { trajRow, writeRows } from '../curate-fixtures.js';

const dir = tempDir('tf-bank-');
const BANK = readJsonl(QUESTIONS);
/** Ten questions again, under new ids, reworded only in case, punctuation and spacing. */
const COPIES = BANK.slice(0, 100).filter((_, i) => i % 10 === 3).map((r, i) => ({ ...r, id: `copy-${i}`, question: `  ${r.question.toUpperCase().replace(/\?$/, ' ?!')}` }));
// Each copy after its source: the first of a cluster is kept.
const DIRTY = [...BANK.slice(0, 100), ...COPIES, ...BANK.slice(100)];

function csvCell(v: unknown, sep: string): string {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s.includes(sep) || s.includes('"') || s.includes('\n') ? `"${s.replace(/"/g, '""')}"` : s;
}

/** The dirty bank in each form the sampler reads, answers and ids as their own columns. */
function writeForms(): Record<string, string> {
  const jsonl = DIRTY.map((r) => JSON.stringify(r)).join('\n') + '\n';
  const table = (sep: string): string => ['id', 'question', 'answer'].join(sep) + '\n' + DIRTY.map((r) => [r.id, r.question, r.answer].map((v) => csvCell(v, sep)).join(sep)).join('\n') + '\n';
  const files: Record<string, string> = {
    jsonl: join(dir, 'bank.jsonl'),
    json: join(dir, 'bank.json'),
    csv: join(dir, 'bank.csv'),
    tsv: join(dir, 'bank.tsv'),
    gz: join(dir, 'bank.jsonl.gz'),
  };
  writeFileSync(files.jsonl!, jsonl);
  writeFileSync(files.json!, JSON.stringify(DIRTY, null, 1));
  writeFileSync(files.csv!, table(','));
  writeFileSync(files.tsv!, table('\t'));
  writeFileSync(files.gz!, gzipSync(jsonl));
  return files;
}

describe('trajforge dedup on a question bank', () => {
  let forms: Record<string, string>;
  beforeAll(() => {
    forms = writeForms();
  });

  it('reads the bundled bank as it is (it failed with "unknown row shape") and keeps all 255 distinct questions, each row unchanged', async () => {
    const out = join(dir, 'bundled.jsonl');
    const r = await runCli(['dedup', QUESTIONS, '--out', out, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ rows: 255, kept: 255, dropped: 0 });
    expect(readJsonl(out)).toEqual(BANK);
  });

  it.each(['jsonl', 'json', 'csv', 'tsv', 'gz'])('drops the ten copies from the %s form, keeping every source row as it was read', async (form) => {
    const out = join(dir, `kept-${form}.jsonl`);
    const rejects = join(dir, `dropped-${form}.jsonl`);
    const r = await runCli(['dedup', forms[form]!, '--out', out, '--rejects', rejects, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ rows: 265, kept: 255, dropped: 10, clusters: 10 });
    const tabular = form === 'csv' || form === 'tsv';
    // A CSV record is the object of its header's fields: every cell a string.
    const shape = (r: Record<string, any>) => (tabular ? { id: r.id, question: r.question, answer: String(r.answer) } : r);
    expect(readJsonl(out)).toEqual(BANK.map(shape));
    expect(readJsonl(rejects)).toEqual(COPIES.map(shape));
  });

  it('writes a bank that generate runs on as it is', async () => {
    const { startSim } = await import('../../sim/server.js');
    const sim = await startSim({ port: 0, seed: 5 });
    try {
      const kept = join(dir, 'kept-csv.jsonl');
      const runDir = tempDir('tf-bank-run-');
      const cfg = writeConfig(runDir, sim.url, { questions: { path: kept }, budgets: { max_turns: 3, max_tool_calls: 2 } });
      const r = await runCli(['generate', '--config', cfg, '--limit', '4', '--seed', '1'], { timeoutMs: 120_000 });
      expect(r.code, r.stderr).toBe(0);
      const ids = new Set(readJsonl(kept).map((q) => q.id));
      const rows = [...readJsonl(join(runDir, 'run', 'trajectories.jsonl')), ...(existsSync(join(runDir, 'run', 'failures.jsonl')) ? readJsonl(join(runDir, 'run', 'failures.jsonl')) : [])];
      expect(rows.length).toBeGreaterThanOrEqual(4);
      for (const t of rows) expect(ids.has(t.question_id), t.question_id).toBe(true);
    } finally {
      await sim.close();
    }
  }, 180_000);
});

describe('trajforge decontaminate on a question bank', () => {
  it('drops the questions an eval set holds and writes the rest as read, the flags in the report', async () => {
    const evalFile = join(dir, 'held-out.txt');
    const held = [BANK[7]!, BANK[100]!, BANK[200]!];
    writeFileSync(evalFile, held.map((r) => `${r.question}\n`).join(''));
    const out = join(dir, 'clean.jsonl');
    const report = join(dir, 'flagged.jsonl');
    const r = await runCli(['decontaminate', join(dir, 'bank.csv'), '--against', evalFile, '--drop', '--out', out, '--report', report, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ rows: 265, flagged: 3, clean: 262 });
    const clean = readJsonl(out);
    expect(clean.map((q) => q.id)).toEqual(DIRTY.map((q) => q.id).filter((id) => !held.some((h) => h.id === id)));
    expect(clean.every((q) => Object.keys(q).join() === 'id,question,answer')).toBe(true);
    expect(readJsonl(report).map((f) => ContaminationFlag.parse(f).id)).toEqual(held.map((h) => h.id));
  });

  it('reads a bank from stdin with --input-format bank', async () => {
    const evalFile = join(dir, 'one.txt');
    writeFileSync(evalFile, `${BANK[3]!.question}\n`);
    const out = join(dir, 'stdin-clean.jsonl');
    const { spawnSync } = await import('node:child_process');
    const { CLI } = await import('../helpers.js');
    const r = spawnSync(process.execPath, [CLI, 'decontaminate', '-', '--input-format', 'bank', '--against', evalFile, '--drop', '--out', out], { input: readFileSync(QUESTIONS) });
    expect(r.status, String(r.stderr)).toBe(0);
    expect(readJsonl(out).map((q) => q.id)).toEqual(BANK.filter((_, i) => i !== 3).map((q) => q.id));
  });
});

describe('question banks: bad input and usage', () => {
  const traj = writeRows(join(dir, 'traj.jsonl'), [trajRow({ id: 'a', question: 'What is the capital of France?' })]);

  it.each([
    [['dedup', QUESTIONS, traj, '--out', join(dir, 'o.jsonl')], /is a question bank and .*traj\.jsonl is not/],
    [['dedup', QUESTIONS, '--out', join(dir, 'o.csv')], /--out .*o\.csv: a cleaned bank is written as JSON Lines/],
    [['dedup', QUESTIONS, '--out', join(dir, 'o.jsonl'), '--by', 'answer'], /--by answer compares final answers, and a question bank has none/],
    [['decontaminate', QUESTIONS, '--against', QUESTIONS, '--drop', '--out', join(dir, 'o.jsonl'), '--rejects', join(dir, 'o.gz')], /--rejects .*o\.gz: a cleaned bank/],
  ])('%j exits 2: %s', async (args, message) => {
    const r = await runCli(args);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.code).toBe(2);
    expect(existsSync(join(dir, 'o.jsonl'))).toBe(false);
  });

  it('names the file, line and field of a bad bank row, or counts it with --on-bad-row skip', async () => {
    const input = join(dir, 'bad-bank.jsonl');
    writeFileSync(input, `{"id":"a","question":"Q one?"}\n{"id":"b","question":7}\n{"id":"c","question":"Q one?"}\n`);
    const strict = await runCli(['dedup', input, '--out', join(dir, 'bad-o1.jsonl')]);
    expect(strict.code).toBe(2);
    expect(strict.stderr).toContain(`${input}:2: question: expected a string, got number`);
    expect(existsSync(join(dir, 'bad-o1.jsonl'))).toBe(false);
    const skip = await runCli(['dedup', input, '--out', join(dir, 'bad-o2.jsonl'), '--on-bad-row', 'skip', '--json']);
    expect(skip.code, skip.stderr).toBe(0);
    expect(JSON.parse(skip.stdout)).toMatchObject({ rows: 2, bad: 1, kept: 1, dropped: 1 });
    expect(readJsonl(join(dir, 'bad-o2.jsonl'))).toEqual([{ id: 'a', question: 'Q one?' }]);
  });
});
