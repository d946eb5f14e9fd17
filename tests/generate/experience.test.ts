/**
 * Failure-experience retry: the model's summary of a failed attempt, parsed leniently, and the
 * summary derived from the record whenever the model cannot give one.
 */
import { describe, expect, it } from 'vitest';
import { RunConfig, SCHEMA_VERSION, Trajectory, type ChatMessage, type FailureReason, type ToolCallRecord } from '../../schemas/index.js';
import { mcpXml } from '../../pipeline/dialects/mcp-xml.js';
import { native } from '../../pipeline/dialects/native.js';
import { tulu } from '../../pipeline/dialects/tulu.js';
import type { Dialect, ToolSpec } from '../../pipeline/dialects/types.js';
import { deriveSummary, parseSummary, summariseFailure } from '../../pipeline/generate/experience.js';
import { LlmError, type Completion, type CompletionRequest } from '../../pipeline/core/llm/llm.js';
import { loadPrompt, renderPrompt } from '../../pipeline/prompts.js';

function record(i: number, tool: string, query: string, more: Partial<ToolCallRecord> = {}): ToolCallRecord {
  return {
    schema_version: SCHEMA_VERSION,
    call_id: `q1-1-${i}`,
    turn: i,
    tool_name: tool,
    server: 'corpus',
    mcp_tool: tool,
    parameters: { query },
    query,
    arguments: { query },
    result: {},
    truncated: false,
    output_text: '<tool_output>\nNo results found.\n</tool_output>',
    snippet_ids: [],
    skipped: false,
    cached: false,
    duration_ms: 1,
    timestamp: '2026-01-01T00:00:00.000Z',
    ...more,
  };
}

function failed(opts: { reason?: FailureReason; error?: string; attempt?: number; calls?: ToolCallRecord[]; messages?: ChatMessage[] } = {}): Trajectory {
  return Trajectory.parse({
    schema_version: SCHEMA_VERSION,
    id: 'q1#0-a1',
    question_id: 'q1',
    question: 'Does aspirin lower stroke risk?',
    dialect: 'tulu',
    model: 'test-model',
    status: 'failed',
    ...(opts.reason === undefined ? {} : { reason: opts.reason }),
    ...(opts.error === undefined ? {} : { error: opts.error }),
    final_answer: '',
    interleaved_text: '',
    messages: opts.messages ?? [
      { role: 'system', content: 'You are a research assistant.' },
      { role: 'user', content: 'Does aspirin lower stroke risk?' },
      { role: 'assistant', content: '<think>search</think>\n<call_tool name="pubmed_search">aspirin stroke</call_tool>' },
      { role: 'user', content: '<tool_output>\nNo results found.\n</tool_output>' },
    ],
    tool_calls: opts.calls ?? [],
    total_tool_calls: (opts.calls ?? []).length,
    tools_used: [],
    cited_ids: [],
    unresolved_cited_ids: [],
    turns: 2,
    repairs: [],
    rollbacks: [],
    validation: { passed: false, issues: [] },
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: 2 },
    timing: { started_at: '2026-01-01T00:00:00.000Z', finished_at: '2026-01-01T00:00:01.000Z', duration_ms: 1000, llm_ms: 900, tool_ms: 1 },
    attempt: opts.attempt ?? 1,
    run_id: 'run-test',
  });
}

const GOOD_JSON = '{"failure_type": "ran out of turns", "what_happened": "Searched twice with the same words.", "useful_findings": ["pm-1: aspirin lowered stroke risk"]}';

describe('parseSummary', () => {
  it('reads the JSON object after a think block, braces in the think notwithstanding', () => {
    const s = parseSummary(`<think>Shape it like {"failure_type": "wrong"}.</think>\n${GOOD_JSON}`, 2);
    expect(s).toEqual({
      from_attempt: 2,
      failure_type: 'ran out of turns',
      what_happened: 'Searched twice with the same words.',
      useful_findings: ['pm-1: aspirin lowered stroke risk'],
      source: 'model',
    });
  });

  it('reads a JSON object with prose around it', () => {
    const s = parseSummary(`Here is the summary:\n\n${GOOD_JSON}\n\nGood luck with the next attempt.`, 0);
    expect(s?.failure_type).toBe('ran out of turns');
    expect(s?.useful_findings).toEqual(['pm-1: aspirin lowered stroke risk']);
    expect(s?.source).toBe('model');
    expect(s?.from_attempt).toBe(0);
  });

  it('repairs JSON written with single quotes and a trailing comma', () => {
    const s = parseSummary("{'failure_type': 'no answer', 'what_happened': 'Never answered.', 'useful_findings': ['a', 'b'],}", 3);
    expect(s).toEqual({ from_attempt: 3, failure_type: 'no answer', what_happened: 'Never answered.', useful_findings: ['a', 'b'], source: 'model' });
  });

  it('is undefined without the two string fields, or without JSON', () => {
    expect(parseSummary('{"failure_type": "x", "useful_findings": []}', 1)).toBeUndefined();
    expect(parseSummary('{"what_happened": "x"}', 1)).toBeUndefined();
    expect(parseSummary('{"failure_type": 3, "what_happened": "x"}', 1)).toBeUndefined();
    expect(parseSummary('{"failure_type": "x", "what_happened": ["x"]}', 1)).toBeUndefined();
    expect(parseSummary('I could not work out what went wrong.', 1)).toBeUndefined();
    expect(parseSummary('', 1)).toBeUndefined();
    expect(parseSummary('["failure_type", "what_happened"]', 1)).toBeUndefined();
    // The JSON only inside the think: the reply itself has none.
    expect(parseSummary(`<think>${GOOD_JSON}</think>\nNo summary, sorry.`, 1)).toBeUndefined();
  });

  it('keeps only non-blank string findings, at most eight, in order', () => {
    const s = parseSummary(JSON.stringify({ failure_type: 't', what_happened: 'w', useful_findings: ['a', 3, null, '', '   ', { f: 'x' }, 'b'] }), 1);
    expect(s?.useful_findings).toEqual(['a', 'b']);
    const many = Array.from({ length: 12 }, (_, i) => `finding ${i}`);
    const capped = parseSummary(JSON.stringify({ failure_type: 't', what_happened: 'w', useful_findings: many }), 1);
    expect(capped?.useful_findings).toEqual(many.slice(0, 8));
    // Not a list: no findings.
    expect(parseSummary(JSON.stringify({ failure_type: 't', what_happened: 'w', useful_findings: 'one' }), 1)?.useful_findings).toEqual([]);
    expect(parseSummary(JSON.stringify({ failure_type: 't', what_happened: 'w' }), 1)?.useful_findings).toEqual([]);
  });

  it('trims the fields and names a blank failure type unknown', () => {
    const s = parseSummary(JSON.stringify({ failure_type: '   ', what_happened: '  w  ', useful_findings: ['  f  '] }), 1);
    expect(s).toMatchObject({ failure_type: 'unknown', what_happened: 'w', useful_findings: ['f'] });
  });

  // The first complete object is taken, so braces in prose after it do not spoil the reply.
  it('reads the first JSON object even when prose after it holds braces', () => {
    const s = parseSummary(`${GOOD_JSON}\n\nNote: the {query} parameter was wrong.`, 1);
    expect(s?.failure_type).toBe('ran out of turns');
  });
});

describe('deriveSummary', () => {
  it('names the reason as the failure type and lists the calls that ran, with their queries', () => {
    const t = failed({
      reason: 'max_turns',
      error: 'the turn budget (8) is used up',
      attempt: 2,
      calls: [
        record(0, 'pubmed_search', 'aspirin stroke'),
        record(1, 'pubmed_search', 'never ran', { skipped: true, error: 'limit reached' }),
        record(2, 'browse_page', 'https://example.org/x', { error: 'timeout' }),
      ],
    });
    const s = deriveSummary(t);
    expect(s.failure_type).toBe('max_turns');
    expect(s.source).toBe('derived');
    expect(s.from_attempt).toBe(2);
    expect(s.useful_findings).toEqual([]);
    expect(s.what_happened).toContain('2 tool calls');
    expect(s.what_happened).toContain('pubmed_search(aspirin stroke)');
    expect(s.what_happened).toContain('browse_page(https://example.org/x)');
    expect(s.what_happened).not.toContain('never ran');
    expect(s.what_happened).toContain('1 failed');
    expect(s.what_happened).toContain('max_turns');
    expect(s.what_happened).toContain('the turn budget (8) is used up');
  });

  it('says when no tool was called, and when there is no reason', () => {
    const s = deriveSummary(failed({}));
    expect(s.what_happened).toContain('No tool was called.');
    expect(s.failure_type).toBe('unknown');
  });

  it('lists at most five calls and marks the rest', () => {
    const calls = Array.from({ length: 7 }, (_, i) => record(i, 'pubmed_search', `query number ${i}`));
    const s = deriveSummary(failed({ reason: 'no_answer', calls }));
    expect(s.what_happened).toContain('7 tool calls');
    for (let i = 0; i < 5; i++) expect(s.what_happened).toContain(`pubmed_search(query number ${i})`);
    expect(s.what_happened).not.toContain('query number 5');
    expect(s.what_happened).toContain('…');
  });
});

describe('summariseFailure', () => {
  const config = RunConfig.parse({ endpoint: { model: 'test-model', max_tokens: 256 } });

  function completion(text: string): Completion {
    return { text, toolCalls: [], finishReason: 'stop', clientStop: false, repetitionCut: false, promptTokens: 0, completionTokens: 0, estimated: true, attempts: 1, ms: 1 };
  }

  function fakeLlm(reply: (req: CompletionRequest) => Promise<Completion> | Completion): { llm: { complete(req: CompletionRequest): Promise<Completion> }; requests: CompletionRequest[] } {
    const requests: CompletionRequest[] = [];
    return {
      requests,
      llm: {
        complete: async (req) => {
          requests.push(req);
          return reply(req);
        },
      },
    };
  }

  const deps = (llm: { complete(req: CompletionRequest): Promise<Completion> }, more: { dialect?: Dialect; config?: RunConfig; tools?: ToolSpec[] } = {}) => ({
    llm,
    dialect: more.dialect ?? tulu,
    config: more.config ?? config,
    tools: more.tools,
  });

  it("asks with the transcript and the failure-summary prompt naming the reason, and returns the model's summary", async () => {
    const t = failed({ reason: 'max_turns', error: 'the turn budget is used up', attempt: 1 });
    const { llm, requests } = fakeLlm(() => completion(`<think>Let me summarise.</think>\n${GOOD_JSON}`));
    const s = await summariseFailure(t, deps(llm));

    expect(requests).toHaveLength(1);
    const req = requests[0]!;
    expect(req.messages.slice(0, -1)).toEqual(t.messages);
    const last = req.messages[req.messages.length - 1]!;
    expect(last.role).toBe('user');
    expect(last.content).toBe(renderPrompt(loadPrompt('failure-summary'), { reason: 'max_turns', detail: 'the turn budget is used up' }).trimEnd());
    expect(last.content).toContain('FAILURE SUMMARY');
    expect(last.content).toContain('max_turns');
    expect(req.stop).toEqual([]);
    expect(req.tools).toBeUndefined();

    expect(s).toEqual({
      from_attempt: 1,
      failure_type: 'ran out of turns',
      what_happened: 'Searched twice with the same words.',
      useful_findings: ['pm-1: aspirin lowered stroke risk'],
      source: 'model',
    });
  });

  it('names an unknown reason and no detail when the record has neither', async () => {
    const { llm, requests } = fakeLlm(() => completion(GOOD_JSON));
    await summariseFailure(failed({}), deps(llm));
    const last = requests[0]!.messages.at(-1)!;
    expect(last.content).toContain('unknown');
    expect(last.content).toContain('(none)');
    expect(last.content).not.toMatch(/\{(reason|detail)\}/);
  });

  it('native: sends the tools, and asks for text only', async () => {
    const tools: ToolSpec[] = [{ name: 'pubmed_search', description: 'Search PubMed', inputSchema: { type: 'object', properties: { query: { type: 'string' } } } }];
    const { llm, requests } = fakeLlm(() => completion(GOOD_JSON));
    await summariseFailure(failed({ reason: 'no_answer' }), deps(llm, { dialect: native, tools }));
    expect(requests[0]!.tools).toEqual(native.requestTools!(tools));
    expect(requests[0]!.toolChoice).toBe('none');
  });

  it('shows only the last K tool results in full when keep_tool_results is set', async () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 's' },
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'a0', tool_calls: [{ id: 'c0', type: 'function', function: { name: 'pubmed_search', arguments: '{}' } }] },
      { role: 'tool', content: '<tool_output>\nfirst\n</tool_output>', tool_call_id: 'c0' },
      { role: 'assistant', content: 'a1', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'pubmed_search', arguments: '{}' } }] },
      { role: 'tool', content: '<tool_output>\nsecond\n</tool_output>', tool_call_id: 'c1' },
      { role: 'assistant', content: 'a2', tool_calls: [{ id: 'c2', type: 'function', function: { name: 'pubmed_search', arguments: '{}' } }] },
      { role: 'tool', content: '<tool_output>\nthird\n</tool_output>', tool_call_id: 'c2' },
    ];
    const cfg = RunConfig.parse({ endpoint: { model: 'm', max_tokens: 256 }, context: { keep_tool_results: 1 } });
    const { llm, requests } = fakeLlm(() => completion(GOOD_JSON));
    await summariseFailure(failed({ messages }), deps(llm, { dialect: native, config: cfg }));
    const sent = requests[0]!.messages;
    expect(sent).toHaveLength(messages.length + 1);
    expect([3, 5].map((i) => [sent[i]!.role, sent[i]!.tool_call_id, sent[i]!.content.includes('<tool_output')])).toEqual([
      ['tool', 'c0', false],
      ['tool', 'c1', false],
    ]);
    expect(sent[7]).toEqual(messages[7]);
  });

  it("mcp-xml in MiroThinker's form: bare result turns are tool results too, so only the last K are shown in full", async () => {
    const call = (q: string): string => `<use_mcp_tool>\n<server_name>corpus</server_name>\n<tool_name>pubmed_search</tool_name>\n<arguments>\n{"query": "${q}"}\n</arguments>\n</use_mcp_tool>`;
    const messages: ChatMessage[] = [
      { role: 'system', content: 's' },
      { role: 'user', content: 'q' },
      { role: 'assistant', content: call('one') },
      { role: 'user', content: 'Found 1 results. Showing top 1:\n<snippet id="a">first</snippet>' },
      { role: 'assistant', content: 'Let me think.' },
      { role: 'user', content: 'Please call a tool or answer.' },
      { role: 'assistant', content: call('two') },
      { role: 'user', content: 'Found 1 results. Showing top 1:\n<snippet id="b">second</snippet>' },
    ];
    const cfg = RunConfig.parse({ endpoint: { model: 'm', max_tokens: 256 }, dialect: 'mcp-xml', context: { keep_tool_results: 1 } });
    const { llm, requests } = fakeLlm(() => completion(GOOD_JSON));
    await summariseFailure(failed({ messages }), deps(llm, { dialect: mcpXml, config: cfg }));
    const sent = requests[0]!.messages;
    expect(sent).toHaveLength(messages.length + 1);
    // The older result is left out; the nudge after a turn without a call is no result and stays.
    expect(sent[3]!.content).not.toContain('first');
    expect(sent[3]!.content).toBe(renderPrompt(loadPrompt('tool-result-omitted'), { index: '1', keep: '1' }).trim());
    expect(sent[5]).toEqual(messages[5]);
    expect(sent[7]).toEqual(messages[7]);
  });

  it('falls back to the derived summary when the llm fails, whatever the error (but an abort)', async () => {
    const t = failed({ reason: 'tool_error', error: 'server died', calls: [record(0, 'pubmed_search', 'aspirin')] });
    for (const err of [new Error('socket hang up'), new LlmError('exhausted', 'retries used up', 503), new LlmError('fatal', 'bad request', 400), new LlmError('context_overflow', 'too long', 400)]) {
      const { llm } = fakeLlm(() => {
        throw err;
      });
      const s = await summariseFailure(t, deps(llm));
      expect(s, err.message).toEqual(deriveSummary(t));
      expect(s.source).toBe('derived');
    }
  });

  it('falls back to the derived summary when the reply holds no usable JSON', async () => {
    const t = failed({ reason: 'no_answer' });
    for (const reply of ['I am not sure what went wrong.', '{"failure_type": "x"}', '']) {
      const { llm } = fakeLlm(() => completion(reply));
      expect(await summariseFailure(t, deps(llm))).toEqual(deriveSummary(t));
    }
  });

  it('rethrows an aborted request', async () => {
    const aborted = new LlmError('aborted', 'the run was stopped');
    const { llm } = fakeLlm(() => {
      throw aborted;
    });
    await expect(summariseFailure(failed({ reason: 'max_turns' }), deps(llm))).rejects.toBe(aborted);
  });

  it('passes the signal on', async () => {
    const controller = new AbortController();
    const { llm, requests } = fakeLlm(() => completion(GOOD_JSON));
    await summariseFailure(failed({}), deps(llm), controller.signal);
    expect(requests[0]!.signal).toBe(controller.signal);
  });

  it('does not ask at all when even a transcript without tool results would not fit the window (256 + 64 reserved of 340)', async () => {
    const cfg = RunConfig.parse({ endpoint: { model: 'm', max_tokens: 256 }, context: { max_context_tokens: 340, safety_margin_tokens: 64 } });
    const { llm, requests } = fakeLlm(() => completion(GOOD_JSON));
    const t = failed({ reason: 'context_overflow' });
    expect(await summariseFailure(t, deps(llm, { config: cfg }))).toEqual(deriveSummary(t));
    expect(requests).toHaveLength(0);
  });
});
