/**
 * How deep a parsed JSON value nests. `JSON.parse` takes any depth, but much of what runs on a
 * record afterwards recurses (`JSON.stringify`, the text cleaning before export, the
 * validator's walks): a row nested 10,000 deep would end the process with "Maximum call stack
 * size exceeded". A reader refuses such a row up front, as a bad row with its file and line.
 */

/** Levels of nesting a record may have: real trajectories have a few dozen; every walk in trajforge handles this many. */
export const MAX_JSON_DEPTH = 1000;

/**
 * Whether `value` nests deeper than `limit` levels (an object or array is one level, its
 * members the next). Recursive, but never deeper than `limit` + 1 calls; it stops at the first
 * branch found too deep.
 */
export function deeperThan(value: unknown, limit: number, depth = 1): boolean {
  if (typeof value !== 'object' || value === null) return false;
  if (depth > limit) return true;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const v: unknown = value[i];
      if (typeof v === 'object' && v !== null && deeperThan(v, limit, depth + 1)) return true;
    }
    return false;
  }
  for (const k in value) {
    const v: unknown = (value as Record<string, unknown>)[k];
    if (typeof v === 'object' && v !== null && deeperThan(v, limit, depth + 1)) return true;
  }
  return false;
}
