/**
 * The errors trajforge raises on purpose, under one root and in two kinds kept apart, as the MCP
 * SDK keeps an error that crossed the wire apart from one it raised itself:
 *
 *   TrajforgeBaseError          every error trajforge raises on purpose (anything else that escapes is a bug)
 *   ├── UserError               a user must act on it: what they gave is wrong (a flag, a config, an
 *   │   │                       input file, a filter), or what their config points at cannot be used
 *   │   │                       (an endpoint that refuses the key, a tool server that will not start).
 *   │   │                       The CLI prints the message without a stack.
 *   │   └── TrajforgeError      ...with a stable code and, where it is in a file, file:line:field: what
 *   │                           the CLI prints, exit 2 (1 for the codes that say a run could not go on)
 *   └── WireError               the other end of a wire answered with an error or not at all: a model
 *                               endpoint, a tool server, Redis, a web site, a pipe's reader. Carries
 *                               what the answer said (status, body, request id) where there was one.
 *                               A command turns one into a TrajforgeError when a user must act on it
 *                               (ENDPOINT_FATAL, TOOL_SERVER_FAILED …); one that reaches the CLI as it
 *                               is was not handled, and is printed with its stack.
 */

/** Every error trajforge raises on purpose. Never thrown itself: throw one of the two kinds. */
export abstract class TrajforgeBaseError extends Error {}

/** A user must act on it (what they gave is wrong, or cannot be used): the CLI prints the message, no stack. */
export abstract class UserError extends TrajforgeBaseError {
  /** The CLI's exit code for it. */
  get exitCode(): number {
    return 2;
  }
}

/**
 * The other end of a wire answered with an error, or not at all. The fields are the answer's
 * facts where there was an answer; each class sets those it has (declared here, not defined, so
 * an error that has none carries none).
 */
export abstract class WireError extends TrajforgeBaseError {
  /** The HTTP status (or the protocol's numeric code), when the other end answered with one. */
  declare readonly status?: number | undefined;
  /** What the other end sent with its error, when it is worth keeping. */
  declare readonly body?: string | undefined;
  /** The request id the other end gave its answer, for its operators. */
  declare readonly requestId?: string | undefined;
}

/** A TrajforgeError's stable code: what scripts and tests match on (the message may be reworded). */
export type ErrorCode =
  | 'BAD_CONFIG'
  | 'BAD_INPUT'
  | 'BAD_USAGE'
  | 'MISSING_ENV'
  | 'ENDPOINT_FATAL'
  /** The endpoint did not answer at all (connection refused, no such host, no answer in time). */
  | 'ENDPOINT_UNREACHABLE'
  | 'TOOL_SERVER_FAILED'
  | 'RUN_MISMATCH'
  | 'RUN_LOCKED'
  /** Queue mode: Redis did not answer (at the first connection, or for longer than queue.unreachable_for_ms). */
  | 'QUEUE_UNREACHABLE'
  /** Queue mode: the run's state is gone from Redis (restarted without its data): enqueue it again. */
  | 'QUEUE_LOST'
  /** `merge`: planned samples have no record in the runs given (pass --allow-missing to merge what is there). */
  | 'RUN_INCOMPLETE'
  | 'WRITE_FAILED';

/** The codes whose error means a run (or a write) could not go on: exit 1, as a failed run. The rest are bad usage or input: exit 2. */
const RUN_FAILED_CODES: ReadonlySet<ErrorCode> = new Set(['WRITE_FAILED', 'ENDPOINT_FATAL', 'ENDPOINT_UNREACHABLE', 'QUEUE_UNREACHABLE', 'RUN_INCOMPLETE']);

/**
 * A user error with a stable code (ErrorCode) and, when the problem is in a file, where:
 * what the CLI prints (`error: message`) and exits with `exitCode`.
 */
export class TrajforgeError extends UserError {
  readonly code: ErrorCode;
  /** Where the problem is, when it is in a file: path, 1-based line, field path. */
  readonly file?: string | undefined;
  readonly line?: number | undefined;
  readonly field?: string | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    where: { file?: string | undefined; line?: number | undefined; field?: string | undefined; cause?: unknown } = {},
  ) {
    super(message, where.cause === undefined ? undefined : { cause: where.cause });
    this.name = 'TrajforgeError';
    this.code = code;
    this.file = where.file;
    this.line = where.line;
    this.field = where.field;
  }

  override get exitCode(): number {
    return RUN_FAILED_CODES.has(this.code) ? 1 : 2;
  }
}

/** `file:line: field: message` — the form editors and terminals make clickable. */
export function inputError(file: string, line: number | undefined, field: string | undefined, message: string): TrajforgeError {
  const place = line === undefined ? file : `${file}:${line}`;
  const what = field === undefined ? message : `${field}: ${message}`;
  return new TrajforgeError('BAD_INPUT', `${place}: ${what}`, { file, line, field });
}
