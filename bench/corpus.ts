/**
 * The offline corpus at scale: `trajforge corpus index` over 1,000,000 generated documents
 * (documents per second, size on disk, peak RSS of the CLI), then the corpus server over that
 * index answering search, open and find through MCP (latency per call, peak RSS of the server
 * process, which must stay within 500 MB), against the in-memory BM25 server over as many of
 * the same documents as it is given (TRAJFORGE_BENCH_CORPUS_MEMORY_DOCS), asked the same queries.
 *
 * The documents are synthesised from the bundled corpus's vocabulary, seeded: each takes a
 * bundled document's title plus two words, and a text of sentences drawn from other bundled
 * documents, so the term statistics look like the real corpus's, only larger.
 *
 *   TRAJFORGE_BENCH_CORPUS_DOCS          documents indexed (default 1,000,000)
 *   TRAJFORGE_BENCH_CORPUS_MEMORY_DOCS   documents the in-memory server holds (default 100,000)
 *   TRAJFORGE_BENCH_CORPUS_QUERIES       queries asked of each server (default 300)
 *   TRAJFORGE_BENCH_CORPUS_DIR           keep the data and the index here (default: a temp dir, removed)
 */
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { measure } from './curate.js';
import { mb, percentile, procPeakRss } from './harness.js';

const DOCS = Number(process.env.TRAJFORGE_BENCH_CORPUS_DOCS ?? '1000000');
const MEMORY_DOCS = Math.min(DOCS, Number(process.env.TRAJFORGE_BENCH_CORPUS_MEMORY_DOCS ?? '100000'));
const QUERIES = Number(process.env.TRAJFORGE_BENCH_CORPUS_QUERIES ?? '300');
const RSS_LIMIT = 500 * 1024 * 1024;
const SERVER = join(PACKAGE_ROOT, 'dist/tools/corpus/server.js');

interface Bundled {
  title: string;
  abstract: string;
}

/** A small seeded generator (an LCG's high bits): the data is the same on every run. */
function seeded(seed: number): (n: number) => number {
  let s = seed >>> 0;
  return (n) => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return Math.floor((s / 4294967296) * n);
  };
}

function bundled(): Bundled[] {
  return readFileSync(join(PACKAGE_ROOT, 'data/corpus.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Bundled);
}

/** Writes the generated corpus; the first `memoryDocs` lines also go to a file of their own for the in-memory server. */
async function writeDocs(dir: string, docs: readonly Bundled[]): Promise<{ all: string; head: string }> {
  const all = join(dir, 'docs.jsonl');
  const head = join(dir, 'head.jsonl');
  const words = [...new Set(docs.flatMap((d) => d.title.split(/\s+/)))];
  const sentences = docs.flatMap((d) => d.abstract.split(/(?<=\.) /));
  const pick = seeded(20261127);
  const outAll = createWriteStream(all);
  const outHead = createWriteStream(head);
  for (let i = 0; i < DOCS; i++) {
    const base = docs[i % docs.length]!;
    const text = Array.from({ length: 3 + pick(4) }, () => sentences[pick(sentences.length)]).join(' ');
    const line = `${JSON.stringify({ paperId: `gen-${i}`, title: `${base.title} ${words[pick(words.length)]} ${words[pick(words.length)]}`, abstract: text, year: 2000 + pick(26), venue: 'generated' })}\n`;
    if (i < MEMORY_DOCS) outHead.write(line);
    if (!outAll.write(line)) await new Promise<void>((r) => outAll.once('drain', () => r()));
  }
  await Promise.all([outAll, outHead].map((s) => new Promise<void>((r) => s.end(() => r()))));
  return { all, head };
}

interface Latencies {
  search: number[];
  open: number[];
  find: number[];
  startMs: number;
  peakRss: number;
}

/** Starts a server, asks it the queries (and, where it offers them, opens and finds in the first hit), and reads its peak RSS before it stops. */
async function askServer(args: string[], queries: readonly string[], browse: boolean): Promise<Latencies> {
  const started = performance.now();
  const transport = new StdioClientTransport({ command: process.execPath, args: [SERVER, ...args], stderr: 'inherit' });
  const client = new Client({ name: 'bench-corpus', version: '0' });
  await client.connect(transport, { timeout: 30 * 60_000 });
  const out: Latencies = { search: [], open: [], find: [], startMs: performance.now() - started, peakRss: 0 };
  const timed = async (into: number[], name: string, args: Record<string, unknown>): Promise<string> => {
    const t0 = performance.now();
    const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 });
    into.push(performance.now() - t0);
    if (r.isError) throw new Error(`${name} ${JSON.stringify(args)} failed: ${JSON.stringify(r.content)}`);
    return (r.content as { text: string }[])[0]!.text;
  };
  try {
    for (const q of queries) {
      if (!browse) {
        await timed(out.search, 'pubmed_search', { query: q, limit: 10 });
        continue;
      }
      const page = JSON.parse(await timed(out.search, 'search', { query: q, k: 10 })) as { results: { id: string }[] };
      const first = page.results[0];
      if (first === undefined) continue;
      await timed(out.open, 'open', { id: first.id, cursor: 0 });
      await timed(out.find, 'find', { id: first.id, pattern: 'first supported' });
    }
    out.peakRss = procPeakRss(transport.pid!);
  } finally {
    await client.close();
  }
  return out;
}

function queriesFrom(docs: readonly Bundled[]): string[] {
  const questions = readFileSync(join(PACKAGE_ROOT, 'data/questions.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => (JSON.parse(l) as { question: string }).question);
  const pick = seeded(7);
  return Array.from({ length: QUERIES }, (_, i) => (i % 2 === 0 ? questions[pick(questions.length)]! : docs[pick(docs.length)]!.title));
}

const ms = (v: number): string => (v < 10 ? v.toFixed(2) : v.toFixed(1));

export async function benchCorpus(): Promise<string> {
  const keep = process.env.TRAJFORGE_BENCH_CORPUS_DIR;
  const dir = keep ?? mkdtempSync(join(tmpdir(), 'tf-bench-corpus-'));
  if (keep && !existsSync(keep)) mkdirSync(keep, { recursive: true });
  try {
    const docs = bundled();
    process.stderr.write(`  corpus: writing ${DOCS.toLocaleString('en-US')} documents…\n`);
    const files = await writeDocs(dir, docs);
    const index = join(dir, 'index');
    rmSync(index, { recursive: true, force: true });
    process.stderr.write('  corpus: indexing…\n');
    const built = await measure(['corpus', 'index', files.all, '--out', index, '--quiet']);
    if (built.code !== 0) throw new Error(`corpus index exited ${built.code}: ${built.stderr}`);
    const queries = queriesFrom(docs);
    process.stderr.write('  corpus: the on-disk server…\n');
    const disk = await askServer(['--index', index], queries, true);
    process.stderr.write(`  corpus: the in-memory server over ${MEMORY_DOCS.toLocaleString('en-US')} documents…\n`);
    const memory = await askServer(['--corpus', files.head], queries, false);
    return report({ files, index, built, disk, memory });
  } finally {
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
}

function report(r: { files: { all: string }; index: string; built: Awaited<ReturnType<typeof measure>>; disk: Latencies; memory: Latencies }): string {
  const p = (xs: number[], q: number): string => ms(percentile(xs, q));
  const ratio = (q: number): string => (percentile(r.disk.search, q) / percentile(r.memory.search, q)).toFixed(1);
  const within = r.disk.peakRss <= RSS_LIMIT;
  return [
    '## Offline corpus at scale: `corpus index`, and search / open / find over 1,000,000 documents',
    '',
    `Input: ${DOCS.toLocaleString('en-US')} documents (${mb(statSync(r.files.all).size)} of JSONL) written by bench/corpus.ts from the bundled corpus's vocabulary (a bundled title plus two of its words; 3–6 sentences drawn from other bundled documents). ` +
      `The index is built by the real CLI (\`trajforge corpus index docs.jsonl --out DIR\`); each server is a real process behind an MCP client, and every latency is one call as the client sees it (JSON-RPC over stdio included). ` +
      `Queries: ${QUERIES}, half bundled questions, half bundled titles, the same for both servers. The in-memory server (\`--corpus\`, MiniSearch BM25, today's default) is given the first ${MEMORY_DOCS.toLocaleString('en-US')} documents. ` +
      'Reproduce with `npm run bench -- corpus`; `TRAJFORGE_BENCH_CORPUS_DOCS`, `TRAJFORGE_BENCH_CORPUS_MEMORY_DOCS`, `TRAJFORGE_BENCH_CORPUS_QUERIES` change the sizes, `TRAJFORGE_BENCH_CORPUS_DIR` keeps the data.',
    '',
    '| build | wall time | documents/s | index on disk | peak RSS |',
    '|---|---|---|---|---|',
    `| \`trajforge corpus index\` | ${r.built.seconds.toFixed(1)} s | ${Math.round(DOCS / r.built.seconds).toLocaleString('en-US')} | ${mb(statSync(join(r.index, 'corpus.sqlite')).size)} | ${Math.round(r.built.peakRssMb)} MB |`,
    '',
    '| server | documents | start | search p50 / p99 | open p50 / p99 | find p50 / p99 | peak RSS |',
    '|---|---|---|---|---|---|---|',
    `| on disk (\`--index\`, SQLite FTS5) | ${DOCS.toLocaleString('en-US')} | ${(r.disk.startMs / 1000).toFixed(1)} s | ${p(r.disk.search, 50)} / ${p(r.disk.search, 99)} ms | ${p(r.disk.open, 50)} / ${p(r.disk.open, 99)} ms | ${p(r.disk.find, 50)} / ${p(r.disk.find, 99)} ms | ${mb(r.disk.peakRss)} |`,
    `| in memory (\`--corpus\`, MiniSearch) | ${MEMORY_DOCS.toLocaleString('en-US')} | ${(r.memory.startMs / 1000).toFixed(1)} s | ${p(r.memory.search, 50)} / ${p(r.memory.search, 99)} ms | — | — | ${mb(r.memory.peakRss)} |`,
    '',
    `Search at ${DOCS.toLocaleString('en-US')} documents on disk against ${MEMORY_DOCS.toLocaleString('en-US')} in memory: ${ratio(50)}× the in-memory p50, ${ratio(99)}× its p99. ` +
      `Target: the on-disk server's peak RSS ≤ 500 MB during search, open and find — ${within ? 'met' : '**not met**'} (${mb(r.disk.peakRss)}, the server process's VmHWM).`,
  ].join('\n');
}
