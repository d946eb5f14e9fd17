/**
 * The offline corpus, its question bank and the `pubmed_search` MCP server.
 * Needs a built dist/ (`npm run build`); the server is run as a real child process.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildCorpus, type CorpusDocument } from '../../data/build/build-corpus.js';
import { CorpusIndex, indexPathFor, loadCorpus, openCorpus, tokenize } from '../../tools/corpus/search.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const SERVER = join(ROOT, 'dist', 'tools', 'corpus', 'server.js');
const CORPUS = join(ROOT, 'data', 'corpus.jsonl');
const QUESTIONS = join(ROOT, 'data', 'questions.jsonl');

type Doc = CorpusDocument;
interface Question {
  id: string;
  question: string;
  answer: string;
  meta: { feature: string; browser: string };
}
interface Page {
  total: number;
  offset: number;
  data: Doc[];
}

const readJsonl = <T>(file: string): T[] =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as T);

const docs = readJsonl<Doc>(CORPUS);
const questions = readJsonl<Question>(QUESTIONS);
const byId = new Map(docs.map((d) => [d.paperId, d]));

const answerSentence = (q: Question): string => `${q.meta.browser} first supported it in version ${q.answer},`;

interface Started {
  client: Client;
  transport: StdioClientTransport;
  stderr: () => string;
  errors: Error[];
  closed: Promise<void>;
}

const running: Started[] = [];
let scratch: string;

async function start(args: string[] = [], env: Record<string, string> = {}): Promise<Started> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [SERVER, ...args],
    env: { PATH: process.env.PATH ?? '', ...env },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const errors: Error[] = [];
  const client = new Client({ name: 'corpus-test', version: '0' });
  const closed = new Promise<void>((res) => {
    client.onclose = () => res();
  });
  client.onerror = (err) => errors.push(err);
  const started = { client, transport, stderr: () => stderr, errors, closed };
  running.push(started);
  await client.connect(transport);
  return started;
}

async function search(client: Client, args: Record<string, unknown>, timeout?: number): Promise<Page> {
  const result = await client.callTool({ name: 'pubmed_search', arguments: args }, undefined, timeout ? { timeout } : {});
  expect(result.isError ?? false).toBe(false);
  const content = result.content as Array<{ type: string; text: string }>;
  expect(content).toHaveLength(1);
  expect(content[0]!.type).toBe('text');
  return JSON.parse(content[0]!.text) as Page;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

beforeAll(() => {
  if (!existsSync(SERVER)) throw new Error(`${SERVER} is missing: run \`npm run build\` before these tests`);
  scratch = mkdtempSync(join(tmpdir(), 'trajforge-corpus-test-'));
});

afterAll(async () => {
  await Promise.allSettled(running.map((s) => s.client.close()));
  rmSync(scratch, { recursive: true, force: true });
});

describe('bundled data', () => {
  it('has 2,000-6,000 documents of the agreed shape in under 5 MB', () => {
    expect(docs.length).toBeGreaterThanOrEqual(2000);
    expect(docs.length).toBeLessThanOrEqual(6000);
    expect(statSync(CORPUS).size).toBeLessThan(5_000_000);
    expect(byId.size).toBe(docs.length);
    for (const d of docs) {
      expect(Object.keys(d)).toEqual(['paperId', 'title', 'authors', 'year', 'venue', 'abstract']);
      expect(d.authors).toEqual(['MDN contributors']);
      expect(d.venue).toBe('MDN browser-compat-data');
      expect(Number.isInteger(d.year)).toBe(true);
      expect(d.abstract).toMatch(/ first supported it in version \d+(\.\d+)*, released \d{4}-\d{2}-\d{2}\./);
      // Descriptions come from BCD as HTML; only the text may reach the abstract.
      expect(d.abstract).not.toMatch(/<\/code>|<a href=|&(lt|gt|amp|quot);/);
    }
  });

  it('documents are sorted and each year is the earliest release date in the abstract', () => {
    const ids = docs.map((d) => d.paperId);
    expect(ids).toEqual([...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    for (const d of docs) {
      const years = [...d.abstract.matchAll(/released (\d{4})-/g)].map((m) => Number(m[1]));
      expect(d.year).toBe(Math.min(...years));
    }
  });

  it('has at least 200 questions whose gold answer is a sentence of the feature document', () => {
    expect(questions.length).toBeGreaterThanOrEqual(200);
    expect(new Set(questions.map((q) => q.id)).size).toBe(questions.length);
    for (const q of questions) {
      expect(q.id).toMatch(/^bcd-q-\d{4}$/);
      const doc = byId.get(q.meta.feature);
      expect(doc, q.meta.feature).toBeDefined();
      expect(doc!.abstract).toContain(answerSentence(q));
      expect(q.question).toContain(q.meta.browser);
      // The question names the feature as the title does, minus the colon.
      expect(q.question).toContain(doc!.title.replace(': ', ' '));
    }
  });

  it('spreads questions over categories and browsers', () => {
    const areas = new Set(questions.map((q) => q.meta.feature.split('.')[0]));
    for (const area of ['css', 'html', 'javascript', 'api', 'http']) expect(areas).toContain(area);
    expect(new Set(questions.map((q) => q.meta.browser)).size).toBeGreaterThanOrEqual(6);
  });

  it('the files on disk are what the build script produces from the installed BCD', () => {
    const built = buildCorpus();
    const jsonl = (rows: unknown[]): string => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';
    expect(jsonl(built.documents)).toBe(readFileSync(CORPUS, 'utf8'));
    expect(jsonl(built.questions)).toBe(readFileSync(QUESTIONS, 'utf8'));
  });

  it('the shipped index matches the corpus and ranks like a fresh build', () => {
    const opened = openCorpus(CORPUS);
    expect(opened.source).toBe('prebuilt');
    const fresh = CorpusIndex.build(loadCorpus(CORPUS));
    for (const q of questions.slice(0, 40)) {
      expect(opened.index.search(q.question, 10).data.map((d) => d.paperId)).toEqual(
        fresh.search(q.question, 10).data.map((d) => d.paperId),
      );
    }
  });

  it('the fast scorer ranks every question exactly as MiniSearch does, and pages cut from that ranking', () => {
    const { index } = openCorpus(CORPUS);
    const queries = [
      ...questions.map((q) => q.question),
      'grid grid grid',
      'Chrome CSS property grid 12 browser compatibility',
      'HTML element <div>',
      'first version supported',
      '2017-03-09 10.1',
    ];
    for (const q of queries) {
      const reference = index.rankWithMiniSearch(q);
      expect(index.rank(q).map((d) => d.paperId)).toEqual(reference.map((d) => d.paperId));
      for (const [limit, offset] of [[5, 0], [1, 0], [3, 4], [50, 20], [5, 200], [50, 120]] as const) {
        expect(index.search(q, limit, offset)).toEqual({ total: reference.length, offset, data: reference.slice(offset, offset + limit) });
      }
    }
  });
});

describe('tokenize', () => {
  it('keeps dotted and hyphenated names whole as well as in parts', () => {
    expect(tokenize('The CSS property grid-template-columns?')).toEqual([
      'the', 'css', 'property', 'grid-template-columns', 'grid', 'template', 'columns',
    ]);
    expect(tokenize('<div> Array.prototype.map(), ::after')).toEqual([
      'div', 'array.prototype.map', 'array', 'prototype', 'map', 'after',
    ]);
    expect(tokenize('  --- ')).toEqual([]);
  });
});

describe('pubmed_search server', () => {
  it('lists pubmed_search with query, limit and offset', async () => {
    const { client } = await start();
    const { tools } = await client.listTools();
    // read_document (tests/tools/corpus-read.test.ts) comes second.
    expect(tools.map((t) => t.name)).toEqual(['pubmed_search', 'read_document']);
    const schema = tools[0]!.inputSchema as {
      properties: Record<string, { type: string; description?: string; default?: unknown; minimum?: number; maximum?: number }>;
      required?: string[];
    };
    expect(schema.required).toEqual(['query']);
    expect(schema.properties.query?.type).toBe('string');
    expect(schema.properties.query?.description).toBeTruthy();
    expect(schema.properties.limit).toMatchObject({ type: 'integer', default: 5, minimum: 1, maximum: 50 });
    expect(schema.properties.offset).toMatchObject({ type: 'integer', default: 0, minimum: 0 });
  });

  it('finds the gold document for a bank question, with the answer sentence in its abstract', async () => {
    const { client } = await start();
    const q = questions.find((x) => x.meta.feature === 'css.properties.grid') ?? questions[0]!;
    const page = await search(client, { query: q.question });
    expect(page.offset).toBe(0);
    expect(page.data).toHaveLength(5);
    expect(page.total).toBeGreaterThanOrEqual(5);
    const ids = page.data.map((d) => d.paperId);
    expect(ids).toContain(q.meta.feature);
    const gold = page.data.find((d) => d.paperId === q.meta.feature)!;
    expect(Object.keys(gold).sort()).toEqual(['abstract', 'authors', 'paperId', 'title', 'venue', 'year']);
    expect(gold.abstract).toContain(answerSentence(q));
  });

  it('pages with limit and offset, and reports the same total', async () => {
    const { client } = await start();
    const first = await search(client, { query: 'CSS property grid', limit: 10 });
    expect(first.data).toHaveLength(10);
    const page = await search(client, { query: 'CSS property grid', limit: 3, offset: 4 });
    expect(page.offset).toBe(4);
    expect(page.total).toBe(first.total);
    expect(page.data.map((d) => d.paperId)).toEqual(first.data.slice(4, 7).map((d) => d.paperId));
    const beyond = await search(client, { query: 'CSS property grid', limit: 5, offset: first.total });
    expect(beyond).toEqual({ total: first.total, offset: first.total, data: [] });
    const rejected = await client.callTool({ name: 'pubmed_search', arguments: { query: 'grid', limit: 51 } });
    expect(rejected.isError).toBe(true);
  });

  it('answers an empty query or one with no hits with an empty page', async () => {
    const { client } = await start();
    expect(await search(client, { query: '' })).toEqual({ total: 0, offset: 0, data: [] });
    expect(await search(client, { query: 'qwxzvbnm', offset: 2 })).toEqual({ total: 0, offset: 2, data: [] });
  });

  it('retrieves the gold document in the top 5 for at least 80% of the questions', async () => {
    const { client } = await start();
    let hits = 0;
    for (const q of questions) {
      const page = await search(client, { query: q.question, limit: 5 });
      if (page.data.some((d) => d.paperId === q.meta.feature)) hits++;
    }
    expect(hits / questions.length).toBeGreaterThanOrEqual(0.8);
  }, 180_000);

  it('logs each answered call to CORPUS_CALL_LOG', async () => {
    const log = join(scratch, 'calls.jsonl');
    const { client } = await start([], { CORPUS_CALL_LOG: log });
    await search(client, { query: 'HTML element <div>' });
    await search(client, { query: 'HTTP header Accept', limit: 2 });
    const lines = readJsonl<{ query: string; limit: number }>(log);
    expect(lines.map((l) => l.query)).toEqual(['HTML element <div>', 'HTTP header Accept']);
    expect(lines[1]!.limit).toBe(2);
  });

  it('reads another corpus from --corpus and from CORPUS_PATH', async () => {
    const small = join(scratch, 'small.jsonl');
    writeFileSync(
      small,
      [
        { paperId: '111', title: 'Aspirin and headaches', authors: ['A'], year: 2001, venue: 'J', abstract: 'Aspirin helps.' },
        { paperId: '222', title: 'Coffee', authors: ['B'], year: 2002, venue: 'K', abstract: 'Coffee and sleep.' },
      ]
        .map((d) => JSON.stringify(d))
        .join('\n') + '\n',
    );
    expect(existsSync(indexPathFor(small))).toBe(false);
    const ways: Array<{ args: string[]; env: Record<string, string> }> = [
      { args: ['--corpus', small], env: {} },
      { args: [], env: { CORPUS_PATH: small } },
    ];
    for (const how of ways) {
      const { client, stderr } = await start(how.args, how.env);
      const page = await search(client, { query: 'aspirin' });
      expect(page.total).toBe(1);
      expect(page.data[0]).toMatchObject({ paperId: '111', title: 'Aspirin and headaches', year: 2001, venue: 'J' });
      expect(stderr()).toContain('index built');
    }
  });

  it('exits 1 naming the file and line for an invalid corpus', async () => {
    const bad = join(scratch, 'bad.jsonl');
    writeFileSync(bad, '{"paperId":"1","title":"ok","abstract":"x"}\n{"paperId": oops}\n');
    const broken = start(['--corpus', bad]);
    await expect(broken).rejects.toThrow();
    const started = running[running.length - 1]!;
    await started.closed;
    expect(started.stderr()).toContain(`${bad}:2:`);

    const missing = join(scratch, 'nope.jsonl');
    await expect(start(['--corpus', missing])).rejects.toThrow();
    const second = running[running.length - 1]!;
    await second.closed;
    expect(second.stderr()).toContain(missing);
  });

  it('--fail-start makes connecting fail', async () => {
    await expect(start(['--fail-start'])).rejects.toThrow(/closed/i);
    const started = running[running.length - 1]!;
    await started.closed;
    expect(started.stderr()).toMatch(/fail-start/);
  });

  it('--crash-every 2 kills the process on the second call', async () => {
    const log = join(scratch, 'crash.jsonl');
    const { client, transport, closed } = await start(['--crash-every', '2'], { CORPUS_CALL_LOG: log });
    const pid = transport.pid!;
    await search(client, { query: 'CSS property grid' });
    await expect(search(client, { query: 'CSS property flex' })).rejects.toThrow(/closed/i);
    await closed;
    await expect.poll(() => pidAlive(pid)).toBe(false);
    expect(readJsonl(log)).toHaveLength(1);
  });

  it('--hang-every 2 never answers the second call but answers the third', async () => {
    const { client } = await start(['--hang-every', '2']);
    await search(client, { query: 'grid' });
    await expect(search(client, { query: 'flex' }, 700)).rejects.toThrow(/timed out/i);
    expect((await search(client, { query: 'HTML element <div>' })).data.length).toBeGreaterThan(0);
  });

  it('--delay-ms delays every answer', async () => {
    const { client } = await start(['--delay-ms', '400']);
    const t0 = performance.now();
    await search(client, { query: 'grid' });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(380);
  });

  it('--junk-stdout writes a non-JSON line before the protocol starts', async () => {
    const { client, errors } = await start(['--junk-stdout']);
    expect(errors.some((e) => /JSON/i.test(e.message))).toBe(true);
    // The junk line is the client's problem to survive; the server itself still works.
    expect((await search(client, { query: 'grid' })).total).toBeGreaterThan(0);
  });

  it('rejects an unknown flag rather than ignoring it', async () => {
    await expect(start(['--crash-evry', '2'])).rejects.toThrow();
    const started = running[running.length - 1]!;
    await started.closed;
    expect(started.stderr()).toContain('--crash-evry');
  });
});
