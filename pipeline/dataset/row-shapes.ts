/**
 * What a row of a dataset file can be: the three shapes the readers take (our own records,
 * DR Tulu generator rows, chat rows), how a file's first row tells which it holds, the light
 * check every later row of it must pass, and the error a row that fails carries (BadRow: the
 * reader turns it into `FILE:LINE: field: message`).
 */
import { UserError } from '../errors.js';
export type RowFormat = 'trajforge' | 'drtulu' | 'chat';

export const ROW_FORMATS: readonly RowFormat[] = ['trajforge', 'drtulu', 'chat'];

export type Obj = Record<string, unknown>;

export function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** What the first row of a file says the file holds. */
export function detectRowFormat(v: unknown): RowFormat | undefined {
  if (!isObj(v)) return undefined;
  if ('schema_version' in v && typeof v.interleaved_text === 'string' && Array.isArray(v.tool_calls)) return 'trajforge';
  if (isObj(v.trajectory) && typeof v.trajectory.interleaved_text === 'string') return 'drtulu';
  if (Array.isArray(v.messages)) return 'chat';
  return undefined;
}

export const SHAPE: Record<RowFormat, string> = {
  trajforge: 'a trajforge record: id and interleaved_text strings',
  drtulu: 'a DR Tulu generator row: a trajectory object with interleaved_text',
  chat: 'a chat row: a messages array',
};

/** The light check a row of a file of `format` must pass. */
export function fits(v: unknown, format: RowFormat): boolean {
  if (!isObj(v)) return false;
  switch (format) {
    case 'trajforge':
      return typeof v.id === 'string' && typeof v.interleaved_text === 'string';
    case 'drtulu':
      return isObj(v.trajectory) && typeof v.trajectory.interleaved_text === 'string';
    case 'chat':
      return Array.isArray(v.messages);
  }
}

export function describe(v: unknown): string {
  const seen = detectRowFormat(v);
  if (seen !== undefined) return `this row looks like a ${seen} row`;
  if (Array.isArray(v)) return 'got a JSON array';
  if (!isObj(v)) return `got ${v === null ? 'null' : `a JSON ${typeof v}`}`;
  const keys = Object.keys(v);
  return keys.length === 0 ? 'got an empty object' : `got an object with ${keys.slice(0, 8).join(', ')}${keys.length > 8 ? ', …' : ''}`;
}

/** A row that cannot be read; `field` is the path of the culprit when there is one. */
export class BadRow extends UserError {
  constructor(
    readonly field: string | undefined,
    message: string,
  ) {
    super(message);
  }
}

export function bad(field: string | undefined, message: string): never {
  throw new BadRow(field, message);
}
