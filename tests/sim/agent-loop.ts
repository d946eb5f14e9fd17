/**
 * A bare two-level agent loop for the sim's role tests: a main agent whose one tool is the
 * browsing sub-agent (MiroThinker's `browsing-agent` / `search_and_browse`), and a sub-agent
 * that searches and reads the bundled corpus through trajforge's executor (the real corpus
 * server over stdio). Requests go to the sim over HTTP with the OpenAI SDK, in the shape
 * trajforge's dialects give them. It stands in for the agents' run loop (not this suite's
 * subject) so the roles can be tested on their own: no budgets, no repairs recorded.
 */
import OpenAI from 'openai';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import type { ChatMessage, NativeToolCall } from '../../schemas/index.js';
import type { Dialect, ParsedCall, ToolSpec } from '../../pipeline/dialects/types.js';
import type { Executor } from '../../pipeline/generate/executor.js';
import { loadPrompt, renderPrompt } from '../../pipeline/prompts.js';

export const SUBAGENT_TOOL: ToolSpec = {
  name: 'search_and_browse',
  server: 'browsing-agent',
  description: 'This tool is an agent that performs the subtask of searching and browsing for specific missing information and generating the desired answer.',
  inputSchema: { type: 'object', properties: { subtask: { title: 'Subtask', type: 'string' } }, required: ['subtask'] },
};

export interface Session {
  readonly messages: ChatMessage[];
  /** The answer turn's text (the last assistant message before any summary prompt), or null. */
  readonly answer: string | null;
  /** browsing: the reply to the summary prompt, think removed. */
  readonly report: string | null;
  /** The calls made, as bound, with what they returned. */
  readonly calls: { call: ParsedCall; output: string }[];
}

export interface LoopDeps {
  readonly client: OpenAI;
  readonly dialect: Dialect;
  readonly executor: Executor;
  /** The browsing sub-agent's tools (search and read), as the executor serves them. */
  readonly browsingTools: readonly ToolSpec[];
  readonly maxTurns?: number;
}

function stripThink(text: string): string {
  const close = text.lastIndexOf('</think>');
  return (close === -1 ? text : text.slice(close + '</think>'.length)).trim();
}

async function complete(deps: LoopDeps, messages: ChatMessage[], tools: readonly ToolSpec[]) {
  const { dialect, client } = deps;
  const requestTools = dialect.requestTools?.(tools);
  const r = await client.chat.completions.create({
    model: 'trajforge-sim',
    messages: messages as ChatCompletionMessageParam[],
    ...(requestTools === undefined ? {} : { tools: requestTools as OpenAI.Chat.Completions.ChatCompletionTool[] }),
    ...(dialect.stopStrings.length > 0 ? { stop: [...dialect.stopStrings] } : {}),
    max_tokens: 2048,
  });
  const choice = r.choices[0]!;
  const m = choice.message as typeof choice.message & { reasoning_content?: string };
  const calls: NativeToolCall[] = (m.tool_calls ?? []).flatMap((c) => (c.type === 'function' ? [{ id: c.id, type: 'function' as const, function: { name: c.function.name, arguments: c.function.arguments } }] : []));
  const reasoning = m.reasoning_content ?? '';
  const raw = (reasoning === '' ? '' : `<think>${reasoning}</think>\n`) + (m.content ?? '');
  return { raw, finish: choice.finish_reason === 'length' ? ('length' as const) : ('stop' as const), calls };
}

/**
 * One session: the system prompt (the dialect's, then `objective`), the first user message,
 * turns until an answer or `maxTurns`; then, when `summaryPrompt` is given, that prompt and
 * the reply as the report.
 */
export async function runSession(
  deps: LoopDeps,
  opts: { objective: string; user: string; tools: readonly ToolSpec[]; run: (call: ParsedCall, callId: string) => Promise<string>; summaryPrompt?: string },
): Promise<Session> {
  const { dialect } = deps;
  const messages: ChatMessage[] = [
    { role: 'system', content: `${dialect.systemPrompt(opts.tools)}\n\n${opts.objective}` },
    { role: 'user', content: opts.user },
  ];
  const calls: Session['calls'] = [];
  let answer: string | null = null;
  for (let turn = 0; turn < (deps.maxTurns ?? 8) && answer === null; turn++) {
    const c = await complete(deps, messages, opts.tools);
    const r = dialect.repairTurn(c.raw, c.finish, c.calls);
    if (r.action.kind === 'answer') {
      messages.push(dialect.turnMessage?.(r, []) ?? { role: 'assistant', content: r.text });
      answer = r.text;
      break;
    }
    const parsed = r.action.kind === 'call' ? [r.action.call] : r.action.kind === 'calls' ? r.action.calls : [];
    if (parsed.length === 0) break;
    const bound = parsed.map((p, i) => ({ ...(dialect.bindCall?.(p, opts.tools).call ?? p), id: p.id ?? `call_${turn}_${i}` }));
    messages.push(dialect.turnMessage?.(r, bound) ?? { role: 'assistant', content: r.text });
    for (const call of bound) {
      const output = await opts.run(call, `${call.id}`);
      calls.push({ call, output });
      messages.push(dialect.toolMessage?.(output, call) ?? { role: 'user', content: output });
    }
  }
  let report: string | null = null;
  if (opts.summaryPrompt !== undefined) {
    messages.push({ role: 'user', content: opts.summaryPrompt });
    const c = await complete(deps, messages, opts.tools);
    report = stripThink(c.raw);
    messages.push({ role: 'assistant', content: report });
  }
  return { messages, answer, report, calls };
}

/** The browsing sub-agent on one subtask: search and read through the executor, then the report. */
export function browse(deps: LoopDeps, subtask: string): Promise<Session> {
  return runSession(deps, {
    objective: loadPrompt('browsing-agent-objective').trim(),
    user: renderPrompt(loadPrompt('subtask'), { subtask }).trimEnd(),
    tools: deps.browsingTools,
    run: async (call, callId) => deps.dialect.renderToolOutput((await deps.executor.call(call, callId, new Map())).view).text,
    summaryPrompt: renderPrompt(loadPrompt('browsing-agent-summary'), { task: subtask }).trimEnd(),
  });
}

/** The whole family: the main agent, and one browsing session per subtask it hands over. */
export async function family(deps: LoopDeps, question: string): Promise<{ main: Session; children: Session[] }> {
  const children: Session[] = [];
  const main = await runSession(deps, {
    objective: loadPrompt('main-agent-objective').trim(),
    user: question,
    tools: [SUBAGENT_TOOL],
    run: async (call, callId) => {
      const subtask = typeof call.arguments?.subtask === 'string' ? call.arguments.subtask : call.query;
      const child = await browse(deps, subtask);
      children.push(child);
      return deps.dialect.renderToolOutput({ text: child.report ?? '', textId: `${callId}-0` }).text;
    },
  });
  return { main, children };
}
