/**
 * Every sample is accounted for, and the exit code says so (#14, item 2), through the CLI:
 * a refusal of one prompt (a content filter, a context-length 400 in words the client did
 * not know, a 403 on fewer samples than fail_fast_after) becomes a failure record with the
 * server's message, visible to `stats` and `rerun`; a session whose every sample failed exits
 * 1 naming the main reason. Fail fast keeps its own rule: the refusals that trip it are not
 * recorded (failfast.test.ts), so the same command resumes.
 */
import { writeFileSync } from 'node:fs';
import { request, type IncomingMessage, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { QUESTIONS, readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';
import { accountedIds, checkRunDir, loopbackServer, openAiError } from './util.js';
import { readFileSync } from 'node:fs';

const FILTERED = 'FORBIDDEN-TOPIC';
const TOO_LONG = 'ENORMOUS-DOCUMENT';
const FILTER_MESSAGE = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.";
const FORBIDDEN = 'Your organization must be verified to use the model `trajforge-sim`.';
// Anthropic's wording behind an OpenAI-compatible proxy: no `context_length_exceeded` code.
const TOO_LONG_MESSAGE = 'prompt is too long: 250112 tokens > 200000 maximum';

let sim: Sim;
beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 3, contentFilter: FILTERED });
});
afterAll(() => sim.close());

/** The first `n` questions of the bundled set, with `mark` appended to the ones at `marked`. */
function questions(dir: string, n: number, marks: Record<number, string>): string {
  const rows = readFileSync(QUESTIONS, 'utf8').trim().split('\n').slice(0, n).map((l) => JSON.parse(l) as { question: string });
  for (const [i, mark] of Object.entries(marks)) rows[Number(i)]!.question += ` (${mark})`;
  const file = join(dir, 'questions.jsonl');
  writeFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return file;
}

/** Passes a request on to the sim as it is, streamed or not. */
function forward(req: IncomingMessage, res: ServerResponse, body: string): void {
  const up = request(`${sim.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (r) => {
    res.writeHead(r.statusCode ?? 502, r.headers);
    r.pipe(res);
  });
  up.on('error', () => res.destroy());
  up.end(body);
}

describe('a refusal of one sample is a failure record', () => {
  it('a content filter, a context-length 400 in unknown words and 403s on fewer samples than fail_fast_after: each sample recorded with the server message; exit 0; stats and rerun see them', async () => {
    let forbidden = 3;
    let served = 0;
    const proxy = await loopbackServer((req, res, body) => {
      // After the first answer (before it, a 403 says the endpoint is wrong and stops the run at
      // once: tests/faults/failfast.test.ts), requests meet a gateway that refuses three, then
      // lets everything through.
      if (served++ > 0 && forbidden > 0) {
        forbidden--;
        return openAiError(res, 403, FORBIDDEN, 'unverified_organization');
      }
      if (body.includes(TOO_LONG)) return openAiError(res, 400, TOO_LONG_MESSAGE, null);
      forward(req, res, body);
    });
    try {
      const dir = tempDir('tf-acc-');
      // One sample at a time, so which request meets which refusal is fixed.
      const config = writeConfig(dir, proxy.url, { concurrency: 1, questions: { path: questions(dir, 10, { 5: FILTERED, 6: TOO_LONG, 8: FILTERED }) } });
      const res = await runCli(['generate', '--config', config], { timeoutMs: 60_000 });
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout).toContain('[completed]');
      expect(res.stdout).toContain('10 planned, 10 recorded');
      const files = checkRunDir(join(dir, 'run'));
      expect(accountedIds(files).size).toBe(10);
      const rejected = files.failed.filter((t) => t.reason === 'endpoint_rejected');
      expect(rejected.map((t) => t.question.includes(FILTERED))).toEqual([false, false, false, true, true]);
      for (const t of rejected.slice(0, 3)) expect(t.error).toBe(`${proxy.url} answered 403: ${FORBIDDEN}`);
      for (const t of rejected.slice(3)) expect(t.error).toContain(FILTER_MESSAGE);
      const overflow = files.failed.filter((t) => t.reason === 'context_overflow');
      expect(overflow.map((t) => t.question.includes(TOO_LONG))).toEqual([true]);
      expect(overflow[0]!.error).toBe(TOO_LONG_MESSAGE);
      expect(files.manifest?.counts.by_reason.endpoint_rejected).toBe(5);

      const stats = await runCli(['stats', join(dir, 'run'), '--json']);
      expect(stats.code, stats.stderr).toBe(0);
      expect(stats.stdout).toMatch(/"endpoint_rejected":\s*5/);

      // rerun takes them: the gateway lets them through now; the filtered prompts are refused again.
      const again = await runCli(['rerun', join(dir, 'run'), '--reason', 'endpoint_rejected', '--base-url', proxy.url]);
      expect(again.code, again.stderr).toBe(0);
      const after = checkRunDir(join(dir, 'run'));
      const retried = [...after.ok, ...after.failed].filter((t) => t.attempt === 1);
      expect(retried).toHaveLength(5);
      expect(retried.filter((t) => t.reason === 'endpoint_rejected').every((t) => t.question.includes(FILTERED))).toBe(true);
      expect(after.ok.filter((t) => t.attempt === 1).length).toBeGreaterThan(0);
    } finally {
      await proxy.close();
    }
  });

  it('every sample refused, fewer than fail_fast_after: each recorded, exit 1 naming the main reason and the server message', async () => {
    // A 400 for every prompt (a 401 before any answer would stop the run at once, recording nothing).
    const server = await loopbackServer((_req, res) => openAiError(res, 400, 'Unrecognized request argument supplied: chat_template_kwargs', 'invalid_request_error'));
    try {
      const dir = tempDir('tf-acc-all-');
      const config = writeConfig(dir, server.url, { concurrency: 2 });
      const res = await runCli(['generate', '--config', config, '--limit', '3']);
      expect(res.code, res.stdout).toBe(1);
      expect(res.stderr).toContain(`error: every sample of this run failed (3); the main reason: endpoint_rejected (3): ${server.url} answered 400: Unrecognized request argument supplied`);
      expect(res.stderr).not.toMatch(/\n\s+at /);
      const files = checkRunDir(join(dir, 'run'));
      expect(files.failed.map((t) => t.reason)).toEqual(['endpoint_rejected', 'endpoint_rejected', 'endpoint_rejected']);
      expect(files.manifest?.status).toBe('failed');
      expect(files.manifest?.sessions.at(-1)?.exit).toContain('every sample of this run failed');
      // Nothing left to do: the same command plans nothing and exits 0.
      const same = await runCli(['generate', '--config', config, '--limit', '3']);
      expect(same.code, same.stderr).toBe(0);
      expect(same.stdout).toContain('0 planned');
      expect(readJsonl(join(dir, 'run', 'failures.jsonl'))).toHaveLength(3);
    } finally {
      await server.close();
    }
  });
});
