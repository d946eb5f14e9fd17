/**
 * Question ids: a row without an id of its own gets one from its normalised text, so the same
 * question read twice (or from two files) has one id, and ids double as dedupe keys.
 */
import { createHash } from 'node:crypto';

/** `q-` and 16 hex digits of sha256 over the question, NFKC, lowercased, spaces folded. */
export function questionIdFor(question: string): string {
  const normalised = question.normalize('NFKC').toLowerCase().replace(/\s+/g, ' ').trim();
  // 16 hex digits (64 bits): ids double as dedupe keys, and 48 bits already collide with a
  // fair chance in a multi-million-row bank, which would silently drop a question.
  return 'q-' + createHash('sha256').update(normalised).digest('hex').slice(0, 16);
}
