import { appendFileSync, existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SCHEMA_VERSION, type RunManifest, type Trajectory } from '../schemas/index.js';
import { TrajforgeError } from '../pipeline/errors.js';
import { FAILURES, MANIFEST, RunStore, TRAJECTORIES } from '../pipeline/generate/store.js';
import { repairTail } from '../pipeline/generate/run-lines.js';

const fields = { 'endpoint.model': 'm', dialect: 'tulu' };
function manifest(): RunManifest {
  const now = new Date().toISOString();
  return {
    schema_version: SCHEMA_VERSION,
    run_id: 'r1',
    created_at: now,
    updated_at: now,
    status: 'running',
    trajforge_version: '0',
    node_version: process.version,
    model: 'm',
    dialect: 'tulu',
    config: {},
    config_fingerprint: 'f',
    fingerprint_fields: fields,
    questions: { path: null, total: null },
    counts: { accepted: 0, failed: 0, by_reason: {} },
    sessions: [],
  };
}
function traj(id: string, status: 'ok' | 'failed', attempt = 0): Trajectory {
  const now = new Date().toISOString();
  return {
    schema_version: SCHEMA_VERSION,
    id,
    question_id: id,
    question: 'q',
    dialect: 'tulu',
    model: 'm',
    status,
    ...(status === 'failed' ? { reason: 'max_turns' as const } : {}),
    final_answer: '',
    interleaved_text: '',
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
    timing: { started_at: now, finished_at: now, duration_ms: 0, llm_ms: 0, tool_ms: 0 },
    attempt,
    run_id: 'r1',
  };
}
const open = (dir: string, f: Record<string, unknown> = fields) => RunStore.open({ dir, fresh: manifest, fingerprintFields: f });

describe('run store', () => {
  it('accepts an id at most once and keeps failures apart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-'));
    const s = await open(dir);
    expect(await s.append(traj('a', 'ok'))).toBe(true);
    expect(await s.append(traj('a', 'ok'))).toBe(false);
    expect(await s.append(traj('b', 'failed'))).toBe(true);
    await s.close('completed', 'completed');
    const ok = readFileSync(join(dir, TRAJECTORIES), 'utf8').trim().split('\n');
    const failed = readFileSync(join(dir, FAILURES), 'utf8').trim().split('\n');
    expect(ok.map((l) => JSON.parse(l).id)).toEqual(['a']);
    expect(failed.map((l) => JSON.parse(l).id)).toEqual(['b']);
    const m = JSON.parse(readFileSync(join(dir, MANIFEST), 'utf8'));
    expect(m.status).toBe('completed');
    expect(m.counts).toEqual({ accepted: 1, failed: 1, by_reason: { max_turns: 1 } });
  });

  it('cuts a partial last line left by a crash and resumes with the ids it holds', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-'));
    const s = await open(dir);
    await s.append(traj('a', 'ok'));
    await s.append(traj('c', 'failed'));
    // Simulate SIGKILL: no close, and half a record at the end of the file.
    appendFileSync(join(dir, TRAJECTORIES), JSON.stringify(traj('b', 'ok')).slice(0, 50));
    // …and its lock entry names a process that is gone.
    writeFileSync(join(dir, '.lock', '1'), JSON.stringify({ pid: 999999999, host: 'h', token: 't' }));
    const again = await open(dir);
    expect(again.resumed).toBe(true);
    expect([...again.accepted]).toEqual(['a']);
    expect(again.isDone('a')).toBe(true);
    expect(again.isDone('c')).toBe(true);
    expect(again.isDone('b')).toBe(false);
    await again.append(traj('b', 'ok'));
    await again.close('completed', 'completed');
    const lines = readFileSync(join(dir, TRAJECTORIES), 'utf8').split('\n').filter(Boolean);
    expect(lines.map((l) => JSON.parse(l).id)).toEqual(['a', 'b']);
  });

  it('repairTail keeps a whole last record, moves a cut one aside, and never truncates a file to zero', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-'));
    const f = join(dir, 'x.jsonl');
    writeFileSync(f, '{"id":"a"}\n');
    expect(repairTail(f)).toBeUndefined();
    // A whole record without its newline: the newline is added, nothing is cut.
    writeFileSync(f, '{"id":"a"}\n{"id":"b"}');
    expect(repairTail(f)).toEqual({ file: f, action: 'newline_added', bytes: 10 });
    expect(readFileSync(f, 'utf8')).toBe('{"id":"a"}\n{"id":"b"}\n');
    // A cut one: its bytes go to a file beside it, then the file is cut back to its last newline.
    const partial = '{"id":"b", "text": "\u00e9t';
    writeFileSync(f, `{"id":"a"}\n${partial}`);
    const cut = repairTail(f);
    expect(cut).toMatchObject({ file: f, action: 'moved_aside', bytes: Buffer.byteLength(partial) });
    expect(readFileSync(f, 'utf8')).toBe('{"id":"a"}\n');
    expect(readFileSync(cut!.saved_to!, 'utf8')).toBe(partial);
    // Nothing but a cut line: the file is moved aside whole, not truncated to zero.
    writeFileSync(f, '{"id":"a"');
    const whole = repairTail(f);
    expect(whole).toMatchObject({ action: 'moved_aside', bytes: 9 });
    expect(existsSync(f)).toBe(false);
    expect(readFileSync(whole!.saved_to!, 'utf8')).toBe('{"id":"a"');
    expect(whole!.saved_to).not.toBe(cut!.saved_to);
  });

  it('refuses a resume with another config, naming the fields', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-'));
    await (await open(dir)).close('completed', 'completed');
    await expect(open(dir, { ...fields, 'endpoint.model': 'other' })).rejects.toThrow(/endpoint\.model/);
  });

  it('refuses a second live writer: another process, or another store of this one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-'));
    const s = await open(dir);
    const second = await open(dir).catch((e: unknown) => e);
    expect(second).toBeInstanceOf(TrajforgeError);
    expect((second as TrajforgeError).code).toBe('RUN_LOCKED');
    // The entry rewritten to name a live process (vitest's parent) on another machine.
    const entry = join(dir, '.lock', '1');
    const mine = readFileSync(entry, 'utf8');
    writeFileSync(entry, JSON.stringify({ pid: process.ppid, host: 'elsewhere', token: 'x' }));
    const other = await open(dir).catch((e: unknown) => e);
    expect((other as TrajforgeError).code).toBe('RUN_LOCKED');
    expect((other as Error).message).toBe(`${dir}: another trajforge process (pid ${process.ppid} on elsewhere) is writing this run`);
    writeFileSync(entry, mine);
    await s.close('completed', 'completed');
    // A clean close leaves no lock behind.
    expect(existsSync(join(dir, '.lock'))).toBe(false);
  });

  it('honours the lock file of earlier versions while its pid lives, and replaces it when it does not', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-'));
    writeFileSync(join(dir, '.lock'), String(process.ppid));
    const err = await open(dir).catch((e: unknown) => e);
    expect((err as TrajforgeError).code).toBe('RUN_LOCKED');
    writeFileSync(join(dir, '.lock'), '999999999');
    const s = await open(dir);
    expect(statSync(join(dir, '.lock')).isDirectory()).toBe(true);
    await s.close('completed', 'completed');
  });
});
