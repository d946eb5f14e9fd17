/**
 * A scripted OpenAI-compatible endpoint on loopback that plays a main agent and its sub-agents
 * in tulu, mcp-xml and native, for the agents suites. Each session's role comes from a marker
 * its config puts in the system prompt (`ROLE: main`, `ROLE: mid`, `ROLE: leaf`); its step from
 * how many turns it has taken. A main agent delegates once and answers; a mid sub-agent
 * delegates once, searches once and concludes; a leaf searches and concludes. A sub-agent's
 * final-answer prompt (`browsing-agent-summary`) gets a report with a think block.
 *
 * It counts the requests it holds at once (`maxInFlight`), and can be told to fail a role's
 * sessions (`failRole`: empty replies after its delegation, if it delegates, so the session ends
 * without an answer or a report).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadPrompt } from '../pipeline/prompts.js';

type Dialect = 'tulu' | 'mcp-xml' | 'native';
type Msg = { role: string; content: string | null; tool_calls?: { function: { name: string; arguments: string } }[] };
interface Reply {
  content: string;
  tool_calls?: unknown[];
  finish: string;
}

export interface AgentsModel {
  readonly url: string;
  readonly stats: { requests: number; inFlight: number; maxInFlight: number };
  /** Roles whose sessions never answer: they fail, as `no_answer` or `max_turns`. */
  failRole: Set<string>;
  /** Roles whose session fails the first time it is given a task, and works when given the same task again (a retry). */
  failFirst: Set<string>;
  latencyMs: number;
  close(): Promise<void>;
}

/** The tool that delegates, per role: its name, its server (mcp-xml) and its parameter. */
export const DELEGATE: Record<string, { tool: string; server: string }> = {
  main: { tool: 'research', server: 'researcher-agent' },
  mid: { tool: 'look_up', server: 'lookup-agent' },
};

function dialectOf(system: string, tools: unknown[] | undefined): Dialect {
  if (tools !== undefined && tools.length > 0) return 'native';
  return system.includes('<use_mcp_tool>') ? 'mcp-xml' : 'tulu';
}

function call(d: Dialect, tool: string, server: string, param: string, value: string, n: number): Reply {
  switch (d) {
    case 'tulu':
      return { content: `<think>step ${n}: ${tool}</think>\n<call_tool name="${tool}">${value}</call_tool>`, finish: 'stop' };
    case 'mcp-xml':
      return {
        content: `<think>step ${n}: ${tool}</think>\n<use_mcp_tool>\n<server_name>${server}</server_name>\n<tool_name>${tool}</tool_name>\n<arguments>\n${JSON.stringify({ [param]: value })}\n</arguments>\n</use_mcp_tool>`,
        finish: 'stop',
      };
    case 'native':
      return { content: '', tool_calls: [{ id: `call_${n}`, type: 'function', function: { name: tool, arguments: JSON.stringify({ [param]: value }) } }], finish: 'tool_calls' };
  }
}

function answer(d: Dialect, text: string): Reply {
  switch (d) {
    case 'tulu':
      return { content: `<think>enough</think>\n<answer>${text}</answer>`, finish: 'stop' };
    case 'mcp-xml':
      return { content: `<think>enough</think>\n${text} \\boxed{${text}}`, finish: 'stop' };
    case 'native':
      return { content: text, finish: 'stop' };
  }
}

/** What the scripted model says to one request. `starts` counts the sessions each role has begun per task. */
function respond(body: { messages: Msg[]; tools?: unknown[] }, failRole: ReadonlySet<string>, failFirst: ReadonlySet<string>, starts: Map<string, number>): Reply {
  const messages = body.messages;
  const system = messages[0]?.content ?? '';
  const role = /ROLE: (\w+)/.exec(system)?.[1] ?? 'main';
  const d = dialectOf(system, body.tools);
  const last = messages.at(-1)!;
  const task = messages[1]?.content ?? '';
  const turns = messages.filter((m) => m.role === 'assistant').length;
  const key = `${role}\u0000${task}`;
  if (turns === 0) starts.set(key, (starts.get(key) ?? 0) + 1);
  const failing = failRole.has(role) || (failFirst.has(role) && starts.get(key) === 1);
  // A failing role that delegates still does so first: its family then has sessions below it.
  if (failing && (turns > 0 || !(role in DELEGATE))) return { content: '', finish: 'stop' };
  // A sub-agent's last step: its report.
  if (last.role === 'user' && last.content?.startsWith(loadPrompt('browsing-agent-summary').split('\n')[0]!)) {
    return { content: `<think>Wrapping up the subtask.</think>\nReport (${role}): ${task.split('\n')[0]!.slice(0, 60)} — ${turns} steps taken, the evidence is in the documents read.`, finish: 'stop' };
  }
  // A forced final answer (main), whatever the dialect's prompt.
  if (last.role === 'user' && /final answer/i.test(last.content ?? '') && turns > 0) return answer(d, 'forced done');
  const search = (n: number): Reply => call(d, 'pubmed_search', 'corpus', 'query', `css grid ${role} ${n}`, n);
  if (role === 'main') {
    if (turns === 0) return call(d, DELEGATE.main!.tool, DELEGATE.main!.server, 'subtask', `Find the facts for: ${task.slice(0, 50)}`, 0);
    return answer(d, 'done');
  }
  if (role === 'mid') {
    if (turns === 0) return call(d, DELEGATE.mid!.tool, DELEGATE.mid!.server, 'subtask', `Look up: ${task.slice(0, 40)}`, 0);
    if (turns === 1) return search(1);
  } else if (turns === 0) {
    return search(0);
  }
  // A sub-agent's conclusion: prose with no call (mcp-xml: then its summary prompt), an answer elsewhere.
  return d === 'mcp-xml' ? { content: `<think>I have what I need.</think>\nThe documents answer the subtask.`, finish: 'stop' } : answer(d, `conclusion of ${role}`);
}

export async function startAgentsModel(latencyMs = 0): Promise<AgentsModel> {
  const stats = { requests: 0, inFlight: 0, maxInFlight: 0 };
  const state = { failRole: new Set<string>(), failFirst: new Set<string>(), latencyMs };
  const starts = new Map<string, number>();
  const http: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      stats.requests++;
      stats.inFlight++;
      stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
      const request = JSON.parse(body) as { messages: Msg[]; tools?: unknown[]; stop?: string[] };
      const t = respond(request, state.failRole, state.failFirst, starts);
      // As endpoints do: the text ends before the first stop string, which is not sent.
      for (const stop of request.stop ?? []) if (t.content.includes(stop)) t.content = t.content.slice(0, t.content.indexOf(stop));
      setTimeout(() => {
        stats.inFlight--;
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
      }, state.latencyMs);
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/v1`;
  return {
    url,
    stats,
    get failRole() {
      return state.failRole;
    },
    set failRole(v: Set<string>) {
      state.failRole = v;
    },
    get failFirst() {
      return state.failFirst;
    },
    set failFirst(v: Set<string>) {
      state.failFirst = v;
    },
    get latencyMs() {
      return state.latencyMs;
    },
    set latencyMs(v: number) {
      state.latencyMs = v;
    },
    close: () =>
      new Promise((r) => {
        http.closeAllConnections();
        http.close(() => r());
      }),
  };
}

/** An agents config over the corpus server: main → researcher (mid, with `depth2`) → lookup (leaf). */
export function agentsPatch(dialect: Dialect, opts: { depth2?: boolean; concurrency?: number } = {}): Record<string, unknown> {
  const researcher = {
    instructions: `ROLE: ${opts.depth2 ? 'mid' : 'leaf'}`,
    as_tool: { server: DELEGATE.main!.server, name: DELEGATE.main!.tool },
    ...(opts.depth2 ? { sub_agents: ['lookup'] } : {}),
  };
  return {
    dialect,
    rollback: { conditions: [] },
    executor: { cache: false },
    validation: { gold_match: 'off' },
    concurrency: opts.concurrency ?? 4,
    max_agent_depth: opts.depth2 ? 2 : 1,
    agents: {
      main: { instructions: 'ROLE: main', servers: [], sub_agents: ['researcher'] },
      researcher,
      ...(opts.depth2 ? { lookup: { instructions: 'ROLE: leaf', as_tool: { server: DELEGATE.mid!.server, name: DELEGATE.mid!.tool } } } : {}),
    },
  };
}
