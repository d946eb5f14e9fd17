/**
 * What turns a config error into one a person can fix at once: "did you mean" for a misspelt
 * key (against the keys the schema allows at that place), the shape an MCP server entry came
 * closest to instead of zod's bare "Invalid input", and the line and column of the field.
 *
 * The schema is walked through zod's own definitions (`_zod.def`): the one place that knows
 * which keys each object takes, so no list here can drift from it.
 */
import { isMap, LineCounter, parseDocument, type Document } from 'yaml';
import type { z } from 'zod';

/** One problem, at a path of the config. */
export interface ConfigIssue {
  readonly path: readonly PropertyKey[];
  readonly message: string;
}

type Issue = z.core.$ZodIssue;
type AnySchema = z.core.$ZodType;

/** Optimal string alignment distance: edits, with a swap of two neighbours counted as one. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The allowed key `key` was most likely meant to be: one that differs only in case, `-` or `_`
 * (`baseUrl`, `base-url` → `base_url`), else the nearest by edit distance when it is near
 * enough to be a slip (1 edit in a short key, 2 in a longer one). Undefined when none is.
 */
export function suggestKey(key: string, allowed: readonly string[]): string | undefined {
  const norm = (s: string): string => s.toLowerCase().replace(/[-_]/g, '');
  const same = allowed.find((k) => norm(k) === norm(key));
  if (same !== undefined) return same;
  const budget = key.length <= 4 ? 1 : 2;
  let best: string | undefined;
  let bestDistance = budget + 1;
  for (const k of allowed) {
    const dist = editDistance(key.toLowerCase(), k.toLowerCase());
    if (dist < bestDistance) [best, bestDistance] = [k, dist];
  }
  return best;
}

interface Def {
  type: string;
  innerType?: AnySchema;
  in?: AnySchema;
  shape?: Record<string, AnySchema>;
  valueType?: AnySchema;
  element?: AnySchema;
  options?: AnySchema[];
}

function defOf(schema: AnySchema): Def {
  return (schema as unknown as { _zod: { def: Def } })._zod.def;
}

/** The schema past its wrappers (default, prefault, optional, nullable, readonly, catch, pipe). */
function unwrap(schema: AnySchema): AnySchema {
  for (;;) {
    const def = defOf(schema);
    if (def.innerType !== undefined) schema = def.innerType;
    else if (def.type === 'pipe' && def.in !== undefined) schema = def.in;
    else return schema;
  }
}

/** The schema of the value at `path` below `schema`; undefined where a union leaves it open. */
function schemaAt(schema: AnySchema, path: readonly PropertyKey[]): AnySchema | undefined {
  let node: AnySchema | undefined = schema;
  for (const key of path) {
    if (node === undefined) return undefined;
    const def = defOf(unwrap(node));
    if (def.type === 'object') node = def.shape?.[String(key)];
    else if (def.type === 'record') node = def.valueType;
    else if (def.type === 'array') node = def.element;
    else return undefined;
  }
  return node;
}

function objectKeys(schema: AnySchema | undefined): string[] {
  if (schema === undefined) return [];
  const def = defOf(unwrap(schema));
  return def.type === 'object' ? Object.keys(def.shape ?? {}) : [];
}

/**
 * zod's issues as problems worth reading. An unknown key names the key and the one it was
 * probably meant to be (or, when none is near, the keys that place takes). A value that fits
 * no shape of a union (an MCP server entry) is explained by the shape it came closest to: the
 * one with the fewest problems, the first on a tie; a union of plain values keeps its own message.
 */
export function describeIssues(issues: readonly Issue[], schema?: AnySchema, base: readonly PropertyKey[] = []): ConfigIssue[] {
  const out: ConfigIssue[] = [];
  for (const issue of issues) {
    const path = [...base, ...issue.path];
    if (issue.code === 'unrecognized_keys') {
      const allowed = schema === undefined ? [] : objectKeys(schemaAt(schema, issue.path));
      for (const key of issue.keys) {
        const hint = suggestKey(key, allowed);
        const tail = hint !== undefined ? ` (did you mean ${hint}?)` : allowed.length ? ` (${allowed.length > 12 ? 'this place takes' : 'expected one of'}: ${allowed.join(', ')})` : '';
        out.push({ path: [...path, key], message: `unknown key${tail}` });
      }
    } else if (issue.code === 'invalid_union' && issue.errors.length > 0 && issue.errors.every((b) => b.every((i) => i.path.length === 0))) {
      // A union of values (a date or 'run'), not of shapes: no branch is closer; its own message says what it takes.
      out.push({ path, message: issue.message });
    } else if (issue.code === 'invalid_union' && issue.errors.length > 0) {
      const options = schema === undefined ? undefined : defOf(unwrap(schemaAt(schema, issue.path) ?? schema)).options;
      let best = 0;
      issue.errors.forEach((branch, i) => {
        if (branch.length < issue.errors[best]!.length) best = i;
      });
      out.push(...describeIssues(issue.errors[best]!, options?.[best], path));
    } else if (issue.code === 'invalid_type' && issue.message.endsWith('received undefined')) {
      out.push({ path, message: `missing (expected ${issue.expected})` });
    } else {
      out.push({ path, message: issue.message });
    }
  }
  return out;
}

/** `endpoint.max_tokens`, `mcpServers.web.args[0]`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out || '(root)';
}

/** 1-based line and column. */
export interface Position {
  readonly line: number;
  readonly col: number;
}

/**
 * Finds where a field is written in a YAML (or JSON) text: the key of the field when it has
 * one, else its value; for a field the text lacks (a missing one), the nearest enclosing one
 * it holds. Undefined when the text holds none of the path.
 */
export function locator(text: string): (path: readonly PropertyKey[]) => Position | undefined {
  let doc: Document.Parsed | undefined;
  const lines = new LineCounter();
  return (path) => {
    doc ??= parseDocument(text, { lineCounter: lines });
    let node: unknown = doc.contents;
    let offset: number | undefined;
    for (const key of path) {
      if (isMap(node)) {
        const pair = node.items.find((p) => String((p.key as { value?: unknown } | null)?.value ?? p.key) === String(key));
        if (pair === undefined) break;
        offset = (pair.key as { range?: [number, number, number] } | null)?.range?.[0];
        node = pair.value;
      } else {
        const items = (node as { items?: unknown[] } | null)?.items;
        if (!Array.isArray(items) || typeof key !== 'number' || items[key] === undefined) break;
        node = items[key];
        offset = (node as { range?: [number, number, number] } | null)?.range?.[0];
      }
    }
    if (offset === undefined) return undefined;
    const { line, col } = lines.linePos(offset);
    return { line, col };
  };
}
