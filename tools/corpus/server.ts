/**
 * MCP server over stdio for an offline corpus: OpenResearcher's browsing primitives `search`,
 * `open` and `find`, and `pubmed_search` / `read_document` in the shapes of a PubMed search
 * (tools.ts), so every example and test runs with no network and no keys.
 *
 *   node dist/tools/corpus/server.js [--corpus PATH [--engine memory|sqlite] | --index DIR] [options] [fault switches]
 *
 * What it serves: `--index DIR`, an on-disk SQLite FTS5 index that `trajforge corpus index`
 * built (millions of documents in tens of MB of memory); else a JSONL corpus (--corpus PATH,
 * else $CORPUS_PATH, else <package root>/data/corpus.jsonl), held in memory (`--engine memory`,
 * the default: fast to start when a prebuilt index lies next to it) or indexed on disk at first
 * use into the cache directory (`--engine sqlite`; first-use.ts).
 * Options: --tools LIST (which tools to offer: names, or all; by default pubmed_search and
 * read_document for a corpus in memory, all five for an on-disk index), --cache-mb N
 * (SQLite's page cache), --page-lines N (open's page), --blocklist FILE and --block RULE (the
 * benchmark-leak guard; tools/web/policy.ts).
 * Fault switches exist so the executor's handling of broken servers can be tested against a
 * real process: --fail-start, --crash-every N, --hang-every N, --junk-stdout, --delay-ms N,
 * --junk-every N (a line that is not JSON-RPC on stdout before every Nth answer),
 * --corrupt-every N (junk with no newline, so it fuses with the Nth answer and breaks it),
 * --huge-result N (the first document of every result carries N more characters),
 * --crash-while FILE (every call kills the process while FILE exists: a server that is down
 * for a while, across restarts, and comes back when the file is removed). The faults count
 * and hit the calls of every tool alike.
 * $CORPUS_CALL_LOG names a file that gets one JSON line per answered call.
 */
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { TrajforgeError } from '../../pipeline/errors.js';
import { PACKAGE_ROOT, PACKAGE_VERSION } from '../../pipeline/paths.js';
import { exitWith, serverFlags } from '../shared/flags.js';
import { LeakGuard, leakRules } from '../web/policy.js';
import { withSqlite } from './fts.js';
import { DEFAULT_PAGE_LINES, MAX_PAGE_LINES } from './pages.js';
import { CorpusError, openCorpus } from './search.js';
import { MemoryStore, type CorpusStore } from './store.js';
import { CORPUS_TOOL_NAMES, registerCorpusTools, type CallHooks, type CorpusToolName } from './tools.js';

const FLAGS = {
  corpus: { kind: 'string' },
  index: { kind: 'string' },
  engine: { kind: 'string' },
  'cache-mb': { kind: 'int', min: 1 },
  'page-lines': { kind: 'int', min: 1 },
  blocklist: { kind: 'string' },
  block: { kind: 'string', multiple: true },
  tools: { kind: 'string' },
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

type Flags = ReturnType<typeof serverFlags<typeof FLAGS>>;

function resolveCorpusPath(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return flag ?? (env.CORPUS_PATH || join(PACKAGE_ROOT, 'data', 'corpus.jsonl'));
}

const fatal = (message: string): never => exitWith('corpus', message);

/**
 * `--tools a,b,…` or `all`. By default a server started as before (a JSONL corpus in memory)
 * offers what it offered before, `pubmed_search` and `read_document`, so a config that exposes
 * every tool of the server keeps its prompt; an on-disk index offers all five.
 */
function offeredTools(flag: string | undefined, engine: string): Set<CorpusToolName> {
  if (flag === undefined) return new Set(engine === 'memory' ? ['pubmed_search', 'read_document'] : CORPUS_TOOL_NAMES);
  if (flag.trim() === 'all') return new Set(CORPUS_TOOL_NAMES);
  const names = flag.split(',').map((n) => n.trim()).filter(Boolean);
  const unknown = names.filter((n) => !(CORPUS_TOOL_NAMES as readonly string[]).includes(n));
  if (unknown.length || names.length === 0) fatal(`--tools: ${unknown.length ? `no tool ${unknown.join(', ')}` : 'names no tool'}; have ${CORPUS_TOOL_NAMES.join(', ')} (or all)`);
  return new Set(names as CorpusToolName[]);
}

/** The store the flags ask for, and a line for stderr saying what was opened and how. */
async function openStore(f: Flags): Promise<{ store: CorpusStore; source: string; how: string }> {
  const engine = f.engine ?? (f.index === undefined ? 'memory' : 'sqlite');
  if (engine !== 'memory' && engine !== 'sqlite') fatal(`--engine must be memory or sqlite, got ${JSON.stringify(engine)}`);
  if (f.index !== undefined && (f.corpus !== undefined || engine === 'memory')) fatal('--index serves an index built by `trajforge corpus index`: give it alone, without --corpus or --engine memory');
  const corpusPath = resolveCorpusPath(f.corpus);
  if (engine === 'memory') {
    const opened = openCorpus(corpusPath);
    return { store: new MemoryStore(opened.index), source: corpusPath, how: opened.source === 'prebuilt' ? 'prebuilt index' : 'index built' };
  }
  // Loaded only here: a server of the in-memory corpus (every test and demo) starts without SQLite.
  const { DEFAULT_CACHE_MB, FtsStore } = await withSqlite(() => import('./fts-store.js'));
  const cacheMb = f['cache-mb'] ?? DEFAULT_CACHE_MB;
  if (f.index !== undefined) return { store: FtsStore.open(f.index, cacheMb), source: f.index, how: 'on-disk index' };
  if (!existsSync(corpusPath)) throw new CorpusError(corpusPath, null, 'cannot read corpus (ENOENT)');
  const [{ indexAtFirstUse }, { defaultCacheDir }] = await Promise.all([withSqlite(() => import('./first-use.js')), import('../../pipeline/core/cache.js')]);
  const { dir, built } = await indexAtFirstUse(corpusPath, defaultCacheDir());
  return { store: FtsStore.open(dir, cacheMb), source: corpusPath, how: `on-disk index ${built ? 'built' : 'found'} in ${dir}` };
}

async function main(): Promise<void> {
  const f = serverFlags('corpus', process.argv.slice(2), FLAGS);
  if (f['fail-start']) fatal('failing at start as asked (--fail-start)');
  // Checked before the corpus is opened (which may mean building its index): a mistyped name fails at once.
  const offer = offeredTools(f.tools, f.engine ?? (f.index === undefined ? 'memory' : 'sqlite'));
  const pageLines = f['page-lines'] ?? DEFAULT_PAGE_LINES;
  if (pageLines > MAX_PAGE_LINES) fatal(`--page-lines must be at most ${MAX_PAGE_LINES}`);
  let guard: LeakGuard;
  try {
    guard = new LeakGuard(leakRules(f.blocklist, f.block ?? [], (p) => readFileSync(p, 'utf8')));
  } catch (err) {
    fatal(`--blocklist: ${(err as Error).message}`);
  }

  const started = performance.now();
  let store: CorpusStore;
  try {
    const opened = await openStore(f);
    store = opened.store;
    process.stderr.write(`corpus server: ${store.size} documents from ${opened.source} (${opened.how}, ${Math.round(performance.now() - started)} ms)\n`);
  } catch (err) {
    if (err instanceof CorpusError || err instanceof TrajforgeError) fatal(err.message);
    throw err;
  }

  // Written before the transport exists, so the client's first read is not JSON-RPC.
  if (f['junk-stdout']) process.stdout.write('corpus server: this line is not JSON-RPC\n');

  const server = new McpServer({ name: 'trajforge-corpus', version: PACKAGE_VERSION });
  registerCorpusTools(server, { store, offer, guard: guard!, hooks: faultHooks(f), pageLines });
  await server.connect(new StdioServerTransport());
}

/**
 * The fault switches, for one call that passed argument validation (those are the ones a
 * fault can hit): `--crash-*` exit in `before`, `hang` says the call must never answer
 * (`--hang-every`), `--delay-ms` waits; `after` writes stray output and the call log line.
 * Calls are numbered over every tool.
 */
function faultHooks(f: Flags): CallHooks {
  const callLog = process.env.CORPUS_CALL_LOG;
  let calls = 0;
  const huge = f['huge-result'] ?? 0;
  return {
    async before() {
      const n = ++calls;
      if (f['crash-every'] !== undefined && n % f['crash-every'] === 0) process.exit(1);
      if (f['crash-while'] !== undefined && existsSync(f['crash-while'])) process.exit(1);
      if (f['hang-every'] !== undefined && n % f['hang-every'] === 0) return { n, hang: true };
      if (f['delay-ms']) await sleep(f['delay-ms']);
      return { n, hang: false };
    },
    after(n, what, log) {
      // Stray output on the channel the JSON-RPC messages use, as a debug print in a server does.
      if (f['junk-every'] !== undefined && n % f['junk-every'] === 0) process.stdout.write(`corpus server: debug: call ${n}: ${what}\n`);
      if (f['corrupt-every'] !== undefined && n % f['corrupt-every'] === 0) process.stdout.write(`corpus server: debug: call ${n} `);
      // Synchronous, so the line is on disk before the caller can see the answer.
      if (callLog) appendFileSync(callLog, JSON.stringify({ ...log, call: n, pid: process.pid }) + '\n');
    },
    pad(text) {
      if (huge <= 0) return text;
      const filler = 'This sentence pads an oversized tool result. ';
      return `${text} ${filler.repeat(Math.ceil(huge / filler.length)).slice(0, huge)}`;
    },
  };
}

main().catch((err: unknown) => fatal(err instanceof Error ? (err.stack ?? err.message) : String(err)));
