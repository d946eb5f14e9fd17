/**
 * The queue's Redis password is a secret (#23 item 3). A real redis-server with `requirepass`,
 * real `trajforge enqueue`, `worker`, `merge --queue`, `status` and `report` processes, and a
 * real stdio MCP server that prints its whole environment into its tool result (what a careless
 * tool does). Then every file the runs wrote (worker directories, the tool cache, the merged
 * run, the report), every command's stdout and stderr, and every request body the model
 * endpoint received are searched for the password.
 *
 * Two ways in: the password from TRAJFORGE_QUEUE_PASSWORD, with the printing server not one
 * that shares its limits (it is handed no Redis at all); and the password in --queue, with the
 * printing server named in shared_limits.tool_servers (it gets the URL, prints it, and the
 * run's scrubber takes the password out before the model or a file sees it).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim, type Sim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir, writeConfig, type CliResult } from '../helpers.js';
import { startRedis, type RedisHandle } from '../redis-server.js';
import { loopbackServer } from './util.js';

const ENV_SERVER = join(PACKAGE_ROOT, 'tests/limits-env-server.mjs');
const PASSWORD = `queue-PLANTED-${randomBytes(12).toString('hex')}`;
/** Its 24 random hex digits: found in any form that keeps them together (as is, URL-encoded, JSON-escaped). */
const DIGITS = /[0-9a-f]{24}/.exec(PASSWORD)![0];

let sim: Sim;
let proxy: Awaited<ReturnType<typeof loopbackServer>>;
let redis: RedisHandle;
/** Every request body the model endpoint received. */
const bodies: string[] = [];
const root = tempDir('tf-queue-secrets-');
/** Questions without a gold answer: the env dump answers nothing, and no sample need fail for it. */
const questions = join(root, 'questions.jsonl');
writeFileSync(questions, ['aspirin dose', 'statin risk', 'insulin storage'].map((q, i) => JSON.stringify({ id: `q${i}`, question: `What is known about ${q}?` })).join('\n') + '\n');

beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 23 });
  proxy = await loopbackServer(async (_req, res, body) => {
    bodies.push(body);
    const r = await fetch(`${sim.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
    res.end(Buffer.from(await r.arrayBuffer()));
  });
  redis = await startRedis({ password: PASSWORD, appendonly: false });
});
afterAll(async () => {
  await Promise.all([sim?.close(), proxy?.close(), redis?.stop()]);
});

interface Place {
  readonly where: string;
  readonly text: string;
}

/** Every file under `dir` (binary ones, the cache's index, read as latin1, where hex digits are themselves). */
function filesUnder(dir: string): Place[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? filesUnder(p) : [{ where: p, text: readFileSync(p, 'latin1') }];
  });
}

const cli = (label: string, r: CliResult): Place[] => [
  { where: `${label}: stdout`, text: r.stdout },
  { where: `${label}: stderr`, text: r.stderr },
];

/** Runs a queue command; `password: 'env'` gives it in TRAJFORGE_QUEUE_PASSWORD, `'url'` in --queue. */
async function queueCli(args: string[], password: 'env' | 'url', places: Place[]): Promise<CliResult> {
  const url = password === 'url' ? `redis://:${PASSWORD}@127.0.0.1:${redis.port}/0` : redis.url;
  const env = password === 'env' ? { TRAJFORGE_QUEUE_PASSWORD: PASSWORD } : {};
  const r = await runCli([...args, '--queue', url], { env });
  places.push(...cli(args.slice(0, 1).join(' '), r));
  expect(r.code, r.stderr).toBe(0);
  return r;
}

describe("the queue's Redis password", () => {
  const cases = [
    { name: 'from TRAJFORGE_QUEUE_PASSWORD, the printing server not sharing limits: it is handed no Redis', password: 'env' as const, toolServers: undefined },
    { name: 'in --queue, the printing server sharing limits: it prints the URL, the scrubber takes the password out', password: 'url' as const, toolServers: ['envtool'] },
  ];
  for (const c of cases) {
    it(`${c.name}; found nowhere a run wrote or sent`, async () => {
      const dir = join(root, c.password);
      mkdirSync(dir, { recursive: true });
      const run = `secrets-${c.password}`;
      const cfg = writeConfig(dir, proxy.url, {
        mcpServers: { envtool: { command: process.execPath, args: [ENV_SERVER, 'lookup'] } },
        tools: { aliases: { pubmed_search: { server: 'envtool', tool: 'lookup' } }, limits: { pubmed_search: 5 } },
        executor: { cache_dir: join(dir, 'cache') },
        questions: { path: questions },
        concurrency: 2,
        ...(c.toolServers === undefined ? {} : { shared_limits: { tool_servers: c.toolServers } }),
      });
      const places: Place[] = [];
      const sentBefore = bodies.length;
      await queueCli(['enqueue', '--config', cfg, '--run', run, '--limit', '3'], c.password, places);
      const out = join(dir, 'workers');
      await queueCli(['worker', '--config', cfg, '--run', run, '--out', out], c.password, places);
      await queueCli(['status', '--run', run], c.password, places);
      const workers = readdirSync(out).map((d) => join(out, d));
      await queueCli(['merge', ...workers, '--out', join(dir, 'merged'), '--run', run], c.password, places);
      const report = await runCli(['report', join(dir, 'merged'), '--out', join(dir, 'report.html')]);
      expect(report.code, report.stderr).toBe(0);
      places.push(...cli('report', report));

      // The tool did print its environment into the run, and the model was sent it.
      const outputs = workers.flatMap((w) => [...readJsonl(join(w, 'trajectories.jsonl')), ...readJsonl(join(w, 'failures.jsonl'))]).flatMap((t) => t.tool_calls.map((call: { output_text: string }) => call.output_text));
      expect(outputs.join('\n')).toContain('PATH');
      expect(bodies.length).toBeGreaterThan(sentBefore);
      if (c.toolServers === undefined) expect(outputs.join('\n')).not.toContain('TRAJFORGE_LIMITS');
      else expect(outputs.join('\n')).toContain('[redacted:queue_password]');

      const everywhere = [...places, ...filesUnder(dir), ...bodies.slice(sentBefore).map((b, i) => ({ where: `request ${i} to the model`, text: b }))];
      for (const { where, text } of everywhere) expect(text.includes(DIGITS), `the password found in ${where}`).toBe(false);
    }, 120_000);
  }
});
