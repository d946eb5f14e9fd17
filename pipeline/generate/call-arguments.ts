/**
 * A model's call bound to a tool's input schema: attribute strings (tulu) coerced to the types
 * the schema declares, JSON arguments (mcp-xml, native) taken as typed, the call body put in the
 * body parameter, and the required parameters checked. A failure is a message for the model.
 */
import type { ParsedCall } from '../dialects/types.js';

/** Attribute strings → the types the input schema declares. Throws a message meant for the model. */
export function coerceArguments(
  call: ParsedCall,
  schema: Record<string, unknown>,
  bodyParam: string | undefined,
): { parameters: Record<string, unknown>; arguments: Record<string, unknown> } {
  const props = (schema.properties ?? {}) as Record<string, { type?: unknown; items?: { type?: unknown } }>;
  const parameters: Record<string, unknown> = {};
  const args: Record<string, unknown> = {};
  if (call.arguments !== undefined) {
    // JSON dialects: typed already; a string where the schema wants a number or flag is coerced.
    for (const [k, raw] of Object.entries(call.arguments)) {
      const type = props[k]?.type;
      const value = typeof raw === 'string' && type !== undefined && type !== 'string' ? coerce(raw, type, k) : raw;
      parameters[k] = value;
      args[k] = value;
    }
  } else {
    for (const [k, raw] of Object.entries(call.attributes)) {
      const prop = props[k];
      const value = coerce(raw, prop?.type, k);
      parameters[k] = value;
      if (prop) args[k] = value;
    }
    if (bodyParam !== undefined && call.query !== '') args[bodyParam] = call.query;
  }
  const required = Array.isArray(schema.required) ? (schema.required as string[]) : [];
  const missing = required.filter((k) => !(k in args));
  if (missing.length) throw new Error(`missing required parameter${missing.length > 1 ? 's' : ''}: ${missing.join(', ')}`);
  return { parameters, arguments: args };
}

function coerce(raw: string, type: unknown, key: string): unknown {
  const t = Array.isArray(type) ? type.find((x) => x !== 'null') : type;
  switch (t) {
    case 'integer':
    case 'number': {
      const n = Number(raw.trim());
      if (raw.trim() === '' || !Number.isFinite(n) || (t === 'integer' && !Number.isInteger(n))) {
        throw new Error(`parameter ${key} must be ${t === 'integer' ? 'an integer' : 'a number'}, got "${raw}"`);
      }
      return n;
    }
    case 'boolean': {
      const v = raw.trim().toLowerCase();
      if (v === 'true' || v === '1' || v === 'yes') return true;
      if (v === 'false' || v === '0' || v === 'no') return false;
      throw new Error(`parameter ${key} must be true or false, got "${raw}"`);
    }
    case 'array':
      return raw
        .split(/[,;]/)
        .map((s) => s.trim())
        .filter(Boolean);
    default:
      return raw;
  }
}
