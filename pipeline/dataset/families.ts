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
import type { Trajectory } from '../../schemas/index.js';

const SEP = '\u0000';

const attemptOf = (t: Partial<Trajectory>): number => (typeof t.attempt === 'number' && Number.isFinite(t.attempt) ? t.attempt : 0);

/** The key of a session: its id and attempt (a redone family reuses its ids). */
export function sessionKey(id: string, attempt: number): string {
  return `${id}${SEP}${attempt}`;
}

/** The session key of a record; undefined without a string id. */
export function sessionKeyOf(t: Partial<Trajectory>): string | undefined {
  return typeof t.id === 'string' ? sessionKey(t.id, attemptOf(t)) : undefined;
}

/** Whether a record carries any family field: it was written by a run with agents. */
export function inFamily(t: Partial<Trajectory>): boolean {
  return typeof t.family_id === 'string' || typeof t.parent_id === 'string';
}

/** A sub-agent session: one started by a call of another session. */
export function isChild(t: Partial<Trajectory>): boolean {
  return typeof t.parent_id === 'string';
}

/**
 * The family key of a record (root id and attempt), or undefined for a record outside any
 * family. A child without `family_id` (hand-made, or cut by another tool) falls back to the
 * root its id names: ids are `<parent id>/<agent>#<n>`, so the root is the part before the
 * first `/<agent>#<n>` step.
 */
export function familyOf(t: Partial<Trajectory>): string | undefined {
  if (!inFamily(t)) return undefined;
  let root = typeof t.family_id === 'string' ? t.family_id : undefined;
  if (root === undefined && typeof t.id === 'string') {
    const m = /\/[A-Za-z0-9_-]+#\d+(\/|$)/.exec(t.id);
    root = m ? t.id.slice(0, m.index) : t.id;
  }
  return root === undefined ? undefined : sessionKey(root, attemptOf(t));
}

/** The session key of a record's parent; undefined for a root or a record outside a family. */
export function parentKeyOf(t: Partial<Trajectory>): string | undefined {
  return typeof t.parent_id === 'string' ? sessionKey(t.parent_id, attemptOf(t)) : undefined;
}

/** The agent of a record, `(none)` for one that names none (a run without agents, an untagged foreign row). */
export function agentOf(t: Partial<Trajectory>): string {
  return typeof t.agent === 'string' && t.agent !== '' ? t.agent : '(none)';
}

/** The ids of the sessions a record's calls started, in call order. */
export function childIdsOf(t: Partial<Trajectory>): string[] {
  const out: string[] = [];
  if (Array.isArray(t.tool_calls)) for (const c of t.tool_calls) if (typeof c?.child_id === 'string') out.push(c.child_id);
  return out;
}
