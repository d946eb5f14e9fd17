/**
 * The benchmark-leak guard (tools/web/policy.ts): its rules against hostile spellings of a
 * blocked URL, and the real web and corpus servers applying it — search results dropped,
 * pages not read, each strike in the result's `_meta`, which the executor keeps in the
 * ToolCallRecord. Needs a built dist/ (`npm run build`).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunConfig } from '../../schemas/index.js';
import { Executor } from '../../pipeline/generate/executor.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { DEFAULT_LEAK_BLOCKLIST, LEAK_META_KEY, LeakGuard } from '../../tools/web/policy.js';
import { Replay } from './replay.js';

const WEB = join(PACKAGE_ROOT, 'dist/tools/web/server.js');
const CORPUS = join(PACKAGE_ROOT, 'dist/tools/corpus/server.js');
const CLI = join(PACKAGE_ROOT, 'dist/pipeline/cli/bin.js');

let scratch: string;
let index: string;
const cleanups: (() => Promise<unknown>)[] = [];

const DOCS = [
  { id: 'leak-1', url: 'https://huggingface.co/datasets/gaia-benchmark/GAIA', title: 'GAIA dataset', text: 'The answers to the benchmark questions: forty two.' },
  { id: 'leak-2', url: 'https://github.com/openai/simple-evals/blob/main/browsecomp_eval.py', title: 'BrowseComp eval', text: 'The benchmark questions and their answers.' },
  { id: 'fine-1', url: 'https://en.wikipedia.org/wiki/Benchmark', title: 'Benchmark', text: 'A benchmark is a standard for comparing questions and answers.' },
  { id: 'fine-2', title: 'No URL', text: 'A document about benchmark questions with no address at all.' },
];

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'trajforge-leak-'));
  const file = join(scratch, 'docs.jsonl');
  writeFileSync(file, DOCS.map((d) => JSON.stringify(d)).join('\n') + '\n');
  index = join(scratch, 'index');
  const r = spawnSync(process.execPath, [CLI, 'corpus', 'index', file, '--out', index], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(r.stderr);
});

afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
  rmSync(scratch, { recursive: true, force: true });
});

async function server(script: string, args: string[], env: Record<string, string> = {}): Promise<Client> {
  const transport = new StdioClientTransport({ command: process.execPath, args: [script, ...args], env: { PATH: process.env.PATH ?? '', ...env }, stderr: 'pipe' });
  const client = new Client({ name: 'leak-test', version: '0' });
  await client.connect(transport);
  cleanups.push(() => client.close());
  return client;
}

interface Called {
  isError: boolean;
  body: string;
  blocked: { url: string; rule: string; where: string }[] | undefined;
}

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<Called> {
  const r = await client.callTool({ name, arguments: args });
  const meta = r._meta as Record<string, { blocked: Called['blocked'] }> | undefined;
  return { isError: r.isError === true, body: (r.content as { text: string }[])[0]!.text, blocked: meta?.[LEAK_META_KEY]?.blocked };
}

describe('LeakGuard rules', () => {
  const guard = new LeakGuard();

  it.each([
    'https://huggingface.co/datasets/gaia-benchmark/GAIA',
    'http://HuggingFace.CO/Datasets/cais/hle',
    'https://huggingface.co./datasets/x',
    'https://www.huggingface.co/datasets/x',
    'https://huggingface.co//datasets/x',
    'https://huggingface.co/%64atasets/x',
    'https://huggingface.co/spaces/gaia-benchmark/leaderboard?tab=answers#x',
    'https://user:pw@huggingface.co:443/datasets/x',
    'huggingface.co/datasets/x',
    'https://hf.co/datasets/x',
    'https://datasets-server.huggingface.co/rows?dataset=cais/hle',
    'https://github.com/openai/simple-evals',
    'https://GitHub.com/OpenAI/Simple-Evals/blob/main/browsecomp_eval.py',
    'https://raw.githubusercontent.com/openai/simple-evals/main/x.py',
    'https://lastexam.ai/',
  ])('blocks %s', (url) => {
    expect(guard.match(url)).toBeDefined();
  });

  it.each([
    'https://huggingface.co/models',
    'https://huggingface.co/datasetsfoo',
    'https://huggingface.co/docs/datasets',
    'https://nothuggingface.co/datasets/x',
    'https://huggingface.co.evil.example/datasets/x',
    'https://github.com/openai/simple-evals-fork',
    'https://en.wikipedia.org/wiki/Humanity%27s_Last_Exam',
    'not a url at all',
    '',
  ])('lets %s through', (url) => {
    expect(guard.match(url)).toBeUndefined();
  });

  it('reads a list of its own, with comments, and refuses a rule that is not a host', () => {
    const g = new LeakGuard(['# eval hosts', '', 'example.org/answers   # the answer pages', 'https://eval.example/']);
    expect(g.match('https://example.org/answers/q1')).toBe('example.org/answers');
    expect(g.match('https://example.org/other')).toBeUndefined();
    expect(g.match('http://sub.eval.example/anything')).toBe('eval.example/');
    expect(() => new LeakGuard(['has space/path'])).toThrow(/not a host/);
    expect(DEFAULT_LEAK_BLOCKLIST).toContain('huggingface.co/datasets');
  });
});

describe('the corpus server', () => {
  it('drops blocked documents from search and pubmed_search, refuses to open them, and records each strike', async () => {
    const client = await server(CORPUS, ['--index', index]);
    const search = await call(client, 'search', { query: 'benchmark questions answers', k: 10 });
    expect(search.isError).toBe(false);
    const body = JSON.parse(search.body) as { total: number; results: { id: string }[] };
    expect(body.results.map((r) => r.id).sort()).toEqual(['fine-1', 'fine-2']);
    expect(body.total).toBe(4);
    const byUrl = (a: { url: string }, b: { url: string }): number => (a.url < b.url ? -1 : 1);
    expect([...(search.blocked ?? [])].sort(byUrl)).toEqual(
      [
        { url: DOCS[0]!.url, rule: 'huggingface.co/datasets', where: 'result' },
        { url: DOCS[1]!.url, rule: 'github.com/openai/simple-evals', where: 'result' },
      ].sort(byUrl),
    );
    expect(search.blocked).toHaveLength(2);
    const pubmed = await call(client, 'pubmed_search', { query: 'benchmark questions answers', limit: 10 });
    expect((JSON.parse(pubmed.body) as { data: { paperId: string }[] }).data.map((d) => d.paperId).sort()).toEqual(['fine-1', 'fine-2']);
    expect(pubmed.blocked).toHaveLength(2);
    for (const [tool, args] of [['open', { id: 'leak-1' }], ['open', { id: DOCS[0]!.url }], ['find', { id: 'leak-1', pattern: 'forty' }], ['read_document', { id: 'leak-1' }]] as const) {
      const r = await call(client, tool, args);
      expect(r.isError, tool).toBe(true);
      expect(r.body).toMatch(/^Not read: https:\/\/huggingface\.co\/datasets\/gaia-benchmark\/GAIA matches the benchmark-leak blocklist \(huggingface\.co\/datasets\)/);
      expect(r.body).not.toContain('forty two');
      expect(r.blocked).toEqual([{ url: DOCS[0]!.url, rule: 'huggingface.co/datasets', where: 'fetch' }]);
    }
    const fine = await call(client, 'open', { id: 'fine-1' });
    expect(fine.isError).toBe(false);
    expect(fine.blocked).toBeUndefined();
  });

  it('--blocklist replaces the default list (an empty one turns the guard off), --block adds a rule', async () => {
    const empty = join(scratch, 'empty.txt');
    writeFileSync(empty, '# nothing blocked\n');
    const off = await server(CORPUS, ['--index', index, '--blocklist', empty]);
    const all = await call(off, 'search', { query: 'benchmark questions answers', k: 10 });
    expect((JSON.parse(all.body) as { results: unknown[] }).results).toHaveLength(4);
    expect(all.blocked).toBeUndefined();
    const more = await server(CORPUS, ['--index', index, '--blocklist', empty, '--block', 'en.wikipedia.org/wiki']);
    const r = await call(more, 'search', { query: 'benchmark questions answers', k: 10 });
    expect(r.blocked).toEqual([{ url: DOCS[2]!.url, rule: 'en.wikipedia.org/wiki', where: 'result' }]);
    await expect(server(CORPUS, ['--index', index, '--blocklist', join(scratch, 'missing.txt')])).rejects.toThrow();
  });

  it('through the executor, the strike is in the ToolCallRecord\'s result', async () => {
    const cfg = RunConfig.parse({
      endpoint: { model: 'm' },
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS, '--index', index] } },
      tools: { aliases: { search: { server: 'corpus', tool: 'search' } } },
      executor: { cache: false },
    });
    const ex = await Executor.start({ servers: cfg.mcpServers, tools: cfg.tools, executor: cfg.executor });
    cleanups.push(() => ex.close());
    const r = await ex.call({ toolName: 'search', query: 'benchmark questions answers', attributes: {} }, 'c1', new Map());
    expect(r.error).toBeUndefined();
    const meta = (r.result as { _meta?: Record<string, { blocked: { url: string }[] }> })._meta;
    expect(meta?.[LEAK_META_KEY]?.blocked.map((b) => b.url).sort()).toEqual([DOCS[0]!.url, DOCS[1]!.url].sort());
    expect(r.view.documents?.map((d) => d.id).sort()).toEqual(['fine-1', 'fine-2']);
  });
});

describe('the web server', () => {
  it('google_search drops blocked results and records them', async () => {
    const replay = await Replay.start();
    cleanups.push(() => replay.close());
    const organic = [
      { title: 'GAIA on the Hub', link: 'https://huggingface.co/datasets/gaia-benchmark/GAIA', snippet: 'validation answers', position: 1 },
      { title: 'A fine page', link: 'https://example.org/fine', snippet: 'fine', position: 2 },
    ];
    replay.route('/search', { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ organic }) });
    const client = await server(WEB, [], { SERPER_API_KEY: 'k', SERPER_BASE: replay.url });
    const r = await call(client, 'google_search', { query: 'gaia answers' });
    expect(r.isError).toBe(false);
    expect((JSON.parse(r.body) as { data: { url: string }[] }).data.map((d) => d.url)).toEqual(['https://example.org/fine']);
    expect(r.blocked).toEqual([{ url: organic[0]!.link, rule: 'huggingface.co/datasets', where: 'result' }]);
  });

  it('browse_webpage refuses a blocked page before any request, and one a redirect ends on', async () => {
    const replay = await Replay.start();
    cleanups.push(() => replay.close());
    replay.route('/go', { status: 302, headers: { Location: `http://hf.co:${replay.port}/datasets/cais/hle` } });
    replay.route('/datasets/cais/hle', { headers: { 'Content-Type': 'text/html' }, body: '<p>The answer is forty-two.</p>' });
    const client = await server(WEB, ['--allow-hosts', 'hf.co,127.0.0.1', '--resolve', 'hf.co=127.0.0.1']);
    const direct = await call(client, 'browse_webpage', { url: 'https://huggingface.co/datasets/cais/hle' });
    expect(direct.isError).toBe(true);
    expect(direct.body).toMatch(/^Not read: .* matches the benchmark-leak blocklist \(huggingface\.co\/datasets\)/);
    expect(direct.blocked).toEqual([{ url: 'https://huggingface.co/datasets/cais/hle', rule: 'huggingface.co/datasets', where: 'fetch' }]);
    const before = replay.requests.length;
    const redirected = await call(client, 'browse_webpage', { url: `${replay.url}/go` });
    expect(replay.requests.length).toBeGreaterThan(before);
    expect(redirected.isError).toBe(true);
    // A word no URL of the test holds: the replay's random port may well contain 42.
    expect(redirected.body).not.toContain('forty-two');
    expect(redirected.blocked).toEqual([{ url: `http://hf.co:${replay.port}/datasets/cais/hle`, rule: 'hf.co/datasets', where: 'fetch' }]);
  });
});
