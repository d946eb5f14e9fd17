/**
 * MCP server over stdio: `pubmed_search` through NCBI E-utilities, answering in the corpus
 * server's shape `{total, offset, data: [{paperId, title, authors, abstract, year, venue}]}`.
 *
 *   node dist/tools/pubmed/server.js [--tool NAME] [--email ADDR] [--max-retries N] [--retry-base-ms N] [--timeout-ms N]
 *
 * Environment: NCBI_API_KEY (10 requests/s instead of 3), NCBI_TOOL and NCBI_EMAIL (what the
 * flags set), NCBI_EUTILS_BASE (default https://eutils.ncbi.nlm.nih.gov/entrez/eutils; tests
 * point it at a loopback replay). With TRAJFORGE_LIMITS_REDIS (set by a queue worker for the
 * servers that share their limits, this one by default; see pipeline/core/limits-redis.ts)
 * NCBI's limit is one window shared through Redis by every process that names it, instead of
 * one per process.
 */
import { createHash } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import { PACKAGE_VERSION } from '../../pipeline/paths.js';
import { exitWith, serverFlags } from '../shared/flags.js';
import { LimitsRedis, redisWhere, toolLimitsFromEnv } from '../../pipeline/core/limits-redis.js';
import { SharedLimitsConfig } from '../../schemas/index.js';
import { RedisRateWindow } from '../shared/rate-window.js';
import { DEFAULT_EUTILS_BASE, EutilsClient, EutilsError, ncbiRate } from './eutils.js';
import { RATE_MARGIN_MS } from './ratelimit.js';

const FLAGS = {
  tool: { kind: 'string' },
  email: { kind: 'string' },
  'max-retries': { kind: 'int', min: 0 },
  'retry-base-ms': { kind: 'int', min: 1 },
  'timeout-ms': { kind: 'int', min: 1 },
} as const;

const fatal = (message: string): never => exitWith('pubmed', message);

/**
 * NCBI's window shared through Redis, when the environment names one. NCBI counts per API key
 * (or per address without one), not per run, so the window's key names the key's hash, not the run.
 */
function sharedWindow(env: NodeJS.ProcessEnv): RedisRateWindow | undefined {
  const d = SharedLimitsConfig.parse({});
  let limits;
  try {
    limits = toolLimitsFromEnv(env, { prefix: d.prefix, pollMs: d.poll_ms, redisTimeoutMs: d.redis_timeout_ms, redisWaitMs: d.redis_wait_ms });
  } catch (err) {
    return fatal((err as Error).message);
  }
  if (limits === undefined) return undefined;
  const warn = (m: string): void => void process.stderr.write(`pubmed server: warning: ${m}\n`);
  const apiKey = env.NCBI_API_KEY || undefined;
  const who = apiKey === undefined ? 'no-key' : `key-${createHash('sha256').update(apiKey).digest('hex').slice(0, 16)}`;
  process.stderr.write(`pubmed server: NCBI's limit shared through Redis at ${redisWhere(limits.url)}\n`);
  return new RedisRateWindow({
    redis: new LimitsRedis({ connection: limits.url, callTimeoutMs: limits.redisTimeoutMs, warn }),
    key: `${limits.prefix}rate:ncbi-eutils:${who}`,
    rate: ncbiRate(apiKey),
    windowMs: 1000 + RATE_MARGIN_MS,
    pollMs: limits.pollMs,
    redisWaitMs: limits.redisWaitMs,
    warn,
  });
}

async function main(): Promise<void> {
  const f = serverFlags('pubmed', process.argv.slice(2), FLAGS);
  const flags = { tool: f.tool, email: f.email, maxRetries: f['max-retries'], retryBaseMs: f['retry-base-ms'], timeoutMs: f['timeout-ms'] };
  const env = process.env;
  const base = env.NCBI_EUTILS_BASE || DEFAULT_EUTILS_BASE;
  try {
    const u = new URL(base);
    if (u.protocol !== 'https:' && u.protocol !== 'http:') throw new Error('not http(s)');
  } catch {
    fatal(`NCBI_EUTILS_BASE is not an http(s) URL: ${JSON.stringify(base)}`);
  }
  const window = sharedWindow(env);
  // The client closed our stdin: the session is over. The Redis connection would keep the
  // process alive until the client's SIGTERM; closing it lets the process end at once.
  if (window !== undefined) process.stdin.once('end', () => void window.close());
  const client = new EutilsClient({
    base,
    limiter: window,
    apiKey: env.NCBI_API_KEY,
    tool: flags.tool ?? (env.NCBI_TOOL || 'trajforge'),
    email: flags.email ?? env.NCBI_EMAIL,
    maxRetries: flags.maxRetries,
    retryBaseMs: flags.retryBaseMs,
    timeoutMs: flags.timeoutMs,
  });
  process.stderr.write(`pubmed server: ${base}, ${env.NCBI_API_KEY ? 'with an API key (10 requests/s)' : 'no API key (3 requests/s)'}\n`);

  const server = new McpServer({ name: 'trajforge-pubmed', version: PACKAGE_VERSION });
  server.registerTool(
    'pubmed_search',
    {
      title: 'Search PubMed',
      description:
        'Searches PubMed (NCBI E-utilities), best match first. Returns JSON ' +
        '{"total", "offset", "data": [{"paperId" (the PMID), "title", "authors", "abstract", "year", "venue" (the journal)}]}.',
      inputSchema: {
        query: z.string().min(1).describe('PubMed query: keywords, or PubMed syntax such as "sglt2 inhibitors"[MeSH] AND 2020:2024[dp]'),
        limit: z.number().int().min(1).max(50).default(5).describe('Number of results to return (1-50)'),
        offset: z.number().int().min(0).default(0).describe('Number of ranked results to skip, for paging'),
      },
    },
    async ({ query, limit, offset }) => {
      try {
        const page = await client.search(query, limit, offset);
        return { content: [{ type: 'text', text: JSON.stringify(page) }] };
      } catch (err) {
        const message = err instanceof EutilsError ? err.message : `unexpected failure: ${(err as Error).message}`;
        return { isError: true, content: [{ type: 'text', text: `PubMed search failed: ${message}` }] };
      }
    },
  );
  await server.connect(new StdioServerTransport());
}

main().catch((err: unknown) => fatal(err instanceof Error ? (err.stack ?? err.message) : String(err)));
