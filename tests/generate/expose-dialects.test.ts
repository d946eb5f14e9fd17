/**
 * `tools.expose` in every dialect, through `generate()`: a model that calls a tool the config
 * does not expose (the server offers it, the model was never shown it) is refused by name, and
 * the call never reaches the server. The model is a scripted OpenAI-compatible endpoint on
 * loopback; the tool server is the corpus server, which logs every call it answers.
 */
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { CORPUS_SERVER, readJsonl, tempDir, writeConfig } from '../helpers.js';

type Dialect = 'tulu' | 'mcp-xml' | 'native';
type Msg = { role: string; content: string | null; tool_calls?: unknown[] };

/** The first turn calls `pubmed_search` (the server's own name, not exposed); the next answers. */
function turn(dialect: Dialect, messages: Msg[]): { content: string; tool_calls?: unknown[]; finish: string } {
  const called = messages.some((m) => m.role === 'assistant');
  if (called) return { content: dialect === 'mcp-xml' ? 'Done. \\boxed{done}' : '<answer>done</answer>', finish: 'stop' };
  switch (dialect) {
    case 'tulu':
      return { content: '<call_tool name="pubmed_search">css grid</call_tool>', finish: 'stop' };
    case 'mcp-xml':
      return {
        content: '<use_mcp_tool>\n<server_name>corpus</server_name>\n<tool_name>pubmed_search</tool_name>\n<arguments>\n{"query": "css grid"}\n</arguments>\n</use_mcp_tool>',
        finish: 'stop',
      };
    case 'native':
      return { content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'pubmed_search', arguments: '{"query":"css grid"}' } }], finish: 'tool_calls' };
  }
}

let dialect: Dialect = 'tulu';
/** The tool names each request offered the model (native: the `tools` field). */
const offered: string[][] = [];
let http: Server;
let baseUrl: string;

beforeAll(async () => {
  http = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      const request = JSON.parse(body) as { messages: Msg[]; tools?: { function: { name: string } }[]; stop?: string[] };
      offered.push((request.tools ?? []).map((t) => t.function.name));
      const t = turn(dialect, request.messages);
      // As endpoints do: the text ends before the first stop string, which is not sent.
      for (const stop of request.stop ?? []) if (t.content.includes(stop)) t.content = t.content.slice(0, t.content.indexOf(stop));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: 'x',
          object: 'chat.completion',
          created: 0,
          model: 'scripted',
          choices: [{ index: 0, message: { role: 'assistant', content: t.content, ...(t.tool_calls ? { tool_calls: t.tool_calls } : {}) }, finish_reason: t.finish }],
          usage: { prompt_tokens: 10, completion_tokens: 10, total_tokens: 20 },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}/v1`;
});
afterAll(() => new Promise((r) => http.close(r)));

describe.each(['tulu', 'mcp-xml', 'native'] as const)('%s: tools.expose', (d) => {
  it('a call to a tool that is not exposed is refused as unknown and never reaches its server', async () => {
    dialect = d;
    offered.length = 0;
    const dir = tempDir('tf-expose-');
    const log = join(dir, 'calls.jsonl');
    const config = loadConfig(
      writeConfig(dir, baseUrl, {
        dialect: d,
        mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER], env: { CORPUS_CALL_LOG: log } } },
        tools: { aliases: { search: { server: 'corpus', tool: 'pubmed_search' } }, expose: ['search'] },
        rollback: { conditions: [] },
        executor: { cache: false },
        validation: { gold_match: 'off' },
      }),
      { limit: 1 },
    );
    await generate({ config });
    const [t] = [...readJsonl(join(config.output.dir, 'trajectories.jsonl')), ...readJsonl(join(config.output.dir, 'failures.jsonl'))];
    expect(t!.tool_calls).toHaveLength(1);
    const [c] = t!.tool_calls;
    expect(c).toMatchObject({ tool_name: 'pubmed_search', skipped: true, server: null, error: 'unknown tool "pubmed_search"; available tools: search' });
    expect(c.output_text).toContain('unknown tool');
    expect(existsSync(log)).toBe(false);
    if (d === 'native') expect(offered[0]).toEqual(['search']);
  });
});
