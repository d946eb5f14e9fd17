/**
 * What one invocation of a run did (a run may take several: resumes), counted as its records are written: accepted and failed samples
 * (by reason, with the first message of each), repairs, rollbacks, tool calls, tokens, sub-agent
 * sessions, and the planned samples still without a record. At the end it says whether the
 * invocation failed as a whole: planned samples left without a record, or every sample failed.
 */
import type { Trajectory } from '../../schemas/index.js';

/** How many planned ids without a record are named in the summary and the error. */
const UNACCOUNTED_SHOWN = 5;

/** GenerateSummary["invocation"], as it is counted. */
interface Counts {
  accepted: number;
  failed: number;
  byReason: Record<string, number>;
  repairs: Record<string, number>;
  rollbacks: Record<string, number>;
  toolCalls: number;
  tokens: number;
  skippedDone: number;
  planned: number;
  unaccounted: { count: number; first: string[] };
  schemaRejected: number;
  notNeeded: number;
  subAgents: { accepted: number; failed: number; byReason: Record<string, number>; toolCalls: number };
  /** Tool calls served from the result cache, by the agent that made them (`main` without agents). */
  cachedByAgent: Record<string, number>;
}

const bump = (m: Record<string, number>, k: string): void => {
  m[k] = (m[k] ?? 0) + 1;
};

export class RunTally {
  readonly invocation: Counts = {
    accepted: 0,
    failed: 0,
    byReason: {},
    repairs: {},
    rollbacks: {},
    toolCalls: 0,
    tokens: 0,
    skippedDone: 0,
    planned: 0,
    unaccounted: { count: 0, first: [] },
    schemaRejected: 0,
    notNeeded: 0,
    subAgents: { accepted: 0, failed: 0, byReason: {}, toolCalls: 0 },
    cachedByAgent: {},
  };
  /** The first error message of each failure reason in this invocation: the main reason is reported with one. */
  readonly #firstError = new Map<string, string>();
  /** Planned samples whose final record is not written yet: in flight, or refused and pending. */
  readonly #outstanding = new Set<string>();

  /** Samples taken into the plan. */
  planned(ids: readonly string[]): void {
    this.invocation.planned += ids.length;
    for (const id of ids) this.#outstanding.add(id);
  }

  /** Samples that leave the plan unrun (`--until-correct`: their question was answered). */
  notNeeded(ids: readonly string[]): void {
    for (const id of ids) this.#outstanding.delete(id);
    this.invocation.planned -= ids.length;
    this.invocation.notNeeded += ids.length;
  }

  /** A sample's final record is in the store (or was already: an id the run had accepted is accounted for by that record). */
  settled(id: string): void {
    this.#outstanding.delete(id);
  }

  /**
   * A family written: its root `traj` (the sample) and every session's record. `last`: no
   * further attempt follows (the first message of a reason is kept from final records only).
   * Returns the tokens the family spent.
   */
  written(records: readonly Trajectory[], last: boolean): number {
    const s = this.invocation;
    const traj = records.at(-1)!;
    if (traj.status === 'ok') s.accepted++;
    else {
      s.failed++;
      bump(s.byReason, traj.reason ?? 'unknown');
      if (last && !this.#firstError.has(traj.reason ?? 'unknown')) this.#firstError.set(traj.reason ?? 'unknown', traj.error ?? '');
    }
    let tokens = 0;
    for (const t of records) {
      for (const r of t.repairs) bump(s.repairs, r.kind);
      for (const r of t.rollbacks) bump(s.rollbacks, r.condition);
      tokens += t.usage.total_tokens;
      const cached = t.tool_calls.filter((c) => c.cached).length;
      if (cached > 0) s.cachedByAgent[t.agent ?? 'main'] = (s.cachedByAgent[t.agent ?? 'main'] ?? 0) + cached;
      if (t === traj) continue;
      // Each session's usage is its own: a family's tokens are the sum of its sessions'.
      if (t.status === 'ok') s.subAgents.accepted++;
      else {
        s.subAgents.failed++;
        bump(s.subAgents.byReason, t.reason ?? 'unknown');
      }
      s.subAgents.toolCalls += t.total_tool_calls;
    }
    s.toolCalls += traj.total_tool_calls;
    s.tokens += tokens;
    return tokens;
  }

  /** Notes the planned samples still without a record (at the end of the invocation). */
  closeAccounts(): void {
    this.invocation.unaccounted = { count: this.#outstanding.size, first: [...this.#outstanding].slice(0, UNACCOUNTED_SHOWN) };
  }

  /** Why an invocation that ran to its end failed as a whole, if it did. `rollouts`: rollouts started (a rerun of unjudged samples only judges again). */
  problem(rollouts: number): string | undefined {
    const { planned, accepted, failed, unaccounted } = this.invocation;
    if (unaccounted.count > 0) {
      const more = unaccounted.count > unaccounted.first.length ? ', …' : '';
      return `${unaccounted.count} of the ${planned} samples this run planned have no record (${unaccounted.first.join(', ')}${more}); accepted ${accepted} + failed ${failed} ≠ planned ${planned}. Run the same command again to redo them`;
    }
    // An invocation that only judged recorded answers again found them wrong: a verdict, not a broken run.
    if (planned === 0 || accepted > 0 || rollouts === 0) return undefined;
    const [main, count] = Object.entries(this.invocation.byReason).sort((a, b) => b[1] - a[1])[0] ?? ['unknown', failed];
    const example = this.#firstError.get(main);
    return `every sample of this run failed (${failed}); the main reason: ${main} (${count})${example ? `: ${example}` : ''}`;
  }
}
