/**
 * MCP server over stdio: `google_search` (Serper) and `browse_webpage` (fetch and read a page).
 *
 *   node dist/tools/web/server.js [--allow-hosts LIST] [--resolve NAME=ADDR[,ADDR…]] [--timeout-ms N] [--max-bytes N] [--max-chars N] [--blocklist FILE] [--block RULE]
 *
 * Environment: SERPER_API_KEY (google_search only), SERPER_BASE (default
 * https://google.serper.dev), WEB_ALLOW_HOSTS (what --allow-hosts sets; the two are joined).
 * browse_webpage refuses loopback, private, link-local and cloud-metadata targets, also behind
 * redirects and DNS names, unless the allowlist names them (see policy.ts). `--resolve` pins a
 * name to addresses without asking DNS (as curl's `--resolve` does); the policy judges them
 * like any others. The benchmark-leak guard (policy.ts; `--blocklist FILE` replaces its default
 * list, `--block RULE` adds to it) drops search results and refuses pages that host eval sets.
 */
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import { PACKAGE_VERSION } from '../../pipeline/paths.js';
import { browse, DEFAULT_MAX_CHARS, formatBrowse } from './browse.js';
import { DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_MS, FetchError, systemResolver, type Resolver } from './fetch-page.js';
import { HostPolicy, LeakGuard, leakMeta, leakRefusal, leakRules, type LeakStrike, type ResolvedAddress } from './policy.js';
import { DEFAULT_SERPER_BASE, SerperError, serperSearch } from './serper.js';
import { exitWith, serverFlags } from '../shared/flags.js';

const FLAGS = {
  'allow-hosts': { kind: 'string', multiple: true },
  resolve: { kind: 'string', multiple: true },
  'timeout-ms': { kind: 'int', min: 1 },
  'max-bytes': { kind: 'int', min: 1 },
  'max-chars': { kind: 'int', min: 1 },
  blocklist: { kind: 'string' },
  block: { kind: 'string', multiple: true },
} as const;

const fatal = (message: string): never => exitWith('web', message);

/** `--resolve NAME=ADDR[,ADDR…]` (repeatable): those names answer with those addresses, the rest ask DNS. */
function pinnedResolver(items: readonly string[]): Resolver {
  const table = new Map<string, ResolvedAddress[]>();
  for (const item of items) {
    const eq = item.indexOf('=');
    const name = item.slice(0, eq).trim().toLowerCase().replace(/\.$/, '');
    const addresses = item
      .slice(eq + 1)
      .split(',')
      .map((a) => a.trim().replace(/^\[|\]$/g, ''));
    if (eq <= 0 || name === '' || addresses.some((a) => isIP(a) === 0)) fatal(`--resolve needs NAME=ADDR[,ADDR…] with IP addresses, got ${JSON.stringify(item)}`);
    table.set(name, addresses.map((address) => ({ address, family: isIP(address) === 6 ? 6 : 4 })));
  }
  return async (hostname) => table.get(hostname.toLowerCase().replace(/\.$/, '')) ?? systemResolver(hostname);
}

const failed = (text: string) => ({ isError: true, content: [{ type: 'text' as const, text }] });

async function main(): Promise<void> {
  const f = serverFlags('web', process.argv.slice(2), FLAGS);
  const flags = { timeoutMs: f['timeout-ms'] ?? DEFAULT_TIMEOUT_MS, maxBytes: f['max-bytes'] ?? DEFAULT_MAX_BYTES, maxChars: f['max-chars'] ?? DEFAULT_MAX_CHARS };
  let policy: HostPolicy;
  const env = process.env;
  try {
    policy = new HostPolicy([env.WEB_ALLOW_HOSTS ?? '', ...(f['allow-hosts'] ?? [])].join(','));
  } catch (err) {
    fatal((err as Error).message);
  }
  let guard: LeakGuard;
  try {
    guard = new LeakGuard(leakRules(f.blocklist, f.block ?? [], (p) => readFileSync(p, 'utf8')));
  } catch (err) {
    fatal(`--blocklist: ${(err as Error).message}`);
  }
  const resolve = pinnedResolver(f.resolve ?? []);
  const serperBase = env.SERPER_BASE || DEFAULT_SERPER_BASE;
  if (!/^https?:\/\//i.test(serperBase)) fatal(`SERPER_BASE is not an http(s) URL: ${JSON.stringify(serperBase)}`);
  if (!env.SERPER_API_KEY) process.stderr.write('web server: SERPER_API_KEY is not set; google_search will fail, browse_webpage works\n');

  const server = new McpServer({ name: 'trajforge-web', version: PACKAGE_VERSION });
  server.registerTool(
    'google_search',
    {
      title: 'Search the web',
      description:
        'Google web search (through Serper). Returns JSON {"query", "data": [{"id" (the link), "url", "title", "snippet", "position", "date"?}]}, best first.',
      inputSchema: {
        query: z.string().min(1).describe('Search words'),
        num_results: z.number().int().min(1).max(100).default(10).describe('Number of results (1-100)'),
        gl: z.string().min(2).max(8).default('us').describe('Country code of the search, e.g. us, gb, de'),
        hl: z.string().min(2).max(8).default('en').describe('Language code of the results, e.g. en, de'),
      },
    },
    async ({ query, num_results, gl, hl }) => {
      try {
        const page = await serperSearch({ query, num: num_results, gl, hl }, { apiKey: env.SERPER_API_KEY, base: serperBase });
        const strikes: LeakStrike[] = [];
        const data = guard!.filter(page.data, (d) => d.url, strikes);
        return { content: [{ type: 'text', text: JSON.stringify({ ...page, data }) }], ...leakMeta(strikes) };
      } catch (err) {
        return failed(`google_search failed: ${err instanceof SerperError ? err.message : `unexpected failure: ${(err as Error).message}`}`);
      }
    },
  );
  server.registerTool(
    'browse_webpage',
    {
      title: 'Read a web page',
      description: 'Fetches an http(s) page and returns its title, final URL and readable text (scripts, styles and navigation removed).',
      inputSchema: {
        url: z.string().min(1).describe('The page URL, http or https'),
      },
    },
    async ({ url }) => {
      // Refused before any request, and again when a redirect ended on a blocked page.
      const refuse = (at: string) => {
        const rule = guard!.match(at);
        return rule === undefined ? undefined : { ...failed(leakRefusal(at, rule)), ...leakMeta([{ url: at, rule, where: 'fetch' }]) };
      };
      const before = refuse(url);
      if (before) return before;
      try {
        const r = await browse(url, { policy, resolve, timeoutMs: flags.timeoutMs, maxBytes: flags.maxBytes, maxChars: flags.maxChars });
        return refuse(r.url) ?? { content: [{ type: 'text', text: formatBrowse(r) }] };
      } catch (err) {
        return failed(`browse_webpage failed: ${err instanceof FetchError ? err.message : `unexpected failure: ${(err as Error).message}`}`);
      }
    },
  );
  await server.connect(new StdioServerTransport());
}

main().catch((err: unknown) => fatal(err instanceof Error ? (err.stack ?? err.message) : String(err)));
