/**
 * The mcp-xml dialect's system prompt, in MiroThinker's layout: prompts/mcp-xml-system.txt with
 * every server and its tools (description, input schema) listed, and the settings of
 * MiroThinker's form (a `Today is:` sentence, tool results as bare user turns).
 */
import { loadPrompt, renderPrompt } from '../prompts.js';
import type { ToolSpec } from './types.js';

/** MiroThinker's form, resolved for one run: see `mcpXmlDialect`. */
export interface McpXmlSettings {
  /** `YYYY-MM-DD` for the `Today is:` sentence; undefined: none. */
  readonly today?: string | undefined;
  /** `plain`: tool results go back as bare user turns, without `<tool_output>`. */
  readonly toolResults: 'tagged' | 'plain';
}

export const DEFAULT_SETTINGS: McpXmlSettings = { toolResults: 'tagged' };

/**
 * MiroThinker's layout: the tool-use format first, then every server with its tools and
 * their input schemas. A tool is listed under the MCP server that serves it.
 */
export function systemPrompt(tools: readonly ToolSpec[], settings: McpXmlSettings = DEFAULT_SETTINGS): string {
  return renderPrompt(loadPrompt('mcp-xml-system'), {
    tools: toolListing(tools),
    // Appended to the paragraph's last sentence, with its space, as MiroThinker writes it.
    today: settings.today === undefined ? '' : ` Today is: ${settings.today}`,
    result_wrapping: settings.toolResults === 'plain' ? '' : ', inside <tool_output>...</tool_output>',
  });
}

/** The tools as the system prompt lists them: under each server, each tool with its description and input schema. */
export function toolListing(tools: readonly ToolSpec[]): string {
  const byServer = new Map<string, ToolSpec[]>();
  for (const t of tools) {
    const server = t.server ?? 'tools';
    byServer.set(server, [...(byServer.get(server) ?? []), t]);
  }
  const lines: string[] = [];
  for (const [server, list] of byServer) {
    lines.push(`## Server name: ${server}`);
    for (const t of list) {
      lines.push(`### Tool name: ${t.name}`);
      if (t.description.trim()) lines.push(`Description: ${t.description.trim()}`);
      lines.push(`Input JSON schema: ${JSON.stringify(t.inputSchema)}`, '');
    }
  }
  return lines.length > 0 ? lines.join('\n').trimEnd() : '(no tools are available: answer from what you know)';
}
