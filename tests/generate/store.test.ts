import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SCHEMA_VERSION, type RunManifest, type Trajectory } from '../../schemas/index.js';
import { TrajforgeError } from '../../pipeline/errors.js';
import { FAILURES, MANIFEST, TRAJECTORIES } from '../../pipeline/core/run-dir/names.js';
import { RunStore } from '../../pipeline/generate/store.js';
import { SynthStore } from '../../pipeline/synthesize/store.js';
import { Scrubber } from '../../pipeline/core/secrets.js';
import { repairTail } from '../../pipeline/core/run-dir/run-lines.js';

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
    // The kernel closes a killed process's files; here the "killed" store's are closed after the
    // checks, not left to the garbage collector (Node's "FileHandle closed on garbage collection").
    await s.close('failed', 'killed');
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

/** A family's records as generate writes them: sub-agent sessions post-order, the root last. */
function family(root: string, statuses: { root: 'ok' | 'failed'; children: ('ok' | 'failed')[] }, attempt = 0): Trajectory[] {
  const children = statuses.children.map((st, n) => ({
    ...traj(`${root}/browsing#${n}`, st, attempt),
    agent: 'browsing',
    parent_id: root,
    parent_call: n,
    depth: 1,
    family_id: root,
    ...(st === 'failed' ? { reason: 'no_answer' as const } : {}),
  }));
  return [...children, { ...traj(root, statuses.root, attempt), agent: 'main', depth: 0, family_id: root }];
}
const ids = (file: string): string[] =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l).id)
    : [];

describe('run store: families', () => {
  it('writes a family as one unit, the root last, each session to the file its status names; a family whose root is accepted is never written again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-fam-'));
    const s = await open(dir);
    expect(await s.appendFamily(family('a', { root: 'ok', children: ['ok', 'failed', 'ok'] }))).toBe(true);
    expect(await s.appendFamily(family('a', { root: 'ok', children: ['ok'] }))).toBe(false);
    expect(await s.appendFamily(family('b', { root: 'failed', children: ['failed'] }))).toBe(true);
    await s.close('completed', 'completed');
    expect(ids(join(dir, TRAJECTORIES))).toEqual(['a/browsing#0', 'a/browsing#2', 'a']);
    expect(ids(join(dir, FAILURES))).toEqual(['a/browsing#1', 'b/browsing#0', 'b']);
    const m = JSON.parse(readFileSync(join(dir, MANIFEST), 'utf8'));
    // Samples are roots; the sub-agent sessions are counted apart.
    expect(m.counts).toEqual({ accepted: 1, failed: 1, by_reason: { max_turns: 1 }, sub_agents: { accepted: 2, failed: 2, by_reason: { no_answer: 2 } } });
    const again = await open(dir);
    expect(again.isDone('a')).toBe(true);
    expect(again.isDone('b')).toBe(true);
    expect(again.isDone('a/browsing#0')).toBe(false);
    expect([...again.failed.keys()]).toEqual(['b']);
    expect(again.counts()).toEqual(m.counts);
    await again.close('completed', 'completed');
  });

  it('moves aside the sub-agent lines a crash left without their root, at the end of both files, and says so; the family is redone', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-orphans-'));
    const s = await open(dir);
    await s.appendFamily(family('a', { root: 'ok', children: ['failed', 'ok'] }));
    await s.close('completed', 'completed');
    const before = { traj: readFileSync(join(dir, TRAJECTORIES), 'utf8'), fail: readFileSync(join(dir, FAILURES), 'utf8') };
    // A crash after family b's sub-agent lines, before its root: one in each file.
    const [bFailed, bOk] = family('b', { root: 'ok', children: ['failed', 'ok'] });
    appendFileSync(join(dir, FAILURES), `${JSON.stringify(bFailed)}\n`);
    appendFileSync(join(dir, TRAJECTORIES), `${JSON.stringify(bOk)}\n`);
    const resumed = await open(dir);
    expect(resumed.isDone('b')).toBe(false);
    expect(readFileSync(join(dir, TRAJECTORIES), 'utf8')).toBe(before.traj);
    expect(readFileSync(join(dir, FAILURES), 'utf8')).toBe(before.fail);
    expect(resumed.notices).toEqual([
      expect.stringMatching(/^trajectories\.jsonl: its last 1 lines, sub-agent sessions of a family whose root was never written \(a crash between them\), were moved to trajectories\.jsonl\.orphaned-.*; that family is redone$/),
      expect.stringMatching(/^failures\.jsonl: its last 1 lines, sub-agent sessions of a family whose root was never written .*failures\.jsonl\.orphaned-/),
    ]);
    const repairs = resumed.manifest.sessions.at(-1)!.tail_repairs!;
    expect(repairs.map((r) => [r.action, r.records])).toEqual([
      ['orphans_moved_aside', 1],
      ['orphans_moved_aside', 1],
    ]);
    // Nothing is lost: the lines are in the files beside.
    expect(readFileSync(repairs[0]!.saved_to!, 'utf8')).toBe(`${JSON.stringify(bOk)}\n`);
    expect(readFileSync(repairs[1]!.saved_to!, 'utf8')).toBe(`${JSON.stringify(bFailed)}\n`);
    expect(resumed.counts().sub_agents).toEqual({ accepted: 1, failed: 1, by_reason: { no_answer: 1 } });
    // The family is redone, whole, with the same ids.
    expect(await resumed.appendFamily(family('b', { root: 'ok', children: ['ok', 'ok'] }))).toBe(true);
    await resumed.close('completed', 'completed');
    expect(ids(join(dir, TRAJECTORIES))).toEqual(['a/browsing#1', 'a', 'b/browsing#0', 'b/browsing#1', 'b']);
  });

  it('a partial last line and orphans together: the cut line is moved aside first, then the whole orphan lines before it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-orphans-'));
    const s = await open(dir);
    await s.appendFamily(family('a', { root: 'ok', children: ['ok'] }));
    await s.close('completed', 'completed');
    const [b0, b1, bRoot] = family('b', { root: 'ok', children: ['ok', 'ok'] });
    appendFileSync(join(dir, TRAJECTORIES), `${JSON.stringify(b0)}\n${JSON.stringify(b1)}\n${JSON.stringify(bRoot).slice(0, 40)}`);
    const resumed = await open(dir);
    expect(resumed.manifest.sessions.at(-1)!.tail_repairs!.map((r) => [r.action, r.records])).toEqual([
      ['moved_aside', undefined],
      ['orphans_moved_aside', 2],
    ]);
    expect(ids(join(dir, TRAJECTORIES))).toEqual(['a/browsing#0', 'a']);
    await resumed.close('completed', 'completed');
  });

  it('a sub-agent line without its root followed by another family is not a crash: the run is not opened, and nothing is cut', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-orphans-'));
    const [b0] = family('b', { root: 'ok', children: ['ok'] });
    const a = family('a', { root: 'ok', children: ['ok'] });
    writeFileSync(join(dir, TRAJECTORIES), [b0, ...a].map((t) => `${JSON.stringify(t)}\n`).join(''));
    // b's child is followed by a's child, then a's root: a's root commits b's child too (written before it). A child after the last root is another matter:
    appendFileSync(join(dir, TRAJECTORIES), `${JSON.stringify(family('c', { root: 'ok', children: ['ok'] })[0])}\n`);
    writeFileSync(join(dir, FAILURES), `${JSON.stringify(family('d', { root: 'ok', children: ['failed'] })[0])}\n${JSON.stringify(family('a', { root: 'ok', children: ['failed'] })[0])}\n`);
    const before = readFileSync(join(dir, FAILURES), 'utf8');
    await expect(open(dir)).rejects.toThrow(/failures\.jsonl:1: sub-agent session d\/browsing#0 has no record of its family's root \(d, attempt 0\), and line 2 after it belongs to another family/);
    expect(readFileSync(join(dir, FAILURES), 'utf8')).toBe(before);
  });

  it('a write that fails part of the way through a family cuts both files back to where it began', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-fam-'));
    const s = await open(dir);
    await s.appendFamily(family('a', { root: 'ok', children: ['failed'] }));
    const sizes = [statSync(join(dir, TRAJECTORIES)).size, statSync(join(dir, FAILURES)).size];
    const b = family('b', { root: 'ok', children: ['failed', 'ok', 'ok'] });
    // The third line cannot be serialised: the two before it were written already.
    (b[2] as unknown as { meta: unknown }).meta = { n: 1n };
    await expect(s.appendFamily(b)).rejects.toThrow(/cannot append a record/);
    expect([statSync(join(dir, TRAJECTORIES)).size, statSync(join(dir, FAILURES)).size]).toEqual(sizes);
    // The store stops: nothing more is written after a failed write.
    await expect(s.appendFamily(family('c', { root: 'ok', children: [] }))).rejects.toThrow(/cannot append a record/);
    await s.close('failed', 'write failed').catch(() => {});
    expect(ids(join(dir, TRAJECTORIES))).toEqual(['a']);
    expect(ids(join(dir, FAILURES))).toEqual(['a/browsing#0']);
  });
});

describe('run store: each line serialised once', () => {
  const scrubber = new Scrubber([
    { name: 'API_KEY', value: 'sk-live-"quoted"\\slash-123' },
    { name: 'TOKEN', value: 'tok-abcdef-987' },
  ]);
  // What the store wrote before it serialised once: the scrubbed copy, serialised, a newline.
  const before = (t: Trajectory): string => `${JSON.stringify(scrubber.value(t))}\n`;

  it('writes the bytes the scrub-then-serialise formula gives: secrets in strings, keys and escapes, non-ASCII, lines past the reused buffer', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-once-'));
    const s = await RunStore.open({ dir, fresh: manifest, fingerprintFields: fields, scrubber });
    const withSecret = { ...traj('s', 'ok'), final_answer: 'the key is sk-live-"quoted"\\slash-123 and tok-abcdef-987', meta: { 'tok-abcdef-987': ['x', 'tok-abcdef-987'] } };
    const clean = { ...traj('c', 'ok'), final_answer: 'ünïcödé 日本語 🚀 \u0001 \ud800 "q" \\' };
    // Past the 64 KB the buffer starts with, and past the 4 MB it is ever kept at.
    const big = { ...traj('b', 'ok'), final_answer: `é${'x'.repeat(70_000)}🚀` };
    const huge = { ...traj('h', 'failed'), final_answer: `${'日'.repeat(1_500_000)}tok-abcdef-987` };
    const small = traj('z', 'ok');
    for (const t of [withSecret, clean, big, huge, small]) expect(await s.append(t)).toBe(true);
    await s.close('completed', 'completed');
    expect(readFileSync(join(dir, TRAJECTORIES), 'utf8')).toBe([withSecret, clean, big, small].map(before).join(''));
    expect(readFileSync(join(dir, FAILURES), 'utf8')).toBe(before(huge));
    expect(readFileSync(join(dir, TRAJECTORIES), 'utf8')).not.toContain('tok-abcdef-987');
  });

  it('lineOf gives the root line as written, without its newline (queue mode hashes it for the accept)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-line-'));
    const s = await RunStore.open({ dir, fresh: manifest, fingerprintFields: fields, scrubber });
    const root = { ...traj('r', 'ok'), final_answer: 'tok-abcdef-987' };
    await s.append(root);
    await s.close('completed', 'completed');
    expect(`${s.lineOf(root)}\n`).toBe(readFileSync(join(dir, TRAJECTORIES), 'utf8'));
    expect(s.lineOf(traj('r', 'ok'))).toBeUndefined();
  });
});

describe('run store: sync before an accept', () => {
  it('flushes a wave of records settled together with one fdatasync, of the file they were written to', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-sync-'));
    const s = await open(dir);
    const ids = Array.from({ length: 8 }, (_, i) => `s${i}`);
    await Promise.all(ids.map((id) => s.append(traj(id, 'ok'))));
    await Promise.all(ids.map(() => s.sync()));
    expect(s.datasyncs).toBe(1);
    await s.append(traj('f', 'failed'));
    await s.sync();
    expect(s.datasyncs).toBe(2);
    await s.close('completed', 'completed');
  });
});

describe('run store: an open that fails', () => {
  /** The files of `dir` this process holds open. */
  const held = (dir: string): string[] =>
    readdirSync('/proc/self/fd').flatMap((fd) => {
      try {
        const target = readlinkSync(`/proc/self/fd/${fd}`);
        return target.startsWith(`${dir}/`) ? [target] : [];
      } catch {
        return [];
      }
    });

  it('closes the files it opened and frees the run when its manifest cannot be written; the run opens once the way is clear', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-store-openfail-'));
    // The manifest is written through a temporary name: a directory there makes the write fail after both files are open.
    mkdirSync(join(dir, `${MANIFEST}.tmp`));
    await expect(open(dir)).rejects.toThrow();
    expect(held(dir)).toEqual([]);
    rmSync(join(dir, `${MANIFEST}.tmp`), { recursive: true });
    const s = await open(dir);
    expect(held(dir).sort()).toEqual([join(dir, FAILURES), join(dir, TRAJECTORIES)]);
    await s.close('completed', 'completed');
  });

  it("synthesize's store too: its files closed, the run free, then it opens", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tf-synth-openfail-'));
    mkdirSync(join(dir, `${MANIFEST}.tmp`));
    const openSynth = () => SynthStore.open({ dir, fresh: manifest, fingerprintFields: fields });
    await expect(openSynth()).rejects.toThrow();
    expect(held(dir)).toEqual([]);
    rmSync(join(dir, `${MANIFEST}.tmp`), { recursive: true });
    const s = await openSynth();
    expect(held(dir)).toHaveLength(2);
    await s.close('completed', 'completed');
  });
});
