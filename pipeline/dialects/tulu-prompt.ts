/**
 * The tulu dialect's system prompt: prompts/tulu-system.txt with the tools described as trajforge
 * lists them (a `### name` section each: the parameter between the tags, the attributes, a call).
 */
import { loadPrompt, renderPrompt } from '../prompts.js';
import type { ToolSpec } from './types.js';

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function schemaType(schema: Record<string, unknown>): string {
  const t = schema.type;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) return t.filter((x) => typeof x === 'string' && x !== 'null').join(' or ') || 'any';
  return 'any';
}

function isStringParam(schema: unknown): boolean {
  if (!isRecord(schema)) return false;
  return schema.type === 'string' || (Array.isArray(schema.type) && schema.type.includes('string'));
}

/** Mirrors the executor's default: the first required string parameter, else the first string one. */
export function bodyParamOf(tool: ToolSpec): string | undefined {
  if (tool.bodyParam !== undefined) return tool.bodyParam;
  const props = isRecord(tool.inputSchema.properties) ? tool.inputSchema.properties : {};
  const required = Array.isArray(tool.inputSchema.required) ? tool.inputSchema.required : [];
  const names = Object.keys(props);
  return names.find((n) => required.includes(n) && isStringParam(props[n])) ?? names.find((n) => isStringParam(props[n]));
}

function describeParam(name: string, schema: unknown, required: boolean): string {
  const s = isRecord(schema) ? schema : {};
  const facts = [schemaType(s), required ? 'required' : 'optional'];
  if (s.default !== undefined) facts.push(`default ${JSON.stringify(s.default)}`);
  if (Array.isArray(s.enum)) facts.push(`one of ${s.enum.map((v) => JSON.stringify(v)).join(', ')}`);
  const desc = typeof s.description === 'string' && s.description.trim() ? `: ${s.description.trim()}` : '';
  return `\`${name}\` (${facts.join(', ')})${desc}`;
}

export function describeTools(tools: readonly ToolSpec[]): string {
  if (tools.length === 0) return '(no tools are available: answer from what you know)';
  return tools
    .map((tool) => {
      const props = isRecord(tool.inputSchema.properties) ? tool.inputSchema.properties : {};
      const required = Array.isArray(tool.inputSchema.required) ? tool.inputSchema.required : [];
      const body = bodyParamOf(tool);
      const lines = [`### ${tool.name}`];
      if (tool.description.trim()) lines.push(tool.description.trim());
      if (body !== undefined) lines.push(`Between the tags: ${describeParam(body, props[body], required.includes(body))}`);
      const attrs = Object.keys(props).filter((k) => k !== body);
      if (attrs.length > 0) {
        lines.push('Attributes:');
        for (const a of attrs) lines.push(`- ${describeParam(a, props[a], required.includes(a))}`);
      }
      const example = attrs.filter((a) => required.includes(a)).map((a) => ` ${a}="…"`).join('');
      lines.push(`Call: <call_tool name="${tool.name}"${example}>${body ?? ''}</call_tool>`);
      return lines.join('\n');
    })
    .join('\n\n');
}

export function systemPrompt(tools: readonly ToolSpec[]): string {
  return renderPrompt(loadPrompt('tulu-system'), { tools: describeTools(tools) });
}