/**
 * Agents: a main agent whose tools include sub-agents. Each agent gets its own view of the
 * MCP servers (its tools config), its sub-agents as tools in its dialect, its system prompt and
 * its effective settings (pipeline/core/agent-config.ts). A call to a sub-agent runs a session of
 * its own (rollout.ts, with its own conversation, budgets and repeated-call tracking) whose
 * report is the call's tool output; the child's records come back with the call, and the
 * root's session returns its whole family: every session, validated as a family, with a
 * session below a failed one failed too (`parent_failed`).
 *
 * A config without `agents` is one agent, as it always was: the top-level tools and prompt,
 * records without agent fields, a family of one.
 */
import { SCHEMA_VERSION, type Experience, type RunConfig, type Sample, type Trajectory } from '../../schemas/index.js';
import { agentSettings, MAIN_AGENT, type AgentSettings } from '../core/agent-config.js';
import { dialectFor, getDialect } from '../dialects/index.js';
import type { Dialect, ParsedCall, ToolSpec } from '../dialects/types.js';
import { TrajforgeError } from '../errors.js';
import { loadPrompt, renderPrompt } from '../prompts.js';
import { reportView, validateFamily } from '../core/validator.js';
import { coerceArguments, skippedCall, type CallSite, type ExecResult, type Executor, type Toolbox, type ToolView } from './executor.js';
import type { Completion, CompletionRequest } from '../core/llm/llm.js';
import { runAgentSession, type AgentRole, type RolloutDeps } from './rollout.js';

/** A root session and every session below it, from one attempt. */
export interface Family {
  readonly root: Trajectory;
  /** Every session's record, post-order: each after the sessions it started, the root last. How the store writes them. */
  readonly records: readonly Trajectory[];
}

/** One agent, ready to run: its settings, dialect, prompt and tools. */
interface AgentPlan {
  readonly settings: AgentSettings | undefined;
  readonly name: string;
  readonly config: RunConfig;
  readonly dialect: Dialect;
  readonly systemPrompt: string;
  readonly view: Toolbox;
  /** The sub-agents it may call, by the tool name it calls them with. */
  readonly subs: ReadonlyMap<string, string>;
  /** Everything listed for the model: its MCP tools, then its sub-agents. */
  readonly tools: readonly ToolSpec[];
}

/** Where a session sits: what its children's ids, depth and attempt come from. */
interface Place {
  readonly id: string;
  readonly attempt: number;
  readonly depth: number;
  readonly familyId: string;
}

/** What every session of a rollout shares. */
export interface RolloutContext {
  readonly llm: { complete(req: CompletionRequest): Promise<Completion> };
  readonly runId: string;
  /** Aborting cancels every session of the family. */
  readonly signal?: AbortSignal | undefined;
}

export class Agents {
  readonly #plans = new Map<string, AgentPlan>();
  /** Whether the run has an `agents` config: its records carry agent fields. */
  readonly configured: boolean;

  /**
   * Resolves every agent's tools, dialect and prompt: a tool name an agent would see twice is an
   * error naming the field. `runCreatedAt` is the run's `manifest.created_at`, whose date an
   * mcp-xml agent with `dialect_options.today: run` writes (default now: for the check made
   * before the run directory is opened).
   */
  constructor(opts: { readonly config: RunConfig; readonly executor: Executor; readonly runCreatedAt?: string | undefined }) {
    const createdAt = opts.runCreatedAt ?? new Date().toISOString();
    const settings = agentSettings(opts.config);
    this.configured = settings !== undefined;
    if (settings === undefined) {
      const dialect = dialectFor(opts.config.dialect, opts.config.dialect_options, createdAt);
      const tools = opts.executor.tools();
      this.#plans.set(MAIN_AGENT, {
        settings: undefined,
        name: MAIN_AGENT,
        config: opts.config,
        dialect,
        systemPrompt: [dialect.systemPrompt(tools), opts.config.instructions].filter(Boolean).join('\n\n'),
        view: opts.executor,
        subs: new Map(),
        tools,
      });
      return;
    }
    for (const s of settings.values()) this.#plans.set(s.name, plan(s, settings, opts.executor, createdAt));
  }

  /** Each agent and the tools it is offered (its MCP tools, then its sub-agents), main first. */
  offered(): [string, readonly ToolSpec[]][] {
    return [...this.#plans.values()].map((p) => [p.name, p.tools]);
  }

  /** Each agent as the model meets it: its dialect, system prompt and tools (MCP tools, then sub-agents), main first. */
  shown(): Pick<AgentPlan, 'name' | 'dialect' | 'systemPrompt' | 'tools'>[] {
    return [...this.#plans.values()].map(({ name, dialect, systemPrompt, tools }) => ({ name, dialect, systemPrompt, tools }));
  }

  /** The main agent's dialect, config and tools: what a failure summary is asked with. */
  get main(): Pick<AgentPlan, 'dialect' | 'config' | 'tools'> {
    return this.#plans.get(MAIN_AGENT)!;
  }

  /** One sample's family: the main agent's session and every sub-agent session it started. */
  async rollout(sample: Sample, attempt: number, ctx: RolloutContext, experience?: Experience): Promise<Family> {
    const main = this.#plans.get(MAIN_AGENT)!;
    const place: Place = { id: sample.sample_id, attempt, depth: 0, familyId: sample.sample_id };
    const role: AgentRole | undefined = this.configured
      ? { name: MAIN_AGENT, depth: 0, familyId: sample.sample_id, finalAnswer: main.settings!.finalAnswer, reports: false, finalAnswerPrompt: main.settings!.finalAnswerPrompt }
      : undefined;
    const { trajectory, descendants } = await runAgentSession(sample, attempt, this.#deps(main, place, role, ctx), ctx.signal, experience);
    return assemble([...descendants, trajectory]);
  }

  #deps(agent: AgentPlan, place: Place, role: AgentRole | undefined, ctx: RolloutContext): RolloutDeps {
    return {
      llm: ctx.llm,
      toolbox: agent.subs.size === 0 ? agent.view : new AgentToolbox(agent, (name, subtask, call, site, started) => this.#runChild(name, subtask, call, site, place, started, ctx)),
      dialect: agent.dialect,
      config: agent.config,
      systemPrompt: agent.systemPrompt,
      runId: ctx.runId,
      tools: agent.tools,
      agent: role,
    };
  }

  /**
   * A sub-agent's session, as the tool call that started it: its report (or why it has none)
   * and its records. Its id is `<parent id>/<agent>#<n>`, its attempt its family's.
   */
  async #runChild(name: string, subtask: string, call: ExecBase, site: CallSite, parent: Place, started: number, ctx: RolloutContext): Promise<ExecResult> {
    const agent = this.#plans.get(name)!;
    const s = agent.settings!;
    const id = `${parent.id}/${name}#${site.nextChild(name)}`;
    const place: Place = { id, attempt: parent.attempt, depth: parent.depth + 1, familyId: parent.familyId };
    // Without the file's last newline, as the agents' prompts are sent.
    const question = renderPrompt(loadPrompt(s.taskPrompt!), { subtask }).trimEnd();
    const sample: Sample = { sample_id: id, sample_index: 0, question: { schema_version: SCHEMA_VERSION, id, question } };
    const role: AgentRole = {
      name,
      depth: place.depth,
      familyId: parent.familyId,
      parentId: parent.id,
      parentCall: site.index,
      finalAnswer: 'always',
      reports: true,
      finalAnswerPrompt: s.finalAnswerPrompt,
      task: s.layout.summaryRepeatsMessage === true ? question : subtask,
    };
    const { trajectory, descendants } = await runAgentSession(sample, parent.attempt, this.#deps(agent, place, role, ctx), ctx.signal);
    const child = { id, records: [...descendants, trajectory] };
    const durationMs = performance.now() - started;
    if (trajectory.status === 'ok') {
      return { ...call, result: trajectory.final_answer, truncated: false, view: reportView(trajectory.final_answer, call.callId), skipped: false, cached: false, durationMs, child };
    }
    const error = `sub-agent ${name} failed: ${trajectory.reason ?? 'unknown'}${trajectory.error ? `: ${trajectory.error}` : ''}`;
    return { ...call, result: { error }, truncated: false, view: { error }, error, skipped: false, cached: false, durationMs, child };
  }
}

/** The fields of a sub-agent call's result known before its session runs. */
type ExecBase = Pick<ExecResult, 'server' | 'mcpTool' | 'parameters' | 'arguments'> & { readonly callId: string };

type RunChild = (name: string, subtask: string, call: ExecBase, site: CallSite, started: number) => Promise<ExecResult>;

/** An agent's MCP view plus its sub-agents, for one session. */
class AgentToolbox implements Toolbox {
  readonly #agent: AgentPlan;
  readonly #run: RunChild;

  constructor(agent: AgentPlan, run: RunChild) {
    this.#agent = agent;
    this.#run = run;
  }

  tools(): ToolSpec[] {
    return [...this.#agent.tools];
  }

  hasTool(name: string): boolean {
    return this.#agent.subs.has(name) || this.#agent.view.hasTool(name);
  }

  call(call: ParsedCall, callId: string, used: ReadonlyMap<string, number>, site?: CallSite): Promise<ExecResult> {
    const name = this.#agent.subs.get(call.toolName);
    if (name === undefined || site === undefined) return this.#agent.view.call(call, callId, used, site);
    const started = performance.now();
    const spec = this.#agent.tools.find((t) => t.name === call.toolName)!;
    const limit = this.#agent.config.tools.limits[call.toolName];
    if (limit !== undefined && (used.get(call.toolName) ?? 0) >= limit) {
      return Promise.resolve(skippedCall(call, `call limit reached: ${call.toolName} may be called at most ${limit} times; answer with what you have`));
    }
    let mapped: ReturnType<typeof coerceArguments>;
    try {
      mapped = coerceArguments(call, spec.inputSchema, spec.bodyParam);
    } catch (err) {
      return Promise.resolve(skippedCall(call, (err as Error).message));
    }
    const subtask = mapped.arguments[spec.bodyParam!];
    if (typeof subtask !== 'string' || subtask.trim() === '') {
      return Promise.resolve(skippedCall(call, `${spec.bodyParam} must be a non-empty string: the subtask for the sub-agent`));
    }
    // Numbered now, before any await: the calls of a turn get their numbers in call order.
    return this.#run(name, subtask, { server: spec.server ?? null, mcpTool: spec.name, parameters: mapped.parameters, arguments: mapped.arguments, callId }, site, started);
  }
}

/** An agent's view, prompt and tools. A sub-agent's tool name that one of its MCP tools already has is an error. */
function plan(s: AgentSettings, all: ReadonlyMap<string, AgentSettings>, executor: Executor, createdAt: string): AgentPlan {
  const dialect = dialectFor(s.config.dialect, s.config.dialect_options, createdAt);
  const view: ToolView = executor.view(s.config.tools, {
    servers: s.servers,
    field: s.ownTools ? `agents.${s.name}.tools` : 'tools',
    inherited: !s.ownTools,
  });
  const mcp = view.tools();
  const subs = new Map<string, string>();
  const specs: ToolSpec[] = [];
  s.subAgents.forEach((name, i) => {
    const t = all.get(name)!.asTool!;
    const clash = mcp.find((m) => m.name === t.name);
    if (clash !== undefined) {
      const field = `agents.${name}.as_tool.name`;
      throw new TrajforgeError('BAD_CONFIG', `${field}: ${name} is offered to ${s.name} as ${t.name}, a name its server ${clash.server} also has; give the sub-agent another name (agents.${s.name}.sub_agents[${i}])`, { field });
    }
    subs.set(t.name, name);
    specs.push({ name: t.name, description: t.description, inputSchema: t.inputSchema, bodyParam: t.param, server: t.server });
  });
  const tools = [...mcp, ...specs];
  const objective = s.objectivePrompt === undefined ? undefined : loadPrompt(s.objectivePrompt).trimEnd();
  return {
    settings: s,
    name: s.name,
    config: s.config,
    dialect,
    systemPrompt: [dialect.systemPrompt(tools), objective, s.config.instructions].filter(Boolean).join('\n\n'),
    view,
    subs,
    tools,
  };
}

/**
 * A family's records as they are written: checked as a family (validator.ts `validateFamily`:
 * every call to a sub-agent shows that session's report), and every session below a failed
 * one failed too, with reason `parent_failed` and its own validation kept.
 */
export function assemble(records: readonly Trajectory[]): Family {
  const issues = validateFamily(records, { dialectOf: getDialect });
  const out = records.map((t): Trajectory => {
    const found = issues.get(t.id);
    if (found === undefined) return t;
    const validation = { passed: t.validation.passed && !found.some((i) => i.severity === 'error'), issues: [...t.validation.issues, ...found] };
    if (t.status === 'failed' || validation.passed) return { ...t, validation };
    const errors = found.filter((i) => i.severity === 'error').map((i) => `${i.rule}: ${i.message}`);
    return { ...t, validation, status: 'failed', reason: 'invalid', error: errors.join('; ') };
  });
  // Parents before children (reverse post-order): a failure flows down the whole subtree.
  const byId = new Map(out.map((t) => [t.id, t]));
  for (let i = out.length - 1; i >= 0; i--) {
    const t = out[i]!;
    if (t.parent_id === undefined || t.status === 'failed') continue;
    const parent = byId.get(t.parent_id);
    if (parent === undefined || parent.status !== 'failed') continue;
    const failed: Trajectory = { ...t, status: 'failed', reason: 'parent_failed', error: `its parent session ${parent.id} failed (${parent.reason ?? 'unknown'})` };
    out[i] = failed;
    byId.set(t.id, failed);
  }
  return { root: out[out.length - 1]!, records: out };
}
