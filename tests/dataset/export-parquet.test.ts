/**
 * `export --out FILE.parquet`: every row format written as Parquet and read back by a real
 * reader, DuckDB (@duckdb/node-api), with the same rows as the JSONL export (nested columns
 * as nested Parquet types: `messages` list<struct>, `input_ids` list<int64>); the dataset
 * card beside it in Hugging Face's form; and what happens to files already there.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { typeOf, widen } from '../../pipeline/dataset/formats/parquet-schema.js';
import { writeParquet } from '../../pipeline/dataset/formats/parquet-file.js';
import { main } from '../../pipeline/cli/main.js';
import { QWEN3, readJsonl, runCli, tempDir } from '../helpers.js';
import { formatRuns, type FormatRun } from './dialect-runs.js';

let runs: FormatRun[];
let db: DuckDBInstance;
let conn: DuckDBConnection;

beforeAll(async () => {
  runs = await formatRuns(8);
  db = await DuckDBInstance.create(':memory:');
  conn = await db.connect();
}, 300_000);

afterAll(() => {
  conn?.closeSync();
});

/** DuckDB's rows as plain JSON values: BIGINT as numbers, JSON columns parsed. */
async function readParquet(file: string): Promise<{ rows: Record<string, unknown>[]; types: Record<string, string> }> {
  const described = await conn.runAndReadAll(`describe select * from read_parquet('${file.replace(/'/g, "''")}')`);
  const types = Object.fromEntries(described.getRowObjectsJS().map((r) => [String(r.column_name), String(r.column_type)]));
  const reader = await conn.runAndReadAll(`select * from read_parquet('${file.replace(/'/g, "''")}')`);
  const plain = (v: unknown, type?: string): unknown => {
    if (typeof v === 'bigint') return Number(v);
    if (type === 'JSON' && typeof v === 'string') return JSON.parse(v);
    if (Array.isArray(v)) return v.map((x) => plain(x));
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
    return v;
  };
  return { rows: reader.getRowObjectsJS().map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, plain(v, types[k])]))), types };
}

/** A row with every null or absent field removed (Parquet has no "absent": a missing struct field reads back as null). */
function withoutNulls(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(withoutNulls);
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).filter(([, x]) => x !== null && x !== undefined).map(([k, x]) => [k, withoutNulls(x)]));
  return v;
}

/** Nested JSON columns come back as text inside structs: parse the ones the JSONL holds as objects. */
function parseJsonText(read: unknown, like: unknown): unknown {
  if (typeof read === 'string' && like !== null && typeof like === 'object') return JSON.parse(read);
  if (Array.isArray(read) && Array.isArray(like)) return read.map((x, i) => parseJsonText(x, like[i]));
  if (read !== null && typeof read === 'object' && like !== null && typeof like === 'object') return Object.fromEntries(Object.entries(read).map(([k, x]) => [k, parseJsonText(x, (like as Record<string, unknown>)[k])]));
  return read;
}

async function readBack(file: string): Promise<{ parquet: Record<string, unknown>[]; types: Record<string, string> }> {
  const { rows, types } = await readParquet(file);
  return { parquet: rows, types };
}

async function exportBoth(input: string, format: string, extra: string[] = [], parquetOnly: string[] = []): Promise<{ dir: string; jsonl: Record<string, unknown>[]; parquet: Record<string, unknown>[]; types: Record<string, string> }> {
  const dir = tempDir('tf-parquet-');
  // In this process (a CLI process per export is seconds on a busy machine); the CLI's own paths are the card tests'.
  expect(await main(['export', input, '--format', format, '--out', join(dir, 'rows.jsonl'), ...extra])).toBe(0);
  expect(await main(['export', input, '--format', format, '--out', join(dir, `${format}.parquet`), ...extra, ...parquetOnly])).toBe(0);
  const { rows, types } = await readParquet(join(dir, `${format}.parquet`));
  return { dir, jsonl: readJsonl(join(dir, 'rows.jsonl')), parquet: rows, types };
}

function expectSameRows(jsonl: Record<string, unknown>[], parquet: Record<string, unknown>[], label: string): void {
  expect(parquet.length, label).toBe(jsonl.length);
  jsonl.forEach((row, i) => expect(withoutNulls(parseJsonText(parquet[i], row)), `${label} row ${i}`).toEqual(withoutNulls(row)));
}

describe('Parquet reads back with the same rows', () => {
  it.each(['messages', 'sharegpt', 'text', 'adp', 'atif'])('%s: every run, every row, read by DuckDB', async (format) => {
    for (const run of runs) {
      const { jsonl, parquet } = await exportBoth(run.dir, format);
      expect(jsonl.length, run.name).toBeGreaterThan(0);
      expectSameRows(jsonl, parquet, `${format} ${run.name}`);
    }
  }, 120_000);

  it('nested columns are nested Parquet types, not JSON text: messages list<struct>, tool_calls inside, metadata a struct', async () => {
    const native = runs.find((r) => r.name === 'native')!;
    const { types } = await exportBoth(native.dir, 'messages');
    expect(types.messages).toMatch(/^STRUCT\(.*"?role"? VARCHAR.*content"? VARCHAR.*train BOOLEAN.*tool_calls STRUCT\(id VARCHAR, "?type"? VARCHAR, "?function"? STRUCT\("?name"? VARCHAR, arguments VARCHAR\)\)\[\].*\)\[\]$/);
    expect(types.tokens).toBe('BIGINT');
    expect(types.tools).toBe('JSON');
    const mv = runs.find((r) => r.name === 'miroverse')!;
    expect((await exportBoth(mv.dir, 'sharegpt')).types.metadata).toMatch(/^STRUCT\(agent VARCHAR, parent_id VARCHAR/);
  });

  it('tokens (Qwen3): input_ids and labels as list<int64>, the same ids', async () => {
    const tulu = runs.find((r) => r.name === 'tulu')!;
    const { jsonl, parquet, types } = await exportBoth(tulu.dir, 'tokens', ['--tokenizer', QWEN3]);
    expect(types.input_ids).toBe('BIGINT[]');
    expect(types.labels).toBe('BIGINT[]');
    expectSameRows(jsonl, parquet, 'tokens');
  }, 120_000);

  it('dpo pairs too', async () => {
    const native = runs.find((r) => r.name === 'native')!;
    const a = native.ok[0]!;
    const chosen = { ...a, judgement: { verdict: 'correct' } };
    const wrong = a.messages.map((m, i) => (i === a.messages.length - 1 ? { ...m, content: 'It was version 1.' } : m));
    const rejected = { ...a, id: `${a.question_id}#9`, messages: wrong, final_answer: 'It was version 1.', status: 'failed', reason: 'wrong_answer', judgement: { verdict: 'incorrect' } };
    const file = join(tempDir('tf-parquet-dpo-'), 'judged.jsonl');
    writeFileSync(file, [chosen, rejected].map((r) => JSON.stringify(r)).join('\n') + '\n');
    const { jsonl, parquet } = await exportBoth(file, 'dpo');
    expect(jsonl.length).toBe(1);
    expectSameRows(jsonl, parquet, 'dpo');
  }, 60_000);
});

describe('the dataset card', () => {
  it('README.md in Hugging Face form: configs, features of the file, license, tags; version, fingerprint and counts in the body', async () => {
    const mv = runs.find((r) => r.name === 'miroverse')!;
    const { dir, types } = await exportBoth(mv.dir, 'messages', [], ['--license', 'apache-2.0']);
    const text = readFileSync(join(dir, 'README.md'), 'utf8');
    const m = /^---\n([\s\S]*?)\n---\n([\s\S]*)$/.exec(text)!;
    const header = parse(m[1]!);
    expect(header.license).toBe('apache-2.0');
    expect(header.tags).toEqual(expect.arrayContaining(['trajforge', 'messages']));
    expect(header.configs).toEqual([{ config_name: 'messages', data_files: [{ split: 'train', path: 'messages.parquet' }] }]);
    const info = header.dataset_info[0];
    expect(info.features.map((f: { name: string }) => f.name)).toEqual(Object.keys(types));
    expect(info.features.find((f: { name: string }) => f.name === 'messages').list.map((f: { name: string }) => f.name)).toEqual(expect.arrayContaining(['role', 'content', 'train']));
    expect(info.features.find((f: { name: string }) => f.name === 'tokens')).toEqual({ name: 'tokens', dtype: 'int64' });
    expect(info.splits[0].num_examples).toBe(mv.ok.length);
    const manifest = JSON.parse(readFileSync(join(mv.dir, 'manifest.json'), 'utf8'));
    expect(m[2]).toContain(`config fingerprint \`${manifest.config_fingerprint}\``);
    expect(m[2]).toContain(`trajforge ${manifest.trajforge_version}`);
    expect(m[2]).toContain(`${mv.ok.length} rows`);
    expect(m[2]).toMatch(/sessions by agent: (main|browsing) \d+/);
  });

  it('messages split by the trainee\'s chat template: the rows read back, and the card counts each session once', async () => {
    const mv = runs.find((r) => r.name === 'miroverse')!;
    const { dir, jsonl, parquet } = await exportBoth(mv.dir, 'messages', ['--tokenizer', QWEN3]);
    expect(jsonl.length).toBeGreaterThan(mv.ok.length);
    expectSameRows(jsonl, parquet, 'messages split');
    const body = readFileSync(join(dir, 'README.md'), 'utf8');
    for (const agent of ['main', 'browsing']) {
      const sessions = mv.ok.filter((t) => t.agent === agent).length;
      if (sessions > 0) expect(body).toMatch(new RegExp(`sessions by agent: .*\\b${agent} ${sessions}\\b`));
    }
  });

  it('a second export into the folder adds its config; exporting again replaces only its own', async () => {
    const native = runs.find((r) => r.name === 'native')!;
    const dir = tempDir('tf-parquet-card-');
    for (const [format, file] of [['messages', 'a.parquet'], ['sharegpt', 'b.parquet'], ['text', 'a.parquet']]) {
      const r = await runCli(['export', native.dir, '--format', format!, '--out', join(dir, file!)]);
      expect(r.code, r.stderr).toBe(0);
    }
    const text = readFileSync(join(dir, 'README.md'), 'utf8');
    const header = parse(/^---\n([\s\S]*?)\n---/.exec(text)![1]!);
    expect(header.configs.map((c: { config_name: string }) => c.config_name)).toEqual(['a', 'b']);
    expect(header.dataset_info.find((c: { config_name: string }) => c.config_name === 'a').features.map((f: { name: string }) => f.name)).toContain('mask_spans');
    expect(text.match(/<!-- trajforge:config a -->/g)).toHaveLength(1);
    expect(text).toContain('as `--format text`');
    expect(text).not.toContain('as `--format messages`');
  });

  it('a README.md trajforge did not write is never overwritten: exit 2 before anything is written; --card none writes none', async () => {
    const native = runs.find((r) => r.name === 'native')!;
    const dir = tempDir('tf-parquet-own-');
    writeFileSync(join(dir, 'README.md'), '# my dataset\n');
    const r = await runCli(['export', native.dir, '--format', 'messages', '--out', join(dir, 'train.parquet')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/README\.md exists and trajforge did not write it; .*--card/);
    expect(readFileSync(join(dir, 'README.md'), 'utf8')).toBe('# my dataset\n');
    expect(readdirSync(dir)).toEqual(['README.md']);
    const none = await runCli(['export', native.dir, '--format', 'messages', '--out', join(dir, 'train.parquet'), '--card', 'none']);
    expect(none.code, none.stderr).toBe(0);
    expect(readdirSync(dir).sort()).toEqual(['README.md', 'train.parquet']);
    const jsonl = await runCli(['export', native.dir, '--format', 'messages', '--out', join(dir, 'x.jsonl'), '--card', 'c.md']);
    expect(jsonl.code).toBe(2);
    expect(jsonl.stderr).toContain('--card is for a Parquet --out');
  });

  it('a failed export leaves the Parquet file that was there, and no temporary file', async () => {
    const native = runs.find((r) => r.name === 'native')!;
    const dir = tempDir('tf-parquet-fail-');
    const out = join(dir, 'train.parquet');
    expect((await runCli(['export', native.dir, '--format', 'messages', '--out', out])).code).toBe(0);
    const before = readFileSync(out);
    const bad = join(dir, 'bad.jsonl');
    writeFileSync(bad, `${JSON.stringify({ ...native.ok[0], id: 'b', dialect: 'native', messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }, { role: 'assistant', content: 'b' }] })}\n`);
    const r = await runCli(['export', bad, '--format', 'sharegpt', '--input-format', 'trajforge', '--out', out]);
    expect(r.code).toBe(2);
    expect(readFileSync(out).equals(before)).toBe(true);
    expect(readdirSync(dir).sort()).toEqual(['README.md', 'bad.jsonl', 'train.parquet']);
    expect(existsSync(join(dir, 'README.md'))).toBe(true);
  });
});

describe('column types', () => {
  it('rows that disagree widen the type: int and float to float, a string and an object to JSON text, absent to optional', () => {
    let t = typeOf({ a: 1, b: 'x', c: [1, 2] });
    t = widen(t, typeOf({ a: 1.5, b: { k: 1 }, d: true }));
    expect(t).toEqual({
      kind: 'struct',
      fields: new Map<string, unknown>([
        ['a', { kind: 'float' }],
        ['b', { kind: 'json' }],
        ['c', { kind: 'list', of: { kind: 'int' } }],
        ['d', { kind: 'bool' }],
      ]),
    });
  });

  it('a field whose type changes from row to row round-trips through a JSON column; nested lists and empty ones too', async () => {
    const dir = tempDir('tf-parquet-mixed-');
    const rows = [
      { id: 'a', v: 'text', spans: [[1, 2], [3, 4]], s: { x: 1 } },
      { id: 'b', v: { k: [1, 'two'] }, spans: [], s: { y: 'z' } },
      { id: 'c', v: null, s: null },
    ];
    writeFileSync(join(dir, 'rows.jsonl'), rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const result = await writeParquet(join(dir, 'rows.jsonl'), join(dir, 'rows.parquet'), { trajforge_version: 'test' });
    expect(result.rows).toBe(3);
    const { parquet, types } = await readBack(join(dir, 'rows.parquet'));
    expect(types).toEqual({ id: 'VARCHAR', v: 'JSON', spans: 'BIGINT[][]', s: 'STRUCT(x BIGINT, y VARCHAR)' });
    expectSameRows(rows, parquet, 'mixed');
  });
});
