/**
 * The sim's two roles (#15) over HTTP: a main agent that plans and hands subtasks to a
 * browsing sub-agent, and the sub-agent that searches, reads documents whole and reports, in
 * all three dialects. Requests are built with trajforge's own dialects; whole families run
 * against the real corpus server over stdio (agent-loop.ts). Requests that play neither role
 * keep the plain policy (the other sim suites hold it to its old behaviour).
 */
import OpenAI from 'openai';
import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { dialectFor, getDialect } from '../../pipeline/dialects/index.js';
import type { Dialect, ParsedCall, ToolSpec } from '../../pipeline/dialects/types.js';
import { Executor } from '../../pipeline/generate/executor.js';
import { loadPrompt, renderPrompt } from '../../pipeline/prompts.js';
import { RunConfig, type ChatMessage } from '../../schemas/index.js';
import type { MisbehaviourKind } from '../../sim/misbehave.js';
import { REFUSAL_TEXT } from '../../sim/misbehave.js';
import { startSim, type Sim, type SimOptions } from '../../sim/server.js';
import { CORPUS_SERVER, QUESTIONS, readJsonl } from '../helpers.js';
import { browse, family, SUBAGENT_TOOL, type LoopDeps } from './agent-loop.js';

const DIALECTS = ['tulu', 'mcp-xml', 'native'] as const;
type Name = (typeof DIALECTS)[number];

const SEARCH: ToolSpec = {
  name: 'pubmed_search',
  server: 'corpus',
  description: 'Search the corpus.',
  inputSchema: { type: 'object', properties: { query: { type: 'string' }, limit: { type: 'integer' } }, required: ['query'] },
  bodyParam: 'query',
};
const READ: ToolSpec = {
  name: 'read_document',
  server: 'corpus',
  description: 'Read one document whole.',
  inputSchema: { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] },
  bodyParam: 'id',
};
const QUESTION = 'In which version of Firefox was the CSS property grid first supported?';
const SUBTASK = `Find the answer to this question and the document that states it: ${QUESTION}`;
const MAIN_OBJECTIVE = loadPrompt('main-agent-objective').trim();
const BROWSING_OBJECTIVE = loadPrompt('browsing-agent-objective').trim();
const subtaskMessage = (subtask: string): string => renderPrompt(loadPrompt('subtask'), { subtask }).trimEnd();
const summaryPrompt = (task: string): string => renderPrompt(loadPrompt('browsing-agent-summary'), { task }).trimEnd();

const sims: Sim[] = [];
async function sim(opts: SimOptions = {}): Promise<{ sim: Sim; client: OpenAI }> {
  const s = await startSim({ port: 0, ...opts });
  sims.push(s);
  return { sim: s, client: new OpenAI({ baseURL: s.url, apiKey: 'EMPTY', maxRetries: 0 }) };
}
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

function dialectOf(name: Name): Dialect {
  return getDialect(name);
}

/** One completion for `messages` offered `tools` in `dialect`, as trajforge would ask; the turn repaired by the dialect. */
async function ask(client: OpenAI, dialect: Dialect, messages: ChatMessage[], tools: readonly ToolSpec[]) {
  const requestTools = dialect.requestTools?.(tools) as ChatCompletionTool[] | undefined;
  const r = await client.chat.completions.create({
    model: 'trajforge-sim',
    messages: messages as ChatCompletionMessageParam[],
    ...(requestTools === undefined ? {} : { tools: requestTools }),
    ...(dialect.stopStrings.length > 0 ? { stop: [...dialect.stopStrings] } : {}),
  });
  const choice = r.choices[0]!;
  const m = choice.message as typeof choice.message & { reasoning_content?: string };
  const calls = (m.tool_calls ?? []).flatMap((c) => (c.type === 'function' ? [{ id: c.id, type: 'function' as const, function: c.function }] : []));
  const raw = (m.reasoning_content ? `<think>${m.reasoning_content}</think>\n` : '') + (m.content ?? '');
  const repaired = dialect.repairTurn(raw, choice.finish_reason === 'length' ? 'length' : 'stop', calls);
  return { content: m.content ?? '', raw, finish: choice.finish_reason, calls, repaired };
}

/** The first call of a repaired turn: tool name and its main input. */
function firstCall(turn: Awaited<ReturnType<typeof ask>>, dialect: Dialect, tools: readonly ToolSpec[]): { tool: string; input: string } {
  const a = turn.repaired.action;
  const call = a.kind === 'call' ? a.call : a.kind === 'calls' ? a.calls[0] : undefined;
  if (call === undefined) throw new Error(`expected a call, got ${a.kind}: ${turn.raw}`);
  const bound = dialect.bindCall?.(call, tools).call ?? call;
  const args = bound.arguments as Record<string, unknown> | undefined;
  return { tool: bound.toolName, input: String(args?.subtask ?? args?.query ?? args?.id ?? bound.query) };
}

const system = (dialect: Dialect, tools: readonly ToolSpec[], objective: string | null): ChatMessage => ({
  role: 'system',
  content: objective === null ? dialect.systemPrompt(tools) : `${dialect.systemPrompt(tools)}\n\n${objective}`,
});

// ---------------------------------------------------------------------------------------

describe.each(DIALECTS)('%s: which role a request plays', (name) => {
  const dialect = dialectOf(name);

  it('a tool requiring exactly subtask makes a main agent: it plans, then hands the question over as a subtask', async () => {
    const { sim: s, client } = await sim({ seed: 1 });
    // The search tool is on offer too: the main agent still delegates.
    const tools = [SEARCH, SUBAGENT_TOOL];
    const turn = await ask(client, dialect, [system(dialect, tools, MAIN_OBJECTIVE), { role: 'user', content: QUESTION }], tools);
    const call = firstCall(turn, dialect, tools);
    expect(call.tool).toBe('search_and_browse');
    expect(call.input).toContain(QUESTION);
    // The plan is said before the call, outside any think.
    expect(turn.content).toMatch(/To answer this, I will follow these steps:\n\n1\. Find the answer/);
    expect(s.stats().requestsByRole).toEqual({ main: 1, browsing: 0, report: 0, none: 0 });
  });

  it('without the main objective the tool alone makes a main agent', async () => {
    const { sim: s, client } = await sim({ seed: 1 });
    const turn = await ask(client, dialect, [system(dialect, [SUBAGENT_TOOL], null), { role: 'user', content: QUESTION }], [SUBAGENT_TOOL]);
    expect(firstCall(turn, dialect, [SUBAGENT_TOOL]).tool).toBe('search_and_browse');
    expect(s.stats().requestsByRole.main).toBe(1);
  });

  it('a tool that requires subtask and more is no sub-agent: the plain policy searches with it', async () => {
    const { sim: s, client } = await sim({ seed: 1 });
    const other: ToolSpec = { ...SUBAGENT_TOOL, name: 'plan_search', inputSchema: { type: 'object', properties: { subtask: { type: 'string' }, depth: { type: 'integer' } }, required: ['subtask', 'depth'] } };
    const turn = await ask(client, dialect, [system(dialect, [other], null), { role: 'user', content: QUESTION }], [other]);
    expect(turn.content).not.toContain('I will follow these steps');
    expect(s.stats().requestsByRole).toEqual({ main: 0, browsing: 0, report: 0, none: 1 });
  });

  it.each([
    ['the browsing objective in the system prompt', true, 'Firefox CSS grid support'],
    ['the subtask line ending the first user message', false, subtaskMessage(SUBTASK)],
  ])('%s makes a browsing sub-agent: it searches first', async (_how, withObjective, user) => {
    const { sim: s, client } = await sim({ seed: 2 });
    const tools = [SEARCH, READ];
    const turn = await ask(client, dialect, [system(dialect, tools, withObjective ? BROWSING_OBJECTIVE : null), { role: 'user', content: user }], tools);
    const call = firstCall(turn, dialect, tools);
    expect(call.tool).toBe('pubmed_search');
    expect(call.input).toMatch(/Firefox/);
    expect(call.input).toMatch(/grid/);
    // What to do is not what to search for.
    expect(call.input).not.toMatch(/\b(Find|answer|document|states)\b/);
    expect(s.stats().requestsByRole).toEqual({ main: 0, browsing: 1, report: 0, none: 0 });
  });

  it('the browsing sub-agent wins over a subtask tool it is offered itself', async () => {
    const { sim: s, client } = await sim({ seed: 2 });
    const tools = [SEARCH, READ, SUBAGENT_TOOL];
    const turn = await ask(client, dialect, [system(dialect, tools, BROWSING_OBJECTIVE), { role: 'user', content: subtaskMessage(SUBTASK) }], tools);
    expect(firstCall(turn, dialect, tools).tool).toBe('pubmed_search');
    expect(s.stats().requestsByRole.browsing).toBe(1);
  });

  it('a request with neither stays with the plain policy', async () => {
    const { sim: s, client } = await sim({ seed: 2 });
    const turn = await ask(client, dialect, [system(dialect, [SEARCH], null), { role: 'user', content: QUESTION }], [SEARCH]);
    expect(firstCall(turn, dialect, [SEARCH]).tool).toBe('pubmed_search');
    expect(s.stats().requestsByRole).toEqual({ main: 0, browsing: 0, report: 0, none: 1 });
  });
});

// ---------------------------------------------------------------------------------------

/** A browsing conversation whose search showed two documents and whose read of the first returned text the search did not show. */
function browsingHistory(dialect: Dialect, readResult: string): ChatMessage[] {
  const tools = [SEARCH, READ];
  const searchCall: ParsedCall = { toolName: 'pubmed_search', attributes: { server_name: 'corpus' }, query: '{"query": "Firefox CSS grid"}', arguments: { query: 'Firefox CSS grid' }, id: 'call_s' };
  const readCall: ParsedCall = { toolName: 'read_document', attributes: { server_name: 'corpus' }, query: '{"id": "css.properties.grid"}', arguments: { id: 'css.properties.grid' }, id: 'call_r' };
  const searchOut = dialect.renderToolOutput({
    header: 'Found 2 results. Showing top 2:',
    documents: [
      { id: 'css.properties.grid', title: 'CSS property: grid', text: 'The grid CSS property is a shorthand. Chrome first supported it in version 57, released 2017-03-09.' },
      { id: 'css.properties.grid-area', title: 'CSS property: grid-area', text: 'Firefox first supported grid-area in version 52, released 2017-03-07.' },
    ],
  }).text;
  const readOut = dialect.renderToolOutput(
    readResult.startsWith('Error') ? { error: readResult } : { documents: [{ id: 'css.properties.grid', title: 'CSS property: grid', text: readResult }] },
  ).text;
  const turn = (call: ParsedCall, text: string): ChatMessage[] => {
    const callText = dialect.renderCall?.(call) ?? `<call_tool name="${call.toolName}">${String(Object.values(call.arguments ?? {})[0])}</call_tool>`;
    const r = { text: callText, action: { kind: 'call' as const, call }, repairs: [], callOffset: 0 };
    return [dialect.turnMessage?.(r, [call]) ?? { role: 'assistant', content: callText }, dialect.toolMessage?.(text, call) ?? { role: 'user', content: text }];
  };
  return [system(dialect, tools, BROWSING_OBJECTIVE), { role: 'user', content: subtaskMessage(SUBTASK) }, ...turn(searchCall, searchOut), ...turn(readCall, readOut)];
}

const FULL_TEXT =
  'The grid CSS property is a shorthand. Chrome first supported it in version 57, released 2017-03-09. ' +
  'Firefox first supported it in version 52, released 2017-03-07, after a long time behind a flag.';

describe.each(DIALECTS)('%s: the browsing report', (name) => {
  const dialect = dialectOf(name);

  it('is written on the summary prompt, from the documents read: their ids, titles and quotes, nothing only searched', async () => {
    const { sim: s, client } = await sim({ seed: 4 });
    const messages = [...browsingHistory(dialect, FULL_TEXT), { role: 'user' as const, content: summaryPrompt(SUBTASK) }];
    const turn = await ask(client, dialect, messages, [SEARCH, READ]);
    expect(turn.calls).toEqual([]);
    const report = turn.content.replace(/^<think>[\s\S]*?<\/think>\n?/, '');
    // The sentence only the full text holds: the report comes from the document read.
    expect(report).toContain('> Firefox first supported it in version 52, released 2017-03-07, after a long time behind a flag.');
    expect(report.split('\n')[2]).toBe('Firefox first supported it in version 52, released 2017-03-07, after a long time behind a flag.');
    expect(report).toMatch(/^### Final Response: Find the answer to this question/);
    expect(report).toContain('1. **CSS property: grid** (document css.properties.grid)');
    expect(report).toContain('### Conclusion');
    // The document the search showed but nobody read is not reported, nor its sentence.
    expect(report).not.toContain('grid-area');
    // A report is prose: no call, no answer tags, no box.
    for (const tag of ['<use_mcp_tool', '<call_tool', '<answer>', '\\boxed', '<tool_output']) expect(report).not.toContain(tag);
    expect(s.stats().requestsByRole).toEqual({ main: 0, browsing: 0, report: 1, none: 0 });
  });

  it('says so when no document could be read, and lists what the search showed as not read', async () => {
    const { client } = await sim({ seed: 4 });
    const messages = [...browsingHistory(dialect, 'Error: No document with id "css.properties.grid" in the corpus.'), { role: 'user' as const, content: summaryPrompt(SUBTASK) }];
    const report = (await ask(client, dialect, messages, [SEARCH, READ])).content.replace(/^<think>[\s\S]*?<\/think>\n?/, '');
    expect(report.split('\n')[2]).toBe('No document could be read for this subtask.');
    expect(report).toContain('### Search Results (not read)');
    expect(report).toContain('- CSS property: grid-area (document css.properties.grid-area)');
    expect(report).not.toContain('> ');
  });

  it('before the summary prompt, having read, it answers from the document read (tulu cites its id)', async () => {
    const { client } = await sim({ seed: 6 });
    // Two reads are the most it makes; with one read done the draw may ask for another, so give it two.
    const history = browsingHistory(dialect, FULL_TEXT);
    const turn = await ask(client, dialect, [...history, ...history.slice(-2)], [SEARCH, READ]);
    expect(turn.repaired.action.kind).toBe('answer');
    const answer = turn.repaired.action.kind === 'answer' ? turn.repaired.action.answer : '';
    expect(answer).toContain('Firefox first supported it in version 52, released 2017-03-07, after a long time behind a flag.');
    if (name !== 'mcp-xml') expect(dialect.citedIds(answer)).toEqual(['css.properties.grid']);
  });
});

// ---------------------------------------------------------------------------------------

describe.each(DIALECTS)('%s: the main agent reads its reports', (name) => {
  const dialect = dialectOf(name);
  const report = (sentence: string): string =>
    `### Final Response: ${SUBTASK}\n\n${sentence}\n\n---\n\n### Supporting Information\n\n1. **CSS property: grid** (document css.properties.grid)\n> Chrome first supported it in version 57, released 2017-03-09.\n> ${sentence}\n\n---\n\n### Conclusion\n${sentence}`;

  /** The main agent's history after `n` delegations, each answered by `reports[i]`. */
  function history(reports: string[], d: Dialect = dialect): ChatMessage[] {
    const out: ChatMessage[] = [system(d, [SUBAGENT_TOOL], MAIN_OBJECTIVE), { role: 'user', content: QUESTION }];
    reports.forEach((text, i) => {
      const call = { toolName: 'search_and_browse', attributes: { server_name: 'browsing-agent' }, query: '{}', arguments: { subtask: `subtask ${i}` }, id: `call_${i}` };
      const callText = d.renderCall?.(call) ?? `<call_tool name="search_and_browse">subtask ${i}</call_tool>`;
      out.push(d.turnMessage?.({ text: callText, action: { kind: 'call', call }, repairs: [], callOffset: 0 }, [call]) ?? { role: 'assistant', content: callText });
      const rendered = d.renderToolOutput({ text, textId: `call_${i}-0` }).text;
      out.push(d.toolMessage?.(rendered, call) ?? { role: 'user', content: rendered });
    });
    return out;
  }

  it('answers with the fact the reports carry once its subtasks are done, citing the report where the dialect cites', async () => {
    const { client } = await sim({ seed: 8 });
    const fact = 'Firefox first supported it in version 52, released 2017-03-07.';
    // Two reports: whatever the session drew (one subtask or two), it is done.
    const turn = await ask(client, dialect, history([report(fact), report('Nothing more was found.')]), [SUBAGENT_TOOL]);
    expect(turn.repaired.action.kind).toBe('answer');
    const answer = turn.repaired.action.kind === 'answer' ? turn.repaired.action.answer : '';
    expect(answer).toContain('version 52');
    if (name === 'mcp-xml') expect(turn.content).toMatch(/\\boxed\{Firefox first supported it in version 52, released 2017-03-07\.\}$/);
    else expect(dialect.citedIds(answer)).toEqual(['call_0-0']);
  });

  it('cites nothing when a report came back as bare text, with no snippet id to cite', async () => {
    const { client } = await sim({ seed: 8 });
    const fact = 'Firefox first supported it in version 52, released 2017-03-07.';
    const messages = history([report(fact), report('No more.')]).map((m, i) =>
      i > 1 && (m.role === 'user' || m.role === 'tool') ? { ...m, content: i === 3 ? report(fact) : report('No more.') } : m,
    );
    const turn = await ask(client, dialect, messages, [SUBAGENT_TOOL]);
    const answer = turn.repaired.action.kind === 'answer' ? turn.repaired.action.answer : '';
    expect(answer).toContain(fact);
    expect(dialect.citedIds(answer)).toEqual([]);
  });

  it('says it could not find the answer when the reports carry nothing', async () => {
    const { client } = await sim({ seed: 8 });
    const turn = await ask(client, dialect, history(['Error: the browsing agent failed', '']), [SUBAGENT_TOOL]);
    const answer = turn.repaired.action.kind === 'answer' ? turn.repaired.action.answer : '';
    expect(answer).toBe('I could not find it.');
  });

  it('on the summary prompt restates the answer (mcp-xml: the box alone, as MiroThinker does)', async () => {
    const { client } = await sim({ seed: 8 });
    const fact = 'Firefox first supported it in version 52, released 2017-03-07.';
    const summary = renderPrompt(loadPrompt('main-agent-summary'), { question: QUESTION });
    const turn = await ask(client, dialect, [...history([report(fact)]), { role: 'user', content: summary }], [SUBAGENT_TOOL]);
    expect(turn.repaired.action.kind).toBe('answer');
    if (name === 'mcp-xml') expect(turn.content.replace(/^<think>[\s\S]*?<\/think>\n?/, '')).toBe('\\boxed{Firefox first supported it in version 52, released 2017-03-07.}');
  });

  if (name === 'mcp-xml') {
    it("reads reports sent back as bare user turns (MiroThinker's form)", async () => {
      const { client } = await sim({ seed: 8 });
      const plain = dialectFor('mcp-xml', { tool_results: 'plain' }, '2025-06-08T00:00:00Z');
      const messages = history([report('Firefox first supported it in version 52, released 2017-03-07.'), report('No more.')], plain);
      expect(messages[3]!.content).toMatch(/^### Final Response/);
      const turn = await ask(client, plain, messages, [SUBAGENT_TOOL]);
      expect(turn.content).toMatch(/\\boxed\{Firefox first supported it in version 52, released 2017-03-07\.\}$/);
    });
  }
});

// ---------------------------------------------------------------------------------------

describe('whole families against the corpus server', () => {
  let executor: Executor;
  beforeAll(async () => {
    const cfg = RunConfig.parse({
      endpoint: { model: 'm' },
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER] } },
      tools: { aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' }, read_document: { server: 'corpus', tool: 'read_document' } } },
      executor: { cache: false },
    });
    executor = await Executor.start({ servers: cfg.mcpServers, tools: cfg.tools, executor: cfg.executor });
  });
  afterAll(() => executor.close());

  const bank = (readJsonl(QUESTIONS) as { question: string; answer: string }[]).slice(0, 8);
  const variants: [string, () => Dialect][] = [
    ['tulu', () => getDialect('tulu')],
    ['mcp-xml', () => getDialect('mcp-xml')],
    ['mcp-xml in MiroThinker form', () => dialectFor('mcp-xml', { today: '2025-06-08', tool_results: 'plain' }, '2025-06-08T00:00:00Z')],
    ['native', () => getDialect('native')],
  ];

  it.each(variants)('%s: the main agent delegates 1-2 subtasks, each sub-agent searches and reads, and the answer is right', async (_name, make) => {
    const { sim: s, client } = await sim({ seed: 11 });
    const deps: LoopDeps = { client, dialect: make(), executor, browsingTools: executor.tools() };
    const subtaskCounts = new Set<number>();
    let right = 0;
    for (const q of bank) {
      const { main, children } = await family(deps, q.question);
      subtaskCounts.add(children.length);
      expect(children.length).toBeGreaterThanOrEqual(1);
      expect(children.length).toBeLessThanOrEqual(2);
      expect(main.calls.every((c) => c.call.toolName === 'search_and_browse')).toBe(true);
      for (const child of children) {
        const searched = child.calls.filter((c) => c.call.toolName === 'pubmed_search');
        const read = child.calls.filter((c) => c.call.toolName === 'read_document');
        expect(searched.length).toBeGreaterThanOrEqual(1);
        expect(read.length).toBeGreaterThanOrEqual(1);
        expect(read.length).toBeLessThanOrEqual(2);
        // Every id it read, the search had shown.
        for (const r of read) expect(searched.some((sr) => sr.output.includes(`<snippet id="${String(r.call.arguments?.id ?? r.call.query)}"`))).toBe(true);
        // The report names exactly the documents read, and every quote is a sentence of one of them.
        const readIds = read.map((r) => String(r.call.arguments?.id ?? r.call.query));
        const named = [...child.report!.matchAll(/\(document ([^)]+)\)/g)].map((m) => m[1]);
        expect(named).toEqual(readIds);
        for (const quote of child.report!.split('\n').filter((l) => l.startsWith('> '))) {
          expect(read.some((r) => r.output.includes(quote.slice(2)))).toBe(true);
        }
      }
      if (main.answer !== null && main.answer.includes(`version ${q.answer},`)) right++;
    }
    // Both counts occur for this seed, and the answers are right when the reports carry the fact.
    expect([...subtaskCounts].sort()).toEqual([1, 2]);
    expect(right).toBeGreaterThanOrEqual(bank.length - 1);
    expect(s.stats().requestsByRole.none).toBe(0);
  });

  it('is the same family, word for word, for the same seed', async () => {
    const runOnce = async (): Promise<string> => {
      const { client } = await sim({ seed: 21 });
      const f = await family({ client, dialect: getDialect('mcp-xml'), executor, browsingTools: executor.tools() }, bank[2]!.question);
      return JSON.stringify([f.main.messages, f.children.map((c) => c.messages)]);
    };
    expect(await runOnce()).toBe(await runOnce());
  });

  it('a browsing session alone reports on its subtask from what it read', async () => {
    const { client } = await sim({ seed: 5 });
    const child = await browse({ client, dialect: getDialect('tulu'), executor, browsingTools: executor.tools() }, `Find which version of Chrome first supported the Web API interface AbortController.`);
    expect(child.report).toMatch(/^### Final Response: Find which version of Chrome/);
    expect(child.report).toContain('(document api.AbortController)');
    expect(child.report!.split('\n')[2]).toBe('Chrome first supported it in version 66, released 2018-04-17.');
  });
});

// ---------------------------------------------------------------------------------------

describe('misbehaviours apply to both roles', () => {
  /** A request per role and kind of turn, in mcp-xml (its repairs name each misbehaviour). */
  const dialect = getDialect('mcp-xml');
  const mainFirst = (): ChatMessage[] => [system(dialect, [SUBAGENT_TOOL], MAIN_OBJECTIVE), { role: 'user', content: QUESTION }];
  const browsingFirst = (): ChatMessage[] => [system(dialect, [SEARCH, READ], BROWSING_OBJECTIVE), { role: 'user', content: subtaskMessage(SUBTASK) }];
  const reportAsk = (): ChatMessage[] => [...browsingHistory(dialect, FULL_TEXT), { role: 'user', content: summaryPrompt(SUBTASK) }];

  it('main, its call: unclosed_call leaves the call to the sub-agent open, with more text after it', async () => {
    const { sim: s, client } = await sim({ seed: 3, misbehave: { unclosed_call: 1 } });
    const turn = await ask(client, dialect, mainFirst(), [SUBAGENT_TOOL]);
    const call = turn.content.indexOf('<tool_name>search_and_browse</tool_name>');
    const args = turn.content.indexOf('</arguments>', call);
    expect(call).toBeGreaterThan(0);
    expect(args).toBeGreaterThan(call);
    expect(turn.content.slice(args)).not.toMatch(/^<\/arguments>\s*<\/use_mcp_tool>/);
    expect(turn.content.slice(args + '</arguments>'.length).trim()).not.toBe('');
    // trajforge ends the call after its arguments and says so.
    expect(turn.repaired.action).toMatchObject({ kind: 'call', call: { toolName: 'search_and_browse' } });
    expect(turn.repaired.repairs.map((r) => r.kind)).toContain('unclosed_call');
    expect(s.stats().misbehaviours.unclosed_call).toBe(1);
  });

  it.each<[string, MisbehaviourKind, string, () => ChatMessage[], ToolSpec[]]>([
    ['main, its call', 'hallucinated_output', 'hallucinated_output', mainFirst, [SUBAGENT_TOOL]],
    ['main, its call', 'bad_arguments', 'repaired_arguments', mainFirst, [SUBAGENT_TOOL]],
    ['browsing, its search', 'multiple_calls', 'extra_calls', browsingFirst, [SEARCH, READ]],
    ['browsing, its search', 'hallucinated_output', 'hallucinated_output', browsingFirst, [SEARCH, READ]],
    ['browsing, its search', 'wrong_server', 'corrected_name', browsingFirst, [SEARCH, READ]],
  ])('%s: %s shows as the repair %s, and the call is still to the role tool', async (_role, kind, repair, messages, tools) => {
    const { sim: s, client } = await sim({ seed: 3, misbehave: { [kind]: 1 } });
    const turn = await ask(client, dialect, messages(), tools);
    const bound = turn.repaired.action.kind === 'call' ? (dialect.bindCall?.(turn.repaired.action.call, tools) ?? { repairs: [], call: turn.repaired.action.call }) : undefined;
    expect(bound, turn.raw).toBeDefined();
    expect([...turn.repaired.repairs, ...bound!.repairs].map((r) => r.kind)).toContain(repair);
    expect(bound!.call.toolName).toBe(tools.includes(SUBAGENT_TOOL) ? 'search_and_browse' : 'pubmed_search');
    expect(s.stats().misbehaviours[kind]).toBe(1);
  });

  it.each<[string, () => ChatMessage[], ToolSpec[]]>([
    ['main', mainFirst, [SUBAGENT_TOOL]],
    ['browsing', browsingFirst, [SEARCH, READ]],
    ['the report', reportAsk, [SEARCH, READ]],
  ])('%s: a refusal, a turn with no action, a length cut and a rate limit', async (_role, messages, tools) => {
    const refusing = await sim({ seed: 3, misbehave: { refusal: 1 } });
    expect((await ask(refusing.client, dialect, messages(), tools)).content).toBe(REFUSAL_TEXT);

    const idle = await sim({ seed: 3, misbehave: { no_action: 1 } });
    const none = await ask(idle.client, dialect, messages(), tools);
    expect(none.repaired.action.kind).toBe('none');
    expect(none.content).not.toMatch(/### Final Response|<use_mcp_tool|\\boxed/);

    const whole = await ask((await sim({ seed: 3 })).client, dialect, messages(), tools);
    const cut = await ask((await sim({ seed: 3, misbehave: { length: 1 } })).client, dialect, messages(), tools);
    expect(cut.finish).toBe('length');
    expect(cut.content.length).toBeLessThan(whole.content.length);
    expect(whole.content.startsWith(cut.content)).toBe(true);

    const limited = await sim({ seed: 3, burst: { rate_limit: 1 } });
    await expect(ask(limited.client, dialect, messages(), tools)).rejects.toMatchObject({ status: 429 });
    // The retry is answered in the role (a fresh draw: the same messages seen once more).
    const retried = await ask(limited.client, dialect, messages(), tools);
    expect(retried.repaired.action.kind === 'call' || retried.content.includes('### Final Response')).toBe(true);
  });

  it('with every content misbehaviour at 30%, whole families still run, and the sim never fails on its own', async () => {
    const cfg = RunConfig.parse({
      endpoint: { model: 'm' },
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER] } },
      tools: { aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' }, read_document: { server: 'corpus', tool: 'read_document' } } },
      executor: { cache: false },
    });
    const executor = await Executor.start({ servers: cfg.mcpServers, tools: cfg.tools, executor: cfg.executor });
    try {
      const kinds: MisbehaviourKind[] = ['unclosed_call', 'hallucinated_output', 'multiple_calls', 'no_action', 'unclosed_answer', 'ignore_stop', 'refusal', 'length', 'bad_arguments', 'wrong_server', 'dirty_text', 'repetition'];
      const { sim: s } = await sim({ seed: 13, misbehave: Object.fromEntries(kinds.map((k) => [k, 0.3])) });
      const client = new OpenAI({ baseURL: s.url, apiKey: 'EMPTY', maxRetries: 0 });
      for (const name of DIALECTS) {
        for (const q of (readJsonl(QUESTIONS) as { question: string }[]).slice(10, 13)) {
          await family({ client, dialect: getDialect(name), executor, browsingTools: executor.tools() }, q.question);
        }
      }
      const stats = s.stats();
      expect(stats.responsesByStatus['500'] ?? 0).toBe(0);
      expect(stats.requestsByRole.main).toBeGreaterThan(0);
      expect(stats.requestsByRole.browsing).toBeGreaterThan(0);
      expect(stats.requestsByRole.report).toBeGreaterThan(0);
      for (const k of ['unclosed_call', 'hallucinated_output', 'refusal', 'no_action', 'length'] as const) expect(stats.misbehaviours[k]).toBeGreaterThan(0);
    } finally {
      await executor.close();
    }
  });
});
