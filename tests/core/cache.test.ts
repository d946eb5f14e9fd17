/**
 * The tool-result cache: the store on its own, the executor on top of it, two processes
 * sharing one directory, and whole runs repeated against it. Needs a built dist/.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { cacheKey, defaultCacheDir, DirStore, serverIdentity, type CacheKey } from '../../pipeline/core/cache.js';
import { Executor } from '../../pipeline/generate/executor.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { RunConfig } from '../../schemas/index.js';
import { startSim } from '../../sim/server.js';
import { CORPUS_SERVER, readJsonl, runCli, runNode, tempDir, writeConfig } from '../helpers.js';

const CACHE_JS = join(PACKAGE_ROOT, 'dist/pipeline/core/cache.js');
const DAY = 24 * 3600;

/** Every file under a cache directory's current layout. */
function files(dir: string): string[] {
  const root = join(dir, 'v2');
  return existsSync(root) ? readdirSync(root).map((f) => join(root, f)) : [];
}

/** A v1 entry file, as trajforge wrote them before segments. */
function writeLegacy(dir: string, key: CacheKey, storedAt: number, value: unknown): string {
  const file = join(dir, 'v1', key.id.slice(0, 2), `${key.id}.json`);
  mkdirSync(join(file, '..'), { recursive: true });
  writeFileSync(file, JSON.stringify({ v: 1, key: key.material, stored_at: storedAt, value }));
  return file;
}

const lines = (file: string): number => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0);

describe('DirStore', () => {
  const key = (n: number | string) => cacheKey({ command: 'x' }, 'tool', { q: n });

  it('returns what was stored, from one segment (a log and its index), and misses what was not', async () => {
    const dir = tempDir('tf-store-');
    const store = DirStore.open({ dir, ttlS: DAY, prune: false });
    expect(files(dir)).toEqual([]);
    await store.set(key(1), { content: [{ type: 'text', text: 'one' }] });
    await store.set(key(2), 'two');
    await store.set(key(1), 'again');
    expect(await store.get(key(1))).toBe('again');
    expect(await store.get(key(2))).toBe('two');
    expect(await store.get(key(3))).toBeUndefined();
    const made = files(dir);
    expect(made.map((f) => f.slice(-4)).sort()).toEqual(['.idx', '.log']);
    const log = made.find((f) => f.endsWith('.log'))!;
    expect(readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).value)).toEqual([{ content: [{ type: 'text', text: 'one' }] }, 'two', 'again']);
    expect(statSync(log.replace(/\.log$/, '.idx')).size).toBe(3 * 24);
    await store.close();
  });

  it('indexes each entry by its bytes, not its characters: entries of multi-byte text after one another read back whole in another store', async () => {
    const dir = tempDir('tf-store-');
    const a = DirStore.open({ dir, ttlS: DAY, prune: false });
    const values = ['é'.repeat(3000), '😀 emoji', 'plain', '中文'.repeat(40_000)];
    for (const [i, v] of values.entries()) await a.set(key(`u${i}`), v);
    await a.close();
    const b = DirStore.open({ dir, ttlS: DAY, prune: false });
    for (const [i, v] of values.entries()) expect(await b.get(key(`u${i}`))).toBe(v);
    await b.close();
  });

  it('finds what another store wrote: when it opens, and after a miss while both are open', async () => {
    const dir = tempDir('tf-store-');
    const a = DirStore.open({ dir, ttlS: DAY, prune: false });
    await a.set(key(1), 'one');
    const b = DirStore.open({ dir, ttlS: DAY, prune: false });
    expect(await b.get(key(1))).toBe('one');
    // b looked a moment ago: a's next entry shows once the refresh interval has passed.
    await a.set(key(2), 'two');
    await a.set(key(1), 'one, again');
    await new Promise((r) => setTimeout(r, 2100));
    expect(await b.get(key(2))).toBe('two');
    expect(await b.get(key(1))).toBe('one, again');
    await b.set(key(3), 'three');
    await Promise.all([a.close(), b.close()]);
    const c = DirStore.open({ dir, ttlS: DAY, prune: false });
    expect(await Promise.all([1, 2, 3].map((i) => c.get(key(i))))).toEqual(['one, again', 'two', 'three']);
    expect(files(dir).filter((f) => f.endsWith('.log'))).toHaveLength(2);
  });

  it('gives every segment its own name when many stores in one process open theirs within one millisecond', async () => {
    const dir = tempDir('tf-store-');
    // A clock that stands still: every segment is opened in the same millisecond, for certain.
    const now = () => 1_700_000_000_000;
    const stores = Array.from({ length: 40 }, () => DirStore.open({ dir, ttlS: DAY, prune: false, now, segmentBytes: 200 }));
    // Each store writes three entries of ~150 bytes, so each opens three segments.
    for (let round = 0; round < 3; round++) {
      for (const [i, s] of stores.entries()) await s.set(key(`${i}/${round}`), 'x'.repeat(100));
    }
    await Promise.all(stores.map((s) => s.close()));
    expect(files(dir).filter((f) => f.endsWith('.log'))).toHaveLength(120);
    const again = DirStore.open({ dir, ttlS: DAY, prune: false, now });
    expect(again.size).toBe(120);
    for (let i = 0; i < 40; i++) expect(await again.get(key(`${i}/2`))).toBe('x'.repeat(100));
  });

  it('reads segments opened within one millisecond in the order they were opened: the later entry wins', async () => {
    const dir = tempDir('tf-store-');
    const now = () => 1_700_000_000_000;
    // Twelve segments from one store in one millisecond: a counter compared as text puts "10" before "9".
    const store = DirStore.open({ dir, ttlS: DAY, prune: false, now, segmentBytes: 10 });
    for (let i = 0; i < 12; i++) await store.set(key('same'), `version ${i}`);
    await store.close();
    const again = DirStore.open({ dir, ttlS: DAY, prune: false, now });
    expect(await again.get(key('same'))).toBe('version 11');
  });

  it('starts a new segment when the log reaches its size, and reads across all of them', async () => {
    const dir = tempDir('tf-store-');
    const store = DirStore.open({ dir, ttlS: DAY, prune: false, segmentBytes: 1000 });
    for (let i = 0; i < 30; i++) await store.set(key(i), 'x'.repeat(100 + i));
    const logs = files(dir).filter((f) => f.endsWith('.log'));
    expect(logs.length).toBeGreaterThan(3);
    for (const log of logs) expect(statSync(log).size).toBeLessThan(1000 + 300);
    await store.close();
    const again = DirStore.open({ dir, ttlS: DAY, prune: false });
    expect(again.size).toBe(30);
    for (let i = 0; i < 30; i++) expect(await again.get(key(i))).toBe('x'.repeat(100 + i));
  });

  it('expires entries by the reader’s TTL', async () => {
    const dir = tempDir('tf-store-');
    let now = 1_000_000_000_000;
    const writer = DirStore.open({ dir, ttlS: 10, prune: false, now: () => now });
    await writer.set(key(1), 'v');
    now += 9_000;
    expect(await writer.get(key(1))).toBe('v');
    now += 2_000;
    expect(await writer.get(key(1))).toBeUndefined();
    const patient = DirStore.open({ dir, ttlS: 60, prune: false, now: () => now });
    expect(await patient.get(key(1))).toBe('v');
  });

  it('treats a damaged entry, one whose full key differs (a hash collision), or a cut index record as a miss', async () => {
    const dir = tempDir('tf-store-');
    const store = DirStore.open({ dir, ttlS: DAY, prune: false });
    await store.set(key(1), 'v');
    await store.close();
    const log = files(dir).find((f) => f.endsWith('.log'))!;
    const line = readFileSync(log, 'utf8');
    // Same length, other key: the index still points at it.
    writeFileSync(log, line.replace(key(1).material.replaceAll('"', '\\"'), key(2).material.replaceAll('"', '\\"')));
    expect(await DirStore.open({ dir, ttlS: DAY, prune: false }).get(key(1))).toBeUndefined();
    writeFileSync(log, line.slice(0, 20));
    expect(await DirStore.open({ dir, ttlS: DAY, prune: false }).get(key(1))).toBeUndefined();
    // A writer that died inside its index record left part of one: it is not read.
    const idx = log.replace(/\.log$/, '.idx');
    writeFileSync(idx, readFileSync(idx).subarray(0, 23));
    const reader = DirStore.open({ dir, ttlS: DAY, prune: false });
    expect(reader.size).toBe(0);
    await reader.set(key(1), 'again');
    expect(await reader.get(key(1))).toBe('again');
    // A record that claims more than its log holds is a miss, and nothing of its size is allocated.
    const bogus = Buffer.alloc(24);
    bogus.write(key(5).id.slice(0, 32), 0, 'hex');
    bogus.writeUInt32LE(0xfffffff0, 20);
    writeFileSync(idx, bogus);
    expect(await DirStore.open({ dir, ttlS: DAY, prune: false }).get(key(5))).toBeUndefined();
  });

  it('prunes segments whose every entry has expired, and the old one-file-per-entry tree', async () => {
    const dir = tempDir('tf-store-');
    const hourAgo = Date.now() - 3600_000;
    const old = DirStore.open({ dir, ttlS: 60, prune: false, now: () => hourAgo });
    for (let i = 0; i < 3; i++) await old.set(key(i), i);
    await old.close();
    for (const f of files(dir)) utimesSync(f, hourAgo / 1000, hourAgo / 1000);
    // The old layout: one expired entry, one fresh, and a temporary file a writer died with.
    const gone = writeLegacy(dir, key(10), hourAgo, 10);
    utimesSync(gone, hourAgo / 1000, hourAgo / 1000);
    writeLegacy(dir, key(11), Date.now(), 11);
    const tmp = `${gone}.999.dead.tmp`;
    writeFileSync(tmp, 'partial');
    utimesSync(tmp, hourAgo / 1000 - 7200, hourAgo / 1000 - 7200);

    const store = DirStore.open({ dir, ttlS: 60, prune: false });
    await store.set(key(3), 3);
    expect(await store.prune()).toBe(3 + 1);
    expect(files(dir).filter((f) => f.endsWith('.log'))).toHaveLength(1);
    expect(await Promise.all([0, 1, 2, 3, 10, 11].map((i) => store.get(key(i))))).toEqual([undefined, undefined, undefined, 3, undefined, 11]);
    expect(existsSync(tmp)).toBe(false);
  });

  it('reads an entry of the old layout once, copying it into its segment with its own time, and then needs the old tree no more', async () => {
    const dir = tempDir('tf-store-');
    const storedAt = Date.now() - 30_000;
    const file = writeLegacy(dir, key(1), storedAt, 'from v1');
    writeLegacy(dir, key(2), Date.now() - 120_000, 'expired');
    const store = DirStore.open({ dir, ttlS: 60, prune: false });
    expect(await store.get(key(1))).toBe('from v1');
    expect(await store.get(key(2))).toBeUndefined();
    await store.close();
    rmSync(join(dir, 'v1'), { recursive: true });
    expect(existsSync(file)).toBe(false);
    const later = DirStore.open({ dir, ttlS: 60, prune: false, now: () => storedAt + 59_000 });
    expect(await later.get(key(1))).toBe('from v1');
    const tooLate = DirStore.open({ dir, ttlS: 60, prune: false, now: () => storedAt + 61_000 });
    expect(await tooLate.get(key(1))).toBeUndefined();
  });

  it('falls back to $XDG_CACHE_HOME and ~/.cache, with $TRAJFORGE_CACHE_DIR first', () => {
    expect(defaultCacheDir({ TRAJFORGE_CACHE_DIR: '/tmp/tfc', XDG_CACHE_HOME: '/x' })).toBe('/tmp/tfc');
    expect(defaultCacheDir({ XDG_CACHE_HOME: '/x/cache' })).toBe('/x/cache/trajforge');
    expect(defaultCacheDir({ XDG_CACHE_HOME: 'relative' })).toMatch(/\/\.cache\/trajforge$/);
  });
});

describe('cache keys', () => {
  it('identify a server by how it starts or where it is, not by its name, and leave secrets out', () => {
    const a = serverIdentity({ command: 'node', args: ['s.js'], env: { CORPUS_PATH: '/a', NCBI_API_KEY: 'k1' } });
    const b = serverIdentity({ command: 'node', args: ['s.js'], env: { CORPUS_PATH: '/a', NCBI_API_KEY: 'k2' } });
    const c = serverIdentity({ command: 'node', args: ['s.js'], env: { CORPUS_PATH: '/b' } });
    const d = serverIdentity({ command: 'node', args: ['other.js'], env: {} });
    const k = (id: Record<string, unknown>) => cacheKey(id, 'pubmed_search', { query: 'q', limit: 5 }).id;
    expect(k(a)).toBe(k(b));
    expect(k(a)).not.toBe(k(c));
    expect(k(c)).not.toBe(k(d));
    expect(JSON.stringify(a)).not.toContain('k1');
    const h1 = serverIdentity({ url: 'https://mcp.example/x', headers: { Authorization: 'Bearer 1' } });
    const h2 = serverIdentity({ url: 'https://mcp.example/x', headers: { Authorization: 'Bearer 2' } });
    expect(k(h1)).toBe(k(h2));
    // Argument order does not matter; values do.
    expect(cacheKey(a, 't', { a: 1, b: 2 }).id).toBe(cacheKey(a, 't', { b: 2, a: 1 }).id);
    expect(cacheKey(a, 't', { a: 1 }).id).not.toBe(cacheKey(a, 't2', { a: 1 }).id);
  });
});

describe('executor with the cache', () => {
  const open: Executor[] = [];
  afterEach(async () => {
    while (open.length) await open.pop()!.close();
  });

  async function start(cacheDir: string, opts: { args?: string[]; log?: string; cache?: boolean; warn?: (m: string) => void } = {}): Promise<Executor> {
    const cfg = RunConfig.parse({
      endpoint: { model: 'm' },
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, ...(opts.args ?? [])], env: opts.log ? { CORPUS_CALL_LOG: opts.log } : {} } },
      tools: { aliases: { search: { server: 'corpus', tool: 'pubmed_search' } } },
      executor: { cache: opts.cache ?? true, cache_dir: cacheDir, call_timeout_ms: 10_000 },
    });
    const ex = await Executor.start({ servers: cfg.mcpServers, tools: cfg.tools, executor: cfg.executor, warn: opts.warn });
    open.push(ex);
    return ex;
  }
  const call = (query: string, attributes: Record<string, string> = {}) => ({ toolName: 'search', query, attributes });

  it('serves a call made by an earlier executor (another run) from disk, with the same result', async () => {
    const dir = tempDir('tf-ex-');
    const log = join(dir, 'calls.jsonl');
    const first = await start(join(dir, 'cache'), { log });
    const a = await first.call(call('css grid', { limit: '3' }), 'c1', new Map());
    await first.close();
    const second = await start(join(dir, 'cache'), { log });
    const b = await second.call(call('css grid', { limit: '3' }), 'c2', new Map());
    expect(a.cached).toBe(false);
    expect(b.cached).toBe(true);
    expect(b.result).toEqual(a.result);
    expect(b.view).toEqual(a.view);
    expect(lines(log)).toBe(1);
    expect(second.stats()).toMatchObject({ calls: 0, cacheHits: 1, cacheMisses: 0 });
  });

  it('does not share results between servers that start differently under the same name', async () => {
    const dir = tempDir('tf-ex-');
    const log = join(dir, 'calls.jsonl');
    await (await start(join(dir, 'cache'), { log })).call(call('css grid'), 'c', new Map());
    const other = await start(join(dir, 'cache'), { log, args: ['--delay-ms', '0'] });
    expect((await other.call(call('css grid'), 'c', new Map())).cached).toBe(false);
    expect(lines(log)).toBe(2);
  });

  it('never caches a failed call', async () => {
    const dir = tempDir('tf-ex-');
    const ex = await start(join(dir, 'cache'));
    // limit 0 passes coercion but fails the server's own schema: the tool answers with an error.
    const a = await ex.call(call('css grid', { limit: '0' }), 'c', new Map());
    const b = await ex.call(call('css grid', { limit: '0' }), 'c', new Map());
    expect(a.error).toBeDefined();
    expect([a.cached, b.cached]).toEqual([false, false]);
    expect(ex.stats()).toMatchObject({ calls: 2, cacheHits: 0, cacheMisses: 2 });
    expect(files(join(dir, 'cache'))).toEqual([]);
  });

  it('makes one server call for identical calls in flight together', async () => {
    const dir = tempDir('tf-ex-');
    const log = join(dir, 'calls.jsonl');
    const ex = await start(join(dir, 'cache'), { log, args: ['--delay-ms', '200'] });
    const results = await Promise.all([1, 2, 3].map((i) => ex.call(call('html video'), `c${i}`, new Map())));
    expect(results.map((r) => r.cached).sort()).toEqual([false, true, true]);
    expect(lines(log)).toBe(1);
  });

  it('with cache: false, writes nothing and calls the server every time', async () => {
    const dir = tempDir('tf-ex-');
    const log = join(dir, 'calls.jsonl');
    const ex = await start(join(dir, 'cache'), { log, cache: false });
    await ex.call(call('css grid'), 'c', new Map());
    expect((await ex.call(call('css grid'), 'c', new Map())).cached).toBe(false);
    expect(lines(log)).toBe(2);
    expect(existsSync(join(dir, 'cache'))).toBe(false);
  });

  it('runs on with an in-memory cache, and says so once, when the directory cannot be made', async () => {
    const dir = tempDir('tf-ex-');
    writeFileSync(join(dir, 'file'), 'in the way');
    const warnings: string[] = [];
    const ex = await start(join(dir, 'file', 'cache'), { warn: (m) => warnings.push(m) });
    const a = await ex.call(call('css grid'), 'c', new Map());
    const b = await ex.call(call('css grid'), 'c', new Map());
    expect([a.error, a.cached, b.cached]).toEqual([undefined, false, true]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/cannot use .*file\/cache .*caching in memory for this run only/);
  });
});

const node = (script: string, args: string[]) => runNode(['--input-type=module', '-e', script, ...args]);

describe('two processes sharing a cache directory', () => {
  it('write, read and prune together: every entry read is whole, none is lost', async () => {
    const dir = tempDir('tf-shared-');
    const keyOf = (i: number) => cacheKey({ s: 1 }, 't', { i });
    // An expired segment of 200 entries, which the processes write again while one of them
    // prunes, and a fresh one of 200 other keys.
    const stale = DirStore.open({ dir, ttlS: 60, prune: false, now: () => Date.now() - 3600_000 });
    for (let i = 0; i < 200; i++) await stale.set(keyOf(i), { i, old: true });
    await stale.close();
    const old = (Date.now() - 3600_000) / 1000;
    for (const f of files(dir)) utimesSync(f, old, old);
    const fresh = DirStore.open({ dir, ttlS: 60, prune: false });
    for (let i = 400; i < 600; i++) await fresh.set(keyOf(i), { i });
    await fresh.close();

    // Each process writes the keys of its parity, then keeps rewriting five of them while it
    // reads five of the other's; once both are done, each reads all 400. A value read must be
    // whole (its padding as long as it was written) and for the key asked, and at the end every
    // key of the other's parity must be the other's.
    const script = `
      import { existsSync, writeFileSync } from 'node:fs';
      import { DirStore, cacheKey } from ${JSON.stringify(CACHE_JS)};
      const [dir, role] = process.argv.slice(1);
      const mine = role === 'even' ? 0 : 1;
      const store = DirStore.open({ dir, ttlS: 60, prune: false });
      const key = (i) => cacheKey({ s: 1 }, 't', { i });
      const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
      let pruning = role === 'odd';
      const pruner = (async () => { while (pruning) { await store.prune(); await sleep(5); } })();
      const padOf = (i) => 20000 + (i % 7) * 5000;
      const write = (i) => store.set(key(i), { i, pid: process.pid, pad: 'x'.repeat(padOf(i)) });
      let bad = 0;
      const read = async (i) => {
        const v = await store.get(key(i));
        if (v !== undefined && !v.old && (v.i !== i || v.pad.length !== padOf(i))) bad++;
        return v;
      };
      for (let i = mine; i < 400; i += 2) {
        await write(i);
        await read((i + 1) % 400);
      }
      const until = Date.now() + 2500;
      while (Date.now() < until) {
        await write(2 * Math.floor(Math.random() * 5) + mine);
        await read(2 * Math.floor(Math.random() * 5) + 1 - mine);
        await sleep(1);
      }
      pruning = false;
      await pruner;
      writeFileSync(dir + '/done-' + role, '');
      while (!existsSync(dir + '/done-' + (role === 'even' ? 'odd' : 'even'))) await sleep(20);
      await sleep(2100);
      let theirs = 0;
      for (let i = 0; i < 400; i++) {
        const v = await read(i);
        if (i % 2 !== mine && v?.pid !== undefined && v.pid !== process.pid) theirs++;
      }
      await store.close();
      if (bad) throw new Error(bad + ' reads saw a wrong or partial entry');
      console.log(theirs);
    `;
    const [a, b] = await Promise.all([node(script, [dir, 'even']), node(script, [dir, 'odd'])]);
    expect(a.stderr + b.stderr).toBe('');
    expect([a.code, b.code]).toEqual([0, 0]);
    expect([Number(a.stdout), Number(b.stdout)]).toEqual([200, 200]);
    const after = DirStore.open({ dir, ttlS: 60, prune: false });
    const missing: number[] = [];
    for (let i = 0; i < 600; i++) {
      const v = (await after.get(keyOf(i))) as { i: number; old?: boolean } | undefined;
      if (v?.i !== i || v.old) missing.push(i);
    }
    expect(missing).toEqual([]);
    // The expired segment was pruned; the fresh one and the two processes' are there.
    expect(files(dir).filter((f) => f.endsWith('.log'))).toHaveLength(3);
  }, 60_000);
});

describe('runs sharing the cache', () => {
  const outputs = (runDir: string): Record<string, string[]> => {
    const rows = [...readJsonl(join(runDir, 'trajectories.jsonl')), ...readJsonl(join(runDir, 'failures.jsonl'))];
    return Object.fromEntries(rows.map((t) => [t.id, t.tool_calls.map((c: { output_text: string }) => c.output_text)]));
  };
  const reached = (runDir: string) =>
    [...readJsonl(join(runDir, 'trajectories.jsonl')), ...readJsonl(join(runDir, 'failures.jsonl'))].flatMap((t) => t.tool_calls).filter((c) => !c.skipped);

  /** The demo config against a fresh sim (the same seed gives the same model turns for the same tool outputs). */
  async function generate(dir: string, name: string, flags: string[], log: string) {
    const sim = await startSim({ port: 0, seed: 7 });
    try {
      const config = writeConfig(join(dir, name), sim.url, {
        mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER], env: { CORPUS_CALL_LOG: log } } },
      });
      const out = join(dir, name, 'run');
      const res = await runCli(['generate', '--config', config, '--limit', '12', '--out', out, ...flags]);
      expect(res.code, res.stderr).toBe(0);
      return { out, stderr: res.stderr };
    } finally {
      await sim.close();
    }
  }

  it('a second run with the same cache reaches no server and shows the same outputs; --no-cache does reach it', async () => {
    const dir = tempDir('tf-runs-');
    const cache = join(dir, 'cache');
    const log = join(dir, 'corpus-calls.jsonl');
    for (const n of ['one', 'two', 'three']) mkdirSync(join(dir, n));

    const one = await generate(dir, 'one', ['--cache-dir', cache], log);
    const served = lines(log);
    expect(served).toBeGreaterThan(0);
    expect(reached(one.out).length).toBeGreaterThanOrEqual(served);

    const two = await generate(dir, 'two', ['--cache-dir', cache], log);
    expect(lines(log)).toBe(served);
    expect(outputs(two.out)).toEqual(outputs(one.out));
    const calls = reached(two.out);
    expect(calls.length).toBeGreaterThan(0);
    expect(calls.every((c) => c.cached === true)).toBe(true);
    expect(two.stderr).toMatch(new RegExp(`cache ${calls.length}/0`));

    const stats = await runCli(['stats', two.out, '--json']);
    expect(JSON.parse(stats.stdout).tools.pubmed_search.cached).toBe(calls.length);

    await generate(dir, 'three', ['--cache-dir', cache, '--no-cache'], log);
    expect(lines(log)).toBeGreaterThan(served);
  }, 120_000);

  it('two runs at once share the cache without errors, and a third finds all their results', async () => {
    const dir = tempDir('tf-runs-');
    const cache = join(dir, 'cache');
    const log = join(dir, 'corpus-calls.jsonl');
    for (const n of ['a', 'b', 'c']) mkdirSync(join(dir, n));
    const [a] = await Promise.all([generate(dir, 'a', ['--cache-dir', cache], log), generate(dir, 'b', ['--cache-dir', cache], log)]);
    expect(a.stderr).not.toMatch(/warning: tool-result cache/);
    const before = lines(log);
    const c = await generate(dir, 'c', ['--cache-dir', cache], log);
    expect(lines(log)).toBe(before);
    expect(outputs(c.out)).toEqual(outputs(a.out));
  }, 120_000);
});
