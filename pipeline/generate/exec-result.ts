/**
 * What one call produced, as the rollout records it (a ToolCallRecord's fields, and the view the
 * dialect renders), whatever answered it: an MCP server, the cache, a sub-agent, or nobody (a
 * call refused before any server); and the short, stable id each call gets.
 */
import { createHash } from 'node:crypto';
import type { Trajectory } from '../../schemas/index.js';
import type { ParsedCall, ToolResultView } from '../dialects/types.js';

/** What one call produced: the record's fields, and the view the dialect renders. */
export interface ExecResult {
  readonly server: string | null;
  readonly mcpTool: string | null;
  readonly parameters: Record<string, unknown>;
  readonly arguments: Record<string, unknown>;
  readonly result: unknown;
  readonly truncated: boolean;
  readonly view: ToolResultView;
  readonly error?: string | undefined;
  /** The call never reached a server (unknown tool, over its limit, bad arguments). */
  readonly skipped: boolean;
  readonly cached: boolean;
  readonly durationMs: number;
  /**
   * A call to a sub-agent: the session it started, and that session's records and its
   * descendants' (post-order: each before the session that called it), for its family.
   */
  readonly child?: { readonly id: string; readonly records: readonly Trajectory[] } | undefined;
}

/** A call refused before any server: the model is told why, and the record says `skipped`. */
export function skippedCall(call: ParsedCall, message: string): ExecResult {
  return {
    server: null,
    mcpTool: null,
    parameters: { ...(call.arguments ?? call.attributes) },
    arguments: {},
    result: null,
    truncated: false,
    view: { error: message },
    error: message,
    skipped: true,
    cached: false,
    durationMs: 0,
  };
}

/** Short, stable call ids: DR Tulu's snippet ids look like `7552a5aa-0`. */
export function makeCallId(sampleId: string, attempt: number, index: number): string {
  return createHash('sha1').update(`${sampleId}\u0000${attempt}\u0000${index}`).digest('hex').slice(0, 8);
}
