/**
 * The tool-result cache: the store on its own, the executor on top of it, two processes
 * sharing one directory, and whole runs repeated against it. Needs a built dist/.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { cacheKey, defaultCacheDir, DirStore, serverIdentity } from '../pipeline/cache.js';
import { Executor } from '../pipeline/executor.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { RunConfig } from '../schemas/index.js';
import { startSim } from '../sim/server.js';
import { CORPUS_SERVER, readJsonl, runCli, runNode, tempDir, writeConfig } from './helpers.js';

const CACHE_JS = join(PACKAGE_ROOT, 'dist/pipeline/cache.js');
const DAY = 24 * 3600;

/** Every entry file under a cache directory. */
function entries(dir: string): string[] {
  const root = join(dir, 'v1');
  if (!existsSync(root)) return [];
  return readdirSync(root).flatMap((shard) => readdirSync(join(root, shard)).map((f) => join(root, shard, f)));
}

const lines = (file: string): number => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0);

describe('DirStore', () => {
  const key = (n: number | string) => cacheKey({ command: 'x' }, 'tool', { q: n });

  it('returns what was stored, leaves no temporary file, and misses what was not', async () => {
    const dir = tempDir('tf-store-');
    const store = DirStore.open({ dir, ttlS: DAY, prune: false });
    await store.set(key(1), { content: [{ type: 'text', text: 'one' }] });
    expect(await store.get(key(1))).toEqual({ content: [{ type: 'text', text: 'one' }] });
    expect(await store.get(key(2))).toBeUndefined();
    expect(entries(dir).map((f) => f.slice(-5))).toEqual(['.json']);
  });

  it('works the same with synchronous file calls, asynchronous ones, and after giving up slow synchronous ones', async () => {
    for (const opts of [{}, { sync: false }, { slowSyncMs: 0 }]) {
      const dir = tempDir('tf-store-');
      const store = DirStore.open({ dir, ttlS: DAY, prune: false, ...opts });
      expect(await store.get(key(1))).toBeUndefined();
      await store.set(key(1), 'one');
      await store.set(key(1), 'again');
      expect(await store.get(key(1))).toBe('again');
      expect(entries(dir).map((f) => f.slice(-5))).toEqual(['.json']);
      // A threshold of 0 ms: the first timed call is slow, and the store is asynchronous from then on.
      if ('slowSyncMs' in opts || 'sync' in opts) expect(store.synchronous).toBe(false);
    }
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

  it('treats a corrupt entry, or one whose full key differs (a hash collision), as a miss', async () => {
    const dir = tempDir('tf-store-');
    const store = DirStore.open({ dir, ttlS: DAY, prune: false });
    await store.set(key(1), 'v');
    const [file] = entries(dir);
    const entry = JSON.parse(readFileSync(file!, 'utf8'));
    writeFileSync(file!, JSON.stringify({ ...entry, key: key(2).material }));
    expect(await store.get(key(1))).toBeUndefined();
    writeFileSync(file!, '{"v":1,"key":');
    expect(await store.get(key(1))).toBeUndefined();
    await store.set(key(1), 'again');
    expect(await store.get(key(1))).toBe('again');
  });

  it('prunes expired entries and stale temporary files, and keeps a fresh entry that looks old', async () => {
    const dir = tempDir('tf-store-');
    const store = DirStore.open({ dir, ttlS: 60, prune: false });
    for (let i = 0; i < 5; i++) await store.set(key(i), i);
    const old = (Date.now() - 3600_000) / 1000;
    const files = entries(dir);
    // Entries 0-2 really are old; entry 3 is fresh inside but its file looks old (copied without times).
    for (const f of files) {
      const e = JSON.parse(readFileSync(f, 'utf8'));
      if (e.value <= 2) writeFileSync(f, JSON.stringify({ ...e, stored_at: Date.now() - 3600_000 }));
      if (e.value <= 3) utimesSync(f, old, old);
    }
    const tmp = `${files[0]}.999.dead.tmp`;
    writeFileSync(tmp, 'partial');
    utimesSync(tmp, old - 7200, old - 7200);
    expect(await store.prune()).toBe(4);
    expect(await Promise.all([0, 1, 2, 3, 4].map((i) => store.get(key(i))))).toEqual([undefined, undefined, undefined, 3, 4]);
    expect(existsSync(tmp)).toBe(false);
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
    expect(entries(join(dir, 'cache'))).toEqual([]);
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
  it('write, read and prune together: no reader sees a partial entry, no entry is lost', async () => {
    const dir = tempDir('tf-shared-');
    const keyOf = (i: number) => cacheKey({ s: 1 }, 't', { i });
    // 200 expired entries, which the writers renew while one of them prunes, and 200 fresh ones.
    const stale = DirStore.open({ dir, ttlS: 60, prune: false, now: () => Date.now() - 3600_000 });
    for (let i = 0; i < 200; i++) await stale.set(keyOf(i), { i, old: true });
    const old = (Date.now() - 3600_000) / 1000;
    for (const f of entries(dir)) utimesSync(f, old, old);
    const fresh = DirStore.open({ dir, ttlS: 60, prune: false });
    for (let i = 200; i < 400; i++) await fresh.set(keyOf(i), { i });

    // Each process rewrites every key, and between writes reads entry files directly: a file
    // that exists must always hold a whole entry (writes are renamed into place).
    const script = `
      import { readFile } from 'node:fs/promises';
      import { join } from 'node:path';
      import { DirStore, cacheKey } from ${JSON.stringify(CACHE_JS)};
      const [dir, prune] = process.argv.slice(1);
      const store = DirStore.open({ dir, ttlS: 60, prune: false });
      const key = (i) => cacheKey({ s: 1 }, 't', { i });
      const file = (k) => join(dir, 'v1', k.id.slice(0, 2), k.id + '.json');
      let pruning = prune === 'yes';
      const pruner = (async () => { while (pruning) await store.prune(); })();
      let torn = 0, reads = 0;
      const check = async (k) => {
        let text;
        try { text = await readFile(file(k), 'utf8'); } catch { return; }
        reads++;
        try { if (JSON.parse(text).key !== k.material) torn++; } catch { torn++; }
      };
      const value = (i) => ({ i, pid: process.pid, pad: 'x'.repeat(20000 + (i % 7) * 5000) });
      for (let i = 0; i < 400; i++) {
        await store.set(key(i), value(i));
        await check(key(i));
      }
      // Then both hammer five keys for a while: each write races the other process's reads.
      const until = Date.now() + 1500;
      while (Date.now() < until) {
        const i = Math.floor(Math.random() * 5);
        await store.set(key(i), value(i));
        await check(key((i + 1) % 5));
      }
      pruning = false;
      await pruner;
      if (torn) throw new Error(torn + ' of ' + reads + ' reads saw a partial entry');
    `;
    const [a, b] = await Promise.all([node(script, [dir, 'no']), node(script, [dir, 'yes'])]);
    expect(a.stderr + b.stderr).toBe('');
    expect([a.code, b.code]).toEqual([0, 0]);
    const missing: number[] = [];
    for (let i = 0; i < 400; i++) {
      const v = (await fresh.get(keyOf(i))) as { i: number; old?: boolean } | undefined;
      if (v?.i !== i || v.old) missing.push(i);
    }
    expect(missing).toEqual([]);
    expect(entries(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
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
