/**
 * Secrets never reach the data or the model (#14). Unique values are planted everywhere a
 * config holds one: the endpoint key (`api_key_env`), a PubMed and a Serper key in tool
 * servers' env, a `${VAR}` in a server's args, and `${VAR}`s in an HTTP server's url and
 * headers. The upstreams (loopback fakes of NCBI and Serper) and the HTTP MCP server echo them
 * back, in error bodies and in results. Then everything the runs wrote (run directories, the
 * cache, exports, reports, stdout and stderr of every command) and every request body the
 * endpoint received is searched for them.
 *
 * The model is the sim behind a pass-through that keeps every request. It always calls
 * `pubmed_search`, so each run aliases that name to another server's tool.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim, type Sim } from '../../sim/server.js';
import { runCli, tempDir, writeConfig, type CliResult } from '../helpers.js';
import { checkRunDir, loopbackServer, openAiError } from './util.js';

const PUBMED_SERVER = join(PACKAGE_ROOT, 'dist/tools/pubmed/server.js');
const WEB_SERVER = join(PACKAGE_ROOT, 'dist/tools/web/server.js');

const hex = (): string => randomBytes(12).toString('hex');

/**
 * Each value carries its own 24 random hex digits: searching for those finds the value in
 * any form that keeps them (as is, URL-encoded, JSON-escaped, cut in half at a hex boundary
 * does not hide it either as long as 24 digits stay together).
 */
const planted = {
  TF_SEC_API_KEY: `sk-PLANTED-${hex()}`,
  // Characters URL encoding changes: the server sends it as ncbi%2BPLANTED%2F…%3D.
  TF_SEC_NCBI: `ncbi+PLANTED/${hex()}=`,
  TF_SEC_SERPER: `serper-PLANTED-${hex()}`,
  // Names that do not look secret: they are secrets because expansion put them in args, url, headers.
  TF_SEC_HOSTS: `planted-${hex()}.example`,
  TF_SEC_ROUTE: `route${hex()}`,
  TF_SEC_TENANT: `tenant-${hex()}`,
  TF_SEC_BEARER: `bearer-PLANTED-${hex()}`,
  // A server that dies at start printing its key.
  TF_SEC_DYING: `dying-PLANTED-${hex()}`,
};
const env = planted as Record<string, string>;
const digits = Object.fromEntries(Object.entries(planted).map(([k, v]) => [k, /[0-9a-f]{24}/.exec(v)![0]]));

interface Place {
  readonly where: string;
  readonly text: string;
}

/** Every file under `dir`; binary ones (the cache's .idx) are searched as latin1, where hex digits are themselves. */
function filesUnder(dir: string): Place[] {
  const out: Place[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...filesUnder(p));
    else out.push({ where: p, text: readFileSync(p, 'latin1') });
  }
  return out;
}

function expectNoSecret(places: readonly Place[]): void {
  for (const [name, d] of Object.entries(digits)) {
    for (const { where, text } of places) expect(text.includes(d), `${name} (…${d}) found in ${where}`).toBe(false);
  }
}

function cliPlaces(label: string, r: CliResult): Place[] {
  return [
    { where: `${label}: stdout`, text: r.stdout },
    { where: `${label}: stderr`, text: r.stderr },
  ];
}

/** A Streamable HTTP MCP server whose one tool tells the caller the URL and headers it was reached with. */
async function startTalkativeMcp(): Promise<{ url: string; seen: IncomingMessage['headers'][]; close(): Promise<void> }> {
  const seen: IncomingMessage['headers'][] = [];
  const server = await loopbackServer((req, res, text) => {
    seen.push(req.headers);
    if (req.method !== 'POST' || !req.url?.startsWith('/mcp/')) {
      res.writeHead(405, { 'content-type': 'application/json' }).end('{}');
      return;
    }
    const mcp = new McpServer({ name: 'talkative', version: '1.0.0' });
    mcp.registerTool('lookup', { description: 'Looks a topic up', inputSchema: { query: z.string().describe('the topic') } }, async ({ query }) => ({
      content: [
        {
          type: 'text',
          text: JSON.stringify({
            data: [{ id: 'remote-1', title: `Record on ${query}`, abstract: `Served at ${req.url} to ${req.headers.authorization} for ${String(req.headers['x-tenant'])}. ${query} was first supported in version 52.` }],
          }),
        },
      ],
    }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void mcp.close();
    });
    void mcp.connect(transport).then(() => transport.handleRequest(req, res, text ? JSON.parse(text) : undefined));
  });
  return { url: server.url.replace(/\/v1$/, ''), seen, close: () => server.close() };
}

let sim: Sim;
/** The pass-through in front of the sim: every request body the endpoint received, and the keys it was sent with. */
let proxy: Awaited<ReturnType<typeof loopbackServer>>;
const bodies: string[] = [];
const auth: string[] = [];
/** What the upstreams were sent: the keys did reach the servers that own them. */
const ncbiQueries: string[] = [];
const serperKeys: string[] = [];
let ncbi: Awaited<ReturnType<typeof loopbackServer>>;
let serper: Awaited<ReturnType<typeof loopbackServer>>;
let remote: Awaited<ReturnType<typeof startTalkativeMcp>>;
const root = tempDir('tf-secrets-');
/** Questions whose answer the upstreams' results hold (version 52), so that runs have accepted samples to export. */
const questions = join(root, 'questions.jsonl');
writeFileSync(
  questions,
  ['CSS property grid', 'HTML element video', 'JavaScript builtin Promise']
    .map((f, i) => JSON.stringify({ id: `s${i}`, question: `In which version of Firefox was the ${f} first supported?`, answer: '52' }))
    .join('\n') + '\n',
);

beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 14 });
  proxy = await loopbackServer(async (req, res, body) => {
    bodies.push(body);
    auth.push(String(req.headers.authorization));
    const r = await fetch(`${sim.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
    res.end(Buffer.from(await r.arrayBuffer()));
  });
  // NCBI refusing a key: 400, naming the key it got, as it arrived (URL-encoded) and decoded.
  ncbi = await loopbackServer((req, res) => {
    ncbiQueries.push(req.url ?? '');
    const sent = /[?&]api_key=([^&]*)/.exec(req.url ?? '')?.[1] ?? '';
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: `Invalid API key: api_key=${sent} (${decodeURIComponent(sent.replace(/\+/g, ' '))})` }));
  });
  // Serper answering, with the key in a result (an account notice inside a snippet).
  serper = await loopbackServer((req, res, body) => {
    const key = String(req.headers['x-api-key']);
    serperKeys.push(key);
    const q = (JSON.parse(body) as { q: string }).q;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        organic: [
          { link: 'https://docs.example/a', title: `About ${q}`, snippet: `Account ${key}: 3 searches left. ${q} was first supported in version 52.`, position: 1 },
          { link: 'https://docs.example/b', title: 'Other', snippet: `Key in use: ${encodeURIComponent(key)}.`, position: 2 },
        ],
      }),
    );
  });
  remote = await startTalkativeMcp();
});
afterAll(async () => {
  await Promise.all([sim?.close(), proxy?.close(), ncbi?.close(), serper?.close(), remote?.close()]);
});

/** A fresh folder under the suite's root. */
function folder(name: string): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** All three servers in every run; `pubmed_search` (what the sim calls) goes to `target`. */
function config(dir: string, target: { server: string; tool: string }, dialect = 'tulu'): string {
  return writeConfig(dir, proxy.url, {
    endpoint: { base_url: proxy.url, model: 'trajforge-sim', api_key_env: 'TF_SEC_API_KEY', max_tokens: 1024, retry_base_ms: 20, retry_max_ms: 200 },
    dialect,
    mcpServers: {
      pubmed: {
        command: process.execPath,
        args: [PUBMED_SERVER, '--max-retries', '0'],
        env: { NCBI_API_KEY: '${TF_SEC_NCBI}', NCBI_EUTILS_BASE: ncbi.url },
      },
      web: {
        command: process.execPath,
        args: [WEB_SERVER, '--allow-hosts', '${TF_SEC_HOSTS}'],
        env: { SERPER_API_KEY: '${TF_SEC_SERPER}', SERPER_BASE: serper.url },
      },
      remote: {
        url: `${remote.url}/mcp/\${TF_SEC_ROUTE}`,
        headers: { Authorization: 'Bearer ${TF_SEC_BEARER}', 'X-Tenant': '${TF_SEC_TENANT}' },
      },
    },
    tools: { aliases: { pubmed_search: target }, limits: { pubmed_search: 5 } },
    executor: { cache_dir: join(root, 'cache') },
    questions: { path: questions },
    concurrency: 2,
  });
}

/** The request bodies the endpoint received while `fn` ran. */
async function capturing(fn: () => Promise<void>): Promise<string[]> {
  const from = bodies.length;
  await fn();
  return bodies.slice(from);
}

/** Generates a run in `dir` with `pubmed_search` going to `target`; the CLI's output and the requests the endpoint received. */
async function generateRun(dir: string, target: { server: string; tool: string }, flags = ['--limit', '3'], dialect = 'tulu'): Promise<{ gen: CliResult; places: Place[] }> {
  let gen: CliResult | undefined;
  const seen = await capturing(async () => {
    gen = await runCli(['generate', '--config', config(dir, target, dialect), ...flags], { env });
  });
  // A run whose every sample failed (a fake NCBI refuses every key) exits 1 and says why; the rest must exit 0.
  if (gen!.code === 1) expect(gen!.stderr).toMatch(/every sample of this run failed/);
  else expect(gen!.code, gen!.stderr).toBe(0);
  return { gen: gen!, places: [...cliPlaces(`generate ${target.server}`, gen!), ...seen.map((text, i) => ({ where: `request ${i} of the ${target.server} run`, text }))] };
}

/** `export` (two formats), `report`, `stats` and `validate` of a run: their output files land in `dir`. */
async function readEverything(dir: string): Promise<Place[]> {
  const run = join(dir, 'run');
  const places: Place[] = [];
  for (const args of [
    ['export', run, '--format', 'messages', '--all', '--out', join(dir, 'messages.jsonl')],
    ['export', run, '--format', 'text', '--out', join(dir, 'text.jsonl')],
    ['report', run, '--out', join(dir, 'report.html')],
    ['stats', run],
    ['validate', run],
  ]) {
    const r = await runCli(args);
    expect(r.code, `${args[0]}: ${r.stderr}`).not.toBe(2);
    places.push(...cliPlaces(`${args.slice(0, 3).join(' ')}`, r));
  }
  return places;
}

/** The request bodies that hold `marker`: the model saw the echo, with the secret taken out. */
function expectMarker(places: readonly Place[], marker: string): void {
  expect(places.some((p) => p.where.startsWith('request ') && p.text.includes(marker)), `a request to the model holds ${marker}`).toBe(true);
}

describe('secrets never reach the data or the model', () => {
  it('PubMed (a key in env, echoed URL-encoded and decoded in a 400): not in the run, exports, report, stats, validate, outputs or requests', async () => {
    const dir = folder('pubmed');
    const { places } = await generateRun(dir, { server: 'pubmed', tool: 'pubmed_search' });
    expectMarker(places, '[redacted:NCBI_API_KEY]');
    const { ok, failed, manifest } = checkRunDir(join(dir, 'run'));
    expect(ok.length + failed.length).toBe(3);
    expect(JSON.stringify(manifest?.config)).toContain('"NCBI_API_KEY":"[redacted]"');
    places.push(...(await readEverything(dir)));
    // The key was in use: the upstream got it, and the endpoint its own.
    expect(ncbiQueries.some((q) => q.includes(`api_key=${encodeURIComponent(planted.TF_SEC_NCBI)}`))).toBe(true);
    expect(new Set(auth)).toEqual(new Set([`Bearer ${planted.TF_SEC_API_KEY}`]));
    places.push(...filesUnder(dir));
    expect(places.some((p) => p.where.endsWith('messages.jsonl') && p.text.includes('[redacted:NCBI_API_KEY]'))).toBe(true);
    expectNoSecret(places);
  });

  it('Serper (a key in env, in a result that is cached; a ${VAR} in args): not in the run, the cache, exports, report, validate --judge, outputs or requests', async () => {
    const dir = folder('web');
    const { places } = await generateRun(dir, { server: 'web', tool: 'google_search' });
    expectMarker(places, '[redacted:SERPER_API_KEY]');
    const { ok } = checkRunDir(join(dir, 'run'));
    expect(ok.length).toBeGreaterThan(0);
    places.push(...(await readEverything(dir)));
    expect(serperKeys).toContain(planted.TF_SEC_SERPER);
    // The result was cached, scrubbed; the entry's key names the server by its args, the ${VAR} hashed.
    const logs = filesUnder(join(root, 'cache')).filter((f) => f.where.endsWith('.log'));
    expect(logs.map((f) => f.text).join('')).toContain('[redacted:SERPER_API_KEY]');
    expect(logs.map((f) => f.text).join('')).toMatch(/--allow-hosts\\?",\\?"\[secret:[0-9a-f]{16}\]/);
    // The judge (validate --judge) at an endpoint that echoes the key in its errors.
    const echo = await loopbackServer((req, res) => {
      openAiError(res, 500, `Server error for key ${String(req.headers.authorization).replace(/^Bearer /, '')}`, null, 'server_error');
    });
    try {
      const judgeConfig = writeConfig(folder('judge'), echo.url, {
        endpoint: { base_url: echo.url, model: 'judge', api_key_env: 'TF_SEC_API_KEY', max_retries: 1, retry_base_ms: 10, retry_max_ms: 20 },
      });
      const r = await runCli(['validate', join(dir, 'run'), '--json', '--judge', '--config', judgeConfig], { env });
      expect(r.stdout).toContain('Server error for key [redacted]');
      places.push(...cliPlaces('validate --judge', r));
    } finally {
      await echo.close();
    }
    places.push(...filesUnder(dir), ...filesUnder(join(root, 'cache')));
    for (const name of ['messages.jsonl', 'text.jsonl', 'report.html']) {
      expect(places.some((p) => p.where.endsWith(name) && p.text.includes('[redacted:SERPER_API_KEY]')), `${name} shows the redacted result`).toBe(true);
    }
    expectNoSecret(places);
  });

  it('an HTTP MCP server (${VAR}s in its url and headers, echoed in its results): not in the run, the cache, exports, report, outputs or requests', async () => {
    const dir = folder('remote');
    const { places } = await generateRun(dir, { server: 'remote', tool: 'lookup' });
    expectMarker(places, '[redacted:TF_SEC_ROUTE]');
    expectMarker(places, '[redacted:TF_SEC_TENANT]');
    expect(remote.seen.some((h) => h.authorization === `Bearer ${planted.TF_SEC_BEARER}` && h['x-tenant'] === planted.TF_SEC_TENANT)).toBe(true);
    places.push(...(await readEverything(dir)));
    // rerun cannot take its config from a manifest with secrets taken out: it asks for the file.
    const rerun = await runCli(['rerun', join(dir, 'run')], { env });
    expect(rerun.code).toBe(2);
    expect(rerun.stderr).toContain('the recorded config had secrets');
    places.push(...cliPlaces('rerun', rerun));
    const logs = filesUnder(join(root, 'cache')).filter((f) => f.where.endsWith('.log'));
    expect(logs.map((f) => f.text).join('')).toMatch(/\/mcp\/\[secret:[0-9a-f]{16}\]/);
    places.push(...filesUnder(dir), ...filesUnder(join(root, 'cache')));
    expectNoSecret(places);
  });

  for (const dialect of ['tulu', 'mcp-xml', 'native']) {
    it(`${dialect}: the tool output the model sees has the echoed key taken out, in every encoding`, async () => {
      const dir = folder(`dialect-${dialect}`);
      const { places } = await generateRun(dir, { server: 'pubmed', tool: 'pubmed_search' }, ['--limit', '2', '--no-cache'], dialect);
      // Both forms of the echo (URL-encoded and decoded) became the marker.
      expect(places.some((p) => p.where.startsWith('request ') && p.text.includes('[redacted:NCBI_API_KEY] ([redacted:NCBI_API_KEY])'))).toBe(true);
      const { ok, failed } = checkRunDir(join(dir, 'run'));
      const calls = [...ok, ...failed].flatMap((t) => t.tool_calls);
      expect(calls.length).toBeGreaterThan(0);
      expect(calls.every((c) => c.error?.includes('[redacted:NCBI_API_KEY]'))).toBe(true);
      expectNoSecret([...places, ...filesUnder(dir)]);
    });
  }

  it('a server that dies at start printing its key: the error names the server, with the key taken out', async () => {
    const dir = folder('dying');
    const file = writeConfig(dir, proxy.url, {
      endpoint: { base_url: proxy.url, model: 'trajforge-sim', api_key_env: 'TF_SEC_API_KEY' },
      mcpServers: {
        dying: { command: process.execPath, args: ['-e', 'process.stderr.write("cannot log in with key " + process.env.DYING_API_KEY + "\\n"); process.exit(3)'], env: { DYING_API_KEY: '${TF_SEC_DYING}' } },
      },
      tools: {},
    });
    const r = await runCli(['generate', '--config', file, '--limit', '1'], { env });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('mcpServers.dying');
    expect(r.stderr).toContain('cannot log in with key [redacted:DYING_API_KEY]');
    expectNoSecret(cliPlaces('dying', r));
  });
});
