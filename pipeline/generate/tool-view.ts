/**
 * Tool listing and aliases: what one agent can call over the executor's servers. A tools config
 * (`aliases`, `expose`, `limits`) makes routes from the names the model sees to server tools;
 * each route knows the parameter a call's body goes to. `ToolView` is the Toolbox the rollout
 * gets: the tools it lists, whether a name can be called, and a call refused before any server
 * when it is unknown, over its limit or cannot be bound to the tool's schema.
 */
import type { McpServerConfig, RunConfig } from '../../schemas/index.js';
import type { ParsedCall, ToolSpec } from '../dialects/types.js';
import { TrajforgeError } from '../errors.js';
import { coerceArguments } from './call-arguments.js';
import { skippedCall, type ExecResult } from './exec-result.js';
import type { ServerTool } from './mcp-server.js';

/** How a name the model sees reaches a server tool. */
export interface Route {
  readonly server: string;
  readonly tool: ServerTool;
  readonly bodyParam: string | undefined;
  readonly spec: ToolSpec;
}
/** The parameter that receives a call's body: the alias's choice, `query`, or the first required string. */
function pickBodyParam(schema: Record<string, unknown>, preferred?: string): string | undefined {
  const props = (schema.properties ?? {}) as Record<string, { type?: unknown }>;
  if (preferred && preferred in props) return preferred;
  const isString = (k: string): boolean => props[k]?.type === 'string' || props[k]?.type === undefined;
  const required = Array.isArray(schema.required) ? (schema.required as string[]) : [];
  for (const k of ['query', ...required, ...Object.keys(props)]) if (k in props && isString(k)) return k;
  return undefined;
}
/** Where a call stands in its session, for a toolbox that starts sessions of its own (sub-agents). */
export interface CallSite {
  /** The call's index in the session's `tool_calls`. */
  readonly index: number;
  /**
   * The next number for a session this call starts under `key` (a sub-agent's name), counting
   * only those of the session's kept turns: child ids are `<parent id>/<agent>#<n>`. Call it
   * before the call's first await, so that the calls of a turn are numbered in call order.
   */
  nextChild(key: string): number;
}

/**
 * The tools one agent can call, as the rollout sees them: what to list for the model, whether a
 * name can be called, and the call itself. The executor gives each agent a view of its MCP
 * servers (generate/agents.ts adds the sub-agents); the rollout knows nothing else of them.
 */
export interface Toolbox {
  /** The tools shown to the model. */
  tools(): ToolSpec[];
  /** Whether the model may call this name: only the tools shown can be reached. */
  hasTool(name: string): boolean;
  /** Runs one call. Never throws for a tool's misbehaviour; `used` counts this session's calls per tool, for the limits. */
  call(call: ParsedCall, callId: string, used: ReadonlyMap<string, number>, site?: CallSite): Promise<ExecResult>;
}

export interface ViewOptions {
  /** The servers whose tools it sees; default all. */
  readonly servers?: readonly string[] | undefined;
  /** Where its tools config is written, for errors: `tools` or `agents.NAME.tools`. */
  readonly field?: string | undefined;
  /**
   * Inherited from the top-level tools by an agent that sees fewer servers: an exposed name
   * that leads to no tool of its servers is left out instead of being an error.
   */
  readonly inherited?: boolean | undefined;
}

/** How a view hands a routed, mapped call to the executor. */
export type RunRoute = (route: Route, mapped: ReturnType<typeof coerceArguments>, callId: string, started: number) => Promise<ExecResult>;

/** One agent's tools over the executor's servers: its routes, exposed names and limits. */
export class ToolView implements Toolbox {
  readonly #routes: Map<string, Route>;
  /** The tools shown to the model, and the only ones a call may reach. */
  readonly #exposed: string[];
  readonly #limits: Record<string, number>;
  readonly #run: RunRoute;

  constructor(routes: Map<string, Route>, exposed: string[], limits: Record<string, number>, run: RunRoute) {
    this.#routes = routes;
    this.#exposed = exposed;
    this.#limits = limits;
    this.#run = run;
  }

  tools(): ToolSpec[] {
    return this.#exposed.map((n) => this.#routes.get(n)!.spec);
  }

  hasTool(name: string): boolean {
    return this.#exposed.includes(name);
  }

  async call(call: ParsedCall, callId: string, used: ReadonlyMap<string, number>): Promise<ExecResult> {
    const started = performance.now();
    const refuse = (message: string): ExecResult => ({
      ...skippedCall(call, message),
      server: route?.server ?? null,
      mcpTool: route?.tool.name ?? null,
      durationMs: performance.now() - started,
    });
    // A tool left out of tools.expose is unknown to the model, whatever a server offers.
    const route = this.hasTool(call.toolName) ? this.#routes.get(call.toolName) : undefined;
    if (!route) return refuse(`unknown tool "${call.toolName}"; available tools: ${this.#exposed.join(', ')}`);
    const limit = this.#limits[call.toolName];
    if (limit !== undefined && (used.get(call.toolName) ?? 0) >= limit) {
      return refuse(`call limit reached: ${call.toolName} may be called at most ${limit} times; answer with what you have`);
    }
    let mapped: ReturnType<typeof coerceArguments>;
    try {
      mapped = coerceArguments(call, route.tool.inputSchema, route.bodyParam);
    } catch (err) {
      return refuse((err as Error).message);
    }
    return this.#run(route, mapped, callId, started);
  }
}

/**
 * The routes of a tools config over the listed servers (`aliases` first, then each server tool
 * by its own name unless an alias took it), and the names exposed to the model. An alias or
 * exposed name that leads nowhere, and one tool name offered by two servers, are errors naming
 * the field.
 */
export function routeTools(
  listed: ReadonlyMap<string, readonly ServerTool[]>,
  configured: Readonly<Record<string, McpServerConfig>>,
  tools: RunConfig['tools'],
  opts: ViewOptions,
): { routes: Map<string, Route>; exposed: string[] } {
  const field = opts.field ?? 'tools';
  const routes = new Map<string, Route>();
  const add = (name: string, server: string, tool: ServerTool, bodyParamPref?: string, description?: string): void => {
    const bodyParam = pickBodyParam(tool.inputSchema, bodyParamPref);
    routes.set(name, {
      server,
      tool,
      bodyParam,
      spec: { name, description: description ?? tool.description, inputSchema: tool.inputSchema, bodyParam, server },
    });
  };
  for (const [alias, a] of Object.entries(tools.aliases)) {
    const at = `${field}.aliases.${alias}.server`;
    if (configured[a.server]?.disabled === true) {
      throw new TrajforgeError('BAD_CONFIG', `${at}: server ${a.server} is disabled (mcpServers.${a.server}.disabled: true)`, { field: at });
    }
    if (!listed.has(a.server)) throw new TrajforgeError('BAD_CONFIG', `${at}: no server named ${a.server} in mcpServers`, { field: at });
    const tool = listed.get(a.server)!.find((t) => t.name === a.tool);
    if (!tool) {
      const names = listed.get(a.server)!.map((t) => t.name).join(', ');
      throw new TrajforgeError('BAD_CONFIG', `${field}.aliases.${alias}.tool: server ${a.server} has no tool ${a.tool} (it has: ${names})`, {
        field: `${field}.aliases.${alias}.tool`,
      });
    }
    add(alias, a.server, tool, a.body_param, a.description);
  }
  // Server tools are callable by their own names too, unless an alias took the name.
  const offeredBy = new Map<string, string[]>();
  for (const [server, ts] of listed) {
    for (const t of ts) {
      offeredBy.set(t.name, [...(offeredBy.get(t.name) ?? []), server]);
      if (!routes.has(t.name)) add(t.name, server, t);
    }
  }
  return { routes, exposed: exposedNames(routes, offeredBy, tools, field, opts.inherited === true) };
}

/** The names shown to the model: `expose`, else the aliases, else every route; each must lead to one tool. */
function exposedNames(routes: ReadonlyMap<string, Route>, offeredBy: ReadonlyMap<string, string[]>, tools: RunConfig['tools'], field: string, inherited: boolean): string[] {
  let exposed = tools.expose ?? (Object.keys(tools.aliases).length ? Object.keys(tools.aliases) : [...routes.keys()]);
  if (inherited) exposed = exposed.filter((name) => routes.has(name));
  for (const name of exposed) {
    if (!routes.has(name)) {
      throw new TrajforgeError('BAD_CONFIG', `${field}.expose: no tool or alias named ${name} (have: ${[...routes.keys()].join(', ')})`, {
        field: `${field}.expose`,
      });
    }
    const owners = offeredBy.get(name) ?? [];
    if (owners.length > 1 && !(name in tools.aliases)) {
      // Whichever server listed first would win, silently: the user has to say which one is meant.
      throw new TrajforgeError(
        'BAD_CONFIG',
        `${field}: servers ${owners.slice(0, -1).join(', ')} and ${owners.at(-1)} both offer a tool named ${name}; ` +
          `choose one with an alias (${field}.aliases.${name}: {server: ${owners[0]}, tool: ${name}})${tools.expose ? ` or leave ${name} out of ${field}.expose` : ''}`,
        { field: tools.expose ? `${field}.expose` : `${field}.aliases` },
      );
    }
  }
  return exposed;
}
