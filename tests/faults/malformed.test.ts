/**
 * A malformed answer fails one sample, never the run (#14, item 3), through the CLI against
 * the sim answering in the shapes OpenAI-compatible servers really send: tool-call arguments
 * as a JSON object, a function name that is a number, content as an array of parts, usage
 * counts as strings, a body or a stream that never ends, a model that rejects `max_tokens`,
 * reasoning in `reasoning` (vLLM >= 0.16) instead of `reasoning_content`. And a record that
 * fails its own schema never reaches the run directory.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startSim, type SimOptions, type SimStats } from '../../sim/server.js';
import { FailureRecord, Trajectory } from '../../schemas/index.js';
import { readJsonl, runCli, tempDir, writeConfig, type CliResult } from '../helpers.js';
import { accountedIds, checkRunDir, loopbackServer, openAiError, type RunFiles } from './util.js';

const ENDPOINT = { model: 'trajforge-sim', api_key_env: 'none', max_tokens: 1024, retry_base_ms: 20, retry_max_ms: 200 };

interface Outcome {
  res: CliResult;
  files: RunFiles;
  sim: SimStats;
  ms: number;
}

/** `trajforge generate` against a sim of its own, `limit` questions. */
async function generate(simOpts: SimOptions, endpoint: Record<string, unknown>, patch: Record<string, unknown>, limit: number): Promise<Outcome> {
  const sim = await startSim({ port: 0, seed: 5, ...simOpts });
  try {
    const dir = tempDir('tf-mal-');
    const config = writeConfig(dir, sim.url, { endpoint: { ...ENDPOINT, base_url: sim.url, ...endpoint }, concurrency: 4, ...patch });
    const t0 = Date.now();
    const res = await runCli(['generate', '--config', config, '--limit', String(limit)], { timeoutMs: 90_000 });
    const ms = Date.now() - t0;
    return { res, files: checkRunDir(join(dir, 'run')), sim: sim.stats(), ms };
  } finally {
    await sim.close();
  }
}

/** Exit 0, no stack trace, every sample accounted for. */
function completed(o: Outcome, limit: number): void {
  expect(o.res.code, o.res.stderr).toBe(0);
  expect(o.res.stderr).not.toMatch(/\n\s+at |TypeError|RangeError/);
  expect(accountedIds(o.files).size).toBe(limit);
}

const all = (o: Outcome) => [...o.files.ok, ...o.files.failed];

describe('answers in the shapes servers really send', () => {
  for (const stream of [false, true]) {
    it(`native, stream: ${stream}: arguments as a JSON object reach the tool; a number for a name is an unknown tool; the run completes`, async () => {
      const o = await generate({ misbehave: { object_arguments: 1, numeric_name: 0.3 } }, { stream }, { dialect: 'native' }, 8);
      completed(o, 8);
      expect(o.sim.misbehaviours.object_arguments).toBeGreaterThan(0);
      expect(o.sim.misbehaviours.numeric_name).toBeGreaterThan(0);
      expect(o.files.ok.length).toBeGreaterThan(0);
      const ran = o.files.ok.flatMap((t) => t.tool_calls.filter((c) => !c.skipped));
      expect(ran.length).toBeGreaterThan(0);
      for (const c of ran) expect(c.arguments.query, c.call_id).toEqual(expect.any(String));
      // The object went back to the endpoint as the JSON string the protocol promises (the sim refuses anything else).
      expect(o.sim.responsesByStatus['400'] ?? 0).toBe(0);
      const numeric = all(o).flatMap((t) => t.rollbacks.filter((r) => r.condition === 'unknown_tool'));
      expect(numeric.length).toBeGreaterThan(0);
      for (const r of numeric) expect(r.detail).toMatch(/^no tool named \d+$/);
    });

    it(`content as parts and usage as strings, stream: ${stream}: read as text and counts, nothing retried, in tulu and native`, async () => {
      for (const dialect of ['tulu', 'native']) {
        const o = await generate({ misbehave: { content_parts: 1, string_usage: 1 } }, { stream }, { dialect }, 6);
        completed(o, 6);
        expect(o.sim.misbehaviours.content_parts).toBeGreaterThan(0);
        expect(o.res.stdout).toMatch(/endpoint +\d+ requests, 0 retries/);
        expect(o.files.ok.length, dialect).toBeGreaterThan(0);
        for (const t of all(o)) {
          expect(t.usage.prompt_tokens).toBeGreaterThan(0);
          // Strings of numbers are the endpoint's counts, not estimates.
          expect(t.usage.estimated).toBe(false);
        }
        // Mistral's thinking parts are the reasoning: a think in the training view.
        if (dialect === 'native') expect(o.files.ok.some((t) => t.interleaved_text.startsWith('<think>'))).toBe(true);
      }
    });

    it(`an answer with no end, stream: ${stream}: its sample fails as response_too_large at max_response_bytes, within seconds; the others complete`, async () => {
      const o = await generate({ burst: { endless: 2 } }, { stream, max_response_bytes: 256 * 1024 }, { concurrency: 2 }, 6);
      completed(o, 6);
      expect(o.ms).toBeLessThan(30_000);
      const big = o.files.failed.filter((t) => t.reason === 'response_too_large');
      expect(big).toHaveLength(2);
      for (const t of big) expect(t.error).toContain(`passed ${256 * 1024} bytes (endpoint.max_response_bytes)`);
      expect(o.files.ok.length).toBeGreaterThan(0);
    });
  }

  it('a model that rejects max_tokens is sent max_completion_tokens from then on; configured, from the first request', async () => {
    const auto = await generate({ rejectMaxTokens: true }, {}, {}, 8);
    completed(auto, 8);
    expect(auto.res.stdout).toContain('max_completion_tokens sent for trajforge-sim');
    // Each request in flight when the first 400 came back learns it once; every later one is right.
    expect(auto.sim.requestsByMaxTokensParam.max_tokens).toBeLessThanOrEqual(4);
    expect(auto.sim.requestsByMaxTokensParam.max_completion_tokens).toBeGreaterThan(8);
    expect(auto.files.ok.length).toBeGreaterThan(0);

    const configured = await generate({ rejectMaxTokens: true }, { completion_limit_param: 'max_completion_tokens' }, {}, 4);
    completed(configured, 4);
    expect(configured.sim.requestsByMaxTokensParam.max_tokens).toBe(0);
  });

  it('reasoning in the field "reasoning" (vLLM >= 0.16) is read in every dialect, whole and streamed, and goes back in the field the endpoint answered in', async () => {
    for (const [dialect, stream] of [
      ['tulu', false],
      ['mcp-xml', true],
      ['native', true],
      ['native', false],
    ] as const) {
      const o = await generate({ reasoningField: 'reasoning', reasoningParser: true }, { stream, send_reasoning: 'auto' }, { dialect }, 6);
      completed(o, 6);
      const thinks = all(o).filter((t) => t.interleaved_text.includes('<think>'));
      expect(thinks.length, `${dialect} stream: ${stream}`).toBeGreaterThan(0);
      expect(o.sim.reasoningSentBack.reasoning, dialect).toBeGreaterThan(0);
      expect(o.sim.reasoningSentBack.reasoning_content).toBe(0);
    }
    // By default the reasoning is never sent back (DeepSeek's API refuses it).
    const quiet = await generate({ reasoningField: 'reasoning' }, {}, { dialect: 'native' }, 4);
    completed(quiet, 4);
    expect(quiet.sim.reasoningSentBack).toEqual({ reasoning: 0, reasoning_content: 0 });
  });
});

describe('an endpoint that ignores max_tokens', () => {
  it('a completion far past max_tokens is kept and flagged endpoint.past_max_tokens, and counted in the summary', async () => {
    const server = await loopbackServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ message: { content: 'It was version 1.<answer>1</answer>' }, finish_reason: 'stop' }], usage: { prompt_tokens: 300, completion_tokens: 50_000 } }));
    });
    try {
      const dir = tempDir('tf-mal-past-');
      const res = await runCli(['generate', '--config', writeConfig(dir, server.url), '--limit', '1']);
      expect(res.stdout).toContain('max_tokens 1 completions far past the max_tokens they were sent with');
      const files = checkRunDir(join(dir, 'run'));
      const [t] = [...files.ok, ...files.failed];
      expect(t!.validation.issues).toContainEqual({ rule: 'endpoint.past_max_tokens', severity: 'warn', message: 'the endpoint answered far past max_tokens (turn 0: 50000 completion tokens for max_tokens 1024)' });
    } finally {
      await server.close();
    }
  });
});

describe('the schema check before a record is written', () => {
  it('a rerun of a failure whose question_id was edited into a number writes an invalid failure, never a record that fails its schema', async () => {
    // A 400 for every prompt (a 401 before any answer would stop the run at once, recording nothing): two endpoint_rejected failures.
    const refuse = await loopbackServer((_req, res) => openAiError(res, 400, 'Unrecognized request argument supplied: chat_template_kwargs', 'invalid_request_error'));
    const sim = await startSim({ port: 0, seed: 5 });
    try {
      const dir = tempDir('tf-mal-schema-');
      const config = writeConfig(dir, refuse.url);
      const first = await runCli(['generate', '--config', config, '--limit', '2']);
      expect(first.code).toBe(1);
      const file = join(dir, 'run', 'failures.jsonl');
      const lines = readFileSync(file, 'utf8').trim().split('\n');
      expect(lines).toHaveLength(2);
      const edited = JSON.parse(lines[0]!) as { id: string; question_id: unknown };
      edited.question_id = 12345;
      writeFileSync(file, `${JSON.stringify(edited)}\n${lines[1]}\n`);

      const res = await runCli(['rerun', join(dir, 'run'), '--base-url', sim.url]);
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout).toContain('1 records failed their schema');
      // Every line the rerun wrote parses with its schema; the edited line is the input, left as it was.
      const written = [...readJsonl(join(dir, 'run', 'trajectories.jsonl')), ...readJsonl(file)].filter((t) => t.attempt === 1);
      expect(written).toHaveLength(2);
      const rerun = written.map((t) => (t.status === 'ok' ? Trajectory : FailureRecord).parse(t));
      const bad = rerun.find((t) => t.id === edited.id)!;
      expect(bad.status).toBe('failed');
      expect(bad.reason).toBe('invalid');
      expect(bad.error).toMatch(/failed the (Trajectory|FailureRecord) schema: question_id: /);
      expect(bad.question_id).toBe('12345');
    } finally {
      await refuse.close();
      await sim.close();
    }
  });
});
