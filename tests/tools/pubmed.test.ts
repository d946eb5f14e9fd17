/**
 * The PubMed MCP server against a loopback replay of NCBI E-utilities: parsing, retries, the
 * rate limit as NCBI would measure it. Needs a built dist/ (`npm run build`).
 */
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig, redactConfig } from '../../pipeline/core/config.js';
import { Executor } from '../../pipeline/generate/executor.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { RateLimiter, type Clock } from '../../tools/pubmed/ratelimit.js';
import { parsePubmedXml, PubmedXmlError } from '../../tools/pubmed/xml.js';
import { fixture, maxInWindow, Replay, type Reply } from './replay.js';

const SERVER = join(PACKAGE_ROOT, 'dist/tools/pubmed/server.js');

const xml = (body: string, status = 200): Reply => ({ status, headers: { 'Content-Type': 'text/xml; charset=UTF-8' }, body });
const json = (body: string, status = 200): Reply => ({ status, headers: { 'Content-Type': 'application/json; charset=UTF-8' }, body });
const ESEARCH = json(fixture('esearch.json'));
const EFETCH = xml(fixture('efetch.xml'));

interface Page {
  total: number;
  offset: number;
  data: { paperId: string; title: string; authors: string[]; abstract: string; year: number | null; venue: string }[];
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => {});
});

async function replay(routes: Record<string, Reply | Reply[]>): Promise<Replay> {
  const r = await Replay.start();
  for (const [path, how] of Object.entries(routes)) r.route(`/eutils/${path}`, how);
  cleanups.push(() => r.close());
  return r;
}

async function server(r: Replay, env: Record<string, string> = {}, args: string[] = ['--retry-base-ms', '20']): Promise<Client> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [SERVER, ...args],
    env: { PATH: process.env.PATH ?? '', NCBI_EUTILS_BASE: `${r.url}/eutils`, ...env },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'test', version: '0' });
  await client.connect(transport);
  cleanups.push(() => client.close());
  return client;
}

async function search(client: Client, args: Record<string, unknown>): Promise<{ page?: Page; error?: string }> {
  const res = await client.callTool({ name: 'pubmed_search', arguments: args });
  const text = (res.content as { type: string; text: string }[])[0]!.text;
  return res.isError ? { error: text } : { page: JSON.parse(text) as Page };
}

describe('PubMed XML', () => {
  const docs = parsePubmedXml(fixture('efetch.xml'));
  const byId = new Map(docs.map((d) => [d.paperId, d]));

  it('flattens inline markup in titles, keeping the words in their sentence', () => {
    expect(byId.get('99000001')!.title).toBe('Colonization resistance against Clostridioides difficile by commensal Bacteroides species in mice.');
    expect(byId.get('99000002')!.title).toBe('CO2 uptake by Ca2+-doped sorbents & the role of β-alumina at <400 °C.');
  });

  it('keeps the labels of a structured abstract, one section per line', () => {
    expect(byId.get('99000001')!.abstract.split('\n')).toEqual([
      'BACKGROUND: Commensal bacteria limit colonization by C. difficile, but which species are sufficient is unclear.',
      'METHODS: Germ-free mice were colonized with single Bacteroides strains and challenged with 10^5 spores.',
      'RESULTS: Two of six strains reduced the pathogen burden (P < 0.01).',
      'CONCLUSIONS: Single commensal species can confer colonization resistance.',
    ]);
    expect(byId.get('99000002')!.abstract).toBe('Sorbents doped with Ca2+ took up twice as much CO2 as undoped ones. Whitespace across lines is collapsed.');
  });

  it('reads authors (collective ones too, invalid ones not), the year (from a MedlineDate too) and the journal', () => {
    expect(byId.get('99000001')).toMatchObject({ authors: ['Rivera AM', 'Okafor C', 'Lindqvist J'], year: 2021, venue: 'The Journal of infectious diseases' });
    expect(byId.get('99000002')).toMatchObject({ authors: ['Tanaka H', 'Sorbent Materials Consortium'], year: 2018, venue: 'Journal of applied & environmental chemistry' });
    expect(byId.get('99000003')).toMatchObject({ title: 'Clostridioides difficile Infection', authors: ['Nguyen L'], year: 2024, venue: 'StatPearls (synthetic)' });
  });

  it("tells NCBI's error document apart from a body that is not XML", () => {
    const err = (body: string): PubmedXmlError => {
      try {
        parsePubmedXml(body);
      } catch (e) {
        return e as PubmedXmlError;
      }
      throw new Error('parsed');
    };
    expect(err(fixture('efetch-error.xml'))).toMatchObject({ malformed: false, message: 'NCBI: Cannot retrieve the records: the search backend is unavailable' });
    expect(err('<html><body><h1>502 Bad Gateway</h1><p>nginx</body></html>').malformed).toBe(true);
    expect(err(fixture('efetch.xml').slice(0, 3000)).malformed).toBe(true);
  });
});

/**
 * A clock the test moves, with Node's timer rule: a sleep started at `t` wakes when the event
 * loop's whole-millisecond time has moved on by the delay, i.e. at floor(t) + ceil(delay), which
 * can be up to a millisecond before t + delay. Sleeps wake in deadline order; nothing races real time.
 */
class LoopClock implements Clock {
  t = 0.9;
  readonly #sleepers: { at: number; wake: () => void }[] = [];

  now(): number {
    return this.t;
  }

  sleep(ms: number): Promise<void> {
    return new Promise((wake) => this.#sleepers.push({ at: Math.floor(this.t) + Math.ceil(Math.max(1, ms)), wake }));
  }

  /** Lets every settled promise run on, then wakes sleepers in order until `done` settles. */
  async runUntil<T>(done: Promise<T>): Promise<T> {
    let settled = false;
    void done.finally(() => (settled = true)).catch(() => {});
    for (;;) {
      await new Promise((r) => setImmediate(r));
      if (settled) return done;
      this.#sleepers.sort((a, b) => a.at - b.at);
      const next = this.#sleepers.shift();
      if (!next) throw new Error('stuck: nothing sleeping, and not done');
      this.t = Math.max(this.t, next.at);
      next.wake();
    }
  }
}

describe('RateLimiter', () => {
  it('never lets more than `rate` requests be sent within one window, though timers fire up to 1 ms early, and serves waiters in order', async () => {
    const clock = new LoopClock();
    const limiter = new RateLimiter(3, 200, clock);
    const granted: number[] = [];
    const sent: number[] = [];
    const order: number[] = [];
    const all = Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        limiter.acquire().then((slot) => {
          granted.push(clock.now());
          // Getting on the wire takes a fraction of a millisecond: sends fall between whole milliseconds.
          clock.t += 0.35;
          sent.push(clock.now());
          slot.sent();
          order.push(i);
        }),
      ),
    );
    await clock.runUntil(all);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    for (let k = 3; k < 10; k++) {
      // Allowed no earlier than a window after the send three before it, by any fraction.
      expect(granted[k]! - sent[k - 3]!).toBeGreaterThanOrEqual(200);
      // Nor late by more than the timer's own rounding.
      expect(granted[k]! - (sent[k - 3]! + 200)).toBeLessThan(2);
    }
  });

  it('times the window from when a request was sent, not from when it was allowed', async () => {
    const clock = new LoopClock();
    const limiter = new RateLimiter(1, 200, clock);
    const first = await limiter.acquire();
    const t0 = clock.now();
    const second = limiter.acquire();
    // The first request takes 150 ms to get on the wire (a new connection).
    clock.t += 150;
    first.sent();
    await clock.runUntil(second);
    expect(clock.now() - t0).toBeGreaterThanOrEqual(150 + 200);
    expect(clock.now() - t0).toBeLessThan(150 + 202);
  });

  it('on the real clock too: no window holds more than `rate` sends, under a busy event loop', async () => {
    // Busy spells of 3-8 ms between timers: what made the limiter's sleeps end early before.
    const busy = setInterval(() => {
      const until = performance.now() + 3 + Math.random() * 5;
      while (performance.now() < until);
    }, 7);
    try {
      const limiter = new RateLimiter(3, 50);
      const starts: number[] = [];
      await Promise.all(
        Array.from({ length: 12 }, () =>
          limiter.acquire().then((slot) => {
            // Taken before sent(), where the limiter takes its own, so it can only be earlier.
            starts.push(performance.now());
            slot.sent();
          }),
        ),
      );
      for (let k = 3; k < 12; k++) expect(starts[k]! - starts[k - 3]!).toBeGreaterThanOrEqual(50);
    } finally {
      clearInterval(busy);
    }
  });
});

describe('pubmed_search server', () => {
  it('searches then fetches, and answers in the corpus shape in relevance order', async () => {
    const r = await replay({ 'esearch.fcgi': ESEARCH, 'efetch.fcgi': EFETCH });
    const client = await server(r, { NCBI_EMAIL: 'dev@example.org' }, ['--tool', 'tf-test']);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(['pubmed_search']);

    const { page, error } = await search(client, { query: 'colonization resistance', limit: 3, offset: 0 });
    expect(error).toBeUndefined();
    expect(page!.total).toBe(1234);
    expect(page!.offset).toBe(0);
    // esearch's order, not efetch's.
    expect(page!.data.map((d) => d.paperId)).toEqual(['99000002', '99000001', '99000003']);
    expect(Object.keys(page!.data[0]!).sort()).toEqual(['abstract', 'authors', 'paperId', 'title', 'venue', 'year']);
    expect(page!.data[1]!.title).toContain('against Clostridioides difficile by');
    expect(page!.data[1]!.abstract).toMatch(/^BACKGROUND: .*\nMETHODS: /);

    const [es] = r.on('/eutils/esearch.fcgi');
    expect(Object.fromEntries(es!.url.searchParams)).toEqual({
      db: 'pubmed', term: 'colonization resistance', retmode: 'json', retmax: '3', retstart: '0', sort: 'relevance', tool: 'tf-test', email: 'dev@example.org',
    });
    const [ef] = r.on('/eutils/efetch.fcgi');
    expect(ef!.url.searchParams.get('id')).toBe('99000002,99000001,99000003');
    expect(ef!.url.searchParams.get('retmode')).toBe('xml');
  });

  it('answers an empty page without calling efetch', async () => {
    const r = await replay({ 'esearch.fcgi': json('{"esearchresult":{"count":"0","retmax":"0","retstart":"0","idlist":[]}}') });
    const client = await server(r);
    expect((await search(client, { query: 'zzzz' })).page).toEqual({ total: 0, offset: 0, data: [] });
    expect(r.on('/eutils/efetch.fcgi')).toHaveLength(0);
  });

  it('retries a 429 and then succeeds', async () => {
    const r = await replay({ 'esearch.fcgi': [json(fixture('rate-limit.json'), 429), ESEARCH], 'efetch.fcgi': EFETCH });
    const client = await server(r);
    const { page, error } = await search(client, { query: 'colonization resistance', limit: 3 });
    expect(error).toBeUndefined();
    expect(page!.data).toHaveLength(3);
    expect(r.on('/eutils/esearch.fcgi')).toHaveLength(2);
  });

  it('retries the rate-limit JSON sent with 200 in place of XML, and a 5xx', async () => {
    const r = await replay({
      'esearch.fcgi': ESEARCH,
      'efetch.fcgi': [json(fixture('rate-limit.json'), 200), { status: 502, body: '<html>Bad Gateway</html>' }, EFETCH],
    });
    const client = await server(r);
    const { page, error } = await search(client, { query: 'colonization resistance', limit: 3 });
    expect(error).toBeUndefined();
    expect(page!.data.map((d) => d.paperId)).toEqual(['99000002', '99000001', '99000003']);
    expect(r.on('/eutils/efetch.fcgi')).toHaveLength(3);
  });

  it("reports NCBI's XML error body to the model and does not retry it", async () => {
    const r = await replay({ 'esearch.fcgi': ESEARCH, 'efetch.fcgi': xml(fixture('efetch-error.xml')) });
    const client = await server(r);
    const { page, error } = await search(client, { query: 'colonization resistance' });
    expect(page).toBeUndefined();
    expect(error).toBe('PubMed search failed: NCBI: Cannot retrieve the records: the search backend is unavailable');
    expect(r.on('/eutils/efetch.fcgi')).toHaveLength(1);
  });

  it('gives up after its retries, with the last reason', async () => {
    const r = await replay({ 'esearch.fcgi': { status: 503, body: 'Service Unavailable' } });
    const client = await server(r, {}, ['--retry-base-ms', '5', '--max-retries', '2']);
    const { error } = await search(client, { query: 'x' });
    expect(error).toBe('PubMed search failed: NCBI did not answer after 3 attempts; last: HTTP 503: Service Unavailable');
    expect(r.on('/eutils/esearch.fcgi')).toHaveLength(3);
  });

  it('refuses to page past the 10,000 results esearch can reach, without a request', async () => {
    const r = await replay({ 'esearch.fcgi': ESEARCH });
    const client = await server(r);
    expect((await search(client, { query: 'x', limit: 10, offset: 9995 })).error).toMatch(/offset \+ limit must be at most 10000/);
    expect(r.requests).toHaveLength(0);
  });

  it('keeps 20 concurrent searches within 3 requests per second, as NCBI counts them', async () => {
    const r = await replay({ 'esearch.fcgi': ESEARCH, 'efetch.fcgi': EFETCH });
    const client = await server(r);
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => search(client, { query: `query ${i}`, limit: 3 })));
    expect(results.filter((x) => x.error)).toEqual([]);
    expect(r.requests).toHaveLength(40);
    expect(r.requests.some((q) => q.url.searchParams.has('api_key'))).toBe(false);
    expect(maxInWindow(r.requests.map((q) => q.at), 1000)).toBeLessThanOrEqual(3);
  }, 40_000);

  it('with NCBI_API_KEY, sends the key and allows 10 requests per second', async () => {
    const r = await replay({ 'esearch.fcgi': ESEARCH, 'efetch.fcgi': EFETCH });
    const client = await server(r, { NCBI_API_KEY: 'test-key-123' });
    await Promise.all(Array.from({ length: 15 }, (_, i) => search(client, { query: `q${i}`, limit: 3 })));
    expect(r.requests).toHaveLength(30);
    expect(r.requests.every((q) => q.url.searchParams.get('api_key') === 'test-key-123')).toBe(true);
    const peak = maxInWindow(r.requests.map((q) => q.at), 1000);
    expect(peak).toBeLessThanOrEqual(10);
    // More than the keyless limit lets through.
    expect(peak).toBeGreaterThan(3);
  }, 30_000);
});

describe('data/configs/pubmed.yaml', () => {
  const CONFIG = join(PACKAGE_ROOT, 'data/configs/pubmed.yaml');

  it('needs SERPER_API_KEY, and names it when it is missing', () => {
    expect(() => loadConfig(CONFIG, {}, { OPENAI_API_KEY: 'x' })).toThrow(/mcpServers\.web\.env\.SERPER_API_KEY: environment variable SERPER_API_KEY is not set/);
  });

  it('runs pubmed_search, google_search and browse_webpage through the executor, at most 5 calls', async () => {
    const ncbi = await replay({ 'esearch.fcgi': ESEARCH, 'efetch.fcgi': EFETCH });
    const web = await Replay.start();
    cleanups.push(() => web.close());
    web.route('/search', { headers: { 'Content-Type': 'application/json' }, body: fixture('serper-organic.json') });
    web.route('/page', { headers: { 'Content-Type': 'text/html' }, body: '<title>A page</title><p>Page text.</p>' });
    const cfg = loadConfig(CONFIG, { questions: 'q.jsonl' }, {
      OPENAI_API_KEY: 'x', SERPER_API_KEY: 'serper-key', NCBI_EUTILS_BASE: `${ncbi.url}/eutils`, SERPER_BASE: web.url, WEB_ALLOW_HOSTS: '127.0.0.1',
    });
    expect(cfg.budgets.max_tool_calls).toBe(5);
    expect(cfg.endpoint.api_key_env).toBe('OPENAI_API_KEY');
    expect(cfg.mcpServers.web).toMatchObject({ env: { SERPER_API_KEY: 'serper-key' } });
    expect(JSON.stringify(redactConfig(cfg, { SERPER_API_KEY: 'serper-key' }))).not.toContain('serper-key');
    const ex = await Executor.start({ servers: cfg.mcpServers, tools: cfg.tools, executor: { ...cfg.executor, cache: false } });
    cleanups.push(() => ex.close());
    expect(ex.tools().map((t) => t.name)).toEqual(['pubmed_search', 'google_search', 'browse_webpage']);
    const used = new Map<string, number>();
    const pubmed = await ex.call({ toolName: 'pubmed_search', query: 'colonization resistance', attributes: { limit: '3' } }, 'c1', used);
    expect(pubmed.view.documents!.map((d) => d.id)).toEqual(['99000002', '99000001', '99000003']);
    const google = await ex.call({ toolName: 'google_search', query: 'colonization resistance', attributes: {} }, 'c2', used);
    expect(google.view.documents![0]!.id).toBe('https://www.example.org/topics/colonization-resistance');
    const page = await ex.call({ toolName: 'browse_webpage', query: `${web.url}/page`, attributes: {} }, 'c3', used);
    expect(page.arguments).toEqual({ url: `${web.url}/page` });
    expect(page.view.text).toContain('Page text.');
    const over = await ex.call({ toolName: 'pubmed_search', query: 'x', attributes: {} }, 'c4', new Map([['pubmed_search', 5]]));
    expect(over.skipped).toBe(true);
  });
});
