/**
 * `trajforge validate` over families: the family rules (validator.ts `validateFamily`, the same
 * the run applies inline) on a dataset read row by row, and sessions a dataset holds twice.
 *
 * A family's rows are held until it is whole (families.ts `FamilyGroups`), then checked
 * together and handed back, their issues added. What is still held at the end (a family cut
 * short) is checked as it is, so a missing parent or child is an issue, never a silence.
 * Sessions are keyed by id and attempt (a redone family reuses its ids); the keys seen are
 * kept (ids only) to find duplicates.
 */
import type { Trajectory, Validation, ValidationIssue } from '../../schemas/index.js';
import type { Dialect } from '../dialects/types.js';
import { FamilyGroups, familyOf, sessionKey, sessionKeyOf } from './families.js';
import { ruleSeverity, validateFamily, type RuleSeverity } from '../core/validator.js';

export interface FamilyCheckOptions {
  readonly dialectOf: (name: Trajectory['dialect']) => Dialect;
  readonly severities?: Readonly<Record<string, RuleSeverity>> | undefined;
}

interface Held<R> {
  readonly t: Trajectory;
  readonly item: R;
}

/** `R` carries the row's validation, which the family issues are added to. */
export class FamilyCheck<R extends { readonly validation: Validation }> {
  readonly #opts: FamilyCheckOptions;
  readonly #groups = new FamilyGroups<Held<R>>();
  readonly #seen = new Set<string>();
  /** Sessions of closed families that a call named but showed as failed: in failures.jsonl, or later in the input. */
  readonly #lateOk = new Set<string>();

  constructor(opts: FamilyCheckOptions) {
    this.#opts = opts;
  }

  /** The rows ready to emit after this one: none while its family is incomplete; the row itself when it is in no family. */
  push(t: Trajectory, item: R): R[] {
    if (familyOf(t) === undefined) return [item];
    const key = sessionKeyOf(t);
    if (key !== undefined) {
      if (this.#seen.has(key)) {
        this.#add(item.validation, 'family.duplicate', `session ${t.id} (attempt ${t.attempt ?? 0}) is in this dataset twice: this row repeats an earlier one`);
        return [item];
      }
      this.#seen.add(key);
    }
    if (this.#groups.isClosed(t)) {
      if (key !== undefined && this.#lateOk.delete(key)) return [item];
      // Every session its family's calls named came before the family was complete: this one no call started.
      this.#add(item.validation, 'family.link', `parent_id ${t.parent_id ?? '(none)'}: no call of its parent started this session (its family was complete without it)`);
      return [item];
    }
    const family = this.#groups.push(t, { t, item });
    if (family === undefined) return [];
    const ids = new Set(family.map((h) => h.t.id));
    for (const h of family) for (const c of h.t.tool_calls) if (c.child_id !== undefined && !ids.has(c.child_id)) this.#lateOk.add(sessionKey(c.child_id, h.t.attempt ?? 0));
    return this.#check(family);
  }

  /** The families still open at the end of the input: checked as they are. */
  finish(): R[] {
    return this.#groups.finish().flatMap((g) => this.#check(g));
  }

  #check(held: Held<R>[]): R[] {
    const issues = validateFamily(
      held.map((h) => h.t),
      { dialectOf: this.#opts.dialectOf, severities: this.#opts.severities, failedChildrenElsewhere: true },
    );
    for (const h of held) for (const i of issues.get(h.t.id) ?? []) this.#push(h.item.validation, i);
    return held.map((h) => h.item);
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
