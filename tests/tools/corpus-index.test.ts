/**
 * The on-disk corpus index: `trajforge corpus index` (the real CLI: build, resume after a
 * kill, bad input) and the corpus server over it (a real process over stdio): search, open
 * and find as their descriptions say, hostile queries and patterns, damaged indexes, the
 * index built at first use. Needs a built dist/ (`npm run build`).
 */
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { gzipSync } from 'node:zlib';
import Database from 'better-sqlite3';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..', '..');
const SERVER = join(ROOT, 'dist', 'tools', 'corpus', 'server.js');
const CLI = join(ROOT, 'dist', 'pipeline', 'cli', 'bin.js');
const CORPUS = join(ROOT, 'data', 'corpus.jsonl');

interface Doc {
  paperId: string;
  title: string;
  abstract: string;
}
const docs = readFileSync(CORPUS, 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((l) => JSON.parse(l) as Doc);
const byId = new Map(docs.map((d) => [d.paperId, d]));

let scratch: string;
/** The bundled corpus, indexed once by the CLI. */
let bundled: string;
const clients: Client[] = [];

function cli(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

interface Started {
  client: Client;
  stderr: () => string;
  pid: number;
}

async function start(args: string[], env: Record<string, string> = {}): Promise<Started> {
  const transport = new StdioClientTransport({ command: process.execPath, args: [SERVER, ...args], env: { PATH: process.env.PATH ?? '', ...env }, stderr: 'pipe' });
  let stderr = '';
  transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const client = new Client({ name: 'corpus-index-test', version: '0' });
  clients.push(client);
  try {
    await client.connect(transport);
  } catch (err) {
    // Let the process finish writing why it stopped.
    await new Promise((r) => setTimeout(r, 200));
    throw new Error(`${(err as Error).message}\n${stderr}`);
  }
  return { client, stderr: () => stderr, pid: transport.pid! };
}

interface Result {
  isError: boolean;
  text: string;
  meta: Record<string, unknown> | undefined;
}

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<Result> {
  const r = await client.callTool({ name, arguments: args });
  const content = r.content as { type: string; text: string }[];
  expect(content).toHaveLength(1);
  expect(content[0]!.type).toBe('text');
  return { isError: r.isError === true, text: content[0]!.text, meta: r._meta as Record<string, unknown> | undefined };
}

async function ok<T>(client: Client, name: string, args: Record<string, unknown>): Promise<T> {
  const r = await call(client, name, args);
  expect(r.isError, r.text).toBe(false);
  return JSON.parse(r.text) as T;
}

function writeJsonl(file: string, rows: unknown[]): string {
  writeFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return file;
}

beforeAll(() => {
  if (!existsSync(SERVER) || !existsSync(CLI)) throw new Error('dist/ is missing: run `npm run build` before these tests');
  scratch = mkdtempSync(join(tmpdir(), 'trajforge-corpus-index-'));
  bundled = join(scratch, 'bundled');
  const r = cli(['corpus', 'index', CORPUS, '--out', bundled, '--quiet']);
  if (r.code !== 0) throw new Error(`corpus index failed: ${r.stderr}`);
}, 180_000);

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  rmSync(scratch, { recursive: true, force: true });
});

describe('trajforge corpus index', () => {
  it('indexes the bundled corpus, says what it built, and does nothing the second time', () => {
    const db = new Database(join(bundled, 'corpus.sqlite'), { readonly: true });
    expect(db.prepare('SELECT count(*) AS n FROM docs').get()).toEqual({ n: docs.length });
    db.close();
    const again = cli(['corpus', 'index', CORPUS, '--out', bundled]);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(new RegExp(`is already complete: ${docs.length} documents`));
  });

  it('reads gzipped JSONL, ids as numbers, and the other field names corpora use', async () => {
    const file = join(scratch, 'mixed.jsonl.gz');
    const rows = [
      { _id: 7, title: 'Numeric id', text: 'A document whose id is a number.' },
      { docid: 'web-1', url: 'https://example.org/page', contents: 'A web page, its text under contents.' },
      { id: 'pm-1', title: 'PubMed-like', abstract: 'Aspirin and headaches.', authors: ['A B'], year: 2001, venue: 'J' },
    ];
    writeFileSync(file, gzipSync(rows.map((r) => JSON.stringify(r)).join('\n') + '\n'));
    const out = join(scratch, 'mixed');
    expect(cli(['corpus', 'index', file, '--out', out]).code).toBe(0);
    const { client } = await start(['--index', out]);
    const doc = await ok<{ documents: Record<string, unknown>[] }>(client, 'open', { id: 'https://example.org/page' });
    expect(doc.documents[0]).toMatchObject({ id: 'web-1', url: 'https://example.org/page', title: '' });
    const page = await ok<{ data: Record<string, unknown>[] }>(client, 'pubmed_search', { query: 'aspirin' });
    expect(page.data).toEqual([{ paperId: 'pm-1', title: 'PubMed-like', authors: ['A B'], abstract: 'Aspirin and headaches.', year: 2001, venue: 'J' }]);
    expect((await ok<{ documents: { id: string }[] }>(client, 'open', { id: '7' })).documents[0]!.id).toBe('7');
  });

  it.each([
    ['a line that is not JSON', '{"id": "a", "text": "x"}\n{"id": oops}\n', /:2: not valid JSON/],
    ['a row without an id', '{"id": "a", "text": "x"}\n{"title": "t", "text": "x"}\n', /:2: id: no document id/],
    ['a text that is not a string', '{"id": "a", "text": "x"}\n{"id": "b", "text": 5}\n', /:2: text: must be a string/],
    ['a duplicate id', '{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', /:2: id: duplicate document id "a"/],
  ])('%s stops the build with exit 2, naming file, line and field; --on-bad-row skip counts it', (_what, text, message) => {
    const file = join(scratch, `bad-${Math.random().toString(36).slice(2)}.jsonl`);
    writeFileSync(file, text);
    const failed = cli(['corpus', 'index', file, '--out', `${file}.idx`]);
    expect(failed.code).toBe(2);
    expect(failed.stderr).toContain(file);
    expect(failed.stderr).toMatch(message);
    expect(failed.stderr).not.toMatch(/\n\s+at /);
    const skipped = cli(['corpus', 'index', file, '--out', `${file}.idx2`, '--on-bad-row', 'skip']);
    expect(skipped.code).toBe(0);
    expect(skipped.stdout).toMatch(/1 documents from 2 lines.*1 bad rows skipped/);
    expect(skipped.stdout).toMatch(message);
  });

  it('refuses an --out that is a file, or a directory holding other things, and leaves them as they were', () => {
    const file = join(scratch, 'not-a-dir');
    writeFileSync(file, 'keep me');
    const r1 = cli(['corpus', 'index', CORPUS, '--out', file]);
    expect(r1.code).toBe(2);
    expect(r1.stderr).toMatch(/not a directory/);
    expect(readFileSync(file, 'utf8')).toBe('keep me');
    const dir = join(scratch, 'busy');
    mkdirSync(dir);
    writeFileSync(join(dir, 'notes.txt'), 'mine');
    const r2 = cli(['corpus', 'index', CORPUS, '--out', dir]);
    expect(r2.code).toBe(2);
    expect(r2.stderr).toMatch(/holds other files/);
    expect(readdirSync(dir)).toEqual(['notes.txt']);
  });

  it('killed midway, the same command finishes the index: every document once', async () => {
    const n = 60_000;
    const file = join(scratch, 'many.jsonl');
    writeFileSync(file, Array.from({ length: n }, (_, i) => JSON.stringify({ id: `d${i}`, title: `doc ${i}`, text: `unique${i} shared words here` })).join('\n') + '\n');
    const out = join(scratch, 'many');
    const child = spawn(process.execPath, [CLI, 'corpus', 'index', file, '--out', out, '--batch', '500', '--quiet'], { stdio: 'ignore' });
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    // Killed once a few batches are in, well before the end.
    let done = 0;
    await expect
      .poll(
        () => {
          let db: Database.Database | undefined;
          try {
            db = new Database(join(out, 'corpus.sqlite'), { readonly: true, fileMustExist: true });
            done = Number((db.prepare("SELECT value FROM meta WHERE key = 'lines_done'").get() as { value: string } | undefined)?.value ?? 0);
          } catch {
            // Not created yet, or busy.
          } finally {
            // A connection left open would hold a lock the resumed build then waits on.
            db?.close();
          }
          return done;
        },
        { timeout: 120_000, interval: 20 },
      )
      .toBeGreaterThanOrEqual(1_000);
    child.kill('SIGKILL');
    await exited;
    expect(done).toBeLessThan(n);
    const resumed = cli(['corpus', 'index', file, '--out', out]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toMatch(new RegExp(`${n} documents from ${n} lines.*resumed at line \\d+`));
    const db = new Database(join(out, 'corpus.sqlite'), { readonly: true });
    expect(db.prepare('SELECT count(*) AS n, count(DISTINCT id) AS ids FROM docs').get()).toEqual({ n, ids: n });
    expect(db.prepare('SELECT count(*) AS n FROM terms').get()).toEqual({ n });
    db.close();
    const { client } = await start(['--index', out]);
    for (const i of [0, 999, 1_000, 30_000, n - 1]) {
      const page = await ok<{ total: number; results: { id: string }[] }>(client, 'search', { query: `unique${i}` });
      expect(page.total).toBe(1);
      expect(page.results.map((r) => r.id)).toEqual([`d${i}`]);
    }
  }, 240_000);

  it('a resume over a changed input is refused, and the index is left as it was', async () => {
    const file = join(scratch, 'changing.jsonl');
    writeJsonl(file, Array.from({ length: 30 }, (_, i) => ({ id: `c${i}`, text: `text ${i}` })));
    const out = join(scratch, 'changing');
    // A build that stops at a bad row keeps the batches before it, as a killed one does.
    appendFileSync(file, 'not json\n');
    expect(cli(['corpus', 'index', file, '--out', out, '--batch', '10']).code).toBe(2);
    writeJsonl(file, Array.from({ length: 31 }, (_, i) => ({ id: `x${i}`, text: `other ${i}` })));
    const r = cli(['corpus', 'index', file, '--out', out]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/holds an index of .*changing\.jsonl.*remove the directory/);
    const db = new Database(join(out, 'corpus.sqlite'), { readonly: true });
    expect((db.prepare('SELECT count(*) AS n FROM docs').get() as { n: number }).n).toBe(30);
    db.close();
  });
});

describe('the corpus server over an on-disk index', () => {
  let client: Client;
  beforeAll(async () => {
    ({ client } = await start(['--index', bundled]));
  });

  /** The JSON keys a description names for a result, in order: `{"a", "b": [{"c", "d"}]}` → outer a, b; inner c, d. */
  function describedKeys(description: string): { outer: string[]; inner: string[] } {
    const json = /\{("[^{}[\]]+"(?:, "[^{}[\]]+")*(?:: \[\{[^\]]*\}\])?)\}/.exec(description)![0];
    const inner = /\[\{([^\]]*)\}\]/.exec(json)?.[1] ?? '';
    const names = (s: string): string[] => [...s.matchAll(/"([^"]+)"/g)].map((m) => m[1]!);
    return { outer: names(json.replace(/\[\{[^\]]*\}\]/, '')), inner: names(inner) };
  }

  it('offers all five tools, and every result has exactly the keys its description names', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(['pubmed_search', 'read_document', 'search', 'open', 'find']);
    const description = (name: string): string => tools.find((t) => t.name === name)!.description!;
    const results: Record<string, { outer: Record<string, unknown>; inner: Record<string, unknown>[] }> = {};
    const grab = async (name: string, args: Record<string, unknown>, list: string): Promise<void> => {
      const body = await ok<Record<string, unknown>>(client, name, args);
      results[name] = { outer: body, inner: body[list] as Record<string, unknown>[] };
    };
    await grab('pubmed_search', { query: 'CSS property grid' }, 'data');
    await grab('read_document', { id: 'css.properties.grid' }, 'documents');
    await grab('search', { query: 'CSS property grid', k: 3 }, 'results');
    await grab('open', { id: 'css.properties.grid' }, 'documents');
    await grab('find', { id: 'css.properties.grid', pattern: 'Firefox' }, 'documents');
    for (const [name, r] of Object.entries(results)) {
      const keys = describedKeys(description(name));
      expect(Object.keys(r.outer), name).toEqual(keys.outer);
      expect(r.inner.length, name).toBeGreaterThan(0);
      // "url" is named as present only when the document has one; the bundled documents have none.
      for (const item of r.inner) expect(Object.keys(item), name).toEqual(keys.inner.filter((k) => k !== 'url'));
    }
  });

  it('search ranks the gold document first for a bank question, and a snippet comes from a line holding a query word', async () => {
    const page = await ok<{ query: string; total: number; results: { id: string; title: string; snippet: string; line: number }[] }>(client, 'search', {
      query: 'In which version of Firefox was the CSS property grid first supported?',
      k: 5,
    });
    expect(page.results).toHaveLength(5);
    expect(page.results.map((r) => r.id)).toContain('css.properties.grid');
    expect(page.total).toBeGreaterThan(5);
    const grid = page.results.find((r) => r.id === 'css.properties.grid')!;
    expect(grid.title).toBe('CSS property: grid');
    expect(byId.get('css.properties.grid')!.abstract.replace(/\s+/g, ' ')).toContain(grid.snippet.replace(/…$/, '').split(' ').slice(0, 6).join(' '));
  });

  it('puts the gold document in the top 5 for at least 95% of the bank questions', async () => {
    const questions = readFileSync(join(ROOT, 'data', 'questions.jsonl'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { question: string; meta: { feature: string } });
    let hits = 0;
    for (const q of questions) {
      const page = await ok<{ results: { id: string }[] }>(client, 'search', { query: q.question, k: 5 });
      if (page.results.some((r) => r.id === q.meta.feature)) hits++;
    }
    expect(hits / questions.length).toBeGreaterThanOrEqual(0.95);
  }, 180_000);

  it('open pages through a document: each page starts where the last one said, and together they are the whole text', async () => {
    const longest = docs.reduce((a, b) => (b.abstract.length > a.abstract.length ? b : a));
    const lines: string[] = [];
    let cursor: number | null = 0;
    let pages = 0;
    while (cursor !== null) {
      const body = await ok<{ documents: { text: string; first_line: number; last_line: number; total_lines: number; next_cursor: number | null }[] }>(client, 'open', { id: longest.paperId, cursor, lines: 3 });
      const d = body.documents[0]!;
      expect(d.first_line).toBe(cursor);
      const [header, ...rest] = d.text.split('\n');
      expect(header).toBe(`[lines ${d.first_line}-${d.last_line} of ${d.total_lines}${d.next_cursor === null ? '; end of document' : `; next page: cursor=${d.next_cursor}`}]`);
      rest.forEach((l, i) => {
        expect(l.startsWith(`L${cursor! + i}: `)).toBe(true);
        lines.push(l.slice(`L${cursor! + i}: `.length));
      });
      expect(rest.every((l) => l.length <= 80 + `L${d.last_line}: `.length)).toBe(true);
      cursor = d.next_cursor;
      pages++;
    }
    expect(pages).toBeGreaterThan(2);
    expect(lines.join(' ')).toBe(longest.abstract);
  });

  it('a cursor past the end and an unknown id are errors naming them, and the server goes on', async () => {
    const past = await call(client, 'open', { id: 'css.properties.grid', cursor: 10_000 });
    expect(past.isError).toBe(true);
    expect(past.text).toMatch(/^cursor 10000 is past the end: the document has \d+ lines/);
    const missing = await call(client, 'open', { id: 'API.abortcontroller' });
    expect(missing.isError).toBe(true);
    expect(missing.text).toBe('No document with id "API.abortcontroller" in the corpus. Did you mean "api.AbortController"?');
    expect((await call(client, 'find', { id: 'nope', pattern: 'x' })).text).toMatch(/^No document with id "nope" in the corpus\. Use an id \(paperId\) that search returned\.$/);
    expect((await ok<{ documents: { id: string }[] }>(client, 'open', { id: 'api.fetch' })).documents[0]!.id).toBe('api.fetch');
  });

  it('find is literal and case-insensitive: each match names its line, and the lines shown are the document\'s', async () => {
    const body = await ok<{ documents: { matches: number; lines: number[]; text: string }[] }>(client, 'find', { id: 'css.properties.grid', pattern: 'FIRST SUPPORTED IT' });
    const d = body.documents[0]!;
    const opened = await ok<{ documents: { text: string }[] }>(client, 'open', { id: 'css.properties.grid', lines: 200 });
    const numbered = opened.documents[0]!.text.split('\n').slice(1);
    const bare = (n: number): string => (numbered[n] ?? '').replace(/^L\d+: /, '');
    expect(d.matches).toBe(d.lines.length);
    expect(d.matches).toBeGreaterThanOrEqual(2);
    for (const [i, line] of d.lines.entries()) {
      expect(d.text).toContain(`match ${i} at L${line}\n${numbered[line]}`);
      // A match may run on into the next line.
      expect(`${bare(line)} ${bare(line + 1)}`.toLowerCase()).toContain('first supported it');
    }
    const regex = await ok<{ documents: { matches: number; text: string }[] }>(client, 'find', { id: 'css.properties.grid', pattern: 'first.*it' });
    expect(regex.documents[0]!.matches).toBe(0);
    expect(regex.documents[0]!.text).toMatch(/^No match for "first\.\*it"/);
  });

  it('a pattern that would backtrack catastrophically as a regular expression is matched literally, at once, and the server goes on', async () => {
    const file = writeJsonl(join(scratch, 'redos.jsonl'), [{ id: 'aaa', title: 'a', text: `${'a'.repeat(100_000)}!` }]);
    const out = join(scratch, 'redos');
    expect(cli(['corpus', 'index', file, '--out', out]).code).toBe(0);
    const { client: c } = await start(['--index', out]);
    for (const pattern of ['(a+)+$', '(a|aa)+b', '^(a?){40}a{40}$', '\\', '[', `b${'a'.repeat(499)}`, 'a'.repeat(500)]) {
      const r = await ok<{ documents: { matches: number }[] }>(c, 'find', { id: 'aaa', pattern });
      expect(r.documents[0]!.matches, pattern).toBe(pattern === 'a'.repeat(500) ? 50 : 0);
    }
    const tooLong = await c.callTool({ name: 'find', arguments: { id: 'aaa', pattern: 'a'.repeat(501) } }).catch((err: Error) => ({ isError: true, content: [{ text: err.message }] }));
    expect(tooLong.isError).toBe(true);
    expect((await ok<{ documents: unknown[] }>(c, 'open', { id: 'aaa' })).documents).toHaveLength(1);
  });

  it.each([
    ['quotes', '"grid'],
    ['NEAR', 'NEAR(grid flex, 2)'],
    ['a prefix star', 'gri*'],
    ['a leading minus', '-grid'],
    ['a column filter', 'title:grid'],
    ['boolean words alone', 'AND OR NOT'],
    ['a caret and parentheses', '^grid) (('],
    ['only punctuation', '*:-"()^'],
    ['a very long query', 'grid '.repeat(20_000)],
  ])('a query with FTS5 syntax (%s) is searched as words: no error, nothing injected', async (_what, query) => {
    const r = await call(client, 'search', { query });
    expect(r.isError, r.text).toBe(false);
    const body = JSON.parse(r.text) as { results: { id: string }[] };
    const again = await call(client, 'pubmed_search', { query });
    expect(again.isError, again.text).toBe(false);
    // The words are what is searched: a column filter does not keep body-only matches out, a minus does not exclude.
    if (query === '-grid' || query === 'title:grid') expect(body.results.map((x) => x.id)).toContain('css.properties.grid');
  });

  it('pubmed_search over the index pages like the in-memory one: same total at every offset, pages cut from one ranking', async () => {
    const first = await ok<{ total: number; offset: number; data: { paperId: string }[] }>(client, 'pubmed_search', { query: 'CSS property grid', limit: 10 });
    const page = await ok<{ total: number; offset: number; data: { paperId: string }[] }>(client, 'pubmed_search', { query: 'CSS property grid', limit: 3, offset: 4 });
    expect(page.total).toBe(first.total);
    expect(page.data.map((d) => d.paperId)).toEqual(first.data.slice(4, 7).map((d) => d.paperId));
    expect(await ok(client, 'pubmed_search', { query: '' })).toEqual({ total: 0, offset: 0, data: [] });
  });
});

describe('a damaged or unfinished index', () => {
  it.each([
    ['random bytes', (f: string) => writeFileSync(f, Buffer.alloc(200_000, 7)), /cannot serve this corpus index/],
    ['a file cut in half', (f: string) => truncateSync(f, Math.floor(statSync(f).size / 2)), /cannot serve this corpus index/],
    ['an empty file', (f: string) => writeFileSync(f, ''), /cannot serve this corpus index: not a corpus index/],
  ])('%s: the server refuses to start, naming the file', async (_what, damage, message) => {
    const dir = join(scratch, `damaged-${Math.random().toString(36).slice(2)}`);
    mkdirSync(dir);
    const file = join(dir, 'corpus.sqlite');
    copyFileSync(join(bundled, 'corpus.sqlite'), file);
    damage(file);
    const failed = start(['--index', dir]);
    await expect(failed).rejects.toThrow(message);
    await expect(failed).rejects.toThrow(file);
  });

  it('a build that did not finish is refused with what to run', async () => {
    const file = writeJsonl(join(scratch, 'half.jsonl'), [{ id: 'a', text: 'x' }, { id: 'b', text: 'y' }]);
    appendFileSync(file, '{broken\n');
    const out = join(scratch, 'half');
    expect(cli(['corpus', 'index', file, '--out', out, '--batch', '1']).code).toBe(2);
    await expect(start(['--index', out])).rejects.toThrow(/build did not finish: run the same `trajforge corpus index` command again/);
    await expect(start(['--index', join(scratch, 'no-such-dir')])).rejects.toThrow(/no corpus index here/);
  });
});

describe('the bundled corpus indexed at first use (--engine sqlite)', () => {
  it('two servers starting at once on an empty cache build it once, atomically, and both serve it', async () => {
    const cache = join(scratch, 'cache');
    const env = { TRAJFORGE_CACHE_DIR: cache };
    const [a, b] = await Promise.all([start(['--engine', 'sqlite'], env), start(['--engine', 'sqlite'], env)]);
    const query = { query: 'In which version of Firefox was the CSS property grid first supported?', k: 5 };
    const ra = await ok<{ results: { id: string }[] }>(a.client, 'search', query);
    const rb = await ok<{ results: { id: string }[] }>(b.client, 'search', query);
    expect(ra).toEqual(rb);
    expect(ra.results.map((r) => r.id)).toContain('css.properties.grid');
    // One index directory, no build left behind.
    expect(readdirSync(join(cache, 'corpus-index'))).toEqual([expect.stringMatching(/^[0-9a-f]{32}$/)]);
    expect([a.stderr(), b.stderr()].join('\n')).toMatch(/on-disk index (built|found) in/);
    const third = await start(['--engine', 'sqlite'], env);
    expect(third.stderr()).toMatch(/on-disk index found in/);
    expect((await third.client.listTools()).tools.map((t) => t.name)).toEqual(['pubmed_search', 'read_document', 'search', 'open', 'find']);
  }, 180_000);

  it('without --engine the server offers what it did before, and --tools chooses', async () => {
    const plain = await start([]);
    expect((await plain.client.listTools()).tools.map((t) => t.name)).toEqual(['pubmed_search', 'read_document']);
    const chosen = await start(['--tools', 'search,open,find']);
    expect((await chosen.client.listTools()).tools.map((t) => t.name)).toEqual(['search', 'open', 'find']);
    const page = await ok<{ results: { id: string }[] }>(chosen.client, 'search', { query: 'HTML element <video>', k: 3 });
    expect(page.results.map((r) => r.id)).toContain('html.elements.video');
    await expect(start(['--tools', 'search,grep'])).rejects.toThrow(/--tools: no tool grep/);
  });
});
