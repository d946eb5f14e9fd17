/**
 * `dialect_options` through a whole run: `trajforge generate` (the built CLI) against the sim
 * on loopback and the corpus server over stdio, mcp-xml in MiroThinker's form. The model sees
 * the run's date and bare result turns; the records keep the tagged training view, so every
 * trajectory validates as before; a resumed run renders the prompt of the run it resumes.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dialectFor } from '../../pipeline/dialects/index.js';
import { plainToolResult } from '../../pipeline/dialects/mcp-xml.js';
import { RunManifest, Trajectory } from '../../schemas/index.js';
import { startSim, type Sim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

describe('mcp-xml in MiroThinker form, through generate', () => {
  let sim: Sim;
  beforeAll(async () => {
    sim = await startSim({ port: 0, seed: 3 });
  });
  afterAll(() => sim.close());

  it('sends the run date and bare results, keeps the tagged view, validates, and a resume renders the same date', async () => {
    const dir = tempDir('tf-miro-form-');
    const out = join(dir, 'run');
    const config = writeConfig(dir, sim.url, { dialect: 'mcp-xml', dialect_options: { today: 'run', tool_results: 'plain' } });
    const first = await runCli(['generate', '--config', config, '--limit', '6']);
    expect(first.code, first.stderr).toBe(0);

    const manifestFile = join(out, 'manifest.json');
    const manifest = RunManifest.parse(JSON.parse(readFileSync(manifestFile, 'utf8')));
    expect(manifest.config).toMatchObject({ dialect_options: { today: 'run', tool_results: 'plain' } });
    const ok = readJsonl(join(out, 'trajectories.jsonl')).map((r) => Trajectory.parse(r));
    // The sim reads bare results as it reads tagged ones: the answers are found.
    expect(ok.length).toBeGreaterThanOrEqual(5);
    const date = manifest.created_at.slice(0, 10);
    for (const t of ok) {
      const systemPrompt = t.messages[0]!.content;
      expect(systemPrompt).toContain(`with each tool-use informed by the result of the previous tool-use. Today is: ${date}\n`);
      expect(systemPrompt).not.toContain('<tool_output>');
      expect(t.validation.passed).toBe(true);
      expect(t.tool_calls.length).toBeGreaterThan(0);
      // The model saw bare turns: each call's result message is its record's output without the wrapper.
      const results = t.messages.filter((m, i) => i > 1 && m.role === 'user' && t.messages[i - 1]!.role === 'assistant' && t.messages[i - 1]!.content.includes('<use_mcp_tool>'));
      expect(results.map((m) => m.content)).toEqual(t.tool_calls.map((c) => plainToolResult(c.output_text)));
      for (const m of results) expect(m.content).not.toContain('tool_output');
      expect(results[0]!.content).toMatch(/^Found \d+ results\. Showing top \d+:\n<snippet id="/);
      // The training view keeps one tagged output per call, as the records say.
      expect(t.interleaved_text.split('<tool_output>').length - 1).toBe(t.tool_calls.length);
      for (const c of t.tool_calls) expect(t.interleaved_text).toContain(c.output_text);
    }

    // Resumed on another day (the manifest says when the run was made): the prompt keeps the run's date.
    writeFileSync(manifestFile, JSON.stringify({ ...JSON.parse(readFileSync(manifestFile, 'utf8')), created_at: '2020-01-02T23:30:00.000Z' }));
    const second = await runCli(['generate', '--config', config, '--limit', '9']);
    expect(second.code, second.stderr).toBe(0);
    const later = readJsonl(join(out, 'trajectories.jsonl'))
      .map((r) => Trajectory.parse(r))
      .filter((t) => !ok.some((o) => o.id === t.id));
    expect(later.length).toBeGreaterThan(0);
    for (const t of later) expect(t.messages[0]!.content).toContain('previous tool-use. Today is: 2020-01-02\n');
  });

  it('refuses dialect_options on another dialect before anything is written', async () => {
    const dir = tempDir('tf-miro-form-');
    const config = writeConfig(dir, sim.url, { dialect: 'tulu', dialect_options: { tool_results: 'plain' } });
    const r = await runCli(['generate', '--config', config, '--limit', '1']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`${config}: dialect_options: only the mcp-xml dialect takes options (today, tool_results); the dialect is tulu`);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(() => readFileSync(join(dir, 'run', 'manifest.json'))).toThrow();
  });
});

describe("the sim's plain policy reads bare results", () => {
  it('answers from snippets in a bare result turn, and takes a bare placeholder for no result', async () => {
    const sim = await startSim({ port: 0, seed: 1, callsPerSample: 1 });
    try {
      const client = new OpenAI({ baseURL: sim.url, apiKey: 'EMPTY', maxRetries: 0 });
      const dialect = dialectFor('mcp-xml', { tool_results: 'plain' }, '2025-06-08T00:00:00Z');
      const tools = [{ name: 'pubmed_search', server: 'corpus', description: 'Search.', inputSchema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } }];
      const call = '<use_mcp_tool>\n<server_name>corpus</server_name>\n<tool_name>pubmed_search</tool_name>\n<arguments>\n{"query": "Firefox grid"}\n</arguments>\n</use_mcp_tool>';
      const rendered = dialect.renderToolOutput({
        header: 'Found 1 results. Showing top 1:',
        documents: [{ id: 'css.properties.grid', title: 'CSS property: grid', text: 'Chrome first supported it in version 57, released 2017-03-09. Firefox first supported it in version 52, released 2017-03-07.' }],
      }).text;
      const asked = async (result: string): Promise<string> => {
        const messages = [
          { role: 'system', content: dialect.systemPrompt(tools) },
          { role: 'user', content: 'In which version of Firefox was the CSS property grid first supported?' },
          { role: 'assistant', content: call },
          { role: 'user', content: result },
        ] as ChatCompletionMessageParam[];
        const r = await client.chat.completions.create({ model: 'trajforge-sim', messages, stop: ['</use_mcp_tool>'] });
        return r.choices[0]!.message.content ?? '';
      };
      expect(await asked(plainToolResult(rendered))).toMatch(/\\boxed\{Firefox first supported it in version 52, released 2017-03-07\.\}$/);
      expect(await asked('[This tool result was removed to save context; only the latest results are kept.]')).toMatch(/\\boxed\{I could not find it\.\}$/);
      expect(sim.stats().requestsByRole.none).toBe(2);
    } finally {
      await sim.close();
    }
  });
});
