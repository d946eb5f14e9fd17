/**
 * `report --serve` without a browser: the follower of a file being appended to (whole lines
 * only, a partial last line left for later, a file that shrinks or is replaced read anew, only
 * the appended bytes read), the live figures against `stats` at every step of runs written in
 * many orders (retries superseded, duplicates, lines that are not records), the manifest
 * replaced under it, the rows a page lacks, and the server: loopback only, Host headers,
 * events, the page's rows, and the CLI's flags, errors and Ctrl-C.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdirSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { get, request } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ReportServeOptions } from '../../../schemas/index.js';
import { LiveRun, type LiveFigures } from '../../../pipeline/dataset/report/live.js';
import { isLoopback, serveReport, type ReportServer } from '../../../pipeline/dataset/report/serve.js';
import { FileTail } from '../../../pipeline/dataset/report/tail.js';
import { DEFAULT_ROW_OPTIONS } from '../../../pipeline/dataset/report/rows.js';
import { statsForInput } from '../../../pipeline/dataset/stats.js';
import { CLI, runCli, tempDir } from '../../helpers.js';

// ---------------------------------------------------------------------------------------
// Records

interface Rec {
  id?: unknown;
  status?: string;
  reason?: string;
  attempt?: number;
  tokens?: [number, number];
  finished?: string;
  question?: string;
}

function line(r: Rec): string {
  const [p, c] = r.tokens ?? [100, 10];
  const t: Record<string, unknown> = {
    schema_version: 1,
    id: r.id,
    question_id: 'q',
    question: r.question ?? `question of ${String(r.id)}`,
    dialect: 'tulu',
    model: 'm',
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
    validation: { passed: r.status === 'ok', issues: [] },
    usage: { prompt_tokens: p, completion_tokens: c, total_tokens: p + c, llm_calls: 1, estimated: false },
    timing: { started_at: '', finished_at: r.finished ?? new Date().toISOString(), duration_ms: 1, llm_ms: 1, tool_ms: 0 },
    attempt: r.attempt ?? 0,
    run_id: 'r',
  };
  if (r.status !== undefined) t.status = r.status;
  if (r.reason !== undefined) t.reason = r.reason;
  return JSON.stringify(t);
}

const ok = (id: string, extra: Rec = {}): string => line({ id, status: 'ok', ...extra });
const fail = (id: string, attempt: number, reason?: string, extra: Rec = {}): string => line({ id, status: 'failed', attempt, ...(reason ? { reason } : {}), ...extra });

const OPTS = { rateWindowMs: 60_000, newest: 5, chunkBytes: 1 << 20 };
const READ = { format: 'trajforge', onBadRow: 'skip' } as const;

/** The figures `stats` makes, in the shape both give. */
function statsPart(s: { rows: unknown; status: unknown; reasons: unknown; acceptance_rate: unknown }): Record<string, unknown> {
  return { rows: s.rows, status: s.status, reasons: s.reasons, acceptance_rate: s.acceptance_rate };
}

/** A seeded RNG (mulberry32): the same interleavings on every run. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// ---------------------------------------------------------------------------------------

describe('FileTail', () => {
  it('hands back whole lines only: a partial last line waits for its newline, blank lines and CRLF are handled', async () => {
    const dir = tempDir('tf-tail-');
    const file = join(dir, 'f.jsonl');
    const tail = new FileTail(file);
    expect(await tail.read()).toEqual({ reset: false, lines: [] }); // not there yet
    writeFileSync(file, '\uFEFF{"a":1}\r\n\n   \n{"b":');
    let r = await tail.read();
    expect(r.lines).toEqual([{ line: 1, offset: 0, text: '{"a":1}' }]);
    const afterFirst = Buffer.byteLength('\uFEFF{"a":1}\r\n\n   \n');
    expect(tail.offset).toBe(afterFirst);
    expect((await tail.read()).lines).toEqual([]); // still partial
    appendFileSync(file, '2}');
    expect((await tail.read()).lines).toEqual([]); // whole JSON, but no newline yet: not a line
    appendFileSync(file, '\n{"c":3}\n');
    r = await tail.read();
    expect(r).toEqual({ reset: false, lines: [{ line: 4, offset: afterFirst, text: '{"b":2}' }, { line: 5, offset: afterFirst + 8, text: '{"c":3}' }] });
  });

  it('reads only what was appended: a second look at a large file costs the new bytes', async () => {
    const dir = tempDir('tf-tail-');
    const file = join(dir, 'f.jsonl');
    const row = `${JSON.stringify({ pad: 'x'.repeat(1000) })}\n`;
    writeFileSync(file, row.repeat(5000)); // 5 MB
    const tail = new FileTail(file);
    expect((await tail.read()).lines).toHaveLength(5000);
    const first = tail.bytesRead;
    expect(first).toBe(row.length * 5000);
    appendFileSync(file, '{"new":1}\n');
    expect((await tail.read()).lines).toEqual([{ line: 5001, offset: first, text: '{"new":1}' }]);
    // The new line, and one byte to check the file still ends a line where it was left.
    expect(tail.bytesRead - first).toBe(10 + 1);
    expect((await tail.read()).lines).toEqual([]);
    expect(tail.bytesRead - first).toBe(10 + 2);
  });

  it('keeps to a budget per read, but a longer single line is read whole', async () => {
    const dir = tempDir('tf-tail-');
    const file = join(dir, 'f.jsonl');
    const big = `"${'y'.repeat(3 << 20)}"`; // longer than one read chunk
    writeFileSync(file, `1\n2\n${big}\n3\n`);
    const tail = new FileTail(file);
    expect((await tail.read(2)).lines.map((l) => l.text)).toEqual(['1']);
    expect((await tail.read(2)).lines.map((l) => l.text)).toEqual(['2']);
    expect((await tail.read(2)).lines.map((l) => l.text.length)).toEqual([big.length]);
    expect((await tail.read(2)).lines.map((l) => l.text)).toEqual(['3']);
  });

  it('takes a tail repair in its stride: a cut line removed by a resumed run never was a line', async () => {
    const dir = tempDir('tf-tail-');
    const file = join(dir, 'f.jsonl');
    writeFileSync(file, '{"a":1}\n{"cut":');
    const tail = new FileTail(file);
    expect((await tail.read()).lines).toHaveLength(1);
    // The store moves the cut bytes aside (truncating to the last newline), then appends.
    truncateSync(file, 8);
    appendFileSync(file, '{"b":2}\n');
    expect(await tail.read()).toEqual({ reset: false, lines: [{ line: 2, offset: 8, text: '{"b":2}' }] });
    expect(tail.generation).toBe(0);
  });

  it('starts over when the file shrinks, is replaced by a rename, is rewritten in place, or goes away', async () => {
    const dir = tempDir('tf-tail-');
    const file = join(dir, 'f.jsonl');
    writeFileSync(file, '{"a":1}\n{"b":2}\n');
    const tail = new FileTail(file);
    expect((await tail.read()).lines).toHaveLength(2);

    truncateSync(file, 8); // shrank below what was read
    expect(await tail.read()).toEqual({ reset: true, lines: [{ line: 1, offset: 0, text: '{"a":1}' }] });
    expect(tail.generation).toBe(1);

    // Replaced by a longer file (another inode): the size alone would not tell.
    writeFileSync(join(dir, 'new'), '{"x":1}\n{"y":2}\n{"z":3}\n');
    renameSync(join(dir, 'new'), file);
    expect(await tail.read()).toEqual({ reset: true, lines: ['{"x":1}', '{"y":2}', '{"z":3}'].map((text, i) => ({ line: i + 1, offset: i * 8, text })) });

    // Rewritten in place (same inode, larger), so the old offset is no longer at a line's end.
    writeFileSync(file, '{"long":100}\n{"q":1}\n{"r":2}\n');
    const r = await tail.read();
    expect(r.reset).toBe(true);
    expect(r.lines.map((l) => l.text)).toEqual(['{"long":100}', '{"q":1}', '{"r":2}']);

    rmSync(file);
    expect(await tail.read()).toEqual({ reset: true, lines: [] });
    writeFileSync(file, '{"again":1}\n');
    expect(await tail.read()).toEqual({ reset: false, lines: [{ line: 1, offset: 0, text: '{"again":1}' }] });
    expect(tail.generation).toBe(4);
  });
});

// ---------------------------------------------------------------------------------------

/** Every kind of row a run (or a hand) can put in its files. */
function hostileRun(): { traj: string[]; fail: string[] } {
  return {
    traj: [
      ok('x'), // after two failed attempts (in failures.jsonl): supersedes both
      ok('w'),
      ok('w'), // accepted twice: the first counts
      ok('v'), // a failure after it does not count
      line({ id: 'nostatus' }), // no status: "unknown"
      'not json at all',
      '[1,2,3]',
      line({ id: 7, status: 'ok' }), // an id that is not a string: not a record
      ok('late'), // accepted after failing
    ],
    fail: [
      fail('x', 0, 'no_answer'),
      fail('x', 1, 'max_turns'),
      fail('y', 1, 'tool_error'),
      fail('y', 0, 'no_answer'), // a lower attempt on a later line: attempt 1 stays the latest
      fail('z', 0), // failed without a reason: counted as (none)
      fail('v', 1, 'invalid'),
      fail('u', 2, 'tool_error'),
      fail('u', 2, 'truncated'), // the same attempt again: the later line wins
      fail('late', 0, 'llm_error'),
      '{"truncated json',
    ],
  };
}

describe('LiveRun', () => {
  it('agrees with stats at every whole-line step of a run written in many orders, and ignores partial lines', async () => {
    const { traj, fail: failed } = hostileRun();
    for (let seed = 1; seed <= 12; seed++) {
      const random = rng(seed);
      const dir = tempDir('tf-live-run-');
      const live = new LiveRun(dir, OPTS);
      await live.poll();
      expect(live.figures().rows).toEqual({ read: 0, counted: 0, superseded: 0, bad: 0 });
      // Each file keeps its order (appends), the two interleave at random.
      let ti = 0;
      let fi = 0;
      while (ti < traj.length || fi < failed.length) {
        const takeTraj = fi >= failed.length || (ti < traj.length && random() < 0.5);
        const [file, text] = takeTraj ? ['trajectories.jsonl', traj[ti++]!] : ['failures.jsonl', failed[fi++]!];
        // Half a line first: the figures must not move until its newline is there.
        const cut = Math.max(1, Math.floor(text.length * random()));
        const before = live.figures();
        appendFileSync(join(dir, file), text.slice(0, cut));
        await live.poll();
        expect(statsPart(live.figures())).toEqual(statsPart(before));
        appendFileSync(join(dir, file), `${text.slice(cut)}\n`);
        await live.poll();
        const want = await statsForInput(dir, READ);
        expect(statsPart(live.figures()), `seed ${seed}, after ${ti} + ${fi} lines`).toEqual(statsPart(want));
      }
      const f = live.figures();
      expect(f.rows.bad).toBe(4);
      expect(f.reasons).toEqual({ tool_error: 1, truncated: 1, '(none)': 1 }); // y, u (its later line), z
      expect(f.done).toBe(8); // x w v nostatus late y z u
    }
  });

  it('counts every attempt in the tokens and the spend, and lists the newest by finish time', async () => {
    const dir = tempDir('tf-live-run-');
    writeFileSync(join(dir, 'failures.jsonl'), [fail('a', 0, 'no_answer', { tokens: [1000, 100], finished: '2026-01-01T00:00:03Z' }), fail('b', 0, 'no_answer', { tokens: [10, 1], finished: '2026-01-01T00:00:01Z' })].join('\n') + '\n');
    writeFileSync(join(dir, 'trajectories.jsonl'), `${ok('a', { tokens: [2000, 300], finished: '2026-01-01T00:00:05Z' })}\n`);
    const live = new LiveRun(dir, { ...OPTS, newest: 2, price: { prompt: 3, completion: 15 } });
    await live.poll();
    const f = live.figures();
    expect(f.tokens).toEqual({ prompt: 3010, completion: 401, total: 3411 });
    expect(f.spend_usd).toBeCloseTo((3010 * 3 + 401 * 15) / 1e6, 12);
    expect(f.newest.map((n) => [n[0], n[1]])).toEqual([['a', 'ok'], ['a', 'failed']]);
    const unpriced = new LiveRun(dir, OPTS);
    await unpriced.poll();
    expect(unpriced.figures().spend_usd).toBeNull();
  });

  it('measures samples per minute over the recent window while running, and over the end of the last session once stopped', async () => {
    const dir = tempDir('tf-live-run-');
    const t0 = Date.parse('2026-01-01T00:00:00Z');
    const at = (s: number): string => new Date(t0 + s * 1000).toISOString();
    // 30 samples in the session's first 30 s, then 10 in the last 10 s of a 100 s session.
    const rows = [...Array.from({ length: 30 }, (_, i) => ok(`a${i}`, { finished: at(i) })), ...Array.from({ length: 10 }, (_, i) => ok(`b${i}`, { finished: at(90 + i) }))];
    writeFileSync(join(dir, 'trajectories.jsonl'), `${rows.join('\n')}\n`);
    const manifest = (status: string, finished?: string): void =>
      writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ run_id: 'r', status, model: 'm', questions: { total: 50 }, updated_at: at(100), sessions: [{ started_at: at(0), ...(finished ? { finished_at: finished } : {}) }] }));
    manifest('running');
    const live = new LiveRun(dir, { ...OPTS, rateWindowMs: 20_000 });
    await live.poll();
    // Running, looked at 100 s in: 10 in the last 20 s.
    expect(live.figures(t0 + 100_000).rate).toEqual({ per_min: 30, over: 'window', window_s: 20 });
    // 10 s into the session: the window is the 10 s the session has lasted (11 samples at 0..10 s).
    expect(live.figures(t0 + 10_000).rate.per_min).toBeCloseTo(66, 6);
    manifest('completed', at(100));
    await live.poll();
    // Stopped: an hour later the rate is still the session's end, not the idle time since.
    expect(live.figures(t0 + 3_700_000).rate).toEqual({ per_min: 30, over: 'last session', window_s: 20 });
  });

  it('re-reads the manifest when it is replaced, and keeps the last good one (saying why) when it cannot be read', async () => {
    const dir = tempDir('tf-live-run-');
    const live = new LiveRun(dir, OPTS);
    await live.poll();
    expect(live.figures().manifest).toBeNull();
    const put = (text: string): void => {
      writeFileSync(join(dir, 'manifest.json.tmp'), text);
      renameSync(join(dir, 'manifest.json.tmp'), join(dir, 'manifest.json'));
    };
    put(JSON.stringify({ run_id: 'r1', status: 'running', model: 'm', questions: { total: 12 }, updated_at: 'u1', sessions: [{ started_at: 's1' }] }));
    expect(await live.poll()).toBe(true);
    expect(live.figures().manifest).toEqual({ run_id: 'r1', status: 'running', model: 'm', planned: 12, updated_at: 'u1', session_started_at: 's1', session_finished_at: null });
    expect(await live.poll()).toBe(false); // unchanged: not read again
    put(JSON.stringify({ run_id: 'r1', status: 'completed', questions: { total: null }, sessions: [{ started_at: 's1' }, { started_at: 's2', finished_at: 'f2' }] }));
    await live.poll();
    expect(live.figures().manifest).toMatchObject({ status: 'completed', planned: null, session_started_at: 's2', session_finished_at: 'f2' });
    put('{"run_id": "r1", "status": "comp');
    await live.poll();
    expect(live.figures().manifest?.status).toBe('completed');
    expect(live.figures().manifest_error).toMatch(/manifest\.json: not valid JSON/);
    put('null');
    await live.poll();
    expect(live.figures().manifest).toMatchObject({ run_id: null, status: null, planned: null });
    expect(live.figures().manifest_error).toBeNull();
  });

  it("follows the manifest's endpoint counts, adds up a queue run's workers', and leaves out counts that are not counts", async () => {
    const counts = (requests: number, limited: number, extra: Record<string, unknown> = {}) => ({
      requests,
      responses: { ok: requests - limited, rate_limited: limited, server_error: 0, client_error: 0, connection_error: 0, timeout: 0, malformed: 0, aborted: 0 },
      retries: limited,
      retry_after: { waits: limited, seconds: limited * 0.5 },
      length_retries: 0,
      repetition_resamples: 0,
      ...extra,
    });
    const put = (dir: string, manifest: unknown): void => {
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'manifest.json.tmp'), JSON.stringify(manifest));
      renameSync(join(dir, 'manifest.json.tmp'), join(dir, 'manifest.json'));
    };
    const dir = tempDir('tf-live-endpoint-');
    const live = new LiveRun(dir, OPTS);
    await live.poll();
    expect(live.figures().endpoint).toBeNull();
    put(dir, { status: 'running', endpoint: { agents: counts(10, 3, { concurrency_limit: 4 }), judge: counts(2, 1) } });
    expect(await live.poll()).toBe(true);
    expect(live.figures().endpoint).toEqual({ agents: counts(10, 3, { concurrency_limit: 4 }), judge: counts(2, 1), manifests: 1 });

    // A queue run's directory: no run of its own, one per worker; a worker's manifest rewritten is read again.
    const queue = tempDir('tf-live-endpoint-queue-');
    const q = new LiveRun(queue, OPTS);
    put(join(queue, 'worker-a'), { endpoint: { agents: counts(10, 3) } });
    put(join(queue, 'worker-b'), { endpoint: { agents: counts(5, 1) } });
    put(join(queue, 'worker-evil'), { endpoint: { agents: { ...counts(1000, 1000), requests: -5 } } });
    put(join(queue, 'not-a-worker'), { endpoint: { agents: counts(1000, 1000) } });
    await q.poll();
    const f = q.figures().endpoint!;
    expect(f.manifests).toBe(2);
    expect(f.agents.requests).toBe(15);
    expect(f.agents.responses.rate_limited).toBe(4);
    expect(f.agents.retry_after).toEqual({ waits: 4, seconds: 2 });
    expect(f.judge).toBeNull();
    put(join(queue, 'worker-b'), { endpoint: { agents: counts(7, 2) } });
    expect(await q.poll()).toBe(true);
    expect(q.figures().endpoint!.agents.requests).toBe(17);
    expect(await q.poll()).toBe(false);
  });

  it('starts over when a file shrinks: the figures are those of what the files now hold, and the generation moves', async () => {
    const dir = tempDir('tf-live-run-');
    writeFileSync(join(dir, 'trajectories.jsonl'), `${[ok('a'), ok('b'), ok('c')].join('\n')}\n`);
    writeFileSync(join(dir, 'failures.jsonl'), `${fail('d', 0, 'no_answer')}\n`);
    const live = new LiveRun(dir, OPTS);
    await live.poll();
    expect(live.figures().status).toEqual({ ok: 3, failed: 1 });
    writeFileSync(join(dir, 'trajectories.jsonl'), `${ok('a')}\n`);
    await live.poll();
    expect(live.cursor.generation).toBe(1);
    expect(statsPart(live.figures())).toEqual(statsPart(await statsForInput(dir, READ)));
    expect(live.figures().status).toEqual({ ok: 1, failed: 1 });
  });

  it('hands a page the rows it lacks: each id at its latest state, in pages of the chunk size, and reload for a cursor that is not a place', async () => {
    const dir = tempDir('tf-live-run-');
    const t = join(dir, 'trajectories.jsonl');
    const f = join(dir, 'failures.jsonl');
    writeFileSync(t, `${ok('a')}\n`);
    writeFileSync(f, `${fail('b', 0, 'no_answer')}\n`);
    const live = new LiveRun(dir, { ...OPTS, chunkBytes: 4096 });
    await live.poll();
    const page = live.cursor;
    appendFileSync(f, `${[fail('c', 0, 'no_answer'), fail('b', 1, 'max_turns'), fail('c', 1, 'tool_error'), fail('e', 0, 'no_answer')].join('\n')}\n`);
    appendFileSync(t, `${[ok('c'), ok('a'), ...Array.from({ length: 8 }, (_, i) => ok(`n${i}`, { question: 'q'.repeat(1500) }))].join('\n')}\n`);
    await live.poll();
    const ids: string[] = [];
    let cursor = page;
    let pages = 0;
    for (;;) {
      const r = await live.rowsSince(cursor, DEFAULT_ROW_OPTIONS);
      if (r.reload) throw new Error('unexpected reload');
      ids.push(...r.rows.map((l) => (JSON.parse(l.split('\t')[0]!) as string[])[0]!));
      cursor = r.cursor;
      pages++;
      if (!r.more) break;
    }
    expect(pages).toBeGreaterThan(2); // ~2 KB a row, 4 KB a page
    expect(cursor).toEqual(live.cursor);
    // c was accepted, so none of its failures is sent; b's attempt 1 is; a's second acceptance is
    // sent and the page keeps its first. e's only attempt is its state.
    expect(ids.sort()).toEqual(['a', 'b', 'c', 'e', ...Array.from({ length: 8 }, (_, i) => `n${i}`)].sort());

    expect(await live.rowsSince({ ...page, generation: 9 }, DEFAULT_ROW_OPTIONS)).toEqual({ reload: true });
    expect(await live.rowsSince({ ...page, trajectories: live.cursor.trajectories + 1 }, DEFAULT_ROW_OPTIONS)).toEqual({ reload: true });
    expect(await live.rowsSince({ ...page, trajectories: 3 }, DEFAULT_ROW_OPTIONS)).toEqual({ reload: true }); // inside a line
    expect(await live.rowsSince({ ...page, failures: Number.NaN }, DEFAULT_ROW_OPTIONS)).toEqual({ reload: true });
  });
});

// ---------------------------------------------------------------------------------------

function httpGet(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The rows the page at `url` embeds: one per line of its rows block. */
function pageIds(html: string): string[] {
  const start = html.indexOf('id="rows">') + 'id="rows">'.length;
  const block = html.slice(start, html.indexOf('</script>', start));
  return block
    .split('\n')
    .filter((l) => l.includes('\t'))
    .map((l) => (JSON.parse(l.split('\t')[0]!) as string[])[0]!);
}

/** Figures events of an event stream, as they come. */
function eventStream(url: string): { events: LiveFigures[]; close(): void } {
  const events: LiveFigures[] = [];
  let buffer = '';
  const req = get(url, (res) => {
    res.setEncoding('utf8');
    res.on('data', (d: string) => {
      buffer += d;
      let end: number;
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split('\n').find((l) => l.startsWith('data: '));
        if (block.includes('event: figures') && data) events.push(JSON.parse(data.slice(6)) as LiveFigures);
      }
    });
  });
  req.on('error', () => {});
  return { events, close: () => req.destroy() };
}

describe('serveReport', () => {
  let server: ReportServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  const options = (patch: Partial<ReportServeOptions> = {}): ReportServeOptions => ReportServeOptions.parse({ port: 0, poll_ms: 20, ...patch });

  it('knows loopback addresses from the others', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', 'app.localhost', '::1', '[::1]', '::ffff:127.0.0.1']) expect(isLoopback(h), h).toBe(true);
    for (const h of ['0.0.0.0', '::', '192.168.1.2', '10.0.0.1', 'example.com', 'localhost.example.com', '128.0.0.1', '']) expect(isLoopback(h), h).toBe(false);
  });

  it('refuses a non-loopback host unless allowed, and a file instead of a run directory', async () => {
    const dir = tempDir('tf-serve-');
    await expect(serveReport(join(dir, 'run'), { options: options({ host: '0.0.0.0' }) })).rejects.toThrow(/not a loopback address.*--allow-remote/);
    writeFileSync(join(dir, 'f.jsonl'), '');
    await expect(serveReport(join(dir, 'f.jsonl'), { options: options() })).rejects.toThrow(/is a file; --serve follows a run directory/);
  });

  it('serves a run that has not started, then its rows as they come: the page holds whole lines only, events follow the files, Host must be loopback', async () => {
    const dir = tempDir('tf-serve-');
    const run = join(dir, 'run');
    server = await serveReport(run, { options: options(), log: () => {} });
    const url = server.url;
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);

    let page = await httpGet(url);
    expect(page.status).toBe(200);
    expect(page.headers['content-security-policy']).toContain("connect-src 'self'");
    expect(pageIds(page.body)).toEqual([]);
    expect(page.body).toContain('id="live-init"');

    const stream = eventStream(`${url}events`);
    await expect.poll(() => stream.events.length).toBeGreaterThanOrEqual(1);
    expect(stream.events[0]!.manifest).toBeNull();

    mkdirSync(run);
    writeFileSync(join(run, 'trajectories.jsonl'), `${ok('a')}\n${ok('b')}\n${ok('c').slice(0, 40)}`);
    await expect.poll(() => stream.events.at(-1)?.rows.read).toBe(2);
    page = await httpGet(url);
    expect(pageIds(page.body)).toEqual(['a', 'b']); // the partial third line is not a row yet
    const init = JSON.parse(page.body.slice(page.body.indexOf('id="live-init">') + 15, page.body.indexOf('</script>', page.body.indexOf('id="live-init">'))).replace(/\\u003c/g, '<')) as LiveFigures;
    expect(init.rows.read).toBe(2);

    appendFileSync(join(run, 'trajectories.jsonl'), `${ok('c').slice(40)}\n`);
    appendFileSync(join(run, 'failures.jsonl'), `${fail('d', 0, 'no_answer')}\n`);
    await expect.poll(() => stream.events.at(-1)?.rows.read).toBe(4);
    const c = init.cursor;
    const delta = JSON.parse((await httpGet(`${url}rows?g=${c.generation}&t=${c.trajectories}&f=${c.failures}`)).body) as { rows: string[]; more: boolean };
    expect(delta.rows.map((l) => (JSON.parse(l.split('\t')[0]!) as string[])[0])).toEqual(['c', 'd']);
    expect(delta.more).toBe(false);
    const overview = await httpGet(`${url}overview?g=${c.generation}&t=${c.trajectories}&f=${c.failures}`);
    expect(overview.body).toContain('<section id="overview">');
    expect(overview.body).toContain('2 trajectories in the list below');
    expect((await httpGet(`${url}overview?g=5&t=0&f=0`)).status).toBe(409);

    const figures = JSON.parse((await httpGet(`${url}figures.json`)).body) as LiveFigures;
    expect(statsPart(figures)).toEqual(statsPart(await statsForInput(run, READ)));

    // A page elsewhere reaching this server through a DNS name rebound to 127.0.0.1.
    const rebound = await httpGet(url, { host: 'attacker.example:80' });
    expect(rebound.status).toBe(403);
    expect(rebound.body).not.toContain('question of');
    expect((await httpGet(`${url}figures.json`, { host: 'localhost' })).status).toBe(200);
    expect((await httpGet(`${url}nope`)).status).toBe(404);
    stream.close();
  });
});

// ---------------------------------------------------------------------------------------

function startCli(args: string[]): { proc: ChildProcess; out: () => string; err: () => string; exited: Promise<number | null> } {
  const proc = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  return { proc, out: () => out, err: () => err, exited: new Promise((r) => proc.once('exit', (code) => r(code))) };
}

describe('trajforge report --serve', () => {
  it.each([
    [['--serve', 'RUN', '--out', 'x.html'], /--out does not apply/],
    [['--serve', '-'], /not stdin/],
    [['--serve', 'FILE'], /is a file; --serve follows a run directory/],
    [['--serve', 'RUN', '--host', '0.0.0.0'], /not a loopback address.*--allow-remote/],
    [['--serve', 'RUN', '--price-prompt', '2'], /--price-prompt and --price-completion go together/],
    [['--serve', 'RUN', '--port', '70000'], /--port:/],
    [['--serve', 'RUN', '--poll-ms', 'soon'], /--poll-ms: expected a number/],
    [['RUN', '--out', 'x.html', '--port', '8000'], /--port goes with --serve/],
  ])('%j exits 2 with a clear message', async (args, message) => {
    const dir = tempDir('tf-serve-cli-');
    writeFileSync(join(dir, 'f.jsonl'), '');
    const r = await runCli(['report', ...args.map((a) => (a === 'RUN' ? join(dir, 'run') : a === 'FILE' ? join(dir, 'f.jsonl') : a))]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
  });

  it('says a port in use is in use', async () => {
    const taken = createNetServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', () => r()));
    try {
      const port = (taken.address() as AddressInfo).port;
      const r = await runCli(['report', '--serve', tempDir('tf-serve-cli-'), '--port', String(port)]);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`port ${port} on 127.0.0.1 is in use`);
    } finally {
      taken.close();
    }
  });

  it('prints the address, follows the run, and stops cleanly on Ctrl-C (exit 0)', async () => {
    const dir = tempDir('tf-serve-cli-');
    writeFileSync(join(dir, 'trajectories.jsonl'), `${ok('a')}\n`);
    const cli = startCli(['report', '--serve', dir, '--port', '0', '--poll-ms', '30']);
    try {
      await expect.poll(() => /at (http:\/\/127\.0\.0\.1:\d+\/)/.exec(cli.out())?.[1], { timeout: 20_000 }).toBeTruthy();
      const url = /at (http:\/\/127\.0\.0\.1:\d+\/)/.exec(cli.out())![1]!;
      const read = async (): Promise<number> => (JSON.parse((await httpGet(`${url}figures.json`)).body) as LiveFigures).rows.read;
      expect(await read()).toBe(1);
      appendFileSync(join(dir, 'trajectories.jsonl'), `${ok('b')}\n`);
      await expect.poll(read).toBe(2);
      const stream = eventStream(`${url}events`); // an open event stream must not hold the server
      await expect.poll(() => stream.events.length).toBeGreaterThanOrEqual(1);
      cli.proc.kill('SIGINT');
      expect(await cli.exited).toBe(0);
      expect(cli.err()).toContain('stopped serving');
      stream.close();
    } finally {
      if (cli.proc.exitCode === null) cli.proc.kill('SIGKILL');
    }
  });
});
