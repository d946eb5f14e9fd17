/**
 * The three tool-call formats the sim plays, picked per request the way trajforge sends them:
 * a request that offers `tools` is native function calling; a system prompt that shows
 * `<use_mcp_tool>` is MiroThinker's mcp-xml; anything else is DR Tulu's `<call_tool>`.
 *
 * This file knows each format's surface — where the tools are declared, how a call and an
 * answer are written, how to read back the calls a history already holds — and nothing of
 * the policy that decides what to say.
 */
import { readPythonLiteral } from './python-literal.js';
import { closingBrace } from '../pipeline/dialects/arguments.js';
import type { CallSpec, ChatMessage, Evidence, Rng, SimDialect, TextDialect, ToolChoice } from './types.js';

/** How a call's arguments JSON is written: valid, or in one of the ways a lenient parser repairs. */
export type ArgumentStyle = 'json' | 'single_quotes' | 'trailing_comma' | 'unquoted_key';
export const BAD_ARGUMENT_STYLES: readonly ArgumentStyle[] = ['single_quotes', 'trailing_comma', 'unquoted_key'];

/** How one call is written, where a misbehaviour changes it. */
export interface CallVariant {
  readonly style: ArgumentStyle;
  /** The server_name written (mcp-xml), when it is not the tool's own. */
  readonly server?: string | undefined;
}

export const PLAIN_CALL: CallVariant = { style: 'json' };

/** One assistant message as the sim sends it. The text dialects use `content` only. */
export interface SimTurn {
  /** Native `reasoning_content`; '' when the model does not think (and always in the text dialects). */
  readonly reasoning: string;
  readonly content: string;
  readonly toolCalls: readonly SimToolCall[];
}

export interface SimToolCall {
  readonly id: string;
  readonly name: string;
  readonly arguments: string;
}

export const NOT_FOUND_ANSWER = 'I could not find it.';

export function systemText(messages: readonly ChatMessage[]): string {
  return messages
    .filter((m) => m.role === 'system' || m.role === 'developer')
    .map((m) => messageText(m.content))
    .join('\n');
}

export function detectDialect(messages: readonly ChatMessage[], tools: unknown): SimDialect {
  if (Array.isArray(tools) && tools.length > 0) return 'native';
  return systemText(messages).includes('<use_mcp_tool>') ? 'mcp-xml' : 'tulu';
}

// ---------------------------------------------------------------------------------------
// The tool to call

/** A tool as the request declares it. */
export interface Declared {
  readonly name: string;
  readonly server: string | null;
  /** Its input JSON schema, as far as the request shows it (tulu: rebuilt from the listing's parameter lines). */
  readonly schema: unknown;
}

/** `pubmed_search` when it is offered, else the first tool declared; null when there is none. */
export function findTool(dialect: SimDialect, system: string, tools: unknown): ToolChoice | null {
  const declared = dialect === 'native' ? nativeTools(tools) : dialect === 'mcp-xml' ? mcpTools(system) : [];
  if (declared.length === 0) {
    // A tulu prompt names its tools in prose; so may an mcp-xml prompt without a listing.
    const name = tuluToolName(system);
    const server = dialect === 'mcp-xml' ? 'default' : null;
    return name === null ? null : { name, server, argKey: 'query', servers: [], unique: false };
  }
  return toolChoice(declared.find((t) => t.name === 'pubmed_search') ?? declared[0]!, declared);
}

/** How to call `chosen`, one of the tools `declared`. */
export function toolChoice(chosen: Declared, declared: readonly Declared[]): ToolChoice {
  return {
    name: chosen.name,
    server: chosen.server,
    argKey: queryKey(chosen.schema),
    servers: [...new Set(declared.flatMap((t) => (t.server === null ? [] : [t.server])))],
    unique: declared.filter((t) => t.name === chosen.name).length === 1,
  };
}

/**
 * Every tool the request declares, with its schema: native `tools`, an mcp-xml listing, or a
 * tulu listing (trajforge's `### name` sections with their parameter lines). Unlike findTool,
 * a tulu prompt that names its tools only in prose declares none here.
 */
export function declaredTools(dialect: SimDialect, system: string, tools: unknown): Declared[] {
  return dialect === 'native' ? nativeTools(tools) : dialect === 'mcp-xml' ? mcpTools(system) : tuluTools(system);
}

/** The `required` names of a schema; [] when it has none. */
export function requiredParams(schema: unknown): string[] {
  const required = (schema as { required?: unknown } | null | undefined)?.required;
  return Array.isArray(required) ? required.filter((k): k is string => typeof k === 'string') : [];
}

/**
 * trajforge's tulu listing: a `### name` heading per tool, then lines such as
 * "Between the tags: `query` (string, required): …" and "- `limit` (integer, optional, …)".
 */
function tuluTools(system: string): Declared[] {
  const out: Declared[] = [];
  const headings = [...system.matchAll(/^### ([A-Za-z_][\w.-]*)[ \t]*$/gm)];
  headings.forEach((h, i) => {
    const end = headings[i + 1]?.index ?? system.length;
    const section = system.slice((h.index ?? 0) + h[0].length, end);
    const properties: Record<string, { type: string }> = {};
    const required: string[] = [];
    for (const p of section.matchAll(/^(?:Between the tags: |- )`([^`]+)` \(([^)]*)\)/gm)) {
      const facts = (p[2] ?? '').split(',').map((f) => f.trim());
      properties[p[1]!] = { type: facts[0] ?? 'string' };
      if (facts.includes('required')) required.push(p[1]!);
    }
    out.push({ name: h[1]!, server: null, schema: { type: 'object', properties, required } });
  });
  return out;
}

function nativeTools(tools: unknown): Declared[] {
  if (!Array.isArray(tools)) return [];
  const out: Declared[] = [];
  for (const t of tools) {
    const fn = (t as { function?: { name?: unknown; parameters?: unknown } } | null)?.function;
    if (typeof fn?.name === 'string' && fn.name !== '') out.push({ name: fn.name, server: null, schema: fn.parameters });
  }
  return out;
}

/** The `## Server name:` / `### Tool name:` / `Input JSON schema:` listing of a MiroThinker prompt. */
function mcpTools(system: string): Declared[] {
  const out: { name: string; server: string | null; schema: unknown }[] = [];
  let server: string | null = null;
  for (const m of system.matchAll(/^[ \t]*(## Server name|### Tool name|Input JSON schema):[ \t]*(.*)$/gm)) {
    const value = (m[2] ?? '').trim();
    if (m[1] === '## Server name') server = value;
    else if (m[1] === '### Tool name') {
      if (value !== '') out.push({ name: value, server, schema: undefined });
    } else {
      const last = out[out.length - 1];
      // JSON (trajforge's layout) or Python dict text (MiroThinker's: `{'type': 'object', …}`).
      if (last !== undefined && last.schema === undefined) last.schema = jsonObjectAt(system, m.index ?? 0) ?? pythonObjectAt(system, m.index ?? 0);
    }
  }
  return out;
}

/** The JSON object starting at the first `{` from `at` (it may span lines), or undefined. */
function jsonObjectAt(text: string, at: number): unknown {
  const start = text.indexOf('{', at);
  if (start === -1) return undefined;
  const end = closingBrace(text, start);
  if (end === -1) return undefined;
  try {
    return JSON.parse(text.slice(start, end + 1));
  } catch {
    return undefined;
  }
}

/** The Python dict literal starting at the first `{` from `at`, or undefined. */
function pythonObjectAt(text: string, at: number): unknown {
  const start = text.indexOf('{', at);
  return start === -1 ? undefined : readPythonLiteral(text, start);
}

/** The first required string property (in `required` order), else the first string property, else `query`. */
export function queryKey(schema: unknown): string {
  const s = schema as { properties?: unknown; required?: unknown } | null | undefined;
  const props = s?.properties;
  if (props === null || typeof props !== 'object') return 'query';
  const isString = (key: string): boolean => {
    const type = (props as Record<string, { type?: unknown } | null>)[key]?.type;
    return type === 'string' || (Array.isArray(type) && type.includes('string'));
  };
  const required = Array.isArray(s?.required) ? s.required.filter((k): k is string => typeof k === 'string') : [];
  return required.find((k) => Object.hasOwn(props, k) && isString(k)) ?? Object.keys(props).find(isString) ?? 'query';
}

function tuluToolName(system: string): string | null {
  if (/\bpubmed_search\b/.test(system)) return 'pubmed_search';
  const patterns = [
    /\bname\s*=\s*["']([A-Za-z_][\w.-]*)["']/g,
    /"name"\s*:\s*"([A-Za-z_][\w.-]*)"/g,
    /^[ \t]*(?:[-*][ \t]*)?name[ \t]*:[ \t]*([A-Za-z_][\w.-]*)/gm,
  ];
  let best: { at: number; name: string } | null = null;
  for (const pattern of patterns) {
    for (const m of system.matchAll(pattern)) {
      const name = m[1];
      // Format descriptions show a placeholder call; it is not a tool.
      if (name === undefined || /^(tool_?name|name|tool)$/i.test(name)) continue;
      if (best === null || (m.index ?? 0) < best.at) best = { at: m.index ?? 0, name };
      break;
    }
  }
  return best?.name ?? null;
}

/** A server_name that is not the tool's (`default`, or its own misspelled); null when the tool name alone would not say which server is meant. */
export function wrongServerName(tool: ToolChoice, rng: Rng): string | null {
  const right = tool.server;
  if (right === null || !tool.unique) return null;
  const swapped = right.length < 2 ? right : `${right.slice(0, -2)}${right.at(-1)}${right.at(-2)}`;
  const candidates = ['default', right.slice(0, -1), swapped, `${right}${right.at(-1)}`].filter(
    (n, i, all) => n !== '' && n !== right && !tool.servers.includes(n) && all.indexOf(n) === i,
  );
  return candidates[Math.floor(rng() * candidates.length)] ?? null;
}

// ---------------------------------------------------------------------------------------
// The calls a history holds

/**
 * One entry per call the assistant messages made, holding its query ('' when it cannot be
 * read). Counted from the calls, not the results, so a client that replaced old results with
 * a placeholder still gets an answer after the right number of searches.
 */
export function callsMade(dialect: SimDialect, messages: readonly ChatMessage[]): string[] {
  return messages.flatMap((m) => (m.role === 'assistant' ? callsIn(dialect, m).map((c) => c.query) : []));
}

/** A call an assistant message made: the tool it named ('' when unreadable) and its query. */
export interface MadeCall {
  readonly tool: string;
  readonly query: string;
}

/** The calls of one assistant message, in order. */
export function callsIn(dialect: SimDialect, m: ChatMessage): MadeCall[] {
  const out: MadeCall[] = [];
  if (dialect === 'native') {
    if (!Array.isArray(m.tool_calls)) return out;
    for (const c of m.tool_calls) {
      const fn = (c as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
      out.push({ tool: typeof fn?.name === 'string' ? fn.name : '', query: typeof fn?.arguments === 'string' ? argumentsQuery(fn.arguments) : '' });
    }
    return out;
  }
  const text = messageText(m.content);
  const open = dialect === 'tulu' ? '<call_tool' : '<use_mcp_tool';
  for (let at = text.indexOf(open); at !== -1; at = text.indexOf(open, at + open.length)) {
    if (dialect === 'tulu') {
      const tag = /<call_tool\b([^>]*)>([^<\n]*)/y.exec(text.slice(at));
      const name = /\bname\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))/.exec(tag?.[1] ?? '');
      out.push({ tool: name?.[1] ?? name?.[2] ?? name?.[3] ?? '', query: (tag?.[2] ?? '').trim() });
    } else {
      const end = text.indexOf(open, at + open.length);
      const block = text.slice(at, end === -1 ? text.length : end);
      const args = /<arguments>([\s\S]*?)(?:<\/arguments>|$)/.exec(block)?.[1];
      const tool = /<tool_name>\s*([^<]*?)\s*<\/tool_name>/.exec(block)?.[1] ?? '';
      out.push({ tool, query: args === undefined ? '' : argumentsQuery(args) });
    }
  }
  return out;
}

/** The first string value of an arguments object, read leniently. */
function argumentsQuery(args: string): string {
  try {
    const parsed: unknown = JSON.parse(args);
    if (parsed !== null && typeof parsed === 'object') {
      const value = Object.values(parsed).find((v): v is string => typeof v === 'string');
      if (value !== undefined) return value;
    }
  } catch {
    // Repairable JSON (single quotes, a trailing comma, a bare key) still names its query.
  }
  const m = /:\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')/.exec(args);
  return m?.[1] ?? m?.[2] ?? args.trim();
}

// ---------------------------------------------------------------------------------------
// Writing a turn

export function renderThink(reasoning: string | null): string {
  return reasoning === null ? '' : `<think>${reasoning}</think>\n`;
}

/** The arguments object: `key` holding `value` in `style`, then `extra` as JSON. */
export function renderArguments(key: string, value: string, style: ArgumentStyle, compact: boolean, extra: Readonly<Record<string, unknown>> = {}): string {
  const colon = compact ? ':' : ': ';
  const quoted = JSON.stringify(value);
  const rest = Object.entries(extra)
    .map(([k, v]) => `,${compact ? '' : ' '}${JSON.stringify(k)}${colon}${JSON.stringify(v)}`)
    .join('');
  switch (style) {
    case 'json':
      return `{${JSON.stringify(key)}${colon}${quoted}${rest}}`;
    case 'single_quotes':
      return `{${singleQuoted(key)}${colon}${singleQuoted(value)}${rest}}`;
    case 'trailing_comma':
      return `{${JSON.stringify(key)}${colon}${quoted}${rest},}`;
    case 'unquoted_key':
      return `{${key}${colon}${quoted}${rest}}`;
  }
}

function singleQuoted(s: string): string {
  return `'${JSON.stringify(s).slice(1, -1).replace(/\\"/g, '"').replace(/'/g, "\\'")}'`;
}

export function renderTextCall(dialect: TextDialect, call: CallSpec, closed: boolean, variant: CallVariant = PLAIN_CALL): string {
  const { tool, query } = call;
  if (dialect === 'tulu') {
    const attrs = tool.name === 'pubmed_search' ? ' limit="5"' : '';
    return `<call_tool name="${tool.name}"${attrs}>${query}${closed ? '</call_tool>' : ''}`;
  }
  return (
    `<use_mcp_tool>\n<server_name>${variant.server ?? tool.server ?? 'default'}</server_name>\n<tool_name>${tool.name}</tool_name>\n` +
    `<arguments>\n${renderArguments(tool.argKey, query, variant.style, false, call.args)}\n</arguments>${closed ? '\n</use_mcp_tool>' : ''}`
  );
}

/** The answer as tulu writes it inside `<answer>` and native writes it as the whole content: the sentence and a cite. */
export function answerText(evidence: Evidence | null): string {
  if (evidence === null) return NOT_FOUND_ANSWER;
  const { snippet, sentence } = evidence;
  // Evidence shown under no id (a report sent back as bare text) cannot be cited.
  if (snippet.id === '') return sentence;
  return snippet.title === null
    ? `<cite id="${snippet.id}">${sentence}</cite>`
    : `${sentence} <cite id="${snippet.id}">${snippet.title}</cite>`;
}

/** `lead` (mcp-xml): the prose before the box in place of the default line; '' for the box alone. */
export function renderTextAnswer(dialect: TextDialect, evidence: Evidence | null, closed: boolean, lead?: string): string {
  if (dialect === 'tulu') return `<answer>${answerText(evidence)}${closed ? '</answer>' : ''}`;
  const prose = lead ?? (evidence === null ? 'Nothing I was shown answers the question.' : `Snippet ${evidence.snippet.id} says: ${evidence.sentence}`);
  // A brace in the sentence (CSS, code) must not close the box early.
  const boxed = (evidence?.sentence ?? NOT_FOUND_ANSWER).replace(/[{}]/g, '\\$&');
  return `${prose === '' ? '' : `${prose}\n\n`}\\boxed{${boxed}${closed ? '}' : ''}`;
}

/** A message's text: a string, or the text parts of a content array; '' for null. */
export function messageText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part) => {
      if (typeof part === 'string') return part;
      const text = (part as { text?: unknown } | null)?.text;
      return typeof text === 'string' ? text : '';
    })
    .join('');
}
