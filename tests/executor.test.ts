import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunConfig } from '../schemas/index.js';
import { TrajforgeError } from '../pipeline/errors.js';
import { Executor, coerceArguments, toView } from '../pipeline/generate/executor.js';
import { CORPUS_SERVER } from './helpers.js';

function options(args: string[] = [], patch: Partial<{ limits: Record<string, number>; call_timeout_ms: number }> = {}) {
  const cfg = RunConfig.parse({
    endpoint: { model: 'm' },
    mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, ...args] } },
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

  it('stops restarting a server that dies on every call after max_restarts in a row', async () => {
    const o = options(['--crash-every', '1']);
    const dead = await Executor.start({ ...o, executor: { ...o.executor, max_restarts: 2 } });
    try {
      const results = [];
      for (let i = 0; i < 6; i++) results.push(await dead.call(call(`query ${i}`), 'c', new Map()));
      expect(results.every((r) => r.error !== undefined && !r.skipped)).toBe(true);
      expect(dead.stats().restarts).toBe(2);
      expect(results.at(-1)!.error).toMatch(/restarted 2 times in a row; not restarting it again/);
    } finally {
      await dead.close();
    }
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
