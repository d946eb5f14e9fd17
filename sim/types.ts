/**
 * The words every part of the sim speaks: the request's messages, the dialects, the tool the
 * policy calls, the conversation the policy reads, the evidence it answers from, and the plan of
 * a turn that the dialects and the misbehaviours write out. Types (and the list of dialects), so
 * that the parts that read a request (dialects.ts), plan a turn (policy.ts, roles.ts,
 * summary.ts) and write one (misbehave.ts) depend on this file and not on each other in a circle.
 */

export const SIM_DIALECTS = ['tulu', 'mcp-xml', 'native'] as const;
export type SimDialect = (typeof SIM_DIALECTS)[number];
/** The dialects whose whole turn is one text (think, call and answer inline). */
export type TextDialect = Exclude<SimDialect, 'native'>;

/** The tool the policy calls, as the request declared it. */
export interface ToolChoice {
  readonly name: string;
  /** mcp-xml: the server the tool is listed under; null in the other dialects. */
  readonly server: string | null;
  /** The argument that takes the query (mcp-xml and native; tulu puts the query in the call body). */
  readonly argKey: string;
  /** mcp-xml: every server the prompt lists. */
  readonly servers: readonly string[];
  /** mcp-xml: no other server lists a tool of this name, so the name alone says which is meant. */
  readonly unique: boolean;
}

export interface CallSpec {
  readonly tool: ToolChoice;
  readonly query: string;
  /** Arguments beside the query (`find`'s pattern, `open`'s cursor), written after it; tulu's call body has no room for them. */
  readonly args?: Readonly<Record<string, unknown>> | undefined;
}

/** A uniform draw in [0, 1). Every choice the policy makes goes through one of these. */
export type Rng = () => number;

export interface ChatMessage {
  readonly role: string;
  /** A string, an array of content parts (`{type: 'text', text}`), or null. */
  readonly content?: unknown;
  /** Native function calling: the calls an assistant message made. */
  readonly tool_calls?: unknown;
}

export interface Snippet {
  readonly id: string;
  /** The first line when it reads as a title (`Title: …`, or a line with no final stop). */
  readonly title: string | null;
  readonly sentences: readonly string[];
}

export interface Conversation {
  readonly dialect: SimDialect;
  readonly question: string;
  /** The tool to call, or null when the request declares none (the policy then answers). */
  readonly tool: ToolChoice | null;
  /** `<tool_output>` blocks the client sent back: user messages after the question, and tool messages. */
  readonly toolOutputs: number;
  /** The queries of the calls the assistant messages made ('' where one cannot be read). */
  readonly queries: readonly string[];
  /** Searches done: the calls made or the results seen, whichever is more. */
  readonly searches: number;
  /** Every snippet shown so far, first occurrence of each id. */
  readonly snippets: readonly Snippet[];
  /** The last user message asks for a final answer. */
  readonly forceAnswer: boolean;
  /** The last user message asks for a failure summary; `reason` from its `Failure reason:` line. */
  readonly failure: { readonly reason: string } | null;
}

export interface TurnPlan {
  /** `report`: a browsing sub-agent's final report (roles.ts). */
  readonly kind: 'call' | 'answer' | 'summary' | 'report';
  /** What the model thinks before it acts, or null when it skips thinking this turn. */
  readonly reasoning: string | null;
  /** The call to make (kind 'call'). */
  readonly call: CallSpec | null;
  /** The best evidence available now; call turns keep it for premature answers. */
  readonly evidence: Evidence | null;
  /** The failure summary's JSON (kind 'summary'), else ''. */
  readonly summary: string;
  /** Further queries, for turns that issue more than one call. */
  readonly extraQueries: readonly string[];
  /** Content words of the question, for prose that has to mention the topic. */
  readonly keywords: readonly string[];
  /**
   * Prose written before the action, outside any think block (roles.ts): before a call in every
   * dialect, and in place of the default line before an mcp-xml box ('' for the box alone).
   * Unset: no prose before a call, the default line before a box.
   */
  readonly lead?: string | undefined;
  /** The report's text (kind 'report'). */
  readonly report?: string | undefined;
}

export interface Evidence {
  readonly snippet: Snippet;
  readonly sentence: string;
}
