/**
 * mcp-xml as a generation dialect: the MiroThinker system prompt, the canonical call it
 * writes back, and the call binding that repairs arguments and names.
 */
import { describe, expect, it } from 'vitest';
import { mcpXml, renderCall, repairTurn, systemPrompt } from '../../pipeline/dialects/mcp-xml.js';
import type { ParsedCall, ToolSpec, TurnRepairResult } from '../../pipeline/dialects/types.js';

const TOOLS: readonly ToolSpec[] = [
  {
    name: 'pubmed_search',
    description: 'Search PubMed abstracts for {query} terms.',
    inputSchema: { type: 'object', properties: { query: { type: 'string' }, limit: { type: 'integer' } }, required: ['query'] },
    server: 'corpus',
  },
  { name: 'browse_page', description: 'Fetch one web page.', inputSchema: { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] }, server: 'browser' },
  { name: 'semantic_search', description: '  ', inputSchema: { type: 'object', properties: { q: { type: 'string' } } }, server: 'corpus' },
  { name: 'calculator', description: 'Evaluate arithmetic.', inputSchema: { type: 'object', properties: { expr: { type: 'string' } } } },
];

function count(haystack: string, needle: string): number {
  return haystack.split(needle).length - 1;
}

function theCall(r: TurnRepairResult): ParsedCall {
  if (r.action.kind !== 'call') throw new Error(`expected a call, got ${r.action.kind}`);
  return r.action.call;
}

describe('mcpXml.systemPrompt', () => {
  const prompt = systemPrompt(TOOLS);

  it('lists each server once, with its own tools under it', () => {
    expect(count(prompt, '## Server name: corpus')).toBe(1);
    expect(count(prompt, '## Server name: browser')).toBe(1);
    // A tool without a server goes under the default one.
    expect(count(prompt, '## Server name: tools')).toBe(1);
    expect(count(prompt, '## Server name:')).toBe(3);

    const section = (server: string): string => {
      const start = prompt.indexOf(`## Server name: ${server}`);
      const next = prompt.indexOf('## Server name:', start + 1);
      return prompt.slice(start, next === -1 ? undefined : next);
    };
    for (const t of TOOLS) {
      expect(count(prompt, `### Tool name: ${t.name}\n`), t.name).toBe(1);
      expect(section(t.server ?? 'tools')).toContain(`### Tool name: ${t.name}\n`);
    }
    expect(section('corpus')).not.toContain('browse_page');
  });

  it('gives every tool its input schema as one JSON line, and its description when it has one', () => {
    expect(count(prompt, 'Input JSON schema: ')).toBe(TOOLS.length);
    for (const t of TOOLS) {
      const line = prompt.split('\n').find((l) => l.startsWith('Input JSON schema: ') && l.includes(JSON.stringify(t.inputSchema)));
      expect(line, t.name).toBeDefined();
      expect(JSON.parse(line!.slice('Input JSON schema: '.length))).toEqual(t.inputSchema);
    }
    // A description is text: its braces are not placeholders.
    expect(prompt).toContain('Description: Search PubMed abstracts for {query} terms.');
    expect(prompt).toContain('Description: Fetch one web page.');
    expect(count(prompt, 'Description:')).toBe(3);
  });

  it('holds the format instructions and fills the {tools} slot', () => {
    for (const tag of ['<use_mcp_tool>', '</use_mcp_tool>', '<server_name>', '<tool_name>', '<arguments>', '\\boxed{}']) expect(prompt).toContain(tag);
    expect(prompt).not.toContain('{tools}');
    // The instructions come first, then the listing.
    expect(prompt.indexOf('<use_mcp_tool>')).toBeLessThan(prompt.indexOf('## Server name:'));
    expect(mcpXml.systemPrompt(TOOLS)).toBe(prompt);
  });

  it('says so when there are no tools', () => {
    const none = systemPrompt([]);
    expect(none).not.toContain('## Server name:');
    expect(none).not.toContain('{tools}');
    expect(none).toContain('no tools');
  });
});

describe('mcpXml.renderCall', () => {
  it('writes a call that repairTurn reads back as the same tool, server and arguments', () => {
    const args = { query: 'aspirin "low dose" <b> & stroke', limit: 3, filters: { year: [2019, 2024] } };
    const call: ParsedCall = { toolName: 'pubmed_search', attributes: { server_name: 'corpus' }, query: '', arguments: args };
    const text = renderCall(call);
    expect(text.startsWith('<use_mcp_tool>')).toBe(true);
    expect(text.endsWith('</use_mcp_tool>')).toBe(true);
    const r = repairTurn(text, 'stop');
    expect(r.repairs).toEqual([]);
    expect(r.text).toBe(text);
    const back = theCall(r);
    expect(back.toolName).toBe('pubmed_search');
    expect(back.attributes).toEqual({ server_name: 'corpus' });
    expect(JSON.parse(back.query)).toEqual(args);
    // And the whole-trajectory parser agrees.
    const segs = mcpXml.parseTrajectory(text).segments;
    expect(segs.map((s) => s.kind)).toEqual(['call']);
  });

  it('keeps arguments as written when they were never parsed', () => {
    const text = renderCall({ toolName: 'browse_page', attributes: { server_name: 'browser' }, query: '  {"url": "https://x.org"}  ' });
    expect(theCall(repairTurn(text, 'stop')).query).toBe('{"url": "https://x.org"}');
  });
});

describe('mcpXml.bindCall', () => {
  it("repairs {'query': 'x',} arguments and the re-rendered call is canonical", () => {
    const raw = "<think>Search.</think>\n<use_mcp_tool>\n<server_name>corpus</server_name>\n<tool_name>pubmed_search</tool_name>\n<arguments>\n{'query': 'x',}\n</arguments>\n</use_mcp_tool>";
    const r = repairTurn(raw, 'stop');
    const b = mcpXml.bindCall!(theCall(r), TOOLS);
    expect(b.error).toBeUndefined();
    expect(b.changed).toBe(true);
    expect(b.repairs.map((x) => x.kind)).toEqual(['repaired_arguments']);
    expect(b.call.arguments).toEqual({ query: 'x' });
    const canonical = '<use_mcp_tool>\n<server_name>corpus</server_name>\n<tool_name>pubmed_search</tool_name>\n<arguments>\n{"query":"x"}\n</arguments>\n</use_mcp_tool>';
    expect(mcpXml.renderCall!(b.call)).toBe(canonical);
    // Bound again, the canonical call needs nothing.
    const again = mcpXml.bindCall!(theCall(repairTurn(canonical, 'stop')), TOOLS);
    expect(again.repairs).toEqual([]);
    expect(again.changed).toBe(false);
  });

  it('corrects a misspelled tool on the wrong server, and the re-render names both right', () => {
    const raw = '<use_mcp_tool>\n<server_name>corpus</server_name>\n<tool_name>Browse-Page</tool_name>\n<arguments>\n{"url": "https://x.org"}\n</arguments>\n</use_mcp_tool>';
    const b = mcpXml.bindCall!(theCall(repairTurn(raw, 'stop')), TOOLS);
    expect(b.repairs.map((x) => x.kind)).toEqual(['corrected_name', 'corrected_name']);
    const back = theCall(repairTurn(mcpXml.renderCall!(b.call), 'stop'));
    expect(back.toolName).toBe('browse_page');
    expect(back.attributes.server_name).toBe('browser');
  });

  it('reports arguments that are not JSON even after repair', () => {
    const raw = '<use_mcp_tool>\n<server_name>corpus</server_name>\n<tool_name>pubmed_search</tool_name>\n<arguments>\n{{{\n</arguments>\n</use_mcp_tool>';
    const b = mcpXml.bindCall!(theCall(repairTurn(raw, 'stop')), TOOLS);
    expect(b.error).toBeTypeOf('string');
  });
});

describe('mcpXml.repairTurn callOffset', () => {
  const call = '<use_mcp_tool>\n<server_name>corpus</server_name>\n<tool_name>pubmed_search</tool_name>\n<arguments>\n{"query": "x"}\n</arguments>\n</use_mcp_tool>';

  it('points at <use_mcp_tool>, with think and prose before it', () => {
    const prefix = '<think>Plan the search.</think>\nI will search PubMed.\n';
    const r = repairTurn(prefix + call, 'stop');
    expect(r.callOffset).toBe(prefix.length);
    expect(r.text.slice(0, r.callOffset)).toBe(prefix);
    expect(r.text.slice(r.callOffset).startsWith('<use_mcp_tool')).toBe(true);
  });

  it('still points at the call after an open think was closed before it', () => {
    const r = repairTurn(`<think>Plan the search, and then ${call}`, 'stop');
    expect(r.repairs.map((x) => x.kind)).toContain('noncanonical_syntax');
    expect(r.text.slice(r.callOffset).startsWith('<use_mcp_tool')).toBe(true);
    expect(r.text.slice(0, r.callOffset)).toContain('</think>');
  });

  it('points at a call the server cut at the stop string, once it is closed again', () => {
    const cut = call.slice(0, call.indexOf('</use_mcp_tool>'));
    const r = repairTurn(`Searching.\n${cut}`, 'stop');
    expect(r.repairs).toEqual([]);
    expect(r.text.slice(r.callOffset).startsWith('<use_mcp_tool')).toBe(true);
    expect(r.text.endsWith('</use_mcp_tool>')).toBe(true);
  });

  it('is absent for an answer', () => {
    const r = repairTurn('So the answer is \\boxed{42}.', 'stop');
    expect(r.action).toEqual({ kind: 'answer', answer: '42' });
    expect(r.callOffset).toBeUndefined();
  });
});
