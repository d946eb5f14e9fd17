/**
 * The mcp-xml dialect's system prompt, in MiroThinker's layout: a layout's system template
 * (mcp-xml-layouts.ts) with every server and its tools (description, input schema) listed, and
 * the settings of MiroThinker's form (a `Today is:` sentence, tool results as bare user turns).
 */
import { loadPrompt, renderPrompt } from '../prompts.js';
import { layoutNamed, type LayoutName } from './mcp-xml-layouts.js';
import { pythonRepr } from './python-repr.js';
import type { ToolSpec } from './types.js';

/** MiroThinker's form, resolved for one run: see `mcpXmlDialect`. */
export interface McpXmlSettings {
  /** `YYYY-MM-DD` for the `Today is:` sentence; undefined: none. */
  readonly today?: string | undefined;
  /** `plain`: tool results go back as bare user turns, without `<tool_output>`. */
  readonly toolResults: 'tagged' | 'plain';
  /** The prompt layout; undefined: `trajforge`. */
  readonly layout?: LayoutName | undefined;
}

export const DEFAULT_SETTINGS: McpXmlSettings = { toolResults: 'tagged' };

/**
 * MiroThinker's layout: the tool-use format first, then every server with its tools and
 * their input schemas. A tool is listed under the MCP server that serves it.
 */
export function systemPrompt(tools: readonly ToolSpec[], settings: McpXmlSettings = DEFAULT_SETTINGS): string {
  const layout = layoutNamed(settings.layout);
  const text = renderPrompt(loadPrompt(layout.system), {
    tools: layout.listing === 'mirothinker' ? miroThinkerListing(tools) : toolListing(tools),
    // Appended to the paragraph's last sentence, with its space, as MiroThinker writes it.
    today: settings.today === undefined ? '' : ` Today is: ${settings.today}`,
    result_wrapping: settings.toolResults === 'plain' ? '' : ', inside <tool_output>...</tool_output>',
  });
  // MiroThinker's prompt is followed by the agent's objective after one blank line; trajforge's is sent as it always was.
  return layout.name === 'trajforge' ? text : text.trimEnd();
}

/** Tools grouped under their server, servers in order of first appearance. */
function byServer(tools: readonly ToolSpec[]): Map<string, ToolSpec[]> {
  const out = new Map<string, ToolSpec[]>();
  for (const t of tools) {
    const server = t.server ?? 'tools';
    out.set(server, [...(out.get(server) ?? []), t]);
  }
  return out;
}

/** The tools as the system prompt lists them: under each server, each tool with its description and input schema. */
export function toolListing(tools: readonly ToolSpec[]): string {
  const lines: string[] = [];
  for (const [server, list] of byServer(tools)) {
    lines.push(`## Server name: ${server}`);
    for (const t of list) {
      lines.push(`### Tool name: ${t.name}`);
      if (t.description.trim()) lines.push(`Description: ${t.description.trim()}`);
      lines.push(`Input JSON schema: ${JSON.stringify(t.inputSchema)}`, '');
    }
  }
  return lines.length > 0 ? lines.join('\n').trimEnd() : '(no tools are available: answer from what you know)';
}

/**
 * MiroThinker's listing, as its prompt code writes it: no blank line between tools, the
 * description as the server gave it (untrimmed), the input schema as Python dict text with
 * pydantic's titles (`schemaWithTitles`). No tools: nothing, as MiroThinker lists none.
 */
export function miroThinkerListing(tools: readonly ToolSpec[]): string {
  let out = '';
  for (const [server, list] of byServer(tools)) {
    out += `## Server name: ${server}\n`;
    for (const t of list) out += `### Tool name: ${t.name}\nDescription: ${t.description}\nInput JSON schema: ${pythonRepr(schemaWithTitles(t.inputSchema, t.name))}\n`;
  }
  return out.endsWith('\n') ? out.slice(0, -1) : out;
}

/**
 * An input schema as MiroThinker's Python tool servers (FastMCP, pydantic) declare one: every
 * property titled (pydantic's default, `code_block` → `Code Block`) and the schema titled
 * `<tool>Arguments`, unless the server gave titles; JSON Schema's `$schema` marker left out (a
 * pydantic schema has none). Key order is kept; a new property title comes first, the schema's
 * title last, where MiroThinker's own sub-agent schema has them.
 */
export function schemaWithTitles(schema: Record<string, unknown>, toolName: string): Record<string, unknown> {
  const { $schema: _, ...rest } = schema;
  const props = rest.properties;
  if (props !== null && typeof props === 'object' && !Array.isArray(props)) {
    rest.properties = Object.fromEntries(
      Object.entries(props as Record<string, unknown>).map(([k, v]) => {
        if (v === null || typeof v !== 'object' || Array.isArray(v) || 'title' in v) return [k, v];
        return [k, { title: pydanticTitle(k), ...(v as Record<string, unknown>) }];
      }),
    );
  }
  return 'title' in rest ? rest : { ...rest, title: `${toolName}Arguments` };
}

/** Python's `name.replace('_', ' ').title()`: each letter after a non-letter upper-cased, the others lower-cased. */
export function pydanticTitle(name: string): string {
  let out = '';
  let prevLetter = false;
  for (const ch of name.replaceAll('_', ' ')) {
    const letter = /\p{L}/u.test(ch);
    out += letter ? (prevLetter ? ch.toLowerCase() : ch.toUpperCase()) : ch;
    prevLetter = letter;
  }
  return out;
}
