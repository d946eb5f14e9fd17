/**
 * The reply to trajforge's failure-summary request (a last user message that says
 * `FAILURE SUMMARY`): one JSON object saying what went wrong, what the searches were and
 * what they found, built from the conversation alone, in every dialect.
 */
import type { Conversation, Evidence } from './types.js';

export const FAILURE_SUMMARY_MARKER = 'FAILURE SUMMARY';

export interface FailureSummary {
  /** From a `Failure reason: X` line of the request, else `unknown`. */
  readonly failure_type: string;
  readonly what_happened: string;
  /** The best evidence sentence shown, with its snippet id in brackets; empty when nothing was shown. */
  readonly useful_findings: readonly string[];
}

export function isFailureSummaryRequest(lastUserText: string): boolean {
  return lastUserText.includes(FAILURE_SUMMARY_MARKER);
}

export function failureReason(lastUserText: string): string {
  return /^[ \t]*Failure reason[ \t]*:[ \t]*(\S.*?)[ \t]*$/im.exec(lastUserText)?.[1] ?? 'unknown';
}

export function failureSummary(conv: Conversation, evidence: Evidence | null): string {
  const n = conv.searches;
  const queries = conv.queries.filter((q) => q !== '').map((q) => JSON.stringify(q));
  const searched =
    n === 0
      ? 'No searches were made.'
      : `${n} search${n === 1 ? ' was' : 'es were'} made${queries.length > 0 ? `, with the queries ${queries.join(', ')}` : ''}.`;
  const shown = `${conv.snippets.length} snippet${conv.snippets.length === 1 ? ' was' : 's were'} shown.`;
  const summary: FailureSummary = {
    failure_type: conv.failure?.reason ?? 'unknown',
    what_happened: `${searched} ${shown}`,
    useful_findings: evidence === null ? [] : [`${evidence.sentence} [${evidence.snippet.id}]`],
  };
  return JSON.stringify(summary);
}
