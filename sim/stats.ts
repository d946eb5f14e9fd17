/**
 * The sim's counters (`GET /sim/stats`, `Sim.stats()`): what it was asked, what it answered and
 * which misbehaviours it applied, so a test can tell what its client met.
 */
import { MISBEHAVIOUR_KINDS, type MisbehaviourKind } from './misbehave.js';
import { SIM_DIALECTS, type SimDialect } from './types.js';

export interface SimStats {
  /** Every HTTP request received, whatever the path. */
  requests: number;
  /** POST chat/completions requests. */
  chatRequests: number;
  /** Of those, the ones that asked for a stream (counted before the request is checked, so one rejected for its `stop` counts too). */
  streamedRequests: number;
  /** Responses sent, by HTTP status ("200", "429", …). A stream counts when its headers go out. */
  responsesByStatus: Record<string, number>;
  /** Completions produced, by finish_reason. */
  completionsByFinishReason: Record<string, number>;
  /** Misbehaviours that changed a response (a drawn kind that did not fit the turn is not counted). */
  misbehaviours: Record<MisbehaviourKind, number>;
  /** Most requests in flight at once. */
  peakConcurrent: number;
  inFlight: number;
  /** Connections the client closed before the response was complete. */
  clientAborts: number;
  /** Histogram: number of `<tool_output` blocks in a chat request's user and tool messages → requests. */
  toolOutputsPerRequest: Record<string, number>;
  /** Chat requests by the dialect they were answered in. */
  requestsByDialect: Record<SimDialect, number>;
  /**
   * Chat requests that reached the policy, by the role they were answered in (roles.ts):
   * `main` (can delegate a subtask), `browsing` (a sub-agent), `report` (a sub-agent asked for
   * its summary), `none` (a plain agent).
   */
  requestsByRole: Record<'main' | 'browsing' | 'report' | 'none', number>;
  /** Chat requests by the field that carried the completion limit (`none` when neither did). */
  requestsByMaxTokensParam: Record<'max_tokens' | 'max_completion_tokens' | 'none', number>;
  /** Assistant messages sent back with their reasoning, by field. */
  reasoningSentBack: Record<'reasoning' | 'reasoning_content', number>;
  /** Chat requests that were gradings (sim/judge.ts), answered as a judge; the rest were the policy's. */
  judgeRequests: number;
}

/** Every counter at zero. */
export function newStats(): SimStats {
  return {
    requests: 0,
    chatRequests: 0,
    streamedRequests: 0,
    responsesByStatus: {},
    completionsByFinishReason: {},
    misbehaviours: Object.fromEntries(MISBEHAVIOUR_KINDS.map((k) => [k, 0])) as Record<MisbehaviourKind, number>,
    peakConcurrent: 0,
    inFlight: 0,
    clientAborts: 0,
    toolOutputsPerRequest: {},
    requestsByDialect: Object.fromEntries(SIM_DIALECTS.map((d) => [d, 0])) as Record<SimDialect, number>,
    requestsByRole: { main: 0, browsing: 0, report: 0, none: 0 },
    requestsByMaxTokensParam: { max_tokens: 0, max_completion_tokens: 0, none: 0 },
    reasoningSentBack: { reasoning: 0, reasoning_content: 0 },
    judgeRequests: 0,
  };
}

/** One more under `key`. */
export function bump(table: Record<string, number>, key: string | number): void {
  table[key] = (table[key] ?? 0) + 1;
}
