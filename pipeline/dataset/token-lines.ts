/**
 * How a token export row travels from its worker process to the command's: its ids and labels
 * as Int32Arrays (four bytes a token, copied whole by the channel's serialiser) rather than as
 * the row's JSON text (eleven bytes a token or so, which the worker wrote and the channel then
 * copied again). The command's process, which knows the row's id and metadata, writes the line;
 * it is the same JSON text `JSON.stringify` gives the row (tests/core/tokens/export-golden.test.ts).
 */
import type { TokensRow } from './token-rows.js';
import type { FamilyMetadata } from './export.js';

/** A tokens row without its id: what a worker sends back. */
export interface PackedRow {
  readonly part: number;
  readonly parts: number;
  readonly message_count: number;
  readonly input_ids: Int32Array;
  readonly labels: Int32Array;
  readonly train_tokens: number;
}

export function packRow(r: TokensRow): PackedRow {
  return { part: r.part, parts: r.parts, message_count: r.message_count, input_ids: Int32Array.from(r.input_ids), labels: Int32Array.from(r.labels), train_tokens: r.train_tokens };
}

/** The row's JSON line, keys in `TokensRow`'s order, then `metadata` when there is any. */
export function rowLine(id: string, p: PackedRow, metadata: FamilyMetadata | undefined): string {
  const row: TokensRow & { metadata?: FamilyMetadata } = {
    id,
    part: p.part,
    parts: p.parts,
    message_count: p.message_count,
    input_ids: Array.from(p.input_ids),
    labels: Array.from(p.labels),
    num_tokens: p.input_ids.length,
    train_tokens: p.train_tokens,
  };
  if (metadata !== undefined) row.metadata = metadata;
  return JSON.stringify(row);
}
