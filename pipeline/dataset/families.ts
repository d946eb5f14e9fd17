/**
 * Families on the dataset side: how a record of a run with `agents` (README "Agents") names
 * its family and its place in it, read from a record that may come from anywhere.
 *
 * A family is a root session and every session below it, from one attempt: the same ids come
 * back with `attempt + 1` when a failed family is redone, so a family is keyed by its root id
 * and its attempt, and a session by its id and its attempt. A record without family fields
 * (a run without agents, another system's row) is a family of its own: `familyOf` says so by
 * returning undefined, and every command treats it as it always did.
 */
/**
 * The fields read here, unchecked: a record from any reader or a raw run line, so every one is
 * tested for its type before use.
 */
export interface FamilyFields {
  readonly id?: unknown;
  readonly attempt?: unknown;
  readonly agent?: unknown;
  readonly parent_id?: unknown;
  readonly family_id?: unknown;
  readonly tool_calls?: unknown;
}

const SEP = '\u0000';

const attemptOf = (t: FamilyFields): number => (typeof t.attempt === 'number' && Number.isFinite(t.attempt) ? t.attempt : 0);

/** The key of a session: its id and attempt (a redone family reuses its ids). */
export function sessionKey(id: string, attempt: number): string {
  return `${id}${SEP}${attempt}`;
}

/** The session key of a record; undefined without a string id. */
export function sessionKeyOf(t: FamilyFields): string | undefined {
  return typeof t.id === 'string' ? sessionKey(t.id, attemptOf(t)) : undefined;
}

/** Whether a record carries any family field: it was written by a run with agents. */
export function inFamily(t: FamilyFields): boolean {
  return typeof t.family_id === 'string' || typeof t.parent_id === 'string';
}

/** A sub-agent session: one started by a call of another session. */
export function isChild(t: FamilyFields): boolean {
  return typeof t.parent_id === 'string';
}

/**
 * The family key of a record (root id and attempt), or undefined for a record outside any
 * family. A child without `family_id` (hand-made, or cut by another tool) falls back to the
 * root its id names: ids are `<parent id>/<agent>#<n>`, so the root is the part before the
 * first `/<agent>#<n>` step.
 */
export function familyOf(t: FamilyFields): string | undefined {
  const root = familyRootOf(t);
  return root === undefined ? undefined : sessionKey(root, attemptOf(t));
}

/** The id of a record's root session (see `familyOf`), whatever the attempt; undefined outside a family. */
export function familyRootOf(t: FamilyFields): string | undefined {
  if (!inFamily(t)) return undefined;
  if (typeof t.family_id === 'string') return t.family_id;
  if (typeof t.id !== 'string') return undefined;
  const m = /\/[A-Za-z0-9_-]+#\d+(\/|$)/.exec(t.id);
  return m ? t.id.slice(0, m.index) : t.id;
}

/** A record's attempt (0 when it names none). */
export { attemptOf };

/** The session key of a record's parent; undefined for a root or a record outside a family. */
export function parentKeyOf(t: FamilyFields): string | undefined {
  return typeof t.parent_id === 'string' ? sessionKey(t.parent_id, attemptOf(t)) : undefined;
}

/** The agent of a record, `(none)` for one that names none (a run without agents, an untagged foreign row). */
export function agentOf(t: FamilyFields): string {
  return typeof t.agent === 'string' && t.agent !== '' ? t.agent : '(none)';
}

/** The ids of the sessions a record's calls started, in call order. */
export function childIdsOf(t: FamilyFields): string[] {
  const out: string[] = [];
  if (Array.isArray(t.tool_calls)) for (const c of t.tool_calls as { child_id?: unknown }[]) if (typeof c?.child_id === 'string') out.push(c.child_id);
  return out;
}

interface Group<T> {
  readonly items: T[];
  readonly ids: Set<string>;
  /** Sessions the calls of the rows in named (calls without an error) that have not come yet. */
  readonly awaited: Set<string>;
  root: boolean;
}

/**
 * Rows of a stream gathered by family, each family handed back once it is whole: its root is
 * in, and every session its calls started (a call without an error: a sub-agent that failed
 * on its own may sit in another file). A run writes a family as one block of lines, so one
 * family at a time is held; a stream that scatters families holds more, and `finish` hands
 * back, as they are, the families still incomplete at its end.
 */
export class FamilyGroups<T> {
  readonly #open = new Map<string, Group<T>>();
  readonly #closed = new Set<string>();

  /** Whether the family of this record was already handed back (a late or repeated row). */
  isClosed(t: FamilyFields): boolean {
    const key = familyOf(t);
    return key !== undefined && this.#closed.has(key);
  }

  /** Takes a row of a family; returns its family's rows, in the order they came, when this row completed it. */
  push(t: FamilyFields, item: T): T[] | undefined {
    const family = familyOf(t);
    if (family === undefined || typeof t.id !== 'string') return [item];
    let g = this.#open.get(family);
    if (g === undefined) this.#open.set(family, (g = { items: [], ids: new Set(), awaited: new Set(), root: false }));
    g.items.push(item);
    g.ids.add(t.id);
    g.awaited.delete(t.id);
    if (!isChild(t)) g.root = true;
    if (Array.isArray(t.tool_calls)) {
      for (const c of t.tool_calls as { child_id?: unknown; error?: unknown }[]) {
        if (typeof c?.child_id === 'string' && c.error === undefined && !g.ids.has(c.child_id)) g.awaited.add(c.child_id);
      }
    }
    if (!g.root || g.awaited.size > 0) return undefined;
    this.#open.delete(family);
    this.#closed.add(family);
    return g.items;
  }

  /** The families still incomplete, as they are. */
  finish(): T[][] {
    const out = [...this.#open.values()].map((g) => g.items);
    this.#open.clear();
    return out;
  }
}
