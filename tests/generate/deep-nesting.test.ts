/**
 * Deep nesting fails one call, never the run (#23 item 6, the generate side). A real MCP server
 * whose results nest 6,000 and 100,000 objects deep, and the sim sending native call arguments
 * nested 20,000 deep (its `deep_arguments` misbehaviour): before, either ended the whole
 * generate with `RangeError: Maximum call stack size exceeded` and no record. Now the call fails
 * with a tool error the model sees (as an oversized result does: the sample can still answer
 * from its other calls), every sample gets its record, and the run ends normally.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { MAX_JSON_DEPTH, nestsDeeperThan, textNestsDeeperThan } from '../../pipeline/json-depth.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim, type Sim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

const DEEP_SERVER = join(PACKAGE_ROOT, 'tests/deep-result-server.mjs');

let sim: Sim;
beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 6 });
});
afterAll(() => sim.close());

/** Questions without a gold answer: a sample is judged on what it did, not on the answer. */
function questions(dir: string): string {
  const file = join(dir, 'questions.jsonl');
  writeFileSync(file, ['aspirin', 'statins', 'insulin', 'warfarin'].map((q, i) => JSON.stringify({ id: `d${i}`, question: `What is known about ${q}?` })).join('\n') + '\n');
  return file;
}

describe('a tool result nested past MAX_JSON_DEPTH', () => {
  for (const depth of [6_000, 100_000]) {
    it(`${depth} levels: the call fails with a tool error, the sample gets its record, the run completes`, async () => {
      const dir = tempDir('tf-deep-');
      const config = loadConfig(
        writeConfig(dir, sim.url, {
          mcpServers: { deep: { command: process.execPath, args: [DEEP_SERVER, String(depth)] } },
          tools: { aliases: { pubmed_search: { server: 'deep', tool: 'pubmed_search' } }, limits: { pubmed_search: 5 } },
          questions: { path: questions(dir) },
          executor: { cache_dir: join(dir, 'cache') },
          concurrency: 2,
        }),
      );
      const summary = await generate({ config });
      expect(summary.invocation.planned).toBe(4);
      expect(summary.invocation.accepted + summary.invocation.failed).toBe(4);
      expect(summary.invocation.unaccounted.count).toBe(0);
      const records = [...readJsonl(join(dir, 'run', 'trajectories.jsonl')), ...readJsonl(join(dir, 'run', 'failures.jsonl'))];
      const calls = records.flatMap((t) => t.tool_calls);
      const deep = calls.filter((c) => c.error !== undefined);
      expect(deep.length).toBeGreaterThan(0);
      for (const c of deep) {
        expect(c.error).toBe(`deep/pubmed_search: the result nests objects and arrays more than ${MAX_JSON_DEPTH} levels deep; not read`);
        expect(c.output_text).toContain('more than 256 levels deep');
      }
      // The ordinary results between them went through.
      expect(calls.some((c) => c.error === undefined && c.snippet_ids.includes('plain-1'))).toBe(true);
    }, 120_000);
  }
});

describe('native call arguments nested 20,000 deep', () => {
  it('through the CLI: the call is refused with a message the model sees, every sample is recorded, no stack trace', async () => {
    const deepSim = await startSim({ port: 0, seed: 6, misbehave: { deep_arguments: 0.5 } });
    try {
      const dir = tempDir('tf-deep-args-');
      const cfg = writeConfig(dir, deepSim.url, { dialect: 'native', questions: { path: questions(dir) }, executor: { cache_dir: join(dir, 'cache') }, concurrency: 2 });
      const res = await runCli(['generate', '--config', cfg]);
      expect(res.stderr).not.toMatch(/RangeError|Maximum call stack|\n\s+at /);
      expect(res.code, res.stderr).toBe(0);
      expect(deepSim.stats().misbehaviours.deep_arguments).toBeGreaterThan(0);
      const records = [...readJsonl(join(dir, 'run', 'trajectories.jsonl')), ...readJsonl(join(dir, 'run', 'failures.jsonl'))];
      expect(records).toHaveLength(4);
      // Each deep call was refused with the reason (the sim's count includes the length retries of its long turns).
      const deep = records.flatMap((t) => t.tool_calls).filter((c: { query: string }) => c.query.includes('"filter":{"and":{"and":'));
      expect(deep.length).toBeGreaterThan(0);
      for (const c of deep) expect(c.error).toBe(`arguments nest objects and arrays more than ${MAX_JSON_DEPTH} levels deep`);
    } finally {
      await deepSim.close();
    }
  }, 120_000);
});

describe('json-depth', () => {
  it('measures nesting without recursion, in values and in JSON text (strings skipped)', () => {
    let v: unknown = 1;
    for (let i = 0; i < 200_000; i++) v = [v];
    expect(nestsDeeperThan(v)).toBe(true);
    expect(nestsDeeperThan({ a: [{ b: 1 }] }, 3)).toBe(false);
    expect(nestsDeeperThan({ a: [{ b: { c: 1 } }] }, 3)).toBe(true);
    expect(textNestsDeeperThan('[[[1]]]', 3)).toBe(false);
    expect(textNestsDeeperThan('[[[[1]]]]', 3)).toBe(true);
    expect(textNestsDeeperThan(`{"q": "${'['.repeat(1000)}"}`, 3)).toBe(false);
    expect(textNestsDeeperThan(`{"q": "a\\"${'['.repeat(10)}"}`, 3)).toBe(false);
    expect(textNestsDeeperThan('['.repeat(300_000))).toBe(true);
  });
});
