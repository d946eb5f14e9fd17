/**
 * The `agents` section of a run config, resolved: each agent's effective settings (the
 * top-level ones with its overrides), the sub-agents it may call and how each is offered as a
 * tool. Resolved once, when the config is loaded, so that a bad reference (an unknown agent
 * or server, a cycle, nesting past `max_agent_depth`, a prompt that is not there) is an error
 * naming its field before anything runs.
 */
import type { AgentConfig, DialectName, RunConfig } from '../../schemas/index.js';
import { TrajforgeError, UserError } from '../errors.js';
import { loadPrompt, renderPrompt } from '../prompts.js';
import { LAYOUT_ONLY_PROMPTS, layoutNamed, layoutPrompts, type Layout } from '../dialects/mcp-xml-layouts.js';

const AGENT_NAME = /^[A-Za-z0-9_-]+$/;

/** The main agent's name in `agents`, in records (`agent`) and in ids. */
export const MAIN_AGENT = 'main';

/** MiroThinker's browsing sub-agent as its main agent sees it: the defaults for a sub-agent named `browsing`. */
export const BROWSING_TOOL = {
  server: 'browsing-agent',
  name: 'search_and_browse',
  description:
    'This tool is an agent that performs the subtask of searching and browsing the web for specific missing information and generating the desired answer. The subtask should be clearly defined, include relevant background, and focus on factual gaps. It does not perform vague or speculative subtasks. \nArgs: \n\tsubtask: the subtask to be performed. \nReturns: \n\tthe result of the subtask. ',
} as const;

/** The input of a sub-agent tool unless `as_tool.input_schema` says otherwise. */
export function subtaskSchema(param: string): Record<string, unknown> {
  return { type: 'object', properties: { [param]: { title: param.charAt(0).toUpperCase() + param.slice(1), type: 'string' } }, required: [param] };
}

/** Prompts a sub-agent uses unless its section names others (prompts/*.txt). */
export const SUB_AGENT_PROMPTS = { task: 'subtask', finalAnswer: 'browsing-agent-summary', browsingObjective: 'browsing-agent-objective' } as const;

/**
 * Prompt files only runs with agents send. A run without agents leaves them out of its
 * fingerprint, so adding or changing one does not stop such a run from resuming.
 */
export const AGENT_ONLY_PROMPTS: readonly string[] = [SUB_AGENT_PROMPTS.task, SUB_AGENT_PROMPTS.finalAnswer, SUB_AGENT_PROMPTS.browsingObjective, 'main-agent-objective', 'main-agent-summary'];

/** Prompt files only some runs send (agents', a layout's): a run's fingerprint counts them only when it sends them (`sentPrompts`). */
export const OPTIONAL_PROMPTS: readonly string[] = [...new Set([...AGENT_ONLY_PROMPTS, ...LAYOUT_ONLY_PROMPTS])];

/** The layout of a config's mcp-xml prompts (`dialect_options.layout`); trajforge's for other dialects. */
export function layoutOf(cfg: Pick<RunConfig, 'dialect' | 'dialect_options'>): Layout {
  return layoutNamed(cfg.dialect === 'mcp-xml' ? cfg.dialect_options?.layout : undefined);
}

/**
 * The optional prompts a run sends: the ones its agents name (objective, task, final answer and
 * its failed-task note) and its layouts' (the top level's and every agent's).
 */
export function sentPrompts(cfg: RunConfig): string[] {
  const out = new Set<string>(layoutPrompts(layoutOf(cfg).name));
  for (const a of agentSettings(cfg)?.values() ?? []) {
    for (const p of layoutPrompts(layoutOf(a.config).name)) out.add(p);
    for (const p of [a.objectivePrompt, a.finalAnswerPrompt, a.taskPrompt]) if (p !== undefined) out.add(p);
    if (a.finalAnswerPrompt !== undefined && loadPrompt(a.finalAnswerPrompt).includes('{task_failed}')) out.add(`${a.finalAnswerPrompt}-failed`);
  }
  return [...out].sort();
}

/** How a sub-agent is offered to its callers. */
export interface AgentTool {
  readonly server: string;
  readonly name: string;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
  readonly param: string;
}

/** One agent's settings, everything resolved. */
export interface AgentSettings {
  readonly name: string;
  /** The run config as this agent runs it: dialect, tools, budgets, context, rollback, instructions are its own. */
  readonly config: RunConfig;
  /** The mcpServers whose tools it sees. */
  readonly servers: readonly string[];
  /** Whether `tools` is its own (else inherited from the top level, for its servers). */
  readonly ownTools: boolean;
  /** Prompt appended to the system prompt before `instructions`. */
  readonly objectivePrompt: string | undefined;
  /** Prompt that asks for the final answer; undefined: the dialect's own. */
  readonly finalAnswerPrompt: string | undefined;
  readonly finalAnswer: 'always' | 'when_needed';
  /** Sub-agents: the first user message, `{subtask}` filled. */
  readonly taskPrompt: string | undefined;
  /** Sub-agents: how callers see it. */
  readonly asTool: AgentTool | undefined;
  /** The sub-agents it may call, in config order. */
  readonly subAgents: readonly string[];
  /** The deepest it can run at (0 = main), given who calls it. */
  readonly depth: number;
  /** Its prompt layout (mcp-xml `dialect_options.layout`). */
  readonly layout: Layout;
}

/** A problem with the `agents` section: the field and what is wrong with it. */
class AgentConfigProblem extends UserError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

function fail(field: string, message: string): never {
  throw new AgentConfigProblem(field, message);
}

/** The prompt exists and renders with the variables its caller passes (and asks for no other). */
function checkPrompt(field: string, name: string, vars: Record<string, string>): void {
  let text: string;
  try {
    text = loadPrompt(name);
  } catch (err) {
    fail(field, (err as Error).message);
  }
  try {
    renderPrompt(text, vars);
  } catch (err) {
    fail(field, `prompt ${name}: ${(err as Error).message} (it may use ${Object.keys(vars).map((k) => `{${k}}`).join(', ') || 'no placeholder'})`);
  }
  // `{task_failed}` is filled from the prompt's `-failed` note, which must be there too.
  if ('task_failed' in vars && text.includes('{task_failed}')) checkPrompt(field, `${name}-failed`, {});
}

function agentTool(name: string, a: AgentConfig): AgentTool {
  const t = a.as_tool ?? {};
  const browsing = name === 'browsing';
  const param = t.param ?? 'subtask';
  return {
    server: t.server ?? (browsing ? BROWSING_TOOL.server : `${name}-agent`),
    name: t.name ?? (browsing ? BROWSING_TOOL.name : name),
    description: t.description ?? (browsing ? BROWSING_TOOL.description : `An agent that performs a subtask on its own, with its own tools, and returns a report of what it found. Args: ${param}: the subtask to be performed.`),
    inputSchema: t.input_schema ?? subtaskSchema(param),
    param,
  };
}

/**
 * Each agent's settings, `main` first, or undefined when the config has no `agents` (one
 * agent, as today). Throws a TrajforgeError naming the field for a bad reference.
 */
export function agentSettings(cfg: RunConfig): Map<string, AgentSettings> | undefined {
  if (cfg.agents === undefined) return undefined;
  try {
    return resolve(cfg, cfg.agents);
  } catch (err) {
    if (!(err instanceof AgentConfigProblem)) throw err;
    throw new TrajforgeError('BAD_CONFIG', `${err.field}: ${err.message}`, { field: err.field });
  }
}

function resolve(cfg: RunConfig, agents: Record<string, AgentConfig>): Map<string, AgentSettings> {
  const names = Object.keys(agents).filter((n) => n !== MAIN_AGENT);
  for (const name of names) if (!AGENT_NAME.test(name)) fail(`agents.${name}`, 'an agent name is letters, digits, _ and - (it goes into session ids: <parent id>/<agent>#<n>)');
  const calls = (name: string): string[] => (agents[name] ?? {}).sub_agents ?? (name === MAIN_AGENT ? names : []);

  // References first: every sub_agents entry names a sub-agent.
  for (const name of [MAIN_AGENT, ...names]) {
    const list = calls(name);
    list.forEach((callee, i) => {
      const field = `agents.${name}.sub_agents[${i}]`;
      if (callee === MAIN_AGENT) fail(field, 'the main agent cannot be a sub-agent');
      if (!Object.hasOwn(agents, callee)) fail(field, `no agent named ${callee} (have: ${names.join(', ') || 'none'})`);
      if (list.indexOf(callee) !== i) fail(field, `${callee} is listed twice`);
    });
  }
  const depth = agentDepths(cfg.max_agent_depth, calls);
  for (const name of names) if (!depth.has(name)) fail(`agents.${name}`, `no agent calls it: add it to agents.${MAIN_AGENT}.sub_agents or another agent's sub_agents, or remove it`);

  const out = new Map<string, AgentSettings>();
  /** Tool name → the sub-agent offered under it: two under one name is an error. */
  const toolNames = new Map<string, string>();
  for (const name of [MAIN_AGENT, ...names]) {
    const settings = settingsOf(cfg, name, agents[name] ?? {}, { subAgents: calls(name), depth: depth.get(name)! });
    if (settings.asTool !== undefined) {
      const other = toolNames.get(settings.asTool.name);
      if (other !== undefined) fail(`agents.${name}.as_tool.name`, `sub-agents ${other} and ${name} are both offered as ${settings.asTool.name}; give one another as_tool.name`);
      toolNames.set(settings.asTool.name, name);
    }
    out.set(name, settings);
  }
  return out;
}

/** Each agent's depth: the longest chain of calls from main to it, refusing a cycle (it would nest without end) and a chain past `maxDepth`. */
function agentDepths(maxDepth: number, calls: (name: string) => string[]): Map<string, number> {
  const depth = new Map<string, number>([[MAIN_AGENT, 0]]);
  const walk = (name: string, d: number, path: string[]): void => {
    calls(name).forEach((callee, i) => {
      const field = `agents.${name}.sub_agents[${i}]`;
      if (path.includes(callee)) fail(field, `a cycle: ${[...path, callee].join(' → ')}`);
      if (d + 1 > maxDepth) fail(field, `${callee} would run at depth ${d + 1} (${[...path, callee].join(' → ')}), past max_agent_depth (${maxDepth})`);
      depth.set(callee, Math.max(depth.get(callee) ?? 0, d + 1));
      walk(callee, d + 1, [...path, callee]);
    });
  };
  walk(MAIN_AGENT, 0, [MAIN_AGENT]);
  return depth;
}

/** One agent's settings: its section of `agents` over the run's config, each field checked where it is. */
function settingsOf(cfg: RunConfig, name: string, a: AgentConfig, place: { subAgents: string[]; depth: number }): AgentSettings {
  const sub = name !== MAIN_AGENT;
  const at = `agents.${name}`;
  const servers = Object.keys(cfg.mcpServers);
  (a.servers ?? []).forEach((s, i) => {
    if (!servers.includes(s)) fail(`${at}.servers[${i}]`, `no server named ${s} in mcpServers (have: ${servers.join(', ') || 'none'})`);
  });
  const seen = a.servers ?? servers;
  for (const [alias, al] of Object.entries(a.tools?.aliases ?? {})) {
    if (!seen.includes(al.server)) {
      fail(`${at}.tools.aliases.${alias}.server`, servers.includes(al.server) ? `server ${al.server} is not one of this agent's servers (${seen.join(', ') || 'none'})` : `no server named ${al.server} in mcpServers`);
    }
  }
  const dialect: DialectName = a.dialect ?? cfg.dialect;
  if (a.dialect_options !== undefined && dialect !== 'mcp-xml') fail(`${at}.dialect_options`, `only the mcp-xml dialect takes options (today, tool_results); this agent's dialect is ${dialect}`);
  // An mcp-xml agent inherits the top-level options; an agent of another dialect has none.
  const dialectOptions = a.dialect_options ?? (dialect === 'mcp-xml' ? cfg.dialect_options : undefined);
  const config: RunConfig = {
    ...cfg,
    dialect,
    dialect_options: dialectOptions,
    tools: a.tools ?? inheritedTools(cfg.tools, cfg, seen),
    budgets: { ...cfg.budgets, ...defined(a.budgets) },
    context: { ...cfg.context, ...defined(a.context) },
    rollback: { ...cfg.rollback, ...defined(a.rollback) },
    instructions: a.instructions ?? (sub ? undefined : cfg.instructions),
    validation: sub ? reportPolicy(cfg.validation, a.unusable_report ?? 'tool_error') : cfg.validation,
  };
  if (!sub && a.unusable_report !== undefined) fail(`${at}.unusable_report`, 'only a sub-agent reports: the main agent has no report to refuse');
  if (sub && a.final_answer === 'when_needed') fail(`${at}.final_answer`, 'a sub-agent always ends with its final-answer prompt: its reply is the report its caller gets');
  // A layout's own prompts for main and a sub-agent named browsing, unless the section names others.
  const layout = layoutOf(config);
  const own = sub ? (name === 'browsing' ? layout.browsing : undefined) : layout.main;
  const objectivePrompt = a.objective_prompt ?? own?.objective ?? (name === 'browsing' ? SUB_AGENT_PROMPTS.browsingObjective : undefined);
  if (objectivePrompt !== undefined) checkPrompt(`${at}.objective_prompt`, objectivePrompt, {});
  const finalAnswerPrompt = a.final_answer_prompt ?? own?.summary ?? (sub ? SUB_AGENT_PROMPTS.finalAnswer : undefined);
  if (finalAnswerPrompt !== undefined) checkPrompt(`${at}.final_answer_prompt`, finalAnswerPrompt, { question: 'q', task: 't', task_failed: '' });
  const taskPrompt = sub ? (a.task_prompt ?? SUB_AGENT_PROMPTS.task) : undefined;
  if (!sub && a.task_prompt !== undefined) fail(`${at}.task_prompt`, 'only a sub-agent has a task prompt: the main agent starts from the question');
  if (!sub && a.as_tool !== undefined) fail(`${at}.as_tool`, 'the main agent is no one\'s tool');
  if (taskPrompt !== undefined) checkPrompt(`${at}.task_prompt`, taskPrompt, { subtask: 's' });
  const asTool = sub ? agentTool(name, a) : undefined;
  if (asTool !== undefined && !Object.hasOwn((asTool.inputSchema.properties ?? {}) as Record<string, unknown>, asTool.param)) {
    fail(`${at}.as_tool.param`, `the input schema has no property ${asTool.param}`);
  }
  return {
    name,
    config,
    servers: seen,
    ownTools: a.tools !== undefined,
    objectivePrompt,
    finalAnswerPrompt,
    finalAnswer: sub ? 'always' : (a.final_answer ?? 'when_needed'),
    taskPrompt,
    asTool,
    subAgents: place.subAgents,
    depth: place.depth,
    layout,
  };
}

/**
 * A sub-agent's `unusable_report` policy as the severity of `agent.report_unusable` in its own
 * sessions: `tool_error` makes it an error (the session fails, so its caller is shown a tool
 * error), `pass` a warning (the report goes through, flagged). A rule turned off stays off.
 */
function reportPolicy(validation: RunConfig['validation'], policy: 'tool_error' | 'pass'): RunConfig['validation'] {
  const rule = 'agent.report_unusable';
  if (validation.severities[rule] === 'off') return validation;
  return { ...validation, severities: { ...validation.severities, [rule]: policy === 'pass' ? 'warn' : 'error' } };
}

/** The fields an override sets, without the ones it leaves undefined (which would erase the top-level value in a spread). */
function defined<T extends object>(o: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(o ?? {}).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/**
 * The top-level tools as an agent that sees only `servers` inherits them: aliases to other
 * servers and exposed names they lead to are left out; limits stay (a name it never has costs nothing).
 */
function inheritedTools(tools: RunConfig['tools'], cfg: RunConfig, servers: readonly string[]): RunConfig['tools'] {
  if (servers.length === Object.keys(cfg.mcpServers).length) return tools;
  const aliases = Object.fromEntries(Object.entries(tools.aliases).filter(([, a]) => servers.includes(a.server)));
  const dropped = new Set(Object.keys(tools.aliases).filter((k) => !(k in aliases)));
  return { ...tools, aliases, ...(tools.expose === undefined ? {} : { expose: tools.expose.filter((n) => !dropped.has(n)) }) };
}

/** Every dialect the run's agents write: what the fingerprint's prompt hashes must cover. */
export function agentDialects(cfg: RunConfig): DialectName[] {
  const out = new Set<DialectName>([cfg.dialect]);
  for (const a of Object.values(cfg.agents ?? {})) if (a.dialect !== undefined) out.add(a.dialect);
  return [...out].sort();
}
