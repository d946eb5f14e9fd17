/**
 * The dialect interface: everything that depends on how a model writes tool calls.
 * The rollout loop, the validator and the store see only this.
 */
import type { ChatMessage, NativeToolCall, Repair } from '../../schemas/index.js';

/** A tool as the model sees it (alias name, not the MCP server's name). */
export interface ToolSpec {
  readonly name: string;
  readonly description: string;
  /** JSON Schema of the tool's input, as the MCP server declared it. */
  readonly inputSchema: Record<string, unknown>;
  /** The parameter that receives the call body, if any. */
  readonly bodyParam?: string | undefined;
  /** The MCP server that serves it (mcp-xml lists tools under their server). */
  readonly server?: string | undefined;
}

/** A call as the model wrote it, after repair. */
export interface ParsedCall {
  readonly toolName: string;
  /** Attributes, as strings; the executor coerces them to the tool's schema. */
  readonly attributes: Record<string, string>;
  /** The call body; for the JSON dialects, the arguments as the model wrote them. */
  readonly query: string;
  /** Typed arguments, for the dialects that write JSON (mcp-xml, native), once parsed. */
  readonly arguments?: Readonly<Record<string, unknown>> | undefined;
  /** native: the endpoint's id for the call, echoed in the tool message that answers it. */
  readonly id?: string | undefined;
}

export type TurnAction =
  | { readonly kind: 'call'; readonly call: ParsedCall }
  /** native: several calls in one turn, run concurrently. */
  | { readonly kind: 'calls'; readonly calls: readonly ParsedCall[] }
  | { readonly kind: 'answer'; readonly answer: string }
  | { readonly kind: 'none' };

export type FinishReason = 'stop' | 'length' | 'other';

/** A repair found in one turn; the rollout adds the turn number. */
export type TurnRepair = Omit<Repair, 'turn'>;

export interface TurnRepairResult {
  /** The turn's text in canonical form: what enters the trajectory and the next request. */
  readonly text: string;
  /** Where the call (or the first of several) starts in `text`: what comes before it is think and prose. */
  readonly callOffset?: number | undefined;
  readonly action: TurnAction;
  readonly repairs: readonly TurnRepair[];
}

/** A document a tool returned, with the id the model can cite. */
export interface ToolDocument {
  readonly id: string;
  readonly title?: string | undefined;
  readonly text: string;
  /** Further lines shown under the title (authors, year, venue). */
  readonly meta?: string | undefined;
}

/** A tool result as the executor hands it to the dialect's renderer. */
export interface ToolResultView {
  /** Documents, when the result is a list of them (search results). */
  readonly documents?: readonly ToolDocument[] | undefined;
  /** Plain text, when the result is not a list of documents. */
  readonly text?: string | undefined;
  /** Id for plain text shown as one snippet: `{call_id}-0`. */
  readonly textId?: string | undefined;
  /** A header line such as "Found 52 results. Showing top 5:". */
  readonly header?: string | undefined;
  /** Set when the call failed or was refused; shown to the model instead of a result. */
  readonly error?: string | undefined;
}

export interface RenderedOutput {
  /** The exact text inserted into the trajectory, tags included. */
  readonly text: string;
  readonly snippetIds: readonly string[];
}

/** One piece of a whole trajectory, in order. */
export type Segment =
  | { readonly kind: 'text' | 'think'; readonly text: string; readonly offset: number }
  | {
      readonly kind: 'call';
      readonly call: ParsedCall;
      readonly text: string;
      readonly offset: number;
      readonly closed: boolean;
    }
  | {
      readonly kind: 'output';
      readonly text: string;
      readonly offset: number;
      readonly snippetIds: readonly string[];
      readonly closed: boolean;
    }
  | { readonly kind: 'answer'; readonly text: string; readonly answer: string; readonly offset: number; readonly closed: boolean };

export interface ParsedTrajectory {
  readonly segments: readonly Segment[];
  /** Ids cited in the answer, in order of first appearance, deduplicated. */
  readonly citedIds: readonly string[];
}

export interface Dialect {
  readonly name: 'tulu' | 'mcp-xml' | 'native';
  /** The system prompt fragment that describes the tools and the format. */
  systemPrompt(tools: readonly ToolSpec[]): string;
  /** At most 4 stop strings. */
  readonly stopStrings: readonly string[];
  /**
   * One raw completion → at most one action, in one linear pass. `calls`: the tool calls the
   * endpoint returned apart from the text (native function calling).
   */
  repairTurn(raw: string, finishReason: FinishReason, calls?: readonly NativeToolCall[]): TurnRepairResult;
  /** Tool result → the text inserted into the trajectory. Escapes the dialect's tags in tool text. */
  renderToolOutput(result: ToolResultView): RenderedOutput;
  /** Ids cited in an answer text. */
  citedIds(answer: string): string[];
  /** Whole-trajectory parse, used by the validator and the readers. */
  parseTrajectory(text: string): ParsedTrajectory;

  // Generation. Optional members default to the XML dialects' behaviour (see rollout.ts).

  /** Prompt template (prompts/<name>.txt, `{question}` filled) that asks for the final answer. Default `force-answer`. */
  readonly finalAnswerPrompt?: string;
  /** Prompt template for a turn with neither call nor answer. Default `nudge`. */
  readonly nudgePrompt?: string;
  /** Once a tool has run, a turn with neither call nor answer goes straight to the final-answer prompt instead of a nudge. */
  readonly noActionAsksForAnswer?: boolean;
  /** The tools as `systemPrompt` lists them (the XML dialects; `generate --dry-run` shows it). */
  toolListing?(tools: readonly ToolSpec[]): string;
  /** The `tools` request field (native function calling). */
  requestTools?(tools: readonly ToolSpec[]): unknown[];
  /** Parses a call's JSON arguments and matches its names to the tool list; may rewrite the call. */
  bindCall?(call: ParsedCall, tools: readonly ToolSpec[]): BoundCall;
  /** The canonical text of one call (needed with `bindCall` and with several calls per turn). */
  renderCall?(call: ParsedCall): string;
  /** The assistant message for a repaired turn and its (bound) calls. Default: `{ role: 'assistant', content: text }`. */
  turnMessage?(r: TurnRepairResult, calls: readonly ParsedCall[]): ChatMessage;
  /**
   * The message that carries a tool output back. Default: a user message. `raw`: the result as
   * the tool gave it, for a layout that sends the tool's own text rather than the rendered view.
   */
  toolMessage?(text: string, call: ParsedCall, raw?: RawToolResult): ChatMessage;
  /** Prompt template (`{question}` filled) for the first user message of a session that starts from the question. Default: the question alone. */
  readonly questionPrompt?: string;
  /** Prompt template for a tool result a request leaves out (keep-K; `{index}`, `{keep}`). Default `tool-result-omitted`. */
  readonly omittedResultPrompt?: string;
}

/** A tool result as the tool gave it: its text (JSON when it returned only structured content), or why it failed. */
export interface RawToolResult {
  readonly text: string;
  readonly error?: string | undefined;
  /** The server and tool called, as the model named them when no server was reached. */
  readonly server: string;
  readonly tool: string;
}

export interface BoundCall {
  readonly call: ParsedCall;
  readonly repairs: readonly TurnRepair[];
  /** The call's text must be written again (a name corrected, arguments repaired). */
  readonly changed: boolean;
  /** Set when the call cannot be made at all: its arguments are not JSON even after repair. */
  readonly error?: string | undefined;
}
