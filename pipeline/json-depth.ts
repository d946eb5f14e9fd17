/**
 * How deep a JSON value nests, found without recursion. A tool result or a model's call
 * arguments nested thousands of levels deep would overflow the stack of every recursive walk
 * after it (JSON.stringify, the scrubber, the cache, schema checks) and end the whole run with
 * `RangeError: Maximum call stack size exceeded`; JSON.parse itself copes. So such a value is
 * refused where it comes in: a tool result or call arguments (the executor, the dialects'
 * argument parser) fail that one call with a message, and the run goes on; a dataset row (the
 * readers, the live report) is a bad row with its file and line.
 */

/**
 * Nesting (objects and arrays inside each other) a tool result or call arguments may have. Far
 * past what any tool schema or API answer uses (a few dozen), far below where a recursive walk
 * runs out of stack (a few thousand).
 */
export const MAX_JSON_DEPTH = 256;

/**
 * Nesting a dataset row may have: real trajectories have a few dozen (a record holds tool
 * results and arguments, each up to MAX_JSON_DEPTH); every walk in trajforge handles this many.
 */
export const MAX_RECORD_DEPTH = 1000;

/** Whether `value` nests objects and arrays more than `max` deep (a scalar is depth 0). */
export function nestsDeeperThan(value: unknown, max: number = MAX_JSON_DEPTH): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth + 1 > max) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
  return false;
}

/**
 * Whether JSON text opens more than `max` brackets (`{`, `[`) without closing them, strings
 * skipped: looked at before the text is parsed or repaired (a lenient repair recurses too). One
 * pass, no parse.
 */
export function textNestsDeeperThan(text: string, max: number = MAX_JSON_DEPTH): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 /* { */ || c === 91 /* [ */) {
      if (++depth > max) return true;
    } else if (c === 125 /* } */ || c === 93 /* ] */) depth = Math.max(0, depth - 1);
  }
  return false;
}
