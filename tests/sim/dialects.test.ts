import OpenAI, { APIError } from 'openai';
import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import { afterEach, describe, expect, it } from 'vitest';

import { estimateRequestTokens } from '../../pipeline/core/tokens/count.js';
import type { MisbehaviourKind } from '../../sim/misbehave.js';
import { startSim, type Sim, type SimOptions } from '../../sim/server.js';

const QUESTION = 'In which version of Firefox was the CSS property grid first supported?';
/** The sentence of OUTPUT_GRID that answers QUESTION, and the snippet that holds it. */
const ANSWER_SENTENCE = 'Firefox first supported it in version 52, released 2017-03-07.';
const ANSWER_ID = 'css.properties.grid';

const OUTPUT_FLEX =
  '<tool_output>\nFound 1 results. Showing top 1:\n' +
  '<snippet id="css.properties.flex">Title: CSS property: flex\n' +
  'The flex CSS shorthand property sets how a flex item will grow or shrink. ' +
  'Chrome first supported it in version 29, released 2013-08-20.</snippet>\n</tool_output>';
const OUTPUT_GRID =
  '<tool_output>\nFound 1 results. Showing top 1:\n' +
  '<snippet id="css.properties.grid">Title: CSS property: grid\n' +
  'The grid CSS property is a shorthand property that sets all of the explicit and implicit grid properties in a single declaration. ' +
  'Chrome first supported it in version 57, released 2017-03-09. Firefox first supported it in version 52, released 2017-03-07.</snippet>\n</tool_output>';
const SHOWN_IDS = ['css.properties.flex', 'css.properties.grid'];
/** What trajforge's "keep the last K tool results" puts in place of an older result. */
const PLACEHOLDER = '[This tool result was removed to save context; only the latest results are kept.]';

const mcpServer = (server: string, tool: string, schema: object): string =>
  `## Server name: ${server}\n### Tool name: ${tool}\nDescription: Searches.\nInput JSON schema: ${JSON.stringify(schema)}\n`;
const MCP_PREAMBLE =
  'You are a research agent. Call a tool like this, then wait for its result:\n' +
  '<use_mcp_tool>\n<server_name>server name here</server_name>\n<tool_name>tool name here</tool_name>\n' +
  '<arguments>\n{"param": "value"}\n</arguments>\n</use_mcp_tool>\nPut the final answer in \\boxed{}.\n\n';
const WEB = mcpServer('web', 'google_search', { type: 'object', properties: { num: { type: 'integer' }, q: { type: 'string' } } });
// `topic` is the first string property, `query` the first required one.
const CORPUS_SCHEMA = {
  type: 'object',
  properties: { topic: { type: 'string' }, limit: { type: 'integer' }, query: { type: 'string' } },
  required: ['limit', 'query'],
};
const MCP_SYSTEM = MCP_PREAMBLE + WEB + '\n' + mcpServer('corpus', 'pubmed_search', CORPUS_SCHEMA);
const MCP_STOP = '</use_mcp_tool>';

const TOOLS: ChatCompletionTool[] = [
  {
    type: 'function',
    function: { name: 'google_search', description: 'Search the web.', parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
  },
  {
    type: 'function',
    function: {
      name: 'pubmed_search',
      description: 'Search the literature.',
      parameters: { type: 'object', properties: { topic: { type: 'string' }, limit: { type: 'integer' }, text: { type: 'string' } }, required: ['limit', 'text'] },
    },
  },
];

const sims: Sim[] = [];
async function sim(opts: SimOptions = {}): Promise<{ sim: Sim; client: OpenAI }> {
  const s = await startSim({ port: 0, ...opts });
  sims.push(s);
  return { sim: s, client: new OpenAI({ baseURL: s.url, apiKey: 'EMPTY', maxRetries: 0 }) };
}
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

interface ToolCallOut {
  id: string;
  type: string;
  name: string;
  arguments: string;
}
interface Turn {
  reasoning: string;
  content: string;
  toolCalls: ToolCallOut[];
  finish: string | null;
}

type Body = { messages: ChatCompletionMessageParam[]; tools?: ChatCompletionTool[]; stop?: string[]; max_tokens?: number };

async function complete(client: OpenAI, body: Body): Promise<Turn> {
  const r = await client.chat.completions.create({ model: 'trajforge-sim', ...body });
  const choice = r.choices[0]!;
  const message = choice.message as typeof choice.message & { reasoning_content?: string };
  return {
    reasoning: message.reasoning_content ?? '',
    content: message.content ?? '',
    toolCalls: (message.tool_calls ?? []).map((c) => {
      if (c.type !== 'function') throw new Error(`unexpected tool call type ${c.type}`);
      return { id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments };
    }),
    finish: choice.finish_reason,
  };
}

/** Reads a stream with the OpenAI SDK, as any client of the sim would, checking each tool-call delta has OpenAI's shape. */
async function streamed(client: OpenAI, body: Body): Promise<Turn> {
  const stream = await client.chat.completions.create({ model: 'trajforge-sim', ...body, stream: true, stream_options: { include_usage: true } });
  const turn: Turn = { reasoning: '', content: '', toolCalls: [], finish: null };
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice === undefined) continue;
    const delta = choice.delta as typeof choice.delta & { reasoning_content?: string };
    turn.reasoning += delta.reasoning_content ?? '';
    turn.content += delta.content ?? '';
    for (const d of delta.tool_calls ?? []) {
      const known = turn.toolCalls[d.index];
      if (known === undefined) {
        // The first delta of a call carries its id, type and name, and no arguments yet.
        expect(d).toEqual({ index: turn.toolCalls.length, id: expect.stringMatching(/^call_/), type: 'function', function: { name: expect.any(String), arguments: '' } });
        turn.toolCalls.push({ id: d.id!, type: d.type!, name: d.function!.name!, arguments: '' });
      } else {
        expect(Object.keys(d).sort()).toEqual(['function', 'index']);
        expect(Object.keys(d.function!)).toEqual(['arguments']);
        known.arguments += d.function!.arguments!;
      }
    }
    if (choice.finish_reason) turn.finish = choice.finish_reason;
  }
  return turn;
}

interface McpCall {
  server: string;
  tool: string;
  args: string;
}
const MCP_CALL = /<use_mcp_tool>\n<server_name>([^<]*)<\/server_name>\n<tool_name>([^<]*)<\/tool_name>\n<arguments>\n([^\n]*)\n<\/arguments>\n<\/use_mcp_tool>/g;
function mcpCalls(text: string): McpCall[] {
  return [...text.matchAll(MCP_CALL)].map((m) => ({ server: m[1]!, tool: m[2]!, args: m[3]! }));
}
/** The last `\boxed{…}` and whether it closes (no nested braces in these answers). */
function box(text: string): { inner: string; closed: boolean } | null {
  const at = text.lastIndexOf('\\boxed{');
  if (at === -1) return null;
  const rest = text.slice(at + '\\boxed{'.length);
  const close = rest.indexOf('}');
  return close === -1 ? { inner: rest, closed: false } : { inner: rest.slice(0, close), closed: true };
}

/** A lenient JSON reader, as a repairer would be: single quotes, trailing commas and bare keys. */
function repairJson(text: string): unknown {
  const fixed = text
    .replace(/'((?:[^'\\]|\\.)*)'/g, (_, s: string) => JSON.stringify(s.replace(/\\'/g, "'")))
    .replace(/([{,]\s*)([A-Za-z_]\w*)\s*:/g, '$1"$2":')
    .replace(/,\s*}/g, '}');
  return JSON.parse(fixed);
}

const mcpOpening = (system = MCP_SYSTEM): ChatCompletionMessageParam[] => [
  { role: 'system', content: system },
  { role: 'user', content: QUESTION },
];
/** An mcp-xml history: each call as trajforge keeps it (stop string put back), its result a user turn. */
function mcpHistory(results: string[], queries = results.map((_, i) => `grid firefox ${i}`)): ChatCompletionMessageParam[] {
  const msgs = mcpOpening();
  results.forEach((result, i) => {
    msgs.push({
      role: 'assistant',
      content: `<use_mcp_tool>\n<server_name>corpus</server_name>\n<tool_name>pubmed_search</tool_name>\n<arguments>\n${JSON.stringify({ query: queries[i] })}\n</arguments>\n</use_mcp_tool>`,
    });
    msgs.push({ role: 'user', content: result });
  });
  return msgs;
}

const nativeOpening = (): ChatCompletionMessageParam[] => [{ role: 'user', content: QUESTION }];
/** A native history: assistant messages with tool_calls and null content, results as tool messages. */
function nativeHistory(results: string[], queries = results.map((_, i) => `grid firefox ${i}`)): ChatCompletionMessageParam[] {
  const msgs = nativeOpening();
  results.forEach((result, i) => {
    msgs.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: `call_t${i}`, type: 'function', function: { name: 'pubmed_search', arguments: JSON.stringify({ text: queries[i] }) } }],
    });
    msgs.push({ role: 'tool', tool_call_id: `call_t${i}`, content: result });
  });
  return msgs;
}

describe('mcp-xml', () => {
  it('calls the preferred tool on the server it is listed under, the query in the first required string property', async () => {
    const { client } = await sim({ seed: 1 });
    const t = await complete(client, { messages: mcpOpening(), stop: [MCP_STOP] });
    expect(t.finish).toBe('stop');
    expect(t.toolCalls).toEqual([]);
    // The stop string is cut off, as trajforge asks; it puts it back.
    expect(t.content).not.toContain(MCP_STOP);
    const whole = t.content + MCP_STOP;
    expect(whole).toMatch(/^(<think>[^<]+<\/think>\n)?<use_mcp_tool>\n/);
    const calls = mcpCalls(whole);
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ server: 'corpus', tool: 'pubmed_search' });
    const args = JSON.parse(calls[0]!.args) as Record<string, unknown>;
    expect(Object.keys(args)).toEqual(['query']);
    expect(String(args.query).split(' ')).toEqual(expect.arrayContaining(['Firefox', 'CSS', 'grid']));
  });

  it('without pubmed_search, calls the first tool listed with its first string property', async () => {
    const { client } = await sim({ seed: 1 });
    const t = await complete(client, { messages: mcpOpening(MCP_PREAMBLE + WEB), stop: [MCP_STOP] });
    const [call] = mcpCalls(t.content + MCP_STOP);
    expect(call).toMatchObject({ server: 'web', tool: 'google_search' });
    expect(Object.keys(JSON.parse(call!.args) as object)).toEqual(['q']);
  });

  it('streams the same text it sends whole', async () => {
    for (const [opts, messages] of [
      [{ seed: 7 }, mcpOpening()],
      [{ seed: 7, callsPerSample: 1 }, mcpHistory([OUTPUT_GRID])],
      [{ seed: 8, misbehave: { hallucinated_output: 1 } }, mcpOpening()],
    ] as const) {
      const whole = await complete((await sim(opts)).client, { messages: [...messages], stop: [MCP_STOP] });
      const parts = await streamed((await sim(opts)).client, { messages: [...messages], stop: [MCP_STOP] });
      expect(parts).toEqual(whole);
      expect(parts.content.length).toBeGreaterThan(0);
    }
  });

  it('answers in a box with the best sentence shown, after callsPerSample searches', async () => {
    const { client, sim: s } = await sim({ seed: 2, callsPerSample: 2 });
    const messages = mcpOpening();
    const results = [OUTPUT_FLEX, OUTPUT_GRID];
    let searches = 0;
    for (;;) {
      const t = await complete(client, { messages, stop: [MCP_STOP] });
      if (!t.content.includes('<use_mcp_tool>')) {
        expect(searches).toBe(2);
        expect(box(t.content)).toEqual({ inner: ANSWER_SENTENCE, closed: true });
        expect(t.content).not.toContain('<cite');
        break;
      }
      expect(searches).toBeLessThan(2);
      messages.push({ role: 'assistant', content: t.content + MCP_STOP }, { role: 'user', content: results[searches++]! });
    }
    expect(s.stats().requestsByDialect).toEqual({ tulu: 0, 'mcp-xml': 3, native: 0 });
  });

  it('counts searches from the calls when older results were replaced by a placeholder', async () => {
    const { client, sim: s } = await sim({ seed: 2, callsPerSample: 2 });
    const t = await complete(client, { messages: mcpHistory([PLACEHOLDER, OUTPUT_GRID]), stop: [MCP_STOP] });
    expect(t.content).not.toContain('<use_mcp_tool>');
    expect(box(t.content)?.inner).toBe(ANSWER_SENTENCE);
    const none = await complete(client, { messages: mcpHistory([PLACEHOLDER, PLACEHOLDER]), stop: [MCP_STOP] });
    expect(box(none.content)).toEqual({ inner: 'I could not find it.', closed: true });
    // One result was sent in full, then none.
    expect(s.stats().toolOutputsPerRequest).toEqual({ '1': 1, '0': 1 });
  });

  it('answers at once, in a box, when asked for a final answer', async () => {
    const { client } = await sim({ seed: 3, callsPerSample: 5 });
    const t = await complete(client, {
      messages: [...mcpHistory([OUTPUT_GRID]), { role: 'user', content: 'Stop searching and give your final answer.' }],
      stop: [MCP_STOP],
    });
    expect(t.content).not.toContain('<use_mcp_tool>');
    expect(box(t.content)?.inner).toBe(ANSWER_SENTENCE);
  });
});

describe('native', () => {
  it('calls the preferred tool with tool_calls, the query in the first required string parameter', async () => {
    let reasoned = 0;
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const { client } = await sim({ seed });
      const t = await complete(client, { messages: nativeOpening(), tools: TOOLS });
      expect(t.finish).toBe('tool_calls');
      expect(t.content).toBe('');
      expect(t.toolCalls).toHaveLength(1);
      const [call] = t.toolCalls;
      expect(call).toMatchObject({ id: expect.stringMatching(/^call_\w+$/), type: 'function', name: 'pubmed_search' });
      const args = JSON.parse(call!.arguments) as Record<string, unknown>;
      expect(Object.keys(args)).toEqual(['text']);
      expect(String(args.text)).toContain('Firefox');
      expect(t.reasoning).not.toMatch(/<\/?think>/);
      if (t.reasoning !== '') reasoned++;
    }
    // The policy thinks on some turns and not on others.
    expect(reasoned).toBeGreaterThan(0);
    expect(reasoned).toBeLessThan(6);
  });

  it('streams reasoning, content and tool-call deltas that add up to the whole response', async () => {
    for (const [opts, messages] of [
      [{ seed: 7 }, nativeOpening()],
      [{ seed: 4 }, nativeOpening()],
      [{ seed: 7, callsPerSample: 1 }, nativeHistory([OUTPUT_GRID])],
      [{ seed: 8, misbehave: { multiple_calls: 1, hallucinated_output: 1 } }, nativeOpening()],
    ] as const) {
      const whole = await complete((await sim(opts)).client, { messages: [...messages], tools: TOOLS });
      const parts = await streamed((await sim(opts)).client, { messages: [...messages], tools: TOOLS });
      expect(parts).toEqual(whole);
    }
  });

  it("the SDK's own stream helper rebuilds the same message", async () => {
    const opts = { seed: 5, misbehave: { multiple_calls: 1 } };
    const whole = await complete((await sim(opts)).client, { messages: nativeOpening(), tools: TOOLS });
    const { client } = await sim(opts);
    const final = await client.chat.completions.stream({ model: 'trajforge-sim', messages: nativeOpening(), tools: TOOLS }).finalChatCompletion();
    const calls = final.choices[0]!.message.tool_calls ?? [];
    expect(calls.map((c) => (c.type === 'function' ? [c.id, c.function.name, c.function.arguments] : []))).toEqual(
      whole.toolCalls.map((c) => [c.id, c.name, c.arguments]),
    );
    expect(final.choices[0]!.finish_reason).toBe('tool_calls');
  });

  it('answers with a cited sentence after callsPerSample searches, results coming back as tool messages', async () => {
    const { client, sim: s } = await sim({ seed: 2, callsPerSample: 2 });
    const messages = nativeOpening();
    const results = [OUTPUT_FLEX, OUTPUT_GRID];
    let searches = 0;
    for (;;) {
      const t = await complete(client, { messages, tools: TOOLS });
      if (t.toolCalls.length === 0) {
        expect(searches).toBe(2);
        expect(t.finish).toBe('stop');
        expect(t.content).toContain(ANSWER_SENTENCE);
        const cited = [...t.content.matchAll(/<cite id="([^"]+)">/g)].map((m) => m[1]);
        expect(cited).toEqual([ANSWER_ID]);
        expect(t.content).not.toMatch(/<answer>|<think>/);
        break;
      }
      expect(searches).toBeLessThan(2);
      const [call] = t.toolCalls;
      messages.push(
        { role: 'assistant', content: null, tool_calls: [{ id: call!.id, type: 'function', function: { name: call!.name, arguments: call!.arguments } }] },
        { role: 'tool', tool_call_id: call!.id, content: results[searches++]! },
      );
    }
    expect(s.stats().requestsByDialect).toEqual({ tulu: 0, 'mcp-xml': 0, native: 3 });
    expect(s.stats().toolOutputsPerRequest).toEqual({ '0': 1, '1': 1, '2': 1 });
  });

  it('counts searches from tool_calls when older results were replaced by a placeholder', async () => {
    const { client, sim: s } = await sim({ seed: 2, callsPerSample: 3 });
    // Two calls in one assistant message count as two searches.
    const messages: ChatCompletionMessageParam[] = [
      ...nativeOpening(),
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_a', type: 'function', function: { name: 'pubmed_search', arguments: '{"text":"grid"}' } },
          { id: 'call_b', type: 'function', function: { name: 'pubmed_search', arguments: '{"text":"grid firefox"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_a', content: PLACEHOLDER },
      { role: 'tool', tool_call_id: 'call_b', content: PLACEHOLDER },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_c', type: 'function', function: { name: 'pubmed_search', arguments: '{"text":"grid 52"}' } }] },
      { role: 'tool', tool_call_id: 'call_c', content: OUTPUT_GRID },
    ];
    const t = await complete(client, { messages, tools: TOOLS });
    expect(t.toolCalls).toEqual([]);
    expect(t.content).toContain(`<cite id="${ANSWER_ID}">`);
    expect(s.stats().toolOutputsPerRequest).toEqual({ '1': 1 });
  });

  it('an empty tools array is not native', async () => {
    const { client, sim: s } = await sim();
    await complete(client, { messages: [{ role: 'system', content: 'Use <call_tool name="pubmed_search">q</call_tool>.' }, { role: 'user', content: QUESTION }], tools: [] });
    expect(s.stats().requestsByDialect).toEqual({ tulu: 1, 'mcp-xml': 0, native: 0 });
  });
});

describe('misbehaviours in mcp-xml', () => {
  const only = (kind: MisbehaviourKind, extra: SimOptions = {}) => sim({ seed: 21, misbehave: { [kind]: 1 }, ...extra });
  const call = (client: OpenAI, system?: string) => complete(client, { messages: mcpOpening(system), stop: [MCP_STOP] });

  it('unclosed_call: a call without </use_mcp_tool>, then a blank line and more text', async () => {
    const { client, sim: s } = await only('unclosed_call');
    for (let i = 0; i < 6; i++) {
      const { content } = await call(client);
      const end = content.indexOf('</arguments>') + '</arguments>'.length;
      expect(end, content).toBeGreaterThan('</arguments>'.length);
      expect(content.slice(end, end + 2)).toBe('\n\n');
      const rest = content.slice(end + 2);
      expect(rest.startsWith('<use_mcp_tool>') || box(rest) !== null, rest).toBe(true);
    }
    expect(s.stats().misbehaviours.unclosed_call).toBe(6);
  });

  it('hallucinated_output: an invented <tool_output> and a boxed answer past the stop string', async () => {
    const { client } = await only('hallucinated_output');
    const { content } = await call(client);
    expect(content).toMatch(/<\/use_mcp_tool>\n<tool_output>\n<snippet id="fake-1">/);
    expect(box(content)?.closed).toBe(true);
  });

  it('multiple_calls: two or three closed calls with different queries', async () => {
    const { client } = await only('multiple_calls');
    const calls = mcpCalls((await call(client)).content);
    expect(calls.length).toBeGreaterThanOrEqual(2);
    expect(calls.length).toBeLessThanOrEqual(3);
    const queries = calls.map((c) => (JSON.parse(c.args) as { query: string }).query);
    expect(new Set(queries).size).toBe(calls.length);
  });

  it('no_action: prose with no call and no box', async () => {
    const { client } = await only('no_action');
    const { content } = await call(client);
    expect(content.length).toBeGreaterThan(10);
    expect(content).not.toContain('<use_mcp_tool');
    expect(content).not.toContain('\\boxed');
  });

  it('unclosed_answer: a box that never closes', async () => {
    const { client, sim: s } = await only('unclosed_answer', { callsPerSample: 1 });
    const { content } = await complete(client, { messages: mcpHistory([OUTPUT_GRID]), stop: [MCP_STOP] });
    expect(box(content)).toEqual({ inner: ANSWER_SENTENCE, closed: false });
    // A call turn has no answer to leave open.
    await call(client);
    expect(s.stats().misbehaviours.unclosed_answer).toBe(1);
  });

  it('ignore_stop: the text past </use_mcp_tool> is sent, finish_reason stop', async () => {
    const { client } = await only('ignore_stop');
    const t = await call(client);
    expect(t.finish).toBe('stop');
    expect(t.content).toMatch(/<\/use_mcp_tool>\n<tool_output>/);
  });

  it('bad_arguments: arguments a lenient parser repairs and JSON.parse refuses, drawn per request', async () => {
    const { client, sim: s } = await only('bad_arguments');
    const seen = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const [c] = mcpCalls((await call(client)).content + MCP_STOP);
      expect(() => JSON.parse(c!.args), c!.args).toThrow();
      const repaired = repairJson(c!.args) as Record<string, unknown>;
      expect(Object.keys(repaired)).toEqual(['query']);
      expect(String(repaired.query)).toContain('Firefox');
      seen.add(c!.args.replace(/Firefox[^'"]*/, ''));
    }
    expect(seen.size).toBeGreaterThan(1);
    expect(s.stats().misbehaviours.bad_arguments).toBe(8);
    // The same seed draws the same way on a fresh server.
    const again = await complete((await only('bad_arguments')).client, { messages: mcpOpening(), stop: [MCP_STOP] });
    const first = await complete((await only('bad_arguments')).client, { messages: mcpOpening(), stop: [MCP_STOP] });
    expect(again.content).toBe(first.content);
  });

  it('wrong_server: a server_name that is not listed, the tool name right; not when the name is ambiguous', async () => {
    const { client, sim: s } = await only('wrong_server');
    for (let i = 0; i < 6; i++) {
      const [c] = mcpCalls((await call(client)).content + MCP_STOP);
      expect(c!.tool).toBe('pubmed_search');
      expect(['corpus', 'web']).not.toContain(c!.server);
      // Misspelled (close to the right name) or `default`.
      expect(c!.server === 'default' || editDistance(c!.server, 'corpus') <= 2, c!.server).toBe(true);
    }
    expect(s.stats().misbehaviours.wrong_server).toBe(6);

    const ambiguous = MCP_PREAMBLE + mcpServer('corpus', 'pubmed_search', CORPUS_SCHEMA) + '\n' + mcpServer('mirror', 'pubmed_search', CORPUS_SCHEMA);
    const amb = await only('wrong_server');
    const [c] = mcpCalls((await call(amb.client, ambiguous)).content + MCP_STOP);
    expect(c!.server).toBe('corpus');
    expect(amb.sim.stats().misbehaviours.wrong_server).toBe(0);
  });

  it('refusal, length and repetition behave as in every dialect', async () => {
    const refusal = await call((await only('refusal')).client);
    expect(refusal.content).toBe("I'm sorry, but I can't help with that.");
    const whole = await call((await sim({ seed: 21 })).client);
    const cut = await call((await only('length')).client);
    expect(cut.finish).toBe('length');
    expect(cut.content.length).toBeLessThan(whole.content.length);
    expect(whole.content.startsWith(cut.content)).toBe(true);
    const loop = await complete((await only('repetition')).client, { messages: mcpOpening(), stop: [MCP_STOP], max_tokens: 50 });
    expect(loop.finish).toBe('length');
    expect(loop.content).toHaveLength(200);
  });
});

describe('misbehaviours in native', () => {
  const only = (kind: MisbehaviourKind, extra: SimOptions = {}) => sim({ seed: 21, misbehave: { [kind]: 1 }, ...extra });
  const call = (client: OpenAI) => complete(client, { messages: nativeOpening(), tools: TOOLS });

  it('unclosed_call: arguments cut before their closing brace', async () => {
    const { client, sim: s } = await only('unclosed_call');
    const t = await call(client);
    expect(t.toolCalls).toHaveLength(1);
    const args = t.toolCalls[0]!.arguments;
    expect(() => JSON.parse(args)).toThrow();
    expect(Object.keys(JSON.parse(`${args}}`) as object)).toEqual(['text']);
    expect(s.stats().misbehaviours.unclosed_call).toBe(1);
  });

  it('hallucinated_output: an invented <tool_output> in content beside the tool call', async () => {
    const { client } = await only('hallucinated_output');
    const t = await call(client);
    expect(t.toolCalls).toHaveLength(1);
    expect(t.content).toMatch(/^<tool_output>\n<snippet id="fake-1">[^]*<\/tool_output>\n/);
    expect(t.content).toContain('<cite id="fake-1">');
  });

  it('multiple_calls: two or three parallel tool calls with distinct ids and queries', async () => {
    const { client } = await only('multiple_calls');
    const t = await call(client);
    expect(t.toolCalls.length).toBeGreaterThanOrEqual(2);
    expect(t.toolCalls.length).toBeLessThanOrEqual(3);
    expect(new Set(t.toolCalls.map((c) => c.id)).size).toBe(t.toolCalls.length);
    const queries = t.toolCalls.map((c) => (JSON.parse(c.arguments) as { text: string }).text);
    expect(new Set(queries).size).toBe(t.toolCalls.length);
    expect(t.finish).toBe('tool_calls');
  });

  it('no_action: empty content and no tool calls', async () => {
    const { client, sim: s } = await only('no_action');
    const t = await call(client);
    expect(t.content).toBe('');
    expect(t.toolCalls).toEqual([]);
    expect(t.finish).toBe('stop');
    expect(s.stats().misbehaviours.no_action).toBe(1);
  });

  it('bad_arguments: arguments a lenient parser repairs and JSON.parse refuses', async () => {
    const { client, sim: s } = await only('bad_arguments');
    for (let i = 0; i < 6; i++) {
      const [c] = (await call(client)).toolCalls;
      expect(() => JSON.parse(c!.arguments), c!.arguments).toThrow();
      expect(Object.keys(repairJson(c!.arguments) as object)).toEqual(['text']);
    }
    expect(s.stats().misbehaviours.bad_arguments).toBe(6);
  });

  it('unclosed_answer and wrong_server do not fit native: nothing changes, nothing is counted', async () => {
    for (const kind of ['unclosed_answer', 'wrong_server'] as const) {
      const { client, sim: s } = await only(kind, { callsPerSample: 1 });
      const c = await call(client);
      expect(JSON.parse(c.toolCalls[0]!.arguments)).toEqual({ text: expect.stringContaining('Firefox') });
      const a = await complete(client, { messages: nativeHistory([OUTPUT_GRID]), tools: TOOLS });
      expect(a.content).toContain(`<cite id="${ANSWER_ID}">`);
      expect(s.stats().misbehaviours[kind]).toBe(0);
    }
  });

  it('refusal, length and repetition behave as in every dialect', async () => {
    const refusal = await call((await only('refusal')).client);
    expect(refusal).toMatchObject({ content: "I'm sorry, but I can't help with that.", toolCalls: [] });
    const whole = await call((await sim({ seed: 21 })).client);
    const cut = await call((await only('length')).client);
    expect(cut.finish).toBe('length');
    const flat = (t: Turn): string => t.reasoning + t.content + t.toolCalls.map((c) => c.arguments).join('');
    expect(flat(cut).length).toBeLessThan(flat(whole).length);
    expect(flat(whole).startsWith(flat(cut))).toBe(true);
    const loop = await complete((await only('repetition')).client, { messages: nativeOpening(), tools: TOOLS, max_tokens: 50 });
    expect(loop).toMatchObject({ finish: 'length', content: '', toolCalls: [] });
    expect(loop.reasoning).toHaveLength(200);
  });

  it('drop and malformed break a tool-call stream the way they break any stream', async () => {
    for (const kind of ['drop', 'malformed'] as const) {
      const { client } = await only(kind);
      await expect(streamed(client, { messages: nativeOpening(), tools: TOOLS })).rejects.toThrow();
    }
  });

  it('rate_limit answers 429 whatever the dialect', async () => {
    const { client } = await only('rate_limit');
    const err = await call(client).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).status).toBe(429);
  });
});

describe('the failure summary', () => {
  const summaryRequest = 'FAILURE SUMMARY\nThe run ended without an answer.\nFailure reason: max_turns\nReply with one JSON object.';

  const check = (content: string, queries: string[]): void => {
    const parsed = JSON.parse(content) as Record<string, unknown>;
    expect(Object.keys(parsed).sort()).toEqual(['failure_type', 'useful_findings', 'what_happened']);
    expect(parsed.failure_type).toBe('max_turns');
    expect(typeof parsed.what_happened).toBe('string');
    expect(parsed.what_happened).toMatch(new RegExp(`\\b${queries.length}\\b`));
    for (const q of queries) expect(parsed.what_happened).toContain(q);
    const findings = parsed.useful_findings as unknown[];
    expect(Array.isArray(findings)).toBe(true);
    expect(findings.every((f) => typeof f === 'string')).toBe(true);
    expect(findings.some((f) => SHOWN_IDS.some((id) => String(f).includes(id)))).toBe(true);
  };

  it('mcp-xml: one JSON object naming the searches and a snippet that was shown', async () => {
    const { client } = await sim({ seed: 4, callsPerSample: 5 });
    const queries = ['firefox grid support', 'css grid release notes'];
    const t = await complete(client, { messages: [...mcpHistory([OUTPUT_FLEX, OUTPUT_GRID], queries), { role: 'user', content: summaryRequest }], stop: [MCP_STOP] });
    check(t.content, queries);
  });

  it('native: plain content, no tool calls though tools are offered', async () => {
    const { client } = await sim({ seed: 4, callsPerSample: 5 });
    const queries = ['firefox grid support'];
    const messages = [...nativeHistory([OUTPUT_GRID], queries), { role: 'user' as const, content: summaryRequest }];
    for (const t of [await complete(client, { messages, tools: TOOLS }), await streamed(client, { messages, tools: TOOLS })]) {
      expect(t.toolCalls).toEqual([]);
      expect(t.finish).toBe('stop');
      expect(t.reasoning).toBe('');
      check(t.content, queries);
    }
  });

  it('tulu, with no reason given and nothing shown: unknown, and no findings', async () => {
    const { client } = await sim({ seed: 4 });
    const t = await complete(client, {
      messages: [
        { role: 'system', content: 'Use <call_tool name="pubmed_search">q</call_tool>.' },
        { role: 'user', content: QUESTION },
        { role: 'user', content: 'Write the FAILURE SUMMARY now.' },
      ],
      stop: ['</call_tool>'],
    });
    expect(JSON.parse(t.content)).toMatchObject({ failure_type: 'unknown', useful_findings: [] });
  });
});

describe('the context window', () => {
  async function expectWindow(body: Body, tokens: number): Promise<void> {
    const over = await (await sim({ contextWindow: tokens - 1 })).client.chat.completions.create({ model: 'trajforge-sim', ...body }).catch((e: unknown) => e);
    expect(over).toBeInstanceOf(APIError);
    const err = over as APIError;
    expect(err.status).toBe(400);
    expect(err.code).toBe('context_length_exceeded');
    expect(err.param).toBe('messages');
    expect(err.message).toContain(`maximum context length is ${tokens - 1} tokens`);
    expect(err.message).toContain(`resulted in ${tokens} tokens`);
    const r = await (await sim({ contextWindow: tokens + 20 })).client.chat.completions.create({ model: 'trajforge-sim', ...body });
    expect(r.usage?.prompt_tokens).toBe(tokens);
    expect(r.usage!.total_tokens).toBeLessThanOrEqual(tokens + 20);
  }

  it('mcp-xml: counts the prompt with estimateRequestTokens', async () => {
    const messages = mcpHistory([OUTPUT_FLEX, OUTPUT_GRID]);
    await expectWindow({ messages, stop: [MCP_STOP] }, estimateRequestTokens(messages as Parameters<typeof estimateRequestTokens>[0]));
  });

  it('native: counts the tools offered and the tool calls of the history too', async () => {
    const messages = nativeHistory([OUTPUT_FLEX, OUTPUT_GRID]);
    const tokens = estimateRequestTokens(messages as Parameters<typeof estimateRequestTokens>[0], TOOLS);
    expect(tokens).toBeGreaterThan(estimateRequestTokens(messages.map((m) => ({ content: m.content }))));
    await expectWindow({ messages, tools: TOOLS }, tokens);
  });
});

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const next = Math.min(row[j]! + 1, row[j - 1]! + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = row[j]!;
      row[j] = next;
    }
  }
  return row[b.length]!;
}
