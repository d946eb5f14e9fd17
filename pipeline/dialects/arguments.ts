/**
 * What the two JSON dialects (mcp-xml, native) share: call arguments written as JSON, which
 * models get wrong in small ways (single quotes, trailing commas, unquoted keys, a missing
 * brace at a length cut), and tool names they misspell. Both are repaired when there is
 * exactly one thing the model can have meant, and every repair is recorded.
 */
import { jsonrepair } from 'jsonrepair';
import { MAX_JSON_DEPTH, textNestsDeeperThan } from '../json-depth.js';
import type { BoundCall, ParsedCall, ToolSpec } from './types.js';

export type ParsedArguments = { readonly value: Record<string, unknown>; readonly repaired: boolean } | { readonly error: string };

/**
 * Where the JSON object that opens at `text[start]` (a `{`) closes: the index of its balancing
 * `}`, braces inside strings ignored; -1 when it runs to the end unclosed.
 */
export function closingBrace(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const ch = text[i];
    if (inString) {
      if (ch === '\\') i++;
      else if (ch === '"') inString = false;
    } else if (ch === '"') inString = true;
    else if (ch === '{') depth++;
    else if (ch === '}' && --depth === 0) return i;
  }
  return -1;
}

/**
 * A JSON object, parsed strictly, else after lenient repair. Empty text is `{}`. Arguments
 * nested past MAX_JSON_DEPTH are refused before either: every step after would overflow the stack.
 */
export function parseJsonArguments(text: string): ParsedArguments {
  const src = text.trim();
  if (src === '') return { value: {}, repaired: false };
  if (textNestsDeeperThan(src)) return { error: `arguments nest objects and arrays more than ${MAX_JSON_DEPTH} levels deep` };
  let value: unknown;
  let repaired = false;
  try {
    value = JSON.parse(src);
  } catch {
    try {
      value = JSON.parse(jsonrepair(src));
      repaired = true;
    } catch (err) {
      return { error: `arguments are not JSON, even after repair: ${(err as Error).message}` };
    }
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return { error: `arguments must be a JSON object, got ${Array.isArray(value) ? 'an array' : typeof value}` };
  }
  return { value: value as Record<string, unknown>, repaired };
}

/** Lower case, letters and digits only: `PubMed-Search` and `pubmed_search` are one name. */
function fold(name: string): string {
  return name.toLowerCase().replace(/[^a-z0-9]/g, '');
}

/** Levenshtein distance, stopping early past `max`. */
function distance(a: string, b: string, max: number): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      const v = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      row.push(v);
      best = Math.min(best, v);
    }
    if (best > max) return max + 1;
    prev = row;
  }
  return prev[b.length]!;
}

/**
 * The one candidate `name` can mean: itself, the same name in another case or punctuation,
 * or the single closest name within two edits. Undefined when none or several fit.
 */
export function matchName(name: string, candidates: readonly string[]): string | undefined {
  if (candidates.includes(name)) return name;
  const folded = fold(name);
  const same = candidates.filter((c) => fold(c) === folded);
  if (same.length === 1) return same[0];
  if (same.length > 1 || folded.length < 4) return undefined;
  let best: string[] = [];
  let bestDistance = 3;
  for (const c of candidates) {
    const d = distance(folded, fold(c), 2);
    // Past two edits (`distance` says max + 1) a name means nothing, even when one tool is all there is.
    if (d > 2) continue;
    if (d < bestDistance) {
      bestDistance = d;
      best = [c];
    } else if (d === bestDistance) best.push(c);
  }
  return best.length === 1 ? best[0] : undefined;
}

/**
 * Parses the arguments (`call.query` holds the JSON as written) and corrects the tool name,
 * and with `server` given (mcp-xml) the server name, against the tools on offer. A name that
 * fits no tool, or several, is left as written: the executor then refuses it by name.
 */
export function bindJsonCall(call: ParsedCall, tools: readonly ToolSpec[], server?: string): BoundCall {
  const repairs: { kind: 'repaired_arguments' | 'corrected_name'; detail: string }[] = [];
  const args = parseJsonArguments(call.query);
  if ('error' in args) return { call, repairs, changed: false, error: args.error };
  if (args.repaired) repairs.push({ kind: 'repaired_arguments', detail: `${call.toolName}: arguments repaired to valid JSON` });

  // The server the model named narrows the tools when it is one we have; a tool name is matched first.
  const servers = [...new Set(tools.map((t) => t.server ?? 'tools'))];
  const namedServer = server === undefined ? undefined : matchName(server, servers);
  const onServer = namedServer === undefined ? tools : tools.filter((t) => (t.server ?? 'tools') === namedServer);
  let toolName = matchName(call.toolName, tools.map((t) => t.name));
  if (toolName === undefined && onServer !== tools) toolName = matchName(call.toolName, onServer.map((t) => t.name));
  const spec = tools.find((t) => t.name === toolName);
  let attributes = call.attributes;
  if (spec !== undefined && toolName !== call.toolName) repairs.push({ kind: 'corrected_name', detail: `tool ${call.toolName} → ${toolName}` });
  if (spec !== undefined && server !== undefined) {
    const real = spec.server ?? 'tools';
    if (real !== server) repairs.push({ kind: 'corrected_name', detail: `server ${server} → ${real} (the server of ${spec.name})` });
    attributes = { ...call.attributes, server_name: real };
  }
  const bound: ParsedCall = { ...call, toolName: spec?.name ?? call.toolName, attributes, arguments: args.value };
  return { call: bound, repairs, changed: repairs.length > 0 };
}
