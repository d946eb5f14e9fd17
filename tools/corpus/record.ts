/**
 * One document of an on-disk corpus index, read from a row of the input JSONL. Corpora come
 * in many shapes (PubMed-like `paperId`/`abstract`, web dumps with `url`/`contents`, BEIR and
 * Pyserini's `_id`/`docid`/`text`), so each field is looked up under the names these use; a
 * row that has none of them is refused naming the field, so `corpus index` can say where.
 */
import { UserError } from '../../pipeline/errors.js';

export interface CorpusRecord {
  readonly id: string;
  /** The page's address, when the corpus has one: `open` takes it instead of the id. */
  readonly url: string | null;
  readonly title: string;
  readonly text: string;
  readonly authors: readonly string[];
  readonly year: number | null;
  readonly venue: string;
}

/** Where each field may be found, first name first. */
export const RECORD_FIELDS = {
  id: ['id', 'paperId', 'docid', 'doc_id', '_id'],
  text: ['text', 'contents', 'content', 'abstract', 'body'],
} as const;

/** A row that is not a document, with the field at fault. */
export class RowError extends UserError {
  constructor(
    readonly field: string | undefined,
    message: string,
  ) {
    super(message);
    this.name = 'RowError';
  }
}

function first(row: Record<string, unknown>, names: readonly string[]): [string, unknown] | undefined {
  for (const name of names) if (row[name] !== undefined && row[name] !== null) return [name, row[name]];
  return undefined;
}

/** The document a parsed JSONL row holds; throws RowError naming the field that is missing or of the wrong type. */
export function recordFromRow(raw: unknown): CorpusRecord {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new RowError(undefined, 'not a JSON object');
  const row = raw as Record<string, unknown>;
  const idField = first(row, RECORD_FIELDS.id);
  if (idField === undefined) throw new RowError('id', `no document id (one of ${RECORD_FIELDS.id.join(', ')})`);
  const [idName, idValue] = idField;
  const id = typeof idValue === 'number' && Number.isFinite(idValue) ? String(idValue) : idValue;
  if (typeof id !== 'string' || id.trim() === '') throw new RowError(idName, 'must be a non-empty string or a number');
  const textField = first(row, RECORD_FIELDS.text);
  if (textField !== undefined && typeof textField[1] !== 'string') throw new RowError(textField[0], 'must be a string');
  if (row.title !== undefined && row.title !== null && typeof row.title !== 'string') throw new RowError('title', 'must be a string');
  if (row.url !== undefined && row.url !== null && typeof row.url !== 'string') throw new RowError('url', 'must be a string');
  const title = typeof row.title === 'string' ? row.title : '';
  const text = textField === undefined ? '' : (textField[1] as string);
  if (title.trim() === '' && text.trim() === '') throw new RowError('text', `no title and no text (${RECORD_FIELDS.text.join(', ')})`);
  return {
    id,
    url: typeof row.url === 'string' && row.url.trim() !== '' ? row.url : null,
    title,
    text,
    authors: Array.isArray(row.authors) ? row.authors.filter((a): a is string => typeof a === 'string') : [],
    year: typeof row.year === 'number' && Number.isFinite(row.year) ? row.year : null,
    venue: typeof row.venue === 'string' ? row.venue : '',
  };
}
