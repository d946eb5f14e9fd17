import { afterEach, describe, expect, it } from 'vitest';
import { EndpointConfig } from '../../../schemas/index.js';
import { LlmClient, LlmError, retryAfterMs } from '../../../pipeline/core/llm/llm.js';
import { startSim, type Sim } from '../../../sim/server.js';
import { loopbackServer } from '../../faults/util.js';

const STOP = ['</call_tool>', '</answer>'];
const messages = [
  { role: 'system' as const, content: 'You have the tool pubmed_search.' },
  { role: 'user' as const, content: 'In which version of Firefox was the CSS property grid first supported?' },
];
let sim: Sim | undefined;
afterEach(async () => {
  await sim?.close();
  sim = undefined;
  LlmClient.resetStopMemory();
});
function client(url: string, patch: Partial<EndpointConfig> = {}, maxConcurrency?: number) {
  return new LlmClient(EndpointConfig.parse({ base_url: url, model: 'trajforge-sim', retry_base_ms: 10, retry_max_ms: 50, ...patch }), { apiKey: 'EMPTY', maxConcurrency });
}

describe('llm', () => {
  for (const stream of [true, false]) {
    it(`gets a turn cut at the stop string (stream: ${stream}), with usage`, async () => {
      sim = await startSim({ port: 0, seed: 1 });
      const c = await client(sim.url, { stream }).complete({ messages, stop: STOP });
      expect(c.text).toContain('<call_tool name="pubmed_search"');
      expect(c.text).not.toContain('</call_tool>');
      expect(c.finishReason).toBe('stop');
      expect(c.clientStop).toBe(false);
      expect(c.promptTokens).toBeGreaterThan(0);
      expect(c.completionTokens).toBeGreaterThan(0);
    });
  }

  it('native: parallel tool_calls arrive whole, streaming and not; calls and call ids go back on the wire', async () => {
    sim = await startSim({ port: 0, seed: 2, misbehave: { multiple_calls: 1 } });
    const tools = [{ type: 'function', function: { name: 'pubmed_search', description: 'Search.', parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } } }];
    const [a, b] = await Promise.all([true, false].map((stream) => client(sim!.url, { stream, seed: 5 }).complete({ messages, stop: [], tools })));
    for (const c of [a!, b!]) {
      expect(c.toolCalls.length).toBeGreaterThanOrEqual(2);
      for (const call of c.toolCalls) {
        expect(call.function.name).toBe('pubmed_search');
        expect(JSON.parse(call.function.arguments).query).toEqual(expect.any(String));
        expect(call.id).not.toBe('');
      }
    }
    // Distinct ids within a turn: each tool message answers one call.
    for (const c of [a!, b!]) expect(new Set(c.toolCalls.map((t) => t.id)).size).toBe(c.toolCalls.length);
    // The history goes back with the calls and the ids; the sim answers only a well-formed one.
    const next = await client(sim.url, { stream: true }).complete({
      messages: [
        ...messages,
        { role: 'assistant', content: '', tool_calls: [...a!.toolCalls] },
        ...a!.toolCalls.map((c) => ({ role: 'tool' as const, tool_call_id: c.id, content: '<tool_output>\n<snippet id="s1">Title: Grid\nFirefox 52 supports grid.</snippet>\n</tool_output>' })),
      ],
      stop: [],
      tools,
    });
    expect(next.toolCalls.length + next.text.length).toBeGreaterThan(0);
  });

  it('cuts at the stop string itself when the server ignores it', async () => {
    sim = await startSim({ port: 0, seed: 1, misbehave: { ignore_stop: 1 } });
    for (const stream of [true, false]) {
      const c = await client(sim.url, { stream }).complete({ messages, stop: STOP });
      expect(c.clientStop).toBe(true);
      expect(c.text).not.toContain('</call_tool>');
      expect(c.finishReason).toBe('stop');
    }
  });

  it('drops stop for a model that rejects it, remembers that, and enforces stop on the client', async () => {
    sim = await startSim({ port: 0, seed: 1, rejectStop: true });
    const llm = client(sim.url);
    const c = await llm.complete({ messages, stop: STOP });
    expect(c.text).not.toContain('</call_tool>');
    expect(c.attempts).toBe(2);
    expect(llm.stats().stopRejectedModels).toEqual(['trajforge-sim']);
    const again = await llm.complete({ messages, stop: STOP });
    expect(again.attempts).toBe(1);
    expect(sim.stats().responsesByStatus['400']).toBe(1);
  });

  describe('stream: auto (the default)', () => {
    it('takes whole bodies while the endpoint applies stop', async () => {
      sim = await startSim({ port: 0, seed: 1 });
      const llm = client(sim.url);
      for (let i = 0; i < 3; i++) expect((await llm.complete({ messages, stop: STOP })).finishReason).toBe('stop');
      expect(sim.stats()).toMatchObject({ chatRequests: 3, streamedRequests: 0 });
      expect(llm.stats().streamedModels).toEqual([]);
    });

    it('streams a model from the first answer that ran past a stop string', async () => {
      sim = await startSim({ port: 0, seed: 1, misbehave: { ignore_stop: 1 } });
      const llm = client(sim.url);
      const first = await llm.complete({ messages, stop: STOP });
      expect(first.clientStop).toBe(true);
      expect(sim.stats().streamedRequests).toBe(0);
      await llm.complete({ messages, stop: STOP });
      expect(sim.stats()).toMatchObject({ chatRequests: 2, streamedRequests: 1 });
      expect(llm.stats().streamedModels).toEqual([{ model: 'trajforge-sim', why: 'it answered past a stop string' }]);
    });

    it('streams a model that rejects stop, and one that looped, from then on', async () => {
      sim = await startSim({ port: 0, seed: 1, rejectStop: true });
      const a = client(sim.url);
      await a.complete({ messages, stop: STOP });
      // The rejected request and its retry without stop: the retry already streams.
      expect(sim.stats()).toMatchObject({ chatRequests: 2, streamedRequests: 1 });
      expect(a.stats().streamedModels).toEqual([{ model: 'trajforge-sim', why: 'it rejects stop' }]);
      await sim.close();
      LlmClient.resetStopMemory();

      sim = await startSim({ port: 0, seed: 1, misbehave: { repetition: 1 } });
      const b = client(sim.url, { max_tokens: 600, repetition_retries: 1 });
      const looped = await b.complete({ messages, stop: STOP });
      expect(looped.repetitionCut).toBe(true);
      // The first answer came whole and showed the loop; the resample streamed.
      expect(sim.stats()).toMatchObject({ chatRequests: 2, streamedRequests: 1 });
      expect(b.stats().streamedModels).toEqual([{ model: 'trajforge-sim', why: 'it looped' }]);
    });

    it('is not used when stream is set: true always streams, false never does', async () => {
      sim = await startSim({ port: 0, seed: 1, misbehave: { ignore_stop: 1 } });
      for (const stream of [false, true]) {
        const llm = client(sim.url, { stream });
        await llm.complete({ messages, stop: STOP });
        await llm.complete({ messages, stop: STOP });
        expect(llm.stats().streamedModels).toEqual([]);
      }
      expect(sim.stats()).toMatchObject({ chatRequests: 4, streamedRequests: 2 });
    });
  });

  it('honours Retry-After on 429 and lowers its concurrency', async () => {
    sim = await startSim({ port: 0, seed: 1, misbehave: { rate_limit: 0.5 }, retryAfterMs: 200 });
    // retry_max_ms above the 200 ms asked for: the wait is the endpoint's.
    const llm = client(sim.url, { max_retries: 20, retry_max_ms: 1000 }, 8);
    const started = Date.now();
    let rateLimited = 0;
    for (let i = 0; i < 6; i++) {
      await llm.complete({ messages: [...messages, { role: 'user', content: `try ${i}` }], stop: STOP });
      rateLimited = llm.stats().rateLimited;
    }
    expect(rateLimited).toBeGreaterThan(0);
    expect(Date.now() - started).toBeGreaterThanOrEqual(200 * rateLimited * 0.9);
    expect(llm.stats().concurrencyLimit).toBeLessThan(8);
  });

  it('retries 500s, and gives up after max_retries with the server message', async () => {
    sim = await startSim({ port: 0, seed: 1, misbehave: { server_error: 1 } });
    const err = await client(sim.url, { max_retries: 2 }).complete({ messages, stop: STOP }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LlmError);
    expect((err as LlmError).kind).toBe('exhausted');
    expect(sim.stats().responsesByStatus['500']).toBe(3);
  });

  it('retries an error event inside a 200 stream like a 5xx; a context-length one is not retried', async () => {
    let requests = 0;
    const server = await loopbackServer((_req, res) => {
      requests++;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const event = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`;
      if (requests === 1) res.end(event({ error: { message: 'upstream provider failed', type: 'server_error' } }));
      else if (requests === 2) res.end(event({ choices: [{ index: 0, delta: { content: 'fine' }, finish_reason: 'stop' }] }) + 'data: [DONE]\n\n');
      else res.end(event({ error: { message: "This model's maximum context length is 8192 tokens", code: 'context_length_exceeded' } }));
    });
    try {
      const c = await client(server.url, { stream: true }).complete({ messages, stop: STOP });
      expect(c.text).toBe('fine');
      expect(c.attempts).toBe(2);
      const err = await client(server.url, { stream: true }).complete({ messages, stop: STOP }).catch((e: unknown) => e);
      expect((err as LlmError).kind).toBe('context_overflow');
      expect(requests).toBe(3);
    } finally {
      await server.close();
    }
  });

  it('times out a stalled request and retries it', async () => {
    sim = await startSim({ port: 0, seed: 1, misbehave: { stall: 1 }, stallMs: 5_000 });
    const err = await client(sim.url, { timeout_ms: 200, max_retries: 1 }).complete({ messages, stop: STOP }).catch((e: unknown) => e);
    expect((err as LlmError).kind).toBe('exhausted');
    expect((err as Error).message).toMatch(/no response within 200 ms/);
  });

  it('retries a length cut with more max_tokens, a bounded number of times', async () => {
    sim = await startSim({ port: 0, seed: 1 });
    const c = await client(sim.url, { max_tokens: 3, length_retries: 2 }).complete({ messages, stop: STOP });
    expect(c.attempts).toBe(3);
    expect(c.finishReason).toBe('length');
  });

  describe('answers in the shapes servers send', () => {
    const event = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`;

    it('whole: content parts, both reasoning fields, object arguments, names that are numbers or nothing, usage as strings or junk', async () => {
      const server = await loopbackServer((_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            choices: [
              {
                message: {
                  content: [{ type: 'text', text: 'Searching ' }, { type: 'image_url', image_url: { url: 'x' } }, { type: 'text', text: 'now.' }],
                  reasoning: 'Think first.',
                  reasoning_content: 'Think first.',
                  tool_calls: [
                    { id: 7, function: { name: 42, arguments: { query: 'grid' } } },
                    { type: 'function', function: { name: { nested: true }, arguments: null } },
                    { type: 'custom', custom: { name: 'x' } },
                  ],
                },
                finish_reason: 'tool_calls',
              },
            ],
            usage: { prompt_tokens: '120', completion_tokens: 'n/a' },
          }),
        );
      });
      try {
        const c = await client(server.url, { stream: false }).complete({ messages, stop: [] });
        expect(c.text).toBe('<think>Think first.</think>\nSearching now.');
        expect(c.toolCalls).toEqual([
          { id: 'call_0', type: 'function', function: { name: '42', arguments: '{"query":"grid"}' } },
          { id: 'call_1', type: 'function', function: { name: '', arguments: '' } },
        ]);
        expect(c.promptTokens).toBe(120);
        // A count that is not one is estimated, and says so.
        expect(c.completionTokens).toBeGreaterThan(0);
        expect(c.estimated).toBe(true);
        expect(c.attempts).toBe(1);
      } finally {
        await server.close();
      }
    });

    it('streamed: reasoning in `reasoning`, Mistral thinking parts, an absurd call index, arguments as an object, usage as strings', async () => {
      const server = await loopbackServer((_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const delta = (d: unknown, finish: string | null = null) => event({ choices: [{ index: 0, delta: d, finish_reason: finish }] });
        res.end(
          delta({ reasoning: 'Plan ' }) +
            delta({ content: [{ type: 'thinking', thinking: [{ type: 'text', text: 'more.' }] }] }) +
            delta({ content: [{ type: 'text', text: 'Calling.' }] }) +
            delta({ tool_calls: [{ index: 1e9, id: 'c1', function: { name: 'pubmed_search', arguments: { query: 'grid' } } }] }) +
            delta({}, 'tool_calls') +
            event({ choices: [], usage: { prompt_tokens: '11', completion_tokens: '7' } }) +
            'data: [DONE]\n\n',
        );
      });
      try {
        const t0 = performance.now();
        const c = await client(server.url, { stream: true }).complete({ messages, stop: [] });
        expect(performance.now() - t0).toBeLessThan(1000);
        expect(c.text).toBe('<think>Plan more.</think>\nCalling.');
        expect(c.toolCalls).toEqual([{ id: 'c1', type: 'function', function: { name: 'pubmed_search', arguments: '{"query":"grid"}' } }]);
        expect([c.promptTokens, c.completionTokens, c.estimated]).toEqual([11, 7, false]);
      } finally {
        await server.close();
      }
    });

    it('reads cached prompt tokens from usage.prompt_tokens_details, whole and streamed; junk or more than the prompt is no count or capped', async () => {
      const bodies: unknown[] = [
        { prompt_tokens: 100, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 64 } },
        { prompt_tokens: 100, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 900 } },
        { prompt_tokens: 100, completion_tokens: 5, prompt_tokens_details: { cached_tokens: -3 } },
        { prompt_tokens: 100, completion_tokens: 5, prompt_tokens_details: null },
      ];
      let next = 0;
      const server = await loopbackServer((_req, res, body) => {
        const usage = bodies[next++ % bodies.length];
        if (JSON.parse(body).stream === true) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.end(event({ choices: [{ index: 0, delta: { content: 'ok' }, finish_reason: 'stop' }] }) + event({ choices: [], usage }) + 'data: [DONE]\n\n');
        } else {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ choices: [{ message: { content: 'ok' }, finish_reason: 'stop' }], usage }));
        }
      });
      try {
        for (const stream of [false, true]) {
          const got: (number | undefined)[] = [];
          for (let i = 0; i < bodies.length; i++) got.push((await client(server.url, { stream }).complete({ messages, stop: [] })).cachedTokens);
          expect(got, `stream: ${stream}`).toEqual([64, 100, undefined, undefined]);
        }
      } finally {
        await server.close();
      }
    });

    it('flags a completion far past the max_tokens it was sent with', async () => {
      const server = await loopbackServer((_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ choices: [{ message: { content: 'long' }, finish_reason: 'stop' }], usage: { prompt_tokens: 5, completion_tokens: 5000 } }));
      });
      try {
        const llm = client(server.url, { stream: false, max_tokens: 100 });
        const c = await llm.complete({ messages, stop: [] });
        expect(c.pastMaxTokens).toEqual({ completionTokens: 5000, maxTokens: 100 });
        expect(llm.stats().pastMaxTokens).toBe(1);
      } finally {
        await server.close();
      }
    });

    it('sends the reasoning back only in the field asked for; a think in the content leaves it', async () => {
      const bodies: { messages: Record<string, unknown>[] }[] = [];
      const server = await loopbackServer((_req, res, body) => {
        bodies.push(JSON.parse(body));
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ choices: [{ message: { content: 'ok', reasoning_content: 'R' }, finish_reason: 'stop' }] }));
      });
      const history = [
        ...messages,
        { role: 'assistant' as const, content: '', reasoning_content: 'Native thinking.', tool_calls: [{ id: 'c1', type: 'function' as const, function: { name: 'pubmed_search', arguments: '{}' } }] },
        { role: 'tool' as const, content: 'result', tool_call_id: 'c1' },
        { role: 'assistant' as const, content: '<think>Text thinking.</think>\n<call_tool name="pubmed_search">grid</call_tool>' },
        { role: 'user' as const, content: '<tool_output>…</tool_output>' },
      ];
      try {
        await client(server.url, { stream: false }).complete({ messages: history, stop: [] });
        await client(server.url, { stream: false, send_reasoning: 'reasoning' }).complete({ messages: history, stop: [] });
        // auto: the field the endpoint answered in (the first request above taught it reasoning_content).
        await client(server.url, { stream: false, send_reasoning: 'auto' }).complete({ messages: history, stop: [] });
        const [none, named, auto] = bodies.map((b) => b.messages.filter((m) => m.role === 'assistant'));
        expect(none).toEqual([
          { role: 'assistant', content: null, tool_calls: history[2]!.tool_calls },
          { role: 'assistant', content: history[4]!.content },
        ]);
        expect(named).toEqual([
          { role: 'assistant', content: null, reasoning: 'Native thinking.', tool_calls: history[2]!.tool_calls },
          { role: 'assistant', content: '<call_tool name="pubmed_search">grid</call_tool>', reasoning: 'Text thinking.' },
        ]);
        expect(auto!.map((m) => m.reasoning_content)).toEqual(['Native thinking.', 'Text thinking.']);
      } finally {
        await server.close();
      }
    });
  });

  it('reads Retry-After as seconds, as a date, and retry-after-ms', () => {
    expect(retryAfterMs({ 'retry-after': '2' })).toBe(2000);
    expect(retryAfterMs({ 'retry-after-ms': '150' })).toBe(150);
    const inAMinute = new Date(Date.now() + 60_000).toUTCString();
    expect(retryAfterMs({ 'retry-after': inAMinute })).toBeGreaterThan(50_000);
    expect(retryAfterMs({})).toBeUndefined();
  });
});

describe('AdaptiveGate', () => {
  it('hands a freed slot to the request that waited longest, never to one arriving meanwhile (first come, first served)', async () => {
    const { AdaptiveGate } = await import('../../../pipeline/core/llm/llm.js');
    const gate = new AdaptiveGate(1);
    const order: string[] = [];
    await gate.acquire();
    const b = gate.acquire().then(() => order.push('b'));
    // The slot is freed, and at once another request asks for one: the waiting one gets it.
    gate.release();
    const c = gate.acquire().then(() => order.push('c'));
    await new Promise((r) => setTimeout(r, 0));
    expect(order).toEqual(['b']);
    await b;
    gate.release();
    await c;
    expect(order).toEqual(['b', 'c']);
    gate.release();
  });

  it('after a 429 halves the limit, hands slots over only below it, and again as successes raise it', async () => {
    const { AdaptiveGate } = await import('../../../pipeline/core/llm/llm.js');
    const gate = new AdaptiveGate(4);
    for (let i = 0; i < 4; i++) await gate.acquire();
    gate.rateLimited();
    expect(gate.limit).toBe(2);
    let admitted = 0;
    const waiting = [gate.acquire(), gate.acquire()].map((p) => p.then(() => admitted++));
    gate.release();
    gate.release();
    await new Promise((r) => setTimeout(r, 0));
    // 2 in flight, the limit: nobody is let in yet.
    expect(admitted).toBe(0);
    gate.release();
    await new Promise((r) => setTimeout(r, 0));
    expect(admitted).toBe(1);
    for (let i = 0; i < 20; i++) gate.succeeded();
    expect(gate.limit).toBe(3);
    await Promise.all(waiting);
    expect(admitted).toBe(2);
  });
});
