/**
 * MCP server over stdio that searches a local JSONL corpus and answers in the shape of
 * `pubmed_search`, so every example and test runs with no network and no keys; and
 * `read_document`, which gives one document whole by the id search returned (the browsing
 * sub-agent's "open the page").
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
 * for a while, across restarts, and comes back when the file is removed). The faults count
 * and hit the calls of both tools alike.
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
const READ_TOOL = 'read_document';

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
  /**
   * The fault switches, for one call that passed argument validation (those are the ones a
   * fault can hit): `--crash-*` exit here, `hang` says the call must never answer
   * (`--hang-every`), `--delay-ms` waits. `n` is the call's number, counted over both tools.
   */
  const beforeCall = async (): Promise<{ n: number; hang: boolean }> => {
    const n = ++calls;
    if (flags.crashEvery > 0 && n % flags.crashEvery === 0) process.exit(1);
    if (flags.crashWhile !== undefined && existsSync(flags.crashWhile)) process.exit(1);
    if (flags.hangEvery > 0 && n % flags.hangEvery === 0) return { n, hang: true };
    if (flags.delayMs > 0) await sleep(flags.delayMs);
    return { n, hang: false };
  };
  /** Stray output on the channel the JSON-RPC messages use, as a debug print in a server does. */
  const junk = (n: number, what: string): void => {
    if (flags.junkEvery > 0 && n % flags.junkEvery === 0) process.stdout.write(`corpus server: debug: call ${n}: ${what}\n`);
    if (flags.corruptEvery > 0 && n % flags.corruptEvery === 0) process.stdout.write(`corpus server: debug: call ${n} `);
  };
  const pad = (text: string): string => {
    if (flags.hugeResult <= 0) return text;
    const filler = 'This sentence pads an oversized tool result. ';
    return `${text} ${filler.repeat(Math.ceil(flags.hugeResult / filler.length)).slice(0, flags.hugeResult)}`;
  };

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
      const { n, hang } = await beforeCall();
      if (hang) return new Promise<never>(() => {});
      let page = index.search(query, limit, offset);
      if (flags.hugeResult > 0 && page.data[0]) {
        page = { ...page, data: [{ ...page.data[0], abstract: pad(page.data[0].abstract) }, ...page.data.slice(1)] };
      }
      junk(n, query);
      // Synchronous, so the line is on disk before the caller can see the answer.
      if (callLog) appendFileSync(callLog, JSON.stringify({ query, limit, offset, total: page.total, call: n, pid: process.pid }) + '\n');
      return { content: [{ type: 'text', text: JSON.stringify(page) }] };
    },
  );

  server.registerTool(
    READ_TOOL,
    {
      title: 'Read one document of the local corpus',
      description:
        'Reads one document of the local corpus whole, by its id: the paperId that pubmed_search returned. Returns JSON ' +
        '{"documents": [{"paperId", "title", "authors", "year", "venue", "text"}]} holding that one document, its full text in "text". ' +
        'An id the corpus does not hold is an error.',
      inputSchema: {
        id: z.string().describe('The document id, exactly as pubmed_search returned it (its paperId)'),
      },
    },
    async ({ id }) => {
      const { n, hang } = await beforeCall();
      if (hang) return new Promise<never>(() => {});
      // A model often pads an id it copies; ids themselves never start or end with a space.
      const doc = index.document(id) ?? index.document(id.trim());
      junk(n, id);
      if (callLog) appendFileSync(callLog, JSON.stringify({ tool: READ_TOOL, id, found: doc !== undefined, call: n, pid: process.pid }) + '\n');
      if (doc === undefined) return { isError: true, content: [{ type: 'text', text: unknownId(index, id) }] };
      const { abstract, ...meta } = doc;
      return { content: [{ type: 'text', text: JSON.stringify({ documents: [{ ...meta, text: pad(abstract) }] }) }] };
    },
  );

  await server.connect(new StdioServerTransport());
}

/** The error for an id the corpus does not hold, naming it, and the id it most likely meant when only its case differs. */
function unknownId(index: CorpusIndex, id: string): string {
  const lower = id.trim().toLowerCase();
  const near = lower === '' ? undefined : index.docs.find((d) => d.paperId.toLowerCase() === lower);
  const hint = near === undefined ? ' Use an id (paperId) that pubmed_search returned.' : ` Did you mean ${JSON.stringify(near.paperId)}?`;
  return `No document with id ${JSON.stringify(id)} in the corpus.${hint}`;
}

main().catch((err: unknown) => fatal(err instanceof Error ? (err.stack ?? err.message) : String(err)));
