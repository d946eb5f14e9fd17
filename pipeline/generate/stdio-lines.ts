/**
 * The reader of a stdio MCP server's output: newline-delimited JSON-RPC messages, with a
 * bound on the size of one. The SDK's own reader throws past its bound and the transport then
 * kills the server, so one oversized tool result took down every call in flight and cost a
 * restart, again at each retry. This one lets an oversized message stream past without holding
 * it, and answers the request it belonged to with an error of its own (`result_too_large`):
 * one call fails, the server and the other calls go on.
 *
 * It is the shape the SDK's `StdioClientTransport` reads through (`append`, `readMessage`,
 * `clear`); chunks are kept in a list and joined once per line, so a 50 MB message costs one
 * copy, not one per chunk.
 */

/** The JSON-RPC error code of the answer made up for an oversized message (implementation-defined range). */
export const RESULT_TOO_LARGE_CODE = -32_050;

/** Bytes kept from each end of an oversized message: enough to find its id. */
const EDGE = 512;

export interface OversizedMessage {
  /** Its size, counted up to its newline. */
  readonly bytes: number;
  /** The JSON-RPC id it answered, when one could be read from its first or last bytes. */
  readonly id: string | number | undefined;
}

/** A top-level id written first (`{"jsonrpc":"2.0","id":7,…`, as Python servers write) or last (`…,"jsonrpc":"2.0","id":7}`, as the TypeScript SDK does). */
const ID_FIRST = /^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")/;
const ID_LAST = /"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$/;
const IS_REQUEST = /^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?(?:"id"\s*:\s*[^,]+,\s*)?"method"/;

function readId(head: string, tail: string): string | number | undefined {
  if (IS_REQUEST.test(head)) return undefined;
  const m = ID_FIRST.exec(head) ?? ID_LAST.exec(tail);
  if (!m) return undefined;
  try {
    return JSON.parse(m[1]!) as string | number;
  } catch {
    return undefined;
  }
}

export class BoundedLineReader<M> {
  readonly #maxBytes: number;
  readonly #parse: (line: string) => M;
  readonly #onOversized: (m: OversizedMessage) => M | undefined;
  /** Complete lines not read yet, and answers made up for oversized ones. */
  readonly #ready: ({ line: Buffer } | { message: M })[] = [];
  /** The line being received. */
  #parts: Buffer[] = [];
  #size = 0;
  /** Set while an oversized line streams past: its first and latest bytes. */
  #skipping: { head: Buffer; tail: Buffer; bytes: number } | undefined;

  /**
   * `parse` turns a line into a message (and throws for one that is not: the transport reports
   * it and reads on); `onOversized` makes the answer for an oversized line, or nothing.
   */
  constructor(maxBytes: number, parse: (line: string) => M, onOversized: (m: OversizedMessage) => M | undefined) {
    this.#maxBytes = maxBytes;
    this.#parse = parse;
    this.#onOversized = onOversized;
  }

  append(chunk: Buffer): void {
    let from = 0;
    while (from < chunk.length) {
      const nl = chunk.indexOf(0x0a, from);
      const end = nl === -1 ? chunk.length : nl;
      this.#take(chunk.subarray(from, end));
      if (nl === -1) break;
      this.#endLine();
      from = nl + 1;
    }
  }

  /** The next message, or null when no whole line is waiting. Throws for a line that is not a message. */
  readMessage(): M | null {
    const next = this.#ready.shift();
    if (next === undefined) return null;
    if ('message' in next) return next.message;
    return this.#parse(next.line.toString('utf8').replace(/\r$/, ''));
  }

  clear(): void {
    this.#ready.length = 0;
    this.#parts = [];
    this.#size = 0;
    this.#skipping = undefined;
  }

  #take(piece: Buffer): void {
    if (piece.length === 0) return;
    const s = this.#skipping;
    if (s) {
      s.bytes += piece.length;
      s.tail = piece.length >= EDGE ? Buffer.from(piece.subarray(piece.length - EDGE)) : Buffer.concat([s.tail, piece]).subarray(-EDGE);
      return;
    }
    if (this.#size + piece.length <= this.#maxBytes) {
      this.#parts.push(piece);
      this.#size += piece.length;
      return;
    }
    const held = Buffer.concat([...this.#parts, piece]);
    this.#skipping = { head: Buffer.from(held.subarray(0, EDGE)), tail: Buffer.from(held.subarray(-EDGE)), bytes: held.length };
    this.#parts = [];
    this.#size = 0;
  }

  #endLine(): void {
    const s = this.#skipping;
    if (s) {
      this.#skipping = undefined;
      const message = this.#onOversized({ bytes: s.bytes, id: readId(s.head.toString('utf8'), s.tail.toString('utf8')) });
      if (message !== undefined) this.#ready.push({ message });
      return;
    }
    const line = this.#parts.length === 1 ? this.#parts[0]! : Buffer.concat(this.#parts, this.#size);
    this.#parts = [];
    this.#size = 0;
    this.#ready.push({ line });
  }
}
