import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunConfig } from '../../schemas/index.js';
import { TrajforgeError } from '../../pipeline/errors.js';
import { Executor, coerceArguments, toView } from '../../pipeline/generate/executor.js';
import { CORPUS_SERVER, tempDir } from '../helpers.js';

function options(args: string[] = [], patch: Partial<{ limits: Record<string, number>; call_timeout_ms: number }> = {}, env: Record<string, string> = {}) {
  const cfg = RunConfig.parse({
    endpoint: { model: 'm' },
    mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, ...args], env } },
    tools: { aliases: { search: { server: 'corpus', tool: 'pubmed_search' } }, limits: patch.limits ?? {} },
    executor: { call_timeout_ms: patch.call_timeout_ms ?? 10_000 },
  });
  return { servers: cfg.mcpServers, tools: cfg.tools, executor: cfg.executor };
}
const call = (query: string, attributes: Record<string, string> = {}, toolName = 'search') => ({ toolName, query, attributes });

describe('executor', () => {
  let ex: Executor;
  beforeAll(async () => {
    ex = await Executor.start(options([], { limits: { search: 2 } }));
  });
  afterAll(() => ex.close());

  it('lists the aliased tool with its schema and body parameter', () => {
    const [spec] = ex.tools();
    expect(spec?.name).toBe('search');
    expect(spec?.bodyParam).toBe('query');
    expect(Object.keys((spec?.inputSchema.properties ?? {}) as object)).toEqual(expect.arrayContaining(['query', 'limit']));
  });

  it('maps body and attributes onto the input schema, typed, and returns documents with their own ids', async () => {
    const r = await ex.call(call('CSS property grid Firefox', { limit: '3' }), 'abcd1234', new Map());
    expect(r.error).toBeUndefined();
    expect(r.arguments).toEqual({ query: 'CSS property grid Firefox', limit: 3 });
    expect(r.parameters).toEqual({ limit: 3 });
    expect(r.view.documents).toHaveLength(3);
    expect(r.view.documents![0]!.id).toMatch(/^[a-z]+\./);
    expect(r.view.header).toMatch(/^Found \d+ results\. Showing top 3:/);
  });

  it('serves an identical call from the cache', async () => {
    const first = await ex.call(call('html element video'), 'c1', new Map());
    const second = await ex.call(call('html element  video'.replace('  ', ' ')), 'c2', new Map());
    expect(first.cached).toBe(false);
    expect(second.cached).toBe(true);
    expect(second.view).toEqual(first.view);
  });

  it('tells the model about a mistyped attribute instead of calling', async () => {
    const r = await ex.call(call('grid', { limit: 'five' }), 'c', new Map());
    expect(r.skipped).toBe(true);
    expect(r.view.error).toMatch(/limit must be an integer/);
  });

  it('refuses an unknown tool and a call past its limit, and runs nothing', async () => {
    const unknown = await ex.call(call('x', {}, 'browse_webpage'), 'c', new Map());
    expect(unknown.skipped).toBe(true);
    expect(unknown.view.error).toMatch(/unknown tool "browse_webpage"; available tools: search/);
    const over = await ex.call(call('grid'), 'c', new Map([['search', 2]]));
    expect(over.skipped).toBe(true);
    expect(over.view.error).toMatch(/at most 2 times/);
  });

  it('restarts a server that crashed under a call and retries the call once', async () => {
    const crashy = await Executor.start(options(['--crash-every', '2']));
    try {
      const a = await crashy.call(call('css grid'), 'c', new Map());
      const b = await crashy.call(call('css flexbox'), 'c', new Map());
      expect(a.error).toBeUndefined();
      expect(b.error).toBeUndefined();
      expect(b.view.documents?.length).toBeGreaterThan(0);
      expect(crashy.stats().restarts).toBe(1);
    } finally {
      await crashy.close();
    }
  });

  it('a server dead past max_restarts is down: its calls fail at once, it is tried again after a doubling backoff, and it comes back', async () => {
    const dir = tempDir('tf-down-');
    const flag = join(dir, 'crash');
    writeFileSync(flag, '');
    const log = join(dir, 'calls.jsonl');
    const o = options(['--crash-while', flag], {}, { CORPUS_CALL_LOG: log });
    const ex = await Executor.start({ ...o, executor: { ...o.executor, cache: false, max_restarts: 1, restart_backoff_ms: 1_000, restart_backoff_max_ms: 10_000 } });
    try {
      // Dies under the call, is restarted once (the budget), dies again: the call fails.
      const first = await ex.call(call('css grid'), 'c1', new Map());
      expect(first.error).toMatch(/^tool server corpus failed: /);
      expect(ex.stats().restarts).toBe(1);
      // Down now: refused at once, no process started, the wait named.
      const refused = await ex.call(call('css grid'), 'c2', new Map());
      expect(refused.error).toMatch(/^tool server corpus is down \(its restart budget is spent, executor.max_restarts = 1; it is tried again 1000 ms after its last failure, in [01]\.\d s\)$/);
      expect(refused.skipped).toBe(false);
      expect(ex.stats().restarts).toBe(1);
      // After the wait, one try: it dies again, and the next wait is twice as long.
      await sleep(1_100);
      // The call's own retry on a new process is refused: the server is down until the next wait is over. The error says both.
      expect((await ex.call(call('css grid'), 'c3', new Map())).error).toMatch(/^tool server corpus failed: .*Connection closed; it is down now \(its restart budget is spent, .*; it is tried again 2000 ms after its last failure, in [0-2]\.\d s\)$/);
      expect(ex.stats().restarts).toBe(2);
      expect((await ex.call(call('css grid'), 'c4', new Map())).error).toMatch(/it is tried again 2000 ms after its last failure/);
      expect(ex.stats().down).toEqual([{ server: 'corpus', periods: 1, ms: expect.any(Number), downAtEnd: true }]);
      // The fault goes away; after the wait the server is started again and the call goes through.
      rmSync(flag);
      await sleep(2_100);
      const back = await ex.call(call('css grid'), 'c5', new Map());
      expect(back.error).toBeUndefined();
      expect(back.view.documents?.length).toBeGreaterThan(0);
      expect(existsSync(log)).toBe(true);
      const [down] = ex.stats().down;
      expect(down).toMatchObject({ server: 'corpus', periods: 1, downAtEnd: false });
      // Down from the refused call until the call that went through: at least the two waits.
      expect(down!.ms).toBeGreaterThanOrEqual(1_000 + 2_000);
    } finally {
      await ex.close();
    }
  });

  it('a server still down when the run ends is reported so', async () => {
    const dir = tempDir('tf-down-end-');
    const flag = join(dir, 'crash');
    writeFileSync(flag, '');
    const o = options(['--crash-while', flag]);
    const ex = await Executor.start({ ...o, executor: { ...o.executor, cache: false, max_restarts: 0, restart_backoff_ms: 60_000 } });
    // No restart allowed: the call's own retry already finds the server down, and the error says both.
    expect((await ex.call(call('css grid'), 'c1', new Map())).error).toMatch(/^tool server corpus failed: .*; it is down now \(its restart budget is spent, executor.max_restarts = 0; /);
    expect((await ex.call(call('css grid'), 'c2', new Map())).error).toMatch(/is down/);
    expect(ex.stats().restarts).toBe(0);
    await ex.close();
    expect(ex.stats().down).toEqual([{ server: 'corpus', periods: 1, ms: expect.any(Number), downAtEnd: true }]);
  });

  it('a result larger than the stdio buffer (50 MB) is the tool error result_too_large; the server lives on and the calls beside it succeed', async () => {
    const dir = tempDir('tf-huge-');
    const log = join(dir, 'calls.jsonl');
    // Every result with a document carries 60 MB more; a search that finds nothing stays small.
    const o = options(['--huge-result', String(60_000_000)], {}, { CORPUS_CALL_LOG: log });
    const ex = await Executor.start({ ...o, executor: { ...o.executor, cache: false } });
    try {
      const [huge, beside] = await Promise.all([ex.call(call('css grid'), 'c1', new Map()), ex.call(call('qqxqzzwy nothingmatches'), 'c2', new Map())]);
      expect(huge.error).toMatch(/^result_too_large: the server sent 6\d\.\d MB, more than executor.max_message_bytes \(52\.4 MB\); ask for less$/);
      expect(huge.skipped).toBe(false);
      expect(beside.error).toBeUndefined();
      expect(beside.view.header).toBe('No results found.');
      const after = await ex.call(call('zzqqxxyy nomatch'), 'c3', new Map());
      expect(after.error).toBeUndefined();
      const stats = ex.stats();
      expect(stats.restarts).toBe(0);
      expect(stats.protocolErrors).toBe(0);
      // One process answered all three.
      const pids = readFileSync(log, 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { pid: number }).pid);
      expect(pids).toHaveLength(3);
      expect(new Set(pids).size).toBe(1);
    } finally {
      await ex.close();
    }
  });

  it('tools.expose is enforced: a tool left out is unknown to the model and its call never reaches the server', async () => {
    const dir = tempDir('tf-expose-');
    const log = join(dir, 'calls.jsonl');
    const o = options([], {}, { CORPUS_CALL_LOG: log });
    const ex = await Executor.start({ ...o, tools: { ...o.tools, expose: ['search'] }, executor: { ...o.executor, cache: false } });
    try {
      expect(ex.tools().map((t) => t.name)).toEqual(['search']);
      expect(ex.hasTool('pubmed_search')).toBe(false);
      const hidden = await ex.call(call('css grid', {}, 'pubmed_search'), 'c1', new Map());
      expect(hidden.skipped).toBe(true);
      expect(hidden.error).toBe('unknown tool "pubmed_search"; available tools: search');
      expect(existsSync(log)).toBe(false);
      const shown = await ex.call(call('css grid'), 'c2', new Map());
      expect(shown.error).toBeUndefined();
      expect(readFileSync(log, 'utf8').trim().split('\n')).toHaveLength(1);
    } finally {
      await ex.close();
    }
  });

  it('two servers offering one tool name is an error at start naming both; an alias resolves it', async () => {
    const twoServers = (tools: Record<string, unknown>) => {
      const cfg = RunConfig.parse({
        endpoint: { model: 'm' },
        mcpServers: { a: { command: process.execPath, args: [CORPUS_SERVER] }, b: { command: process.execPath, args: [CORPUS_SERVER] } },
        tools,
      });
      return { servers: cfg.mcpServers, tools: cfg.tools, executor: cfg.executor };
    };
    const err = await Executor.start(twoServers({})).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TrajforgeError);
    expect((err as TrajforgeError).code).toBe('BAD_CONFIG');
    expect((err as Error).message).toBe(
      'tools: servers a and b both offer a tool named pubmed_search; choose one with an alias (tools.aliases.pubmed_search: {server: a, tool: pubmed_search})',
    );
    await expect(Executor.start(twoServers({ expose: ['pubmed_search'] }))).rejects.toThrow(/servers a and b both offer .* or leave pubmed_search out of tools.expose$/);
    const resolved = await Executor.start(twoServers({ aliases: { pubmed_search: { server: 'b', tool: 'pubmed_search' } } }));
    try {
      expect(resolved.tools().map((t) => [t.name, t.server])).toEqual([['pubmed_search', 'b']]);
    } finally {
      await resolved.close();
    }
  });

  it('keys other MCP clients write: disabled servers are not started, timeout (seconds) is the call timeout, autoApprove and alwaysAllow are accepted', async () => {
    const cfg = RunConfig.parse({
      endpoint: { model: 'm' },
      mcpServers: {
        corpus: { command: process.execPath, args: [CORPUS_SERVER, '--hang-every', '1'], timeout: 0.3, autoApprove: ['pubmed_search'], alwaysAllow: [] },
        // Would fail to start, and name itself, were it started.
        off: { command: process.execPath, args: [CORPUS_SERVER, '--fail-start'], disabled: true },
      },
      executor: { call_timeout_ms: 60_000 },
    });
    const ex = await Executor.start({ servers: cfg.mcpServers, tools: cfg.tools, executor: cfg.executor });
    try {
      // The corpus server's two tools; none of the disabled server's.
      expect(ex.tools().map((t) => [t.name, t.server])).toEqual([
        ['pubmed_search', 'corpus'],
        ['read_document', 'corpus'],
      ]);
      const started = performance.now();
      const r = await ex.call(call('css grid', {}, 'pubmed_search'), 'c', new Map());
      expect(r.error).toBe('tool call timed out after 300 ms');
      expect(performance.now() - started).toBeLessThan(10_000);
    } finally {
      await ex.close();
    }
    const aliased = RunConfig.parse({
      endpoint: { model: 'm' },
      mcpServers: { off: { command: process.execPath, args: [CORPUS_SERVER], disabled: true } },
      tools: { aliases: { search: { server: 'off', tool: 'pubmed_search' } } },
    });
    await expect(Executor.start({ servers: aliased.mcpServers, tools: aliased.tools, executor: aliased.executor })).rejects.toThrow(
      'tools.aliases.search.server: server off is disabled (mcpServers.off.disabled: true)',
    );
  });

  it('records a hung call as a timeout, not a crash', async () => {
    const hung = await Executor.start(options(['--hang-every', '1'], { call_timeout_ms: 300 }));
    try {
      const r = await hung.call(call('css grid'), 'c', new Map());
      expect(r.error).toMatch(/timed out after 300 ms/);
      expect(r.skipped).toBe(false);
    } finally {
      await hung.close();
    }
  });

  it('takes hundreds of calls in flight to one stdio server without a listener-leak warning', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error): void => void warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    const busy = await Executor.start({ ...options(), executor: { ...options().executor, cache: false } });
    try {
      // Long queries, so the calls in flight are more than the pipe to the server holds.
      const results = await Promise.all(
        Array.from({ length: 300 }, (_, i) => busy.call(call(`grid ${i} ${'padding '.repeat(150)}`), `w${i}`, new Map())),
      );
      expect(results.every((r) => r.error === undefined)).toBe(true);
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((w) => w.includes('MaxListenersExceeded'))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
      await busy.close();
    }
  });

  it('fails to start with the server name and its stderr', async () => {
    const err = await Executor.start(options(['--fail-start'])).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TrajforgeError);
    expect((err as TrajforgeError).code).toBe('TOOL_SERVER_FAILED');
    expect((err as Error).message).toMatch(/mcpServers\.corpus: the server did not start/);
    expect((err as Error).message).toMatch(/stderr of corpus/);
  });

  it('rejects an alias to a tool the server does not have, naming the field', async () => {
    const o = options();
    const bad = { ...o, tools: { ...o.tools, aliases: { search: { server: 'corpus', tool: 'nope' } } } };
    await expect(Executor.start(bad)).rejects.toThrow(/tools\.aliases\.search\.tool: server corpus has no tool nope/);
  });
});

describe('tool results', () => {
  it('gives documents without ids the call id and their index', () => {
    const v = toView(JSON.stringify({ results: [{ title: 'a', snippet: 'x' }, { title: 'b', snippet: 'y' }] }), 'f00dcafe', 100);
    expect(v.documents?.map((d) => d.id)).toEqual(['f00dcafe-0', 'f00dcafe-1']);
  });

  it('shows plain text as one snippet with id {call_id}-0, cut to the limit', () => {
    const v = toView('x'.repeat(1000), 'f00dcafe', 10);
    expect(v.textId).toBe('f00dcafe-0');
    expect(v.text!.length).toBeLessThan(1000);
    expect(v.text).toMatch(/\[\.\.\.\]$/);
  });

  it('coerces booleans and arrays, and names a missing required parameter', () => {
    const schema = { type: 'object', properties: { q: { type: 'string' }, exact: { type: 'boolean' }, tags: { type: 'array' } }, required: ['q'] };
    expect(coerceArguments({ toolName: 't', query: 'hi', attributes: { exact: 'yes', tags: 'a, b' } }, schema, 'q').arguments).toEqual({ q: 'hi', exact: true, tags: ['a', 'b'] });
    expect(() => coerceArguments({ toolName: 't', query: '', attributes: {} }, schema, 'q')).toThrow(/missing required parameter: q/);
  });
});
