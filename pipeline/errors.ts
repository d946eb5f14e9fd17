/**
 * Errors a user can cause (bad input, bad config, a dead endpoint, a tool server that will
 * not start). Each has a stable code; the CLI prints the message without a stack trace and
 * exits non-zero. Anything else that escapes is a bug.
 */
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

export class TrajforgeError extends Error {
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
}

/** `file:line: field: message` — the form editors and terminals make clickable. */
export function inputError(file: string, line: number | undefined, field: string | undefined, message: string): TrajforgeError {
  const place = line === undefined ? file : `${file}:${line}`;
  const what = field === undefined ? message : `${field}: ${message}`;
  return new TrajforgeError('BAD_INPUT', `${place}: ${what}`, { file, line, field });
}
