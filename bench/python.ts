/**
 * The Python tool (tools/python): cold start (server started → first sandbox → first answer,
 * the memory snapshot built on the way), a new sandbox once the server is warm, and calls per
 * second for a trivial snippet: in one sandbox, in four at once, and one-shot (no sandbox_id, a
 * fresh sandbox per call). Also the resident size of one sandbox process. The server runs as a
 * real process over stdio, as the executor runs it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { mb, percentile } from './harness.js';

const SERVER = join(PACKAGE_ROOT, 'dist/tools/python/server.js');
const CALLS = Number(process.env.TRAJFORGE_BENCH_PY_CALLS ?? '200');
const ONE_SHOTS = Number(process.env.TRAJFORGE_BENCH_PY_ONESHOTS ?? '10');
const PARALLEL = 4;
const SNIPPET = '1 + 1';

async function connect(): Promise<{ client: Client; pid: number }> {
  const transport = new StdioClientTransport({ command: process.execPath, args: [SERVER], env: { PATH: process.env.PATH ?? '' }, stderr: 'ignore' });
  const client = new Client({ name: 'bench-python', version: '0' });
  await client.connect(transport);
  return { client, pid: transport.pid! };
}

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<string> {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 600_000 });
  const text = (r.content as Array<{ text: string }>)[0]!.text;
  if (r.isError) throw new Error(`${name}: ${text}`);
  return text;
}

const create = async (client: Client): Promise<string> => (await call(client, 'create_sandbox', {})).split(': ')[1]!;

/** Calls per second for `n` calls made by `lanes` callers at once, each in its own sandbox (or none). */
async function rate(client: Client, n: number, sandboxes: ReadonlyArray<string | undefined>): Promise<number> {
  const per = Math.ceil(n / sandboxes.length);
  const t0 = performance.now();
  await Promise.all(
    sandboxes.map(async (id) => {
      for (let i = 0; i < per; i++) await call(client, 'run_python_code', { code_block: SNIPPET, ...(id ? { sandbox_id: id } : {}) });
    }),
  );
  return (per * sandboxes.length) / ((performance.now() - t0) / 1000);
}

/** Resident size of the server's sandbox processes (its children), from /proc. */
function sandboxRss(serverPid: number): number[] {
  try {
    return readFileSync(`/proc/${serverPid}/task/${serverPid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map((pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024);
  } catch {
    return [];
  }
}

export async function benchPython(): Promise<string> {
  const t0 = performance.now();
  const { client, pid } = await connect();
  let rows: string[];
  try {
    const first = await create(client);
    await call(client, 'run_python_code', { code_block: SNIPPET, sandbox_id: first });
    const cold = performance.now() - t0;
    const warm: number[] = [];
    for (let i = 0; i < 5; i++) {
      // Time for the spare process to be ready, as between a model's calls.
      await new Promise((res) => setTimeout(res, 3_000));
      const t = performance.now();
      await create(client);
      warm.push(performance.now() - t);
    }
    const one = await rate(client, CALLS, [first]);
    const lanes = await Promise.all(Array.from({ length: PARALLEL - 1 }, () => create(client)));
    const four = await rate(client, CALLS, [first, ...lanes]);
    const shots = await rate(client, ONE_SHOTS, [undefined]);
    const rss = sandboxRss(pid);
    rows = [
      `| cold start: server started → first sandbox → first answer (snapshot built) | ${(cold / 1000).toFixed(1)} s |`,
      `| new sandbox on a warm server (a spare ready), median of 5 | ${Math.round(percentile(warm, 50))} ms |`,
      `| \`${SNIPPET}\` in one sandbox, one call at a time (${CALLS} calls) | ${one.toFixed(1)} calls/s |`,
      `| \`${SNIPPET}\` in ${PARALLEL} sandboxes at once (${CALLS} calls) | ${four.toFixed(1)} calls/s |`,
      `| \`${SNIPPET}\` with no sandbox_id (a fresh sandbox each, ${ONE_SHOTS} calls) | ${shots.toFixed(2)} calls/s |`,
      `| resident size of one sandbox process (median of ${rss.length}) | ${rss.length ? mb(percentile(rss, 50)) : 'n/a'} |`,
    ];
  } finally {
    await client.close();
  }
  return [
    '## Python tool',
    '',
    'tools/python as a real MCP server over stdio (default limits: one spare process, 512 MB heap cap), driven by the MCP client. ' +
      '`TRAJFORGE_BENCH_PY_CALLS` and `TRAJFORGE_BENCH_PY_ONESHOTS` change the workload.',
    '',
    '| measure | value |',
    '| --- | --- |',
    ...rows,
    '',
  ].join('\n');
}
