/**
 * The rules that need a whole family (a root session and every session below it): each call
 * that started a sub-agent has that session in the family, pointing back at the call, and shows
 * the sub-agent's report as the parent's dialect renders it; each sub-agent session was started
 * by a call of its parent. Inline when a run assembles a family; offline (`validate`) over a
 * dataset's records grouped by `family_id`.
 */
import type { Trajectory, ValidationIssue } from '../../schemas/index.js';
import type { Dialect, ToolResultView } from '../dialects/types.js';
import { ruleSeverity, wherePart, type IssuePlace, type RuleId, type RuleSeverity } from './validation-rules.js';

/**
 * A sub-agent's report as its caller's tool result: plain text, one snippet (`{call_id}-0`)
 * where the dialect shows snippets, so a tulu parent can cite it. The family rule renders it
 * again with the parent's dialect and compares.
 */
export function reportView(report: string, callId: string): ToolResultView {
  return { text: report, textId: `${callId}-0` };
}

/** A session of a family: a record written by a run with `agents` (its `parent_id` names the session that called it). */
export function isSubAgent(t: Trajectory): boolean {
  return t.parent_id !== undefined;
}

export interface FamilyOptions {
  /** The dialect a record is written in. */
  readonly dialectOf: (name: Trajectory['dialect']) => Dialect;
  readonly severities?: Readonly<Record<string, RuleSeverity>> | undefined;
  /**
   * Offline, over a dataset that may hold only accepted sessions: a sub-agent session that
   * failed on its own is in failures.jsonl while its accepted caller is not, and the call shows
   * the error the caller saw. With this set, such a call (one with `error`) whose session is
   * absent is no issue. Inline the family is whole, and it is.
   */
  readonly failedChildrenElsewhere?: boolean | undefined;
}

/**
 * The rules that need a whole family (a root session and every session below it): each call
 * with a `child_id` has that session in the family, pointing back at the call (`parent_id`,
 * `parent_call`), and its output is the parent dialect's rendering of the child's report (an
 * error, when the child failed on its own); each sub-agent session was started by a call of its
 * parent. Issues by the id of the record they are about. Inline when a family is assembled;
 * offline over a run's records grouped by `family_id`.
 */
export function validateFamily(records: readonly Trajectory[], opts: FamilyOptions): Map<string, ValidationIssue[]> {
  const out = new Map<string, ValidationIssue[]>();
  const report = (id: string, rule: RuleId, message: string, where: IssuePlace = {}): void => {
    const severity = ruleSeverity(rule, opts.severities);
    if (severity === 'off') return;
    out.set(id, [...(out.get(id) ?? []), { rule, severity, message, ...where }]);
  };
  const byId = new Map(records.map((r) => [r.id, r]));
  for (const parent of records) {
    parent.tool_calls.forEach((call, i) => {
      if (call.child_id === undefined) return;
      const where = { call_index: i, turn: call.turn };
      const child = byId.get(call.child_id);
      if (child === undefined && call.error !== undefined && opts.failedChildrenElsewhere) return;
      if (child === undefined) return report(parent.id, 'family.link', `call ${i} (${call.tool_name}) started session ${call.child_id}, which is not in the family`, where);
      if (child.parent_id !== parent.id || child.parent_call !== i) {
        return report(parent.id, 'family.link', `call ${i} (${call.tool_name}) started session ${child.id}, which points at ${child.parent_id ?? 'no parent'} call ${child.parent_call ?? '?'}`, where);
      }
      // A child failed only because its family did (parent_failed) gave its report all the same.
      if (child.status === 'failed' && child.reason !== 'parent_failed') {
        if (call.error === undefined) report(parent.id, 'family.report_mismatch', `call ${i} (${call.tool_name}) shows a result, but its session ${child.id} failed (${child.reason})`, where);
        return;
      }
      const expected = opts.dialectOf(parent.dialect).renderToolOutput(reportView(child.final_answer, call.call_id)).text;
      if (call.output_text !== expected) {
        report(parent.id, 'family.report_mismatch', `call ${i} (${call.tool_name}): its tool output differs from session ${child.id}'s report ${wherePart(call.output_text, expected)}`, where);
      }
    });
  }
  for (const child of records) {
    if (!isSubAgent(child)) continue;
    const parent = byId.get(child.parent_id!);
    const call = parent?.tool_calls[child.parent_call ?? -1];
    if (parent === undefined || call?.child_id !== child.id) report(child.id, 'family.link', `no call of ${child.parent_id} started this session (parent_call ${child.parent_call ?? '?'})`);
  }
  return out;
}
