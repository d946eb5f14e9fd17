import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

import { afterEach, beforeAll, describe, expect, it } from 'vitest';

import { estimateRequestTokens } from '../../pipeline/core/tokens/count.js';
import { MISBEHAVIOUR_KINDS, type MisbehaviourKind } from '../../sim/misbehave.js';
import { parseMisbehave, parseSimArgs } from '../../sim/cli.js';
import { startSim, type Sim, type SimOptions } from '../../sim/server.js';

const ROOT = join(import.meta.dirname, '..', '..');

const SYSTEM =
  'You are a research assistant.\nTools:\n- pubmed_search: search the literature.\n' +
  'Call a tool as <call_tool name="pubmed_search" limit="5">query</call_tool>; answer in <answer>…</answer>.';
const QUESTION = 'In which version of Firefox was the CSS property grid first supported?';
const STOPS = ['</call_tool>', '</answer>'];

const OUTPUT_FLEX =
  '<tool_output>\nFound 1 results. Showing top 1:\n' +
  '<snippet id=css.properties.flex>Title: CSS property: flex\n' +
  'The flex CSS shorthand property sets how a flex item will grow or shrink. ' +
  'Firefox first supported it in version 20, released 2013-04-02.</snippet>\n</tool_output>';
const OUTPUT_GRID =
  '<tool_output>\nFound 2 results. Showing top 2:\n' +
  '<snippet id="css.properties.grid-template-columns">Title: CSS property: grid-template-columns\n' +
  'Firefox first supported it in version 52, released 2017-03-07.</snippet>\n' +
  '<snippet id="css.properties.grid">Title: CSS property: grid\n' +
  'The grid CSS property is a shorthand property that sets all of the explicit and implicit grid properties in a single declaration. ' +
  'Chrome first supported it in version 57, released 2017-03-09. Firefox first supported it in version 52, released 2017-03-07. ' +
  'Safari first supported it in version 10.1, released 2017-03-27.</snippet>\n</tool_output>';

type Msg = { role: string; content: string };
const opening: Msg[] = [
  { role: 'system', content: SYSTEM },
  { role: 'user', content: QUESTION },
];
const afterSearches = (...outputs: string[]): Msg[] => {
  const msgs = [...opening];
  outputs.forEach((out, i) => {
    msgs.push({ role: 'assistant', content: `<call_tool name="pubmed_search" limit="5">query ${i}` });
    msgs.push({ role: 'user', content: out });
  });
  return msgs;
};

const sims: Sim[] = [];
async function sim(opts: SimOptions = {}): Promise<Sim> {
  const s = await startSim({ port: 0, ...opts });
  sims.push(s);
  return s;
}
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

interface Reply {
  status: number;
  headers: Headers;
  body: any;
}
async function post(s: Sim, body: Record<string, unknown>, init: RequestInit = {}): Promise<Reply> {
  const res = await fetch(`${s.url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'trajforge-sim', ...body }),
    ...init,
  });
  return { status: res.status, headers: res.headers, body: await res.json() };
}
async function complete(s: Sim, body: Record<string, unknown>): Promise<{ text: string; finish: string; body: any }> {
  const r = await post(s, body);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return { text: r.body.choices[0].message.content, finish: r.body.choices[0].finish_reason, body: r.body };
}

/** Reads an SSE stream to the end: the chunks' JSON and whether `[DONE]` arrived. */
async function stream(s: Sim, body: Record<string, unknown>): Promise<{ events: any[]; done: boolean; text: string }> {
  const res = await fetch(`${s.url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'trajforge-sim', ...body, stream: true }),
  });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  const raw = await res.text();
  const events: any[] = [];
  let done = false;
  for (const block of raw.split('\n\n')) {
    if (!block.startsWith('data: ')) continue;
    const data = block.slice(6);
    if (data === '[DONE]') done = true;
    else events.push(JSON.parse(data));
  }
  const text = events.map((e) => e.choices?.[0]?.delta?.content ?? '').join('');
  return { events, done, text };
}

describe('the policy', () => {
  it('searches with the content words of the question first', async () => {
    const s = await sim({ seed: 1 });
    const { text, finish } = await complete(s, { messages: opening, stop: STOPS });
    expect(finish).toBe('stop');
    const call = /<call_tool name="pubmed_search" limit="5">([^<]*)$/.exec(text);
    expect(call, text).not.toBeNull();
    const query = call![1]!.split(' ');
    expect(query).toEqual(expect.arrayContaining(['Firefox', 'CSS', 'property', 'grid']));
    for (const stop of ['In', 'which', 'version', 'of', 'was', 'the', 'first', 'supported']) expect(query).not.toContain(stop);
  });

  it('searches again until it has done callsPerSample searches, with a different query', async () => {
    const s = await sim({ seed: 1, callsPerSample: 2 });
    const first = await complete(s, { messages: opening, stop: STOPS });
    const second = await complete(s, { messages: afterSearches(OUTPUT_FLEX), stop: STOPS });
    const q1 = /limit="5">([^<]*)$/.exec(first.text)?.[1];
    const q2 = /limit="5">([^<]*)$/.exec(second.text)?.[1];
    expect(q2).toBeDefined();
    expect(q2).not.toBe(q1);
    expect(q2).toContain('Firefox');
  });

  it('answers with the best-matching sentence and cites the snippet it came from', async () => {
    const s = await sim({ seed: 2, callsPerSample: 2 });
    const { text, finish } = await complete(s, { messages: afterSearches(OUTPUT_FLEX, OUTPUT_GRID), stop: STOPS });
    expect(finish).toBe('stop');
    expect(text).toContain(
      '<answer>Firefox first supported it in version 52, released 2017-03-07. <cite id="css.properties.grid">CSS property: grid</cite>',
    );
    expect(text).not.toContain('<call_tool');
  });

  it('cites unquoted ids as it was shown them', async () => {
    const s = await sim({ callsPerSample: 1 });
    const { text } = await complete(s, {
      messages: [...opening, { role: 'user', content: OUTPUT_FLEX }],
      stop: STOPS,
    });
    expect(text).toContain('Firefox first supported it in version 20, released 2013-04-02. <cite id="css.properties.flex">');
  });

  it('answers at once when asked for a final answer, honestly when it has nothing', async () => {
    const s = await sim({ callsPerSample: 5 });
    const withEvidence = await complete(s, {
      messages: [...afterSearches(OUTPUT_GRID), { role: 'user', content: 'Now give your final answer.' }],
    });
    expect(withEvidence.text).toMatch(/<answer>Firefox first supported it in version 52.*<cite id="css.properties.grid">/);
    const without = await complete(s, {
      messages: [...opening, { role: 'user', content: 'Please write your final answer now.' }],
    });
    expect(without.text).toMatch(/<answer>I could not find it\.<\/answer>$/);
  });

  it('uses the tool the system prompt declares, or answers directly when there is none', async () => {
    const s = await sim();
    const other = await complete(s, {
      messages: [{ role: 'system', content: 'Tools: <tool name="corpus_search">…</tool>' }, { role: 'user', content: QUESTION }],
      stop: STOPS,
    });
    expect(other.text).toMatch(/<call_tool name="corpus_search">[^<]*Firefox/);
    const none = await complete(s, { messages: [{ role: 'user', content: QUESTION }] });
    expect(none.text).toMatch(/<answer>I could not find it\.<\/answer>$/);
  });
});

describe('stop strings and limits', () => {
  it('cuts at the first stop string and strips it', async () => {
    const whole = await complete(await sim({ seed: 4 }), { messages: opening });
    expect(whole.text).toContain('</call_tool>');
    // Not stopped, the model goes on to invent a tool output, as a real one does.
    expect(whole.text.indexOf('<tool_output>')).toBeGreaterThan(whole.text.indexOf('</call_tool>'));

    const asArray = await complete(await sim({ seed: 4 }), { messages: opening, stop: STOPS });
    expect(asArray.finish).toBe('stop');
    expect(asArray.body.choices[0].stop_reason).toBe('</call_tool>');
    expect(asArray.text).toBe(whole.text.slice(0, whole.text.indexOf('</call_tool>')));

    const asString = await complete(await sim({ seed: 4 }), { messages: opening, stop: '</call_tool>' });
    expect(asString.text).toBe(asArray.text);
  });

  it('refuses more than 4 stop strings like OpenAI', async () => {
    const r = await post(await sim(), { messages: opening, stop: ['a', 'b', 'c', 'd', 'e'] });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ type: 'invalid_request_error', param: 'stop', code: 'array_above_max_length' });
  });

  it('cuts at max_tokens and max_completion_tokens with finish_reason length', async () => {
    const s = await sim({ seed: 5 });
    for (const field of ['max_tokens', 'max_completion_tokens']) {
      const r = await complete(s, { messages: opening, [field]: 6 });
      expect(r.finish).toBe('length');
      expect(r.text.length).toBe(24);
      expect(r.body.usage).toEqual({ prompt_tokens: expect.any(Number), completion_tokens: 6, total_tokens: r.body.usage.prompt_tokens + 6 });
    }
  });

  it('reports usage estimated at four characters a token', async () => {
    const s = await sim();
    const r = await complete(s, { messages: opening, stop: STOPS });
    const promptChars = SYSTEM.length + QUESTION.length;
    expect(r.body.usage.prompt_tokens).toBe(Math.ceil(promptChars / 4));
    expect(r.body.usage.completion_tokens).toBe(Math.ceil(r.text.length / 4));
  });

  it('rejects prompts over the context window with context_length_exceeded, counted as the context guard counts them', async () => {
    const messages = [...opening, { role: 'user', content: 'grid template columns '.repeat(40) }];
    const tokens = estimateRequestTokens(messages);
    // Not the four-characters-a-token estimate: the window is counted with the real tokenizer.
    expect(tokens).not.toBe(Math.ceil(messages.reduce((n, m) => n + m.content.length, 0) / 4));
    const r = await post(await sim({ contextWindow: tokens - 1 }), { messages });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ type: 'invalid_request_error', code: 'context_length_exceeded', param: 'messages' });
    expect(r.body.error.message).toContain(`maximum context length is ${tokens - 1} tokens`);
    expect(r.body.error.message).toContain(`resulted in ${tokens} tokens`);
    const ok = await post(await sim({ contextWindow: tokens + 5 }), { messages });
    expect(ok.status).toBe(200);
    expect(ok.body.usage.prompt_tokens).toBe(tokens);
    expect(ok.body.choices[0].finish_reason).toBe('length');
    expect(ok.body.usage.total_tokens).toBeLessThanOrEqual(tokens + 5);
  });
});

describe('streaming', () => {
  it('reassembles to the same text as the non-streaming response for the same request and seed', async () => {
    for (const [opts, body] of [
      [{ seed: 7 }, { messages: opening, stop: STOPS }],
      [{ seed: 7, callsPerSample: 1 }, { messages: afterSearches(OUTPUT_GRID) }],
      [{ seed: 8, misbehave: { hallucinated_output: 1 } }, { messages: opening, stop: STOPS }],
    ] as const) {
      const plain = await complete(await sim(opts), body);
      const streamed = await stream(await sim(opts), { ...body, stream_options: { include_usage: true } });
      expect(streamed.done).toBe(true);
      expect(streamed.text).toBe(plain.text);
      const contentChunks = streamed.events.filter((e) => e.choices?.[0]?.delta?.content);
      expect(contentChunks.length).toBeGreaterThan(3);
      for (const c of contentChunks) expect(c.choices[0].delta.content.length).toBeLessThanOrEqual(30);
      const finals = streamed.events.filter((e) => e.choices?.[0]?.finish_reason);
      expect(finals.map((e) => e.choices[0].finish_reason)).toEqual([plain.finish]);
      const last = streamed.events[streamed.events.length - 1];
      expect(last.choices).toEqual([]);
      expect(last.usage).toEqual(plain.body.usage);
      expect(streamed.events[0].object).toBe('chat.completion.chunk');
    }
  });

  it('sends no usage chunk unless asked', async () => {
    const streamed = await stream(await sim(), { messages: opening });
    expect(streamed.events.some((e) => e.usage)).toBe(false);
    expect(streamed.done).toBe(true);
  });
});

describe('determinism', () => {
  const conversations = [opening, afterSearches(OUTPUT_FLEX), afterSearches(OUTPUT_FLEX, OUTPUT_GRID)];
  const run = async (opts: SimOptions): Promise<string[]> => {
    const s = await sim(opts);
    const out: string[] = [];
    for (const messages of conversations) {
      for (let i = 0; i < 3; i++) {
        const r = await post(s, { messages, stop: STOPS });
        out.push(`${r.status} ${r.status === 200 ? r.body.choices[0].message.content : r.body.error.code}`);
      }
    }
    return out;
  };

  it('gives the same responses on a fresh server with the same seed', async () => {
    const opts: SimOptions = { seed: 11, misbehave: parseMisbehave(['all=0.3']) };
    expect(await run(opts)).toEqual(await run(opts));
  });

  it('resamples: the same request again on the same server can differ, and so can another seed', async () => {
    const s = await sim({ seed: 11, misbehave: { length: 0.5, refusal: 0.3 } });
    const texts = new Set<string>();
    for (let i = 0; i < 10; i++) texts.add((await complete(s, { messages: opening, stop: STOPS })).text);
    expect(texts.size).toBeGreaterThan(1);
    const opts = { misbehave: parseMisbehave(['all=0.3']) };
    expect(await run({ ...opts, seed: 1 })).not.toEqual(await run({ ...opts, seed: 2 }));
  });

  it('does not depend on how concurrent requests interleave', async () => {
    const inOrder = await sim({ seed: 3, misbehave: { length: 0.5 }, latencyMs: 0 });
    const expected: string[] = [];
    for (const messages of conversations) expected.push((await complete(inOrder, { messages, stop: STOPS })).text);
    const concurrent = await sim({ seed: 3, misbehave: { length: 0.5 }, latencyMs: 30 });
    const reversed = await Promise.all([...conversations].reverse().map((messages) => complete(concurrent, { messages, stop: STOPS })));
    expect(reversed.map((r) => r.text).reverse()).toEqual(expected);
  });
});

describe('misbehaviours at rate 1', () => {
  const only = (kind: MisbehaviourKind, extra: SimOptions = {}) => sim({ seed: 21, misbehave: { [kind]: 1 }, ...extra });

  it('rate_limit: 429 with Retry-After and an OpenAI rate-limit body', async () => {
    const r = await post(await only('rate_limit'), { messages: opening });
    expect(r.status).toBe(429);
    expect(r.headers.get('retry-after')).toBe('1');
    expect(r.headers.get('retry-after-ms')).toBe('1000');
    expect(r.body.error).toMatchObject({ code: 'rate_limit_exceeded', type: 'requests' });
    const slow = await post(await only('rate_limit', { retryAfterMs: 2500 }), { messages: opening });
    expect(slow.headers.get('retry-after')).toBe('3');
    expect(slow.headers.get('retry-after-ms')).toBe('2500');
  });

  it('server_error: 500 with an error body', async () => {
    const r = await post(await only('server_error'), { messages: opening });
    expect(r.status).toBe(500);
    expect(r.body.error).toMatchObject({ type: 'server_error' });
    expect(typeof r.body.error.message).toBe('string');
  });

  it('rejectStop: 400 unsupported_parameter for any request carrying stop, fine without', async () => {
    const s = await sim({ rejectStop: true });
    const r = await post(s, { messages: opening, stop: ['</call_tool>'] });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({
      error: {
        message: "Unsupported parameter: 'stop' is not supported with this model.",
        type: 'invalid_request_error',
        param: 'stop',
        code: 'unsupported_parameter',
      },
    });
    expect((await post(s, { messages: opening })).status).toBe(200);
  });

  it('hallucinated_output: an invented <tool_output> reaches the client despite stop', async () => {
    const { text } = await complete(await only('hallucinated_output'), { messages: opening, stop: STOPS });
    expect(text).toMatch(/<\/call_tool>\n<tool_output>\n<snippet id="fake-1">/);
    expect(text).toContain('<cite id="fake-1">');
  });

  it('unclosed_call: a call without </call_tool>, then a newline and more text', async () => {
    const s = await only('unclosed_call');
    for (let i = 0; i < 6; i++) {
      const { text } = await complete(s, { messages: opening, stop: STOPS });
      const open = text.indexOf('<call_tool');
      const lineEnd = text.indexOf('\n', open);
      expect(lineEnd, text).toBeGreaterThan(open);
      expect(text.slice(open, lineEnd)).not.toContain('</call_tool>');
      expect(text.slice(lineEnd).trim()).toMatch(/^<(call_tool|answer)/);
    }
  });

  it('multiple_calls: two or three closed calls in one turn', async () => {
    const { text } = await complete(await only('multiple_calls'), { messages: opening, stop: STOPS });
    const calls = text.match(/<call_tool [^>]*>[^<]*<\/call_tool>/g) ?? [];
    expect(calls.length).toBeGreaterThanOrEqual(2);
    expect(calls.length).toBeLessThanOrEqual(3);
  });

  it('no_action: plain prose, no call, no answer', async () => {
    const { text } = await complete(await only('no_action'), { messages: opening, stop: STOPS });
    expect(text.length).toBeGreaterThan(10);
    expect(text).not.toMatch(/<call_tool|<answer>/);
  });

  it('unclosed_answer: an answer without </answer>', async () => {
    const { text } = await complete(await only('unclosed_answer', { callsPerSample: 1 }), {
      messages: afterSearches(OUTPUT_GRID),
      stop: STOPS,
    });
    expect(text).toContain('<answer>Firefox first supported it in version 52');
    expect(text).not.toContain('</answer>');
  });

  it('ignore_stop: the text past the stop string is sent, finish_reason stop', async () => {
    const r = await complete(await only('ignore_stop'), { messages: opening, stop: STOPS });
    expect(r.finish).toBe('stop');
    expect(r.text).toMatch(/<\/call_tool>\n<tool_output>/);
  });

  it('refusal: an apology and nothing else', async () => {
    const r = await complete(await only('refusal'), { messages: opening, stop: STOPS });
    expect(r.text).toBe("I'm sorry, but I can't help with that.");
  });

  it('length: cut in the middle with finish_reason length', async () => {
    const whole = await complete(await sim({ seed: 21 }), { messages: opening, stop: STOPS });
    const cut = await complete(await only('length'), { messages: opening, stop: STOPS });
    expect(cut.finish).toBe('length');
    expect(cut.text.length).toBeGreaterThan(0);
    expect(cut.text.length).toBeLessThan(whole.text.length);
    expect(whole.text.startsWith(cut.text)).toBe(true);
  });

  it('stall: waits stallMs; a client with a shorter timeout gives up; close() does not wait for it', async () => {
    const s = await only('stall', { stallMs: 300 });
    const t0 = Date.now();
    await complete(s, { messages: opening });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(290);

    const long = await only('stall', { stallMs: 60_000 });
    await expect(post(long, { messages: opening }, { signal: AbortSignal.timeout(150) })).rejects.toThrow();
    const pending = post(long, { messages: opening }).catch(() => 'failed');
    await new Promise((r) => setTimeout(r, 50));
    const t1 = Date.now();
    await long.close();
    expect(Date.now() - t1).toBeLessThan(2000);
    expect(await pending).toBe('failed');
  });

  it('drop: the connection dies before a response, or mid-stream', async () => {
    const s = await only('drop');
    await expect(post(s, { messages: opening })).rejects.toThrow();
    const res = await fetch(`${s.url}/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ messages: afterSearches(OUTPUT_GRID), stream: true }),
    });
    expect(res.status).toBe(200);
    let received = '';
    await expect(
      (async () => {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) received += Buffer.from(chunk).toString();
      })(),
    ).rejects.toThrow();
    expect(received).toContain('chat.completion.chunk');
    expect(received).not.toContain('[DONE]');
    expect(s.stats().misbehaviours.drop).toBe(2);
  });

  describe('wire shapes servers really send', () => {
    const tools = [{ type: 'function', function: { name: 'pubmed_search', description: 'Search.', parameters: { type: 'object', properties: { query: { type: 'string' } } } } }];
    const native = { messages: [{ role: 'user', content: QUESTION }], tools };

    it('object_arguments and numeric_name: a native call as an object named by a number, whole and streamed', async () => {
      const s = await sim({ seed: 21, misbehave: { object_arguments: 1, numeric_name: 1 } });
      const call = (await post(s, native)).body.choices[0].message.tool_calls[0];
      expect(call.function.name).toBe(1000 + 'pubmed_search'.length);
      expect(call.function.arguments).toEqual({ query: expect.any(String) });
      const pieces = (await stream(s, native)).events.flatMap((e) => e.choices?.[0]?.delta?.tool_calls ?? []);
      expect(pieces[0].function).toEqual({ name: 1013, arguments: { query: expect.any(String) } });
    });

    it('content_parts and string_usage: content as text parts and the reasoning as a thinking part; usage as strings', async () => {
      const s = await sim({ seed: 21, misbehave: { content_parts: 1, string_usage: 1 } });
      const r = (await post(s, { messages: opening })).body;
      expect(r.choices[0].message.content).toEqual([{ type: 'text', text: expect.stringContaining('<call_tool') }]);
      expect(r.usage.prompt_tokens).toEqual(expect.stringMatching(/^\d+$/));
      const thinking = (await post(s, native)).body.choices[0].message.content;
      expect(thinking[0]).toEqual({ type: 'thinking', thinking: [{ type: 'text', text: expect.any(String) }] });
      const streamed = await stream(s, { messages: opening, stream_options: { include_usage: true } });
      expect(streamed.events.find((e) => e.choices?.[0]?.delta?.content?.[0]?.type === 'text')).toBeDefined();
      expect(streamed.events.at(-1).usage.completion_tokens).toEqual(expect.stringMatching(/^\d+$/));
    });

    it('endless: a 200 whose body never ends, until the client goes away', async () => {
      const s = await sim({ seed: 21, misbehave: { endless: 1 } });
      for (const streamed of [false, true]) {
        const res = await fetch(`${s.url}/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: opening, stream: streamed }) });
        expect(res.status).toBe(200);
        let bytes = 0;
        for await (const piece of res.body as unknown as AsyncIterable<Uint8Array>) if ((bytes += piece.length) > 4 << 20) break;
        expect(bytes).toBeGreaterThan(4 << 20);
      }
      expect(s.stats().misbehaviours.endless).toBe(2);
    });

    it('reasoningField and reasoningParser: the reasoning in `reasoning`, `reasoning_content` or both; a text dialect think leaves the content', async () => {
      for (const field of ['reasoning', 'reasoning_content', 'both'] as const) {
        const s = await sim({ seed: 21, reasoningField: field, reasoningParser: true });
        const message = (await post(s, native)).body.choices[0].message;
        const expected = field === 'both' ? ['reasoning', 'reasoning_content'] : [field];
        for (const f of ['reasoning', 'reasoning_content']) expect(typeof message[f], `${field}: ${f}`).toBe(expected.includes(f) ? 'string' : 'undefined');
        // A fresh server draws the same turn for the same request: this time streamed.
        const again = await sim({ seed: 21, reasoningField: field, reasoningParser: true });
        const deltas = (await stream(again, native)).events.map((e) => e.choices?.[0]?.delta ?? {});
        expect(deltas.some((d) => typeof d[expected[0]!] === 'string')).toBe(true);
      }
      const parsed = (await post(await sim({ seed: 21, reasoningField: 'reasoning', reasoningParser: true }), { messages: opening })).body.choices[0].message;
      const plain = (await post(await sim({ seed: 21 }), { messages: opening })).body.choices[0].message;
      expect(plain.content.startsWith('<think>')).toBe(true);
      expect(parsed.content).toBe(plain.content.slice(plain.content.indexOf('</think>') + 9));
      expect(`<think>${parsed.reasoning}</think>`).toBe(plain.content.slice(0, plain.content.indexOf('</think>') + 8));
    });

    it('rejectMaxTokens and contentFilter: the 400s OpenAI and Azure send; counts of what came back', async () => {
      const s = await sim({ seed: 21, rejectMaxTokens: true, contentFilter: 'FORBIDDEN' });
      const no = await post(s, { messages: opening, max_tokens: 10 });
      expect(no.status).toBe(400);
      expect(no.body.error).toMatchObject({ param: 'max_tokens', code: 'unsupported_parameter', message: expect.stringContaining("Use 'max_completion_tokens' instead") });
      expect((await post(s, { messages: opening, max_completion_tokens: 200 })).status).toBe(200);
      const filtered = await post(s, { messages: [{ role: 'user', content: `${QUESTION} FORBIDDEN` }], max_completion_tokens: 10 });
      expect(filtered.status).toBe(400);
      expect(filtered.body.error).toMatchObject({ code: 'content_filter', param: 'prompt' });
      await post(s, { messages: [...opening, { role: 'assistant', content: 'x', reasoning: 'why' }, { role: 'user', content: 'go on' }] });
      expect(s.stats().requestsByMaxTokensParam).toEqual({ max_tokens: 1, max_completion_tokens: 2, none: 1 });
      expect(s.stats().reasoningSentBack).toEqual({ reasoning: 1, reasoning_content: 0 });
    });
  });

  it('all=RATE sets every kind except the transport faults (stall, drop, malformed), the wire shapes, wrong answers, the judge\'s faults, the hostile shapes and unusable reports', () => {
    const rates = parseMisbehave(['all=0.5', 'refusal=0']);
    const left = ['stall', 'drop', 'malformed', 'object_arguments', 'numeric_name', 'content_parts', 'string_usage', 'endless', 'wrong_answer', 'judge_unreadable', 'judge_quotes', 'judge_echo_key', 'deep_arguments', 'refused_report', 'empty_report'];
    for (const kind of MISBEHAVIOUR_KINDS) {
      const expected = left.includes(kind) ? undefined : kind === 'refusal' ? 0 : 0.5;
      expect(rates[kind], kind).toBe(expected);
    }
  });

  it('rejects unknown kinds and rates outside 0..1', async () => {
    expect(() => parseMisbehave(['sulk=0.1'])).toThrow(/unknown misbehaviour/);
    expect(() => parseMisbehave(['refusal=2'])).toThrow(/0 to 1/);
    await expect(startSim({ misbehave: { refusal: -1 } })).rejects.toThrow(/0 to 1/);
  });
});

describe('the endpoint', () => {
  it('lists the model it serves and, as vLLM, answers any other name with 404 and vLLM\'s NotFoundError body', async () => {
    const s = await sim();
    const models = (await (await fetch(`${s.url}/models`)).json()) as any;
    expect(models.data.map((m: { id: string }) => m.id)).toEqual(['trajforge-sim']);
    const wrong = await post(s, { model: 'trajforge-simm', messages: opening });
    expect(wrong.status).toBe(404);
    // vllm/entrypoints/openai/engine/serving.py, OpenAIServing._check_model.
    expect(wrong.body).toEqual({ error: { message: 'The model `trajforge-simm` does not exist.', type: 'NotFoundError', param: 'model', code: 404 } });
    expect((await fetch(`${s.url}/models/trajforge-simm`)).status).toBe(404);
    // No model at all is the default one, as vLLM takes it.
    expect((await complete(s, { model: undefined, messages: opening })).body.model).toBe('trajforge-sim');
    expect(s.stats().chatRequests).toBe(2);
  });

  it('serves the names it is given (--served-model-name), and lists them', async () => {
    const s = await sim({ models: ['Qwen/Qwen3-8B', 'judge'] });
    const models = (await (await fetch(`${s.url}/models`)).json()) as any;
    expect(models.data.map((m: { id: string }) => m.id)).toEqual(['Qwen/Qwen3-8B', 'judge']);
    expect((await complete(s, { model: 'judge', messages: opening })).body.model).toBe('judge');
    expect((await post(s, { model: 'trajforge-sim', messages: opening })).status).toBe(404);
  });

  it('as vLLM, takes nothing outside /v1: a base URL without it meets FastAPI\'s 404', async () => {
    const s = await sim();
    const root = s.url.replace(/\/v1$/, '');
    for (const [method, path] of [['POST', '/chat/completions'], ['GET', '/models']] as const) {
      const res = await fetch(`${root}${path}`, { method, headers: { 'content-type': 'application/json' }, ...(method === 'POST' ? { body: JSON.stringify({ messages: opening }) } : {}) });
      expect(res.status, path).toBe(404);
      expect(await res.json()).toEqual({ detail: 'Not Found' });
    }
    expect(s.stats().chatRequests).toBe(0);
  });

  it('lenient, answers any model name and paths without /v1, as before', async () => {
    const s = await sim({ lenient: true });
    const r = await complete(s, { model: 'meta-llama/whatever', messages: opening });
    expect(r.body.model).toBe('meta-llama/whatever');
    const root = s.url.replace(/\/v1$/, '');
    const res = await fetch(`${root}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'x', messages: opening }) });
    expect(res.status).toBe(200);
  });

  it('answers bad requests with OpenAI error bodies', async () => {
    const s = await sim();
    const notJson = await fetch(`${s.url}/chat/completions`, { method: 'POST', body: '{nope' });
    expect(notJson.status).toBe(400);
    expect(((await notJson.json()) as any).error.type).toBe('invalid_request_error');
    expect((await post(s, { messages: [] })).status).toBe(400);
    const missing = await fetch(`${s.url}/nowhere`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as any).error.code).toBe('unknown_url');
  });

  it('counts requests, statuses, finish reasons, misbehaviours, concurrency and tool outputs', async () => {
    const s = await sim({ seed: 2, latencyMs: 250, misbehave: { refusal: 1 } });
    await Promise.all([0, 1, 2, 3, 4].map(() => post(s, { messages: afterSearches(OUTPUT_FLEX, OUTPUT_GRID) })));
    await post(s, { messages: opening, max_tokens: 2 });
    const stats = s.stats();
    expect(stats.chatRequests).toBe(6);
    expect(stats.responsesByStatus).toEqual({ '200': 6 });
    expect(stats.completionsByFinishReason).toEqual({ stop: 5, length: 1 });
    expect(stats.misbehaviours.refusal).toBe(6);
    expect(stats.misbehaviours.length).toBe(0);
    expect(stats.peakConcurrent).toBe(5);
    expect(stats.inFlight).toBe(0);
    expect(stats.toolOutputsPerRequest).toEqual({ '0': 1, '2': 5 });
  });
});

describe('the CLI', () => {
  const entry = join(ROOT, 'dist', 'sim', 'cli-main.js');

  beforeAll(() => {
    // `npm test` builds first; when run alone, rebuild if the sources are newer than dist.
    const newest = Math.max(...readdirSync(join(ROOT, 'sim')).map((f) => statSync(join(ROOT, 'sim', f)).mtimeMs));
    if (!existsSync(entry) || statSync(entry).mtimeMs < newest) {
      spawnSync('npx', ['tsc', '-p', join(ROOT, 'tsconfig.json')], { cwd: ROOT, stdio: 'ignore' });
    }
    expect(existsSync(entry), `${entry} missing: build with npx tsc`).toBe(true);
  });

  it('prints one URL line, serves, and stops on SIGTERM', async () => {
    const child = spawn(process.execPath, [entry, '--port', '0', '--seed', '3', '--misbehave', 'rate_limit=1', '--retry-after', '0.5'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += String(d)));
    const lines = createInterface({ input: child.stdout });
    const first = await new Promise<string>((resolve, reject) => {
      lines.once('line', resolve);
      child.once('exit', (code) => reject(new Error(`exited ${code}: ${stderr}`)));
    });
    expect(first).toMatch(/^sim listening on http:\/\/127\.0\.0\.1:\d+\/v1$/);
    const url = first.slice('sim listening on '.length);
    const res = await fetch(`${url}/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: opening }) });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after-ms')).toBe('500');
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(stderr).toContain('sim stopped');
  });

  it('--help lists every misbehaviour kind; a bad flag exits non-zero', () => {
    const help = spawnSync(process.execPath, [entry, '--help'], { encoding: 'utf8' });
    expect(help.status).toBe(0);
    for (const kind of MISBEHAVIOUR_KINDS) expect(help.stdout).toMatch(new RegExp(`^  ${kind} +\\S`, 'm'));
    expect(help.stdout).toContain('all=RATE sets every kind except:');
    for (const line of [
      'the transport faults: stall, drop, malformed',
      'the wire shapes: object_arguments, numeric_name, content_parts, string_usage, endless',
      "wrong answers and the judge's faults: wrong_answer, judge_unreadable, judge_quotes, judge_echo_key",
      'hostile shapes: deep_arguments',
      "a sub-agent's unusable report: refused_report, empty_report",
    ])
      expect(help.stdout).toMatch(new RegExp(`^ {27}${line.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'));
    const bad = spawnSync(process.execPath, [entry, '--misbehave', 'sulk=1'], { encoding: 'utf8' });
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain('unknown misbehaviour');
  });

  it('parses every flag', () => {
    const parsed = parseSimArgs([
      '--port=8123', '--seed', '9', '--latency-ms', '15', '--misbehave', 'all=0.1', '--misbehave', 'stall=0.2',
      '--reject-stop', '--calls-per-sample', '3', '--context-window', '4096', '--stall-ms', '500', '--retry-after', '0.25',
      '--served-model-name', 'a/b', '--served-model-name=c', '--lenient',
    ]);
    expect(parsed.help).toBe(false);
    if (parsed.help) return;
    expect(parsed.options).toMatchObject({
      port: 8123, seed: 9, latencyMs: 15, rejectStop: true, callsPerSample: 3, contextWindow: 4096, stallMs: 500, retryAfterMs: 250,
      models: ['a/b', 'c'], lenient: true,
    });
    expect(parsed.options.misbehave).toMatchObject({ refusal: 0.1, stall: 0.2 });
    expect(() => parseSimArgs(['--port', 'x'])).toThrow(/--port/);
  });
});
