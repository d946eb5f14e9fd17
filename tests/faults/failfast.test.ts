/**
 * Fail fast, through the CLI: an endpoint that refuses every request (403, 404, 400) or is
 * down (connection refused, 500 forever) stops the run within seconds, with exit 1 and the
 * server's own message on stderr, and leaves a run that the same command resumes. A wrong
 * endpoint (nothing listening, 404, 401, 403 before any answer) stops at once, naming the URL and
 * the model and pointing at `trajforge check`, with no record written; an endpoint that goes
 * away after it answered is retried as before.
 *
 * The 401 case runs through generate() in tests/generate/run.test.ts ("stops early with the
 * server message when the endpoint refuses every request").
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { runCli, tempDir, writeConfig } from '../helpers.js';
import { accountedIds, checkRunDir, loopbackServer, openAiError } from './util.js';

let sim: Sim;
beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 3 });
});
afterAll(() => sim.close());

/** `wrong`: what the line says when it comes before any answer (403, 404: the endpoint is wrong); 400 is a refusal of the request. */
const refusals: { status: number; message: string; code: string; type?: string; wrong?: string }[] = [
  { status: 403, message: 'Project `proj_Faults` does not have access to model `trajforge-sim`', code: 'model_not_found', wrong: 'refused the key: 403' },
  { status: 404, message: 'The model `trajforge-sim` does not exist or you do not have access to it.', code: 'model_not_found', wrong: 'has no such path or model: 404' },
  { status: 400, message: "Unrecognized request argument supplied: chat_template_kwargs", code: 'invalid_request_error' },
];

// Each case has its own server and run directory: they run side by side.
describe.concurrent('an endpoint that refuses every request', () => {
  for (const r of refusals) {
    it(`${r.status}: exit 1 within seconds, the server's message on stderr, nothing recorded, resumable`, async () => {
      const server = await loopbackServer((_req, res) => openAiError(res, r.status, r.message, r.code));
      try {
        const dir = tempDir(`tf-ff-${r.status}-`);
        const config = writeConfig(dir, server.url, { concurrency: 4 });
        const t0 = Date.now();
        const res = await runCli(['generate', '--config', config, '--limit', '100'], { timeoutMs: 30_000 });
        expect(res.code, res.stderr).toBe(1);
        // Seconds, not the minutes a retrying client would take; the bound is loose because three
        // CLIs start side by side on a loaded machine. The request count below is the exact check.
        expect(Date.now() - t0).toBeLessThan(25_000);
        if (r.wrong === undefined) expect(res.stderr).toContain(`error: the model endpoint refused the requests: ${server.url} answered ${r.status}: ${r.message}`);
        else {
          // Before any answer, a 403 or 404 is a wrong endpoint: said at once, with the URL, the model and what to run.
          expect(res.stderr).toContain(`error: the model endpoint is wrong: ${server.url}/chat/completions (model trajforge-sim) ${r.wrong} ${r.message}, before it answered any request.`);
          expect(res.stderr).toContain('`trajforge check --config');
          // The first requests in flight, not fail_fast_after samples of them.
          expect(server.requests()).toBeLessThanOrEqual(4);
        }
        expect(res.stderr).not.toMatch(/\n\s+at /);
        // fail_fast_after (5) refusals in a row, plus what was in flight: not the 100 samples.
        expect(server.requests()).toBeLessThan(20);
        const files = checkRunDir(join(dir, 'run'));
        expect(files.manifest?.status).toBe('failed');
        // Refusals that trip fail-fast are the endpoint's fault, not the samples': no failure
        // record, nothing to rerun; the summary says they have none, and the same command redoes them.
        expect(files.ok.length + files.failed.length).toBe(0);
        expect(res.stdout).toMatch(/no record +\d+ planned samples \(.+\); the same command redoes them/);
        expect(files.manifest?.sessions.at(-1)?.exit).toContain(r.message);
        // Closed cleanly: no lock left behind, no half-written manifest.
        expect(existsSync(join(dir, 'run', '.lock'))).toBe(false);
        expect(existsSync(join(dir, 'run', 'manifest.json.tmp'))).toBe(false);

        if (r.status !== 404) return;
        // The endpoint fixed: the same command (pointed at it) picks the run up from the start.
        const again = await runCli(['generate', '--config', config, '--limit', '6', '--base-url', sim.url]);
        expect(again.code, again.stderr).toBe(0);
        expect(again.stdout).toContain('(resumed)');
        expect(accountedIds(checkRunDir(join(dir, 'run'))).size).toBe(6);
      } finally {
        await server.close();
      }
    });
  }
});

describe('an endpoint that is not there', () => {
  it('connection refused: stops at once naming the URL and model, exit 1, nothing recorded; the same command runs it once the URL is right', async () => {
    // A port that was just free: nothing listens there.
    const gone = await loopbackServer(() => {});
    await gone.close();
    const dir = tempDir('tf-ff-refused-');
    const config = writeConfig(dir, gone.url, { concurrency: 4 });
    const res = await runCli(['generate', '--config', config, '--limit', '100'], { timeoutMs: 30_000 });
    expect(res.code, res.stderr).toBe(1);
    expect(res.stderr).toContain(`error: the model endpoint is wrong: ${gone.url}/chat/completions (model trajforge-sim) refused the connection: nothing listens there (ECONNREFUSED), before it answered any request.`);
    expect(res.stderr).toContain('endpoint.base_url');
    expect(res.stderr).toContain('`trajforge check --config');
    expect(res.stderr).not.toMatch(/\n\s+at /);
    // No sample ever got an answer: none is recorded as failed, all are redone by the same command.
    const files = checkRunDir(join(dir, 'run'));
    expect(files.manifest?.status).toBe('failed');
    expect(files.ok.length + files.failed.length).toBe(0);
    expect(res.stdout).toMatch(/no record +\d+ planned samples \(.+\); the same command redoes them/);

    const again = await runCli(['generate', '--config', config, '--limit', '6', '--base-url', sim.url]);
    expect(again.code, again.stderr).toBe(0);
    expect(accountedIds(checkRunDir(join(dir, 'run'))).size).toBe(6);
  });
});

describe('an endpoint that is down', () => {
  const downs: [string, () => Promise<{ url: string; close(): Promise<void> }>, RegExp][] = [
    [
      // It answered, then went away: a refused connection is now a moment's trouble, retried as any other.
      'connection refused after it answered',
      async () => {
        let answered = 0;
        const s = await loopbackServer(async (_req, res, body) => {
          const r = await fetch(`${sim.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
          res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
          res.end(Buffer.from(await r.arrayBuffer()));
          if (++answered === 3) void s.close();
        });
        return { url: s.url, close: () => s.close() };
      },
      /ECONNREFUSED|connection error/i,
    ],
    ['500 on every request', () => loopbackServer((_req, res) => openAiError(res, 500, 'upstream model worker crashed', null, 'server_error')), /upstream model worker crashed/],
  ];
  for (const [name, start, pattern] of downs) {
    it(`${name}: stops after fail_fast_after samples in a row fail, exit 1, instead of failing every question`, async () => {
      const server = await start();
      try {
        const dir = tempDir('tf-ff-down-');
        const config = writeConfig(dir, server.url, { concurrency: 4 });
        const t0 = Date.now();
        const res = await runCli(['generate', '--config', config, '--limit', '100'], { timeoutMs: 30_000 });
        expect(res.code, res.stderr).toBe(1);
        expect(Date.now() - t0).toBeLessThan(15_000);
        expect(res.stderr).toMatch(/error: the model endpoint kept failing: \d+ samples in a row failed after 6 retries each/);
        expect(res.stderr).toMatch(pattern);
        expect(res.stderr).toContain('--reason llm_error');
        const files = checkRunDir(join(dir, 'run'));
        expect(files.manifest?.status).toBe('failed');
        // The samples that failed before the run stopped, at most what was in flight: far from 100.
        const failedHere = files.failed.filter((t) => t.reason === 'llm_error');
        expect(failedHere.length).toBeGreaterThanOrEqual(5);
        expect(failedHere.length).toBeLessThan(5 + 4);
        if (!name.startsWith('connection')) return;

        // The endpoint is back: the same command completes the run, and rerun takes the failed ones.
        const again = await runCli(['generate', '--config', config, '--limit', '12', '--base-url', sim.url]);
        expect(again.code, again.stderr).toBe(0);
        const failedIds = new Set(failedHere.map((t) => t.id));
        const rerun = await runCli(['rerun', join(dir, 'run'), '--reason', 'llm_error', '--base-url', sim.url]);
        expect(rerun.code, rerun.stderr).toBe(0);
        const after = checkRunDir(join(dir, 'run'));
        expect(accountedIds(after).size).toBe(12);
        const acceptedNow = after.ok.filter((t) => failedIds.has(t.id));
        expect(acceptedNow.length).toBeGreaterThan(0);
        for (const t of acceptedNow) expect(t.attempt).toBeGreaterThanOrEqual(1);
      } finally {
        await server.close();
      }
    });
  }
});
