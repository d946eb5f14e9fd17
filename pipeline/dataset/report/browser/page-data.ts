/**
 * What the server side writes into the page for its scripts (rows.ts, live.ts), as the scripts
 * read it, and what the report's script offers the live one. Types only; the two sides must
 * agree, and rows.ts and live.ts say the same shapes.
 */

/**
 * One row's summary: `[id, status, reason, rules, question, tool_calls, turns, tokens, repairs,
 * rollbacks, agent, parent, parent_call, question_id, verdict, rubric_score, sample_index]`.
 */
type RowSummary = [string, string, string, string[], string, number, number | null, number | null, number, number, string, string, number | null, string, string, number | null, number | null];

/** A segment to show: `[kind, text, characters cut]`; kind t(ext), k (think), c(all), o(utput), a(nswer). */
type RowSegment = [SegmentKind, string, number?];
type SegmentKind = 't' | 'k' | 'c' | 'o' | 'a';

/** A repair: [turn, kind, detail, the completion before it, that text cut]. */
type RowRepair = [number | null, string, string, string?, boolean?];

/** One row's detail, parsed when the row is opened. */
interface RowDetail {
  readonly m: string;
  readonly dl: string;
  readonly at: number | null;
  readonly fa: string;
  readonly seg: RowSegment[];
  /** Issues: [rule, severity, message]. */
  readonly iss: [string, string, string][];
  /**
   * Repairs: [turn, kind, detail], and when the record kept it, the completion before the repair
   * and whether that was cut; rollbacks: [turn, condition, detail, the discarded completion].
   */
  readonly rep: RowRepair[];
  readonly rb: [number | null, string, string, string][];
  /** Per segment, its turn (null: unknown). */
  readonly tu: (number | null)[];
  /** Per call: [tool, arguments as JSON, latency ms, cached, error, skipped, truncated]. */
  readonly cl: [string, string, number | null, boolean, string, boolean, boolean][];
  /** Wall time of the rollout, ms. */
  readonly ms: number | null;
  /** The judge's: verdict, step, rubric score, F1, rationale, error, criteria [title, weight, score]. */
  readonly j?: { readonly v: string; readonly st: string; readonly sc: number | null; readonly f1: number | null; readonly r: string; readonly e: string; readonly cr: [string, number | null, number | null][] };
  readonly g?: string;
  readonly e?: string;
  /** Cited ids: [cited, unresolved]. */
  readonly ci?: [number, number];
  /** A session of a family: its agent, parent, the parent's call, depth and family. */
  readonly fam?: { readonly ag: string; readonly p: string | null; readonly pc: number | null; readonly dp: number | null; readonly f: string };
  /** Per call, the sub-agent session it started, or null. */
  readonly ch?: (string | null)[];
}

/** A place in a run's files (live.ts's Cursor). */
interface Cursor {
  readonly generation: number;
  readonly trajectories: number;
  readonly failures: number;
}

/** The live figures (live.ts's LiveFigures), as the live panel reads them. */
interface LiveFigures {
  readonly cursor: Cursor;
  readonly at: string;
  readonly manifest: { readonly status?: string | null; readonly model?: string | null; readonly planned: number | null; readonly updated_at?: string | null } | null;
  readonly manifest_error: string | null;
  readonly rows: { readonly read: number; readonly counted: number; readonly superseded: number; readonly bad: number };
  readonly unreadable: readonly string[];
  readonly status: Record<string, number>;
  readonly acceptance_rate: number | null;
  readonly reasons: Record<string, number>;
  readonly done: number;
  readonly rate: { readonly per_min: number | null; readonly over: 'window' | 'last session'; readonly window_s: number };
  readonly tokens: { readonly prompt: number; readonly completion: number; readonly total: number };
  readonly spend_usd: number | null;
  readonly price: { readonly prompt: number; readonly completion: number } | null;
  readonly newest: [string, string, string, string][];
  /** Attempts by the minute they finished: [minute start ms, attempts, accepted]. */
  readonly series: [number, number, number][];
  /** The endpoints' counts from the manifests (live-endpoint.ts); null when none records them. */
  readonly endpoint: { readonly agents: EndpointCounts; readonly judge: EndpointCounts | null; readonly manifests: number } | null;
}

/** What a model client met at its endpoint (schemas/index.ts EndpointCounts). */
interface EndpointCounts {
  readonly requests: number;
  readonly responses: {
    readonly ok: number;
    readonly rate_limited: number;
    readonly server_error: number;
    readonly client_error: number;
    readonly connection_error: number;
    readonly timeout: number;
    readonly malformed: number;
    readonly aborted: number;
  };
  readonly retries: number;
  readonly retry_after: { readonly waits: number; readonly seconds: number };
  readonly length_retries: number;
  readonly repetition_resamples: number;
  readonly concurrency_limit?: number;
}

/** What the report's script offers a script that runs after it (the live panel). */
interface TrajforgeReport {
  /** Rows a run wrote since the page was made: a row of a listed id replaces it, unless that one was accepted. */
  addRows(lines: string[]): void;
  /** Opens a trajectory by id; false when the page does not hold it. */
  openId(id: string): boolean;
  /** Rows the page holds. */
  size(): number;
  /** The overview's cards, made again from the rows the list holds. */
  refreshCards(): void;
}

interface Window {
  trajforgeReport?: TrajforgeReport;
}
