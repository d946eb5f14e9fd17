/**
 * The `miroverse-v0.1` prompt layout against the data it reproduces: the MiroVerse v0.1 row of
 * ../shared/fixtures/miroverse-chat-row.jsonl and MiroThinker's prompt code at commit
 * 73cb96f755de98f10d8dc57ac62ba8d0877a6bb4 (apps/miroflow-agent/src/utils/prompt_utils.py,
 * 2025-08-08, the day MiroVerse v0.1 was published). The fixture's own tool list is read back
 * into tool specs and listed again, so the system prompt is compared whole, byte for byte.
 * Python's repr is checked against values printed by CPython 3 (`repr(v)`), not by our code.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fingerprintFields, resolveConfig } from '../../pipeline/core/config.js';
import { mcpXmlDialect } from '../../pipeline/dialects/mcp-xml.js';
import { pydanticTitle, schemaWithTitles } from '../../pipeline/dialects/mcp-xml-prompt.js';
import { pythonRepr } from '../../pipeline/dialects/python-repr.js';
import type { ToolSpec } from '../../pipeline/dialects/types.js';
import { loadPrompt, omittedResultText, renderPrompt } from '../../pipeline/prompts.js';
import { readPythonLiteral } from '../../sim/python-literal.js';
import { FIXTURES } from '../helpers.js';

type Msg = { role: string; content: string };
const fixture = JSON.parse(readFileSync(join(FIXTURES, 'miroverse-chat-row.jsonl'), 'utf8').split('\n')[0]!) as { messages: Msg[] };
const [fSystem, fQuestion, , fReport, , fSummary] = fixture.messages as [Msg, Msg, Msg, Msg, Msg, Msg];
const QUESTION = fQuestion.content.split('\n')[0]!;

/** The fixture's tool list as tool specs: server, name, description and the schema read back from its Python dict text. */
function fixtureTools(): ToolSpec[] {
  const s = fSystem.content;
  const list = s.slice(s.indexOf('## Server name:'), s.indexOf('\n\n# General Objective'));
  const tools: ToolSpec[] = [];
  let server = '';
  for (const block of list.split(/^(?=## Server name: |### Tool name: )/m)) {
    if (block.startsWith('## Server name: ')) server = block.slice('## Server name: '.length).trim();
    else {
      const name = /^### Tool name: (.*)\n/.exec(block)![1]!;
      const description = block.slice(block.indexOf('Description: ') + 'Description: '.length, block.lastIndexOf('\nInput JSON schema: '));
      const schema = readPythonLiteral(block, block.lastIndexOf('Input JSON schema: ') + 'Input JSON schema: '.length) as Record<string, unknown>;
      tools.push({ name, description, inputSchema: schema, server });
    }
  }
  return tools;
}

const miroverse = mcpXmlDialect({ today: '2025-06-08', toolResults: 'plain', layout: 'miroverse-v0.1' });

describe("pythonRepr: Python's repr of JSON values", () => {
  it('writes dicts, lists, strings, numbers and constants as CPython 3 prints them', () => {
    const v = {
      type: 'object',
      properties: {
        q: { type: 'string', default: null, enum: ['a', "it's", 'say "hi"', 'both \' and "'] },
        n: { type: 'integer', default: 300, minimum: 0.5, maximum: 1e-5, big: 1e16, neg: -2.5e-7, x: 123456789012.25 },
      },
      required: ['q'],
      additionalProperties: false,
      ok: true,
    };
    expect(pythonRepr(v)).toBe(
      `{'type': 'object', 'properties': {'q': {'type': 'string', 'default': None, 'enum': ['a', "it's", 'say "hi"', 'both \\' and "']}, 'n': {'type': 'integer', 'default': 300, 'minimum': 0.5, 'maximum': 1e-05, 'big': 1e+16, 'neg': -2.5e-07, 'x': 123456789012.25}}, 'required': ['q'], 'additionalProperties': False, 'ok': True}`,
    );
    expect(pythonRepr('tab\there\nnl\\back\x00\x7f\u00e9\u200b\u2028\u{1F600} \xa0')).toBe("'tab\\there\\nnl\\\\back\\x00\\x7fé\\u200b\\u2028😀 \\xa0'");
    expect([pythonRepr([]), pythonRepr({}), pythonRepr(0.1), pythonRepr(1e22), pythonRepr(9007199254740993)]).toEqual(['[]', '{}', '0.1', '1e+22', '9007199254740992.0']);
  });

  it("titles a schema as pydantic does, keeping a server's own titles and key order", () => {
    expect(pydanticTitle('local_file_path')).toBe('Local File Path');
    expect(pydanticTitle('docId')).toBe('Docid');
    const zodLike = { $schema: 'http://json-schema.org/draft-07/schema#', type: 'object', properties: { query: { type: 'string' }, top_k: { title: 'K', type: 'integer' } }, required: ['query'] };
    expect(pythonRepr(schemaWithTitles(zodLike, 'search'))).toBe(
      "{'type': 'object', 'properties': {'query': {'title': 'Query', 'type': 'string'}, 'top_k': {'title': 'K', 'type': 'integer'}}, 'required': ['query'], 'title': 'searchArguments'}",
    );
  });
});

describe('the miroverse-v0.1 layout against the MiroVerse v0.1 row', () => {
  it("writes the fixture's system prompt byte for byte from the fixture's own tools, date and objective", () => {
    const system = [miroverse.systemPrompt(fixtureTools()), loadPrompt('main-agent-objective').trimEnd()].join('\n\n');
    expect(system.split('\n')).toEqual(fSystem.content.split('\n'));
  });

  it("writes the fixture's first user turn and its summary prompt", () => {
    expect(renderPrompt(loadPrompt(miroverse.questionPrompt!), { question: QUESTION }).trimEnd()).toBe(fQuestion.content);
    const summary = renderPrompt(loadPrompt('main-agent-miroverse-summary'), { question: QUESTION, task: QUESTION, task_failed: '' }).trimEnd();
    expect(summary).toBe(fSummary.content);
  });

  it("sends a tool's own text, and a failure in MiroThinker's words", () => {
    const call = { toolName: 'search_and_browse', attributes: { server_name: 'browsing-agent' }, query: '' };
    const rendered = '<tool_output>\nthe rendered view\n</tool_output>';
    expect(miroverse.toolMessage!(rendered, call, { text: fReport.content, server: 'browsing-agent', tool: 'search_and_browse' })).toEqual({ role: 'user', content: fReport.content });
    const json = '{"total":1,"data":[{"paperId":"a"}]}';
    expect(miroverse.toolMessage!(rendered, call, { text: json, server: 'corpus', tool: 'pubmed_search' }).content).toBe(json);
    expect(miroverse.toolMessage!(rendered, call, { text: '', error: 'sub-agent browsing failed: max_turns', server: 'browsing-agent', tool: 'search_and_browse' }).content).toBe(
      'Tool call to search_and_browse on browsing-agent failed. Error: sub-agent browsing failed: max_turns',
    );
  });

  // The strings of generate_agent_summarize_prompt(task_failed=True) and _remove_tool_result_from_messages at 73cb96f.
  it("has MiroThinker's failed-task summaries and keep-K placeholder", () => {
    const main = renderPrompt(loadPrompt('main-agent-miroverse-summary'), { question: 'Q', task: 'Q', task_failed: loadPrompt('main-agent-miroverse-summary-failed') });
    expect(main).toMatch(/^Summarize the above conversation, and output the FINAL ANSWER to the original question\.\n\nYou failed to complete the task\.\nIf a clear answer has already/);
    const browsing = renderPrompt(loadPrompt('browsing-agent-miroverse-summary'), { question: 'Q', task: 'T', task_failed: loadPrompt('browsing-agent-miroverse-summary-failed') });
    expect(browsing).toMatch(
      /^This is a direct instruction to you \(the assistant\), not the result of a tool call\.\n\nYou failed to complete the task\. Do not attempt to answer the original task\. Instead, clearly acknowledge that the task has failed\. We are now ending this session/,
    );
    expect(browsing).toContain('return all partially relevant findings, Search results, quotes');
    expect(omittedResultText(0, 5, miroverse.omittedResultPrompt)).toBe('Tool result is omitted to save tokens.');
    expect(loadPrompt('browsing-agent-miroverse-objective')).toContain('\n\nCritically assess the reliability of all information:\n');
    expect(loadPrompt('browsing-agent-miroverse-objective')).toContain('\n\nBe cautious and transparent in your output:\n');
  });

  it("leaves trajforge's layout as it was: no layout, the same prompt as before", () => {
    const tools = fixtureTools();
    const before = mcpXmlDialect({ today: '2025-06-08', toolResults: 'plain' });
    expect(before.systemPrompt(tools)).toBe(mcpXmlDialect({ today: '2025-06-08', toolResults: 'plain', layout: 'trajforge' }).systemPrompt(tools));
    expect(before.systemPrompt(tools)).toContain('Here are the functions available in JSON Schema format:\n\n## Server name: tool-python');
    expect(before.questionPrompt).toBeUndefined();
    expect(before.omittedResultPrompt).toBeUndefined();
  });
});

describe('the fingerprint of a layout', () => {
  const base = { endpoint: { base_url: 'http://127.0.0.1:1/v1', model: 'm' }, dialect: 'mcp-xml', mcpServers: {}, questions: { path: 'q.jsonl' } };
  const prompts = (options: Record<string, unknown>): Record<string, string> => fingerprintFields(resolveConfig({ ...base, dialect_options: options }, 'run.yaml')).prompts as Record<string, string>;

  it("counts a layout's prompts only in runs that send them, so a run made before layouts keeps its fingerprint", () => {
    const old = prompts({ today: 'run', tool_results: 'plain' });
    expect(Object.keys(old).filter((f) => f.includes('miroverse'))).toEqual([]);
    expect(prompts({ today: 'run', tool_results: 'plain', layout: 'trajforge' })).toEqual(old);
    const mv = prompts({ today: 'run', tool_results: 'plain', layout: 'miroverse-v0.1' });
    expect(Object.keys(mv)).toEqual(expect.arrayContaining(['mcp-xml-miroverse-system.txt', 'mcp-xml-miroverse-question.txt', 'mcp-xml-miroverse-omitted.txt', 'mcp-xml-miroverse-tool-error.txt']));
  });
});
