/**
 * `trajforge validate` over families: the family rules (validator.ts `validateFamily`, the same
 * the run applies inline) on a dataset read row by row, and sessions a dataset holds twice.
 *
 * A family's rows are held until it is whole — its root is in, and every session its calls
 * started (a call without an error) — then checked together and handed back, their issues
 * added. A run writes a family as one block of lines, so one family at a time is held; a
 * dataset that scatters families holds more, and what is still held at the end (a family cut
 * short) is checked as it is, so a missing parent or child is an issue, never a silence.
 * Sessions are keyed by id and attempt (a redone family reuses its ids); the keys seen are
 * kept (ids only) to find duplicates.
 */
import type { Trajectory, Validation, ValidationIssue } from '../../schemas/index.js';
import type { Dialect } from '../dialects/types.js';
import { familyOf, sessionKeyOf } from './families.js';
import { ruleSeverity, validateFamily, type RuleSeverity } from './validator.js';

export interface FamilyCheckOptions {
  readonly dialectOf: (name: Trajectory['dialect']) => Dialect;
  readonly severities?: Readonly<Record<string, RuleSeverity>> | undefined;
}

interface Held<R> {
  readonly t: Trajectory;
  readonly item: R;
}

interface Group<R> {
  readonly held: Held<R>[];
  readonly ids: Set<string>;
  /** Session ids named by the calls of the rows in, that have not come yet. */
  readonly awaited: Set<string>;
  root: boolean;
}

/** `R` carries the row's validation, which the family issues are added to. */
export class FamilyCheck<R extends { readonly validation: Validation }> {
  readonly #opts: FamilyCheckOptions;
  readonly #open = new Map<string, Group<R>>();
  readonly #closed = new Set<string>();
  readonly #seen = new Set<string>();
  /** Sessions of closed families that a call named but showed as failed: in failures.jsonl, or later in the input. */
  readonly #lateOk = new Set<string>();

  constructor(opts: FamilyCheckOptions) {
    this.#opts = opts;
  }

  /** The rows ready to emit after this one: none while its family is incomplete; the row itself when it is in no family. */
  push(t: Trajectory, item: R): R[] {
    const family = familyOf(t);
    if (family === undefined) return [item];
    const key = sessionKeyOf(t);
    if (key !== undefined) {
      if (this.#seen.has(key)) {
        this.#add(item.validation, 'family.duplicate', `session ${t.id} (attempt ${t.attempt ?? 0}) is in this dataset twice: this row repeats an earlier one`);
        return [item];
      }
      this.#seen.add(key);
    }
    if (this.#closed.has(family)) {
      if (key !== undefined && this.#lateOk.delete(key)) return [item];
      // Every session its family's calls named came before the root was complete: this one no call started.
      this.#add(item.validation, 'family.link', `parent_id ${t.parent_id ?? '(none)'}: no call of its parent started this session (its family was complete without it)`);
      return [item];
    }
    let g = this.#open.get(family);
    if (g === undefined) this.#open.set(family, (g = { held: [], ids: new Set(), awaited: new Set(), root: false }));
    g.held.push({ t, item });
    g.ids.add(t.id);
    g.awaited.delete(t.id);
    if (t.parent_id === undefined) g.root = true;
    for (const c of t.tool_calls) if (c.child_id !== undefined && c.error === undefined && !g.ids.has(c.child_id)) g.awaited.add(c.child_id);
    if (!g.root || g.awaited.size > 0) return [];
    this.#open.delete(family);
    this.#closed.add(family);
    for (const h of g.held) for (const c of h.t.tool_calls) if (c.child_id !== undefined && !g.ids.has(c.child_id)) this.#lateOk.add(`${c.child_id}\u0000${h.t.attempt ?? 0}`);
    return this.#check(g);
  }

  /** The families still open at the end of the input: checked as they are. */
  finish(): R[] {
    const out: R[] = [];
    for (const g of this.#open.values()) out.push(...this.#check(g));
    this.#open.clear();
    return out;
  }

  #check(g: Group<R>): R[] {
    const issues = validateFamily(
      g.held.map((h) => h.t),
      { dialectOf: this.#opts.dialectOf, severities: this.#opts.severities, failedChildrenElsewhere: true },
    );
    for (const h of g.held) for (const i of issues.get(h.t.id) ?? []) this.#push(h.item.validation, i);
    return g.held.map((h) => h.item);
  }

  #add(v: Validation, rule: 'family.duplicate' | 'family.link', message: string): void {
    const severity = ruleSeverity(rule, this.#opts.severities);
    if (severity !== 'off') this.#push(v, { rule, severity, message });
  }

  #push(v: Validation, issue: ValidationIssue): void {
    v.issues.push(issue);
    if (issue.severity === 'error') v.passed = false;
  }
}
