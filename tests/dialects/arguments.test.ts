/**
 * What the two JSON dialects share: lenient JSON arguments, and tool and server names matched
 * to the one tool the model can have meant.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bindJsonCall, closingBrace, matchName, parseJsonArguments } from '../../pipeline/dialects/arguments.js';
import { mcpXml } from '../../pipeline/dialects/mcp-xml.js';
import type { ParsedCall, ToolSpec } from '../../pipeline/dialects/types.js';

const schema = (param: string): Record<string, unknown> => ({ type: 'object', properties: { [param]: { type: 'string' } }, required: [param] });

const TOOLS: readonly ToolSpec[] = [
  { name: 'pubmed_search', description: 'Search PubMed abstracts', inputSchema: schema('query'), server: 'corpus' },
  { name: 'semantic_scholar_search', description: 'Search Semantic Scholar', inputSchema: schema('query'), server: 'corpus' },
  { name: 'browse_page', description: 'Fetch a web page', inputSchema: schema('url'), server: 'browser' },
];

function call(toolName: string, query: string, attributes: Record<string, string> = {}): ParsedCall {
  return { toolName, attributes, query };
}

function value(text: string): { value: Record<string, unknown>; repaired: boolean } {
  const r = parseJsonArguments(text);
  if ('error' in r) throw new Error(`expected a value for ${JSON.stringify(text)}, got error ${r.error}`);
  return { value: r.value, repaired: r.repaired };
}

describe('parseJsonArguments', () => {
  it('parses strict JSON as written, without marking it repaired', () => {
    expect(value('{"query": "aspirin stroke", "limit": 5, "open": true}')).toEqual({
      value: { query: 'aspirin stroke', limit: 5, open: true },
      repaired: false,
    });
    expect(value('  {"nested": {"a": [1, 2]}}\n')).toEqual({ value: { nested: { a: [1, 2] } }, repaired: false });
  });

  it.each([
    ['single quotes', "{'query': 'aspirin', 'limit': 3}", { query: 'aspirin', limit: 3 }],
    ['a trailing comma', '{"query": "aspirin", "limit": 3,}', { query: 'aspirin', limit: 3 }],
    ['unquoted keys', '{query: "aspirin", limit: 3}', { query: 'aspirin', limit: 3 }],
    ['a missing closing brace (a length cut)', '{"query": "aspirin", "limit": 3', { query: 'aspirin', limit: 3 }],
    ['all of them at once', "{query: 'aspirin',", { query: 'aspirin' }],
  ])('repairs %s and says so', (_what, text, expected) => {
    expect(value(text)).toEqual({ value: expected, repaired: true });
  });

  it.each([
    ['an array', '[1, 2, 3]'],
    ['a string', '"aspirin"'],
    ['a number', '42'],
    ['null', 'null'],
    ['prose', 'search for aspirin please'],
    ['braces that repair cannot make sense of', '{{{'],
    ['two objects', '{"a": 1} {"b": 2}'],
  ])('is an error for %s', (_what, text) => {
    const r = parseJsonArguments(text);
    expect('error' in r).toBe(true);
    if ('error' in r) expect(r.error).not.toBe('');
  });

  it('takes empty or blank text as no arguments', () => {
    expect(value('')).toEqual({ value: {}, repaired: false });
    expect(value('  \n\t ')).toEqual({ value: {}, repaired: false });
  });
});

describe('matchName', () => {
  const names = TOOLS.map((t) => t.name);

  it('returns an exact name as it is', () => {
    expect(matchName('pubmed_search', names)).toBe('pubmed_search');
    expect(matchName('browse_page', names)).toBe('browse_page');
  });

  it('folds case and punctuation', () => {
    expect(matchName('PubMed-Search', names)).toBe('pubmed_search');
    expect(matchName('pubmedsearch', names)).toBe('pubmed_search');
    expect(matchName('Semantic Scholar Search', names)).toBe('semantic_scholar_search');
  });

  it('corrects a name one or two edits away when only one tool is that close', () => {
    expect(matchName('pubmed_serch', names)).toBe('pubmed_search');
    expect(matchName('pubmed_seach', names)).toBe('pubmed_search');
    expect(matchName('browse_pages', names)).toBe('browse_page');
    expect(matchName('pubmd_serch', names)).toBe('pubmed_search');
    // Three edits (a swap counts two) is too far.
    expect(matchName('pubmde_serch', names)).toBeUndefined();
  });

  it('corrects nothing more than two edits away, even to the only tool there is', () => {
    // A name a server sent as a number (1013), or another tool the model made up.
    expect(matchName('1013', ['pubmed_search'])).toBeUndefined();
    expect(matchName('web_search', ['pubmed_search'])).toBeUndefined();
    expect(matchName('pubmed_serch', ['pubmed_search'])).toBe('pubmed_search');
  });

  it('gives up on a name several tools fit equally well', () => {
    expect(matchName('search_c', ['search_a', 'search_b'])).toBeUndefined();
    // Two candidates that fold to the same name: neither is the one.
    expect(matchName('web-search', ['web_search', 'WebSearch'])).toBeUndefined();
  });

  it('gives up on short names and on names nothing is close to', () => {
    expect(matchName('pm', ['pmx'])).toBeUndefined();
    expect(matchName('abc', ['abcd'])).toBeUndefined();
    expect(matchName('fetch_weather', names)).toBeUndefined();
    expect(matchName('pubmed', names)).toBeUndefined();
    // A lone candidate is no closer for being alone: a tool the model was not shown is not the one it was.
    expect(matchName('pubmed_search', ['search'])).toBeUndefined();
    expect(matchName('get-env', ['echo'])).toBeUndefined();
    expect(matchName('anything', [])).toBeUndefined();
  });
});

describe('bindJsonCall', () => {
  it('parses the arguments from the call body and changes nothing else', () => {
    const b = bindJsonCall(call('pubmed_search', '{"query": "aspirin", "limit": 2}'), TOOLS);
    expect(b.error).toBeUndefined();
    expect(b.changed).toBe(false);
    expect(b.repairs).toEqual([]);
    expect(b.call).toEqual({ toolName: 'pubmed_search', attributes: {}, query: '{"query": "aspirin", "limit": 2}', arguments: { query: 'aspirin', limit: 2 } });
  });

  it('records repaired arguments', () => {
    const b = bindJsonCall(call('pubmed_search', "{'query': 'aspirin',}"), TOOLS);
    expect(b.call.arguments).toEqual({ query: 'aspirin' });
    expect(b.changed).toBe(true);
    expect(b.repairs.map((r) => r.kind)).toEqual(['repaired_arguments']);
  });

  it('corrects a misspelled tool name and records it', () => {
    const b = bindJsonCall(call('PubMed_Serch', '{"query": "aspirin"}'), TOOLS);
    expect(b.call.toolName).toBe('pubmed_search');
    expect(b.call.arguments).toEqual({ query: 'aspirin' });
    expect(b.changed).toBe(true);
    expect(b.repairs.map((r) => r.kind)).toEqual(['corrected_name']);
    expect(b.repairs[0]!.detail).toContain('PubMed_Serch');
    expect(b.repairs[0]!.detail).toContain('pubmed_search');
  });

  it('with a server (mcp-xml): puts the tool on its real server and records the correction', () => {
    const b = bindJsonCall(call('pubmed_search', '{"query": "aspirin"}', { server_name: 'browser' }), TOOLS, 'browser');
    expect(b.call.toolName).toBe('pubmed_search');
    expect(b.call.attributes.server_name).toBe('corpus');
    expect(b.changed).toBe(true);
    expect(b.repairs.map((r) => r.kind)).toEqual(['corrected_name']);
    expect(b.repairs[0]!.detail).toContain('browser');
    expect(b.repairs[0]!.detail).toContain('corpus');
  });

  it('with the right server: no repair, and the server stays', () => {
    const b = bindJsonCall(call('browse_page', '{"url": "https://example.org"}', { server_name: 'browser' }), TOOLS, 'browser');
    expect(b.repairs).toEqual([]);
    expect(b.changed).toBe(false);
    expect(b.call.attributes).toEqual({ server_name: 'browser' });
  });

  it('mcpXml.bindCall reads the server from the call, and corrects tool and server together', () => {
    const b = mcpXml.bindCall!(call('browse_pag', '{"url": "https://example.org"}', { server_name: 'corpus' }), TOOLS);
    expect(b.call.toolName).toBe('browse_page');
    expect(b.call.attributes.server_name).toBe('browser');
    expect(b.repairs.map((r) => r.kind)).toEqual(['corrected_name', 'corrected_name']);
    expect(b.changed).toBe(true);
  });

  it('leaves a name that fits no tool as written, without a repair', () => {
    const b = bindJsonCall(call('fetch_weather', '{"city": "Oslo"}'), TOOLS);
    expect(b.call.toolName).toBe('fetch_weather');
    expect(b.call.arguments).toEqual({ city: 'Oslo' });
    expect(b.repairs).toEqual([]);
    expect(b.changed).toBe(false);
    expect(b.error).toBeUndefined();

    // And its server too: nothing to put it on.
    const x = bindJsonCall(call('fetch_weather', '{"city": "Oslo"}', { server_name: 'weather' }), TOOLS, 'weather');
    expect(x.call.attributes).toEqual({ server_name: 'weather' });
    expect(x.repairs).toEqual([]);
  });

  it('reports arguments that are not a JSON object even after repair, and keeps the call as written', () => {
    for (const query of ['{{{', '["aspirin"]', 'aspirin please']) {
      const original = call('pubmed_serch', query);
      const b = bindJsonCall(original, TOOLS);
      expect(b.error, query).toBeTypeOf('string');
      expect(b.changed).toBe(false);
      expect(b.call).toEqual(original);
      expect(b.call.arguments).toBeUndefined();
    }
  });
});

describe('closingBrace', () => {
  it('finds where any JSON object closes, whatever its strings hold, and -1 for one cut short', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.jsonValue()), fc.string(), fc.string(), (obj, before, after) => {
        const json = JSON.stringify(obj);
        const text = `${before.replace(/[{"]/g, '')}${json}${after}`;
        const start = text.length - json.length - after.length;
        expect(closingBrace(text, start)).toBe(start + json.length - 1);
        expect(closingBrace(text.slice(0, start + json.length - 1), start)).toBe(-1);
      }),
    );
  });
});
