/**
 * MCP server over stdio: `pubmed_search` through NCBI E-utilities, answering in the corpus
 * server's shape `{total, offset, data: [{paperId, title, authors, abstract, year, venue}]}`.
 *
 *   node dist/tools/pubmed/server.js [--tool NAME] [--email ADDR] [--max-retries N] [--retry-base-ms N] [--timeout-ms N]
 *
 * Environment: NCBI_API_KEY (10 requests/s instead of 3), NCBI_TOOL and NCBI_EMAIL (what the
 * flags set), NCBI_EUTILS_BASE (default https://eutils.ncbi.nlm.nih.gov/entrez/eutils; tests
 * point it at a loopback replay).
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import { PACKAGE_VERSION } from '../../pipeline/paths.js';
import { DEFAULT_EUTILS_BASE, EutilsClient, EutilsError } from './eutils.js';

interface Flags {
  tool: string | undefined;
  email: string | undefined;
  maxRetries: number | undefined;
  retryBaseMs: number | undefined;
  timeoutMs: number | undefined;
}

class UsageError extends Error {}

function parseFlags(argv: string[]): Flags {
  const flags: Flags = { tool: undefined, email: undefined, maxRetries: undefined, retryBaseMs: undefined, timeoutMs: undefined };
  const count = (name: string, value: string | undefined, min: number): number => {
    const n = Number(value);
    if (value === undefined || !Number.isInteger(n) || n < min) throw new UsageError(`${name} needs an integer >= ${min}, got ${value === undefined ? 'nothing' : JSON.stringify(value)}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.indexOf('=');
    const name = arg.startsWith('--') && eq > 0 ? arg.slice(0, eq) : arg;
    const inline = arg.startsWith('--') && eq > 0 ? arg.slice(eq + 1) : undefined;
    const value = (): string | undefined => inline ?? argv[++i];
    switch (name) {
      case '--tool':
        flags.tool = value();
        if (!flags.tool) throw new UsageError('--tool needs a name');
        break;
      case '--email':
        flags.email = value();
        if (!flags.email) throw new UsageError('--email needs an address');
        break;
      case '--max-retries':
        flags.maxRetries = count(name, value(), 0);
        break;
      case '--retry-base-ms':
        flags.retryBaseMs = count(name, value(), 1);
        break;
      case '--timeout-ms':
        flags.timeoutMs = count(name, value(), 1);
        break;
      default:
        throw new UsageError(`unknown argument ${JSON.stringify(arg)}`);
    }
  }
  return flags;
}

function fatal(message: string): never {
  process.stderr.write(`pubmed server: ${message}\n`);
  process.exit(1);
}

async function main(): Promise<void> {
  let flags: Flags;
  try {
    flags = parseFlags(process.argv.slice(2));
  } catch (err) {
    if (err instanceof UsageError) fatal(err.message);
    throw err;
  }
  const env = process.env;
  const base = env.NCBI_EUTILS_BASE || DEFAULT_EUTILS_BASE;
  try {
    const u = new URL(base);
    if (u.protocol !== 'https:' && u.protocol !== 'http:') throw new Error('not http(s)');
  } catch {
    fatal(`NCBI_EUTILS_BASE is not an http(s) URL: ${JSON.stringify(base)}`);
  }
  const client = new EutilsClient({
    base,
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
