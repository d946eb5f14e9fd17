/**
 * MCP server over stdio that searches a local JSONL corpus and answers in the shape of
 * `pubmed_search`, so every example and test runs with no network and no keys.
 *
 *   node dist/tools/corpus/server.js [--corpus PATH] [fault switches]
 *
 * Corpus: --corpus PATH, else $CORPUS_PATH, else <package root>/data/corpus.jsonl.
 * Fault switches exist so the executor's handling of broken servers can be tested against a
 * real process: --fail-start, --crash-every N, --hang-every N, --junk-stdout, --delay-ms N,
 * --junk-every N (a line that is not JSON-RPC on stdout before every Nth answer),
 * --corrupt-every N (junk with no newline, so it fuses with the Nth answer and breaks it),
 * --huge-result N (the first document of every result carries N more characters),
 * --crash-while FILE (every call kills the process while FILE exists: a server that is down
 * for a while, across restarts, and comes back when the file is removed).
 * $CORPUS_CALL_LOG names a file that gets one JSON line per answered call.
 */
import { appendFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import { PACKAGE_ROOT, PACKAGE_VERSION } from '../../pipeline/paths.js';
import { exitWith, serverFlags } from '../shared/flags.js';
import { CorpusError, type CorpusIndex, openCorpus } from './search.js';

const TOOL_NAME = 'pubmed_search';

const FLAGS = {
  corpus: { kind: 'string' },
  'fail-start': { kind: 'bool' },
  'crash-every': { kind: 'int', min: 1 },
  'hang-every': { kind: 'int', min: 1 },
  'junk-stdout': { kind: 'bool' },
  'delay-ms': { kind: 'int', min: 0 },
  'junk-every': { kind: 'int', min: 1 },
  'corrupt-every': { kind: 'int', min: 1 },
  'huge-result': { kind: 'int', min: 1 },
  'crash-while': { kind: 'string' },
} as const;

function resolveCorpusPath(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return flag ?? (env.CORPUS_PATH || join(PACKAGE_ROOT, 'data', 'corpus.jsonl'));
}

const fatal = (message: string): never => exitWith('corpus', message);

async function main(): Promise<void> {
  const f = serverFlags('corpus', process.argv.slice(2), FLAGS);
  const flags = {
    corpus: f.corpus,
    failStart: f['fail-start'] ?? false,
    crashEvery: f['crash-every'] ?? 0,
    hangEvery: f['hang-every'] ?? 0,
    junkStdout: f['junk-stdout'] ?? false,
    delayMs: f['delay-ms'] ?? 0,
    junkEvery: f['junk-every'] ?? 0,
    corruptEvery: f['corrupt-every'] ?? 0,
    hugeResult: f['huge-result'] ?? 0,
    crashWhile: f['crash-while'],
  };
  if (flags.failStart) fatal('failing at start as asked (--fail-start)');

  const corpusPath = resolveCorpusPath(flags.corpus);
  const started = performance.now();
  let index: CorpusIndex;
  try {
    const opened = openCorpus(corpusPath);
    index = opened.index;
    const how = opened.source === 'prebuilt' ? 'prebuilt index' : 'index built';
    process.stderr.write(
      `corpus server: ${index.docs.length} documents from ${corpusPath} (${how}, ${Math.round(performance.now() - started)} ms)\n`,
    );
  } catch (err) {
    if (err instanceof CorpusError) fatal(err.message);
    throw err;
  }

  // Written before the transport exists, so the client's first read is not JSON-RPC.
  if (flags.junkStdout) process.stdout.write('corpus server: this line is not JSON-RPC\n');

  const callLog = process.env.CORPUS_CALL_LOG;
  let calls = 0;

  const server = new McpServer({ name: 'trajforge-corpus', version: PACKAGE_VERSION });
  server.registerTool(
    TOOL_NAME,
    {
      title: 'Search the local corpus',
      description:
        'Full-text search (BM25) over a local document corpus. Returns JSON ' +
        '{"total", "offset", "data": [{"paperId", "title", "authors", "abstract", "year", "venue"}]}, best match first.',
      inputSchema: {
        query: z.string().describe('Search words: keywords or a question in natural language'),
        limit: z.number().int().min(1).max(50).default(5).describe('Number of results to return (1-50)'),
        offset: z.number().int().min(0).default(0).describe('Number of ranked results to skip, for paging'),
      },
    },
    async ({ query, limit, offset }) => {
      // Counts calls that passed argument validation: those are the ones a fault can hit.
      const n = ++calls;
      if (flags.crashEvery > 0 && n % flags.crashEvery === 0) process.exit(1);
      if (flags.crashWhile !== undefined && existsSync(flags.crashWhile)) process.exit(1);
      if (flags.hangEvery > 0 && n % flags.hangEvery === 0) return new Promise<never>(() => {});
      if (flags.delayMs > 0) await sleep(flags.delayMs);
      let page = index.search(query, limit, offset);
      if (flags.hugeResult > 0 && page.data[0]) {
        const filler = 'This sentence pads an oversized tool result. ';
        const pad = filler.repeat(Math.ceil(flags.hugeResult / filler.length)).slice(0, flags.hugeResult);
        page = { ...page, data: [{ ...page.data[0], abstract: `${page.data[0].abstract} ${pad}` }, ...page.data.slice(1)] };
      }
      // Stray output on the channel the JSON-RPC messages use, as a debug print in a server does.
      if (flags.junkEvery > 0 && n % flags.junkEvery === 0) process.stdout.write(`corpus server: debug: call ${n}: ${query}\n`);
      if (flags.corruptEvery > 0 && n % flags.corruptEvery === 0) process.stdout.write(`corpus server: debug: call ${n} `);
      // Synchronous, so the line is on disk before the caller can see the answer.
      if (callLog) appendFileSync(callLog, JSON.stringify({ query, limit, offset, total: page.total, call: n, pid: process.pid }) + '\n');
      return { content: [{ type: 'text', text: JSON.stringify(page) }] };
    },
  );

  await server.connect(new StdioServerTransport());
}

main().catch((err: unknown) => fatal(err instanceof Error ? (err.stack ?? err.message) : String(err)));
