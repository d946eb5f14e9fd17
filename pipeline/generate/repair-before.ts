/**
 * What a repair keeps of the text before it (`Repair.before`): the model's completion as the
 * endpoint sent it, so a reader (the report) sees what was cut, closed or dropped beside what
 * the trajectory kept. Bounded, because a runaway completion (100 KB of a loop, a page of
 * invented tool output) would otherwise be copied into every repair of its turn.
 */
import type { Completion } from '../core/llm/llm.js';
import { cleanText } from '../text.js';

/**
 * Characters of a completion a repair keeps as `before`. Past it the head, the tail and the
 * stretch around the repair point (where the kept text first differs) are kept, a quarter, a
 * quarter and a half of it, joined by a marker saying how much was cut.
 */
export const REPAIR_BEFORE_CHARS = 4096;

export interface Before {
  readonly before: string;
  readonly before_truncated?: true;
}

/**
 * The completion as sent: the text before the client's own cuts, and native calls after it as
 * JSON (their arguments as sent). Cleaned as all record text is (pipeline/text.ts): a record
 * stays text any strict UTF-8 reader takes, so a NUL or a lone surrogate the model wrote is
 * not in `before` either (the turn's `control_chars` repair says what went).
 */
export function sentCompletion(c: Completion): string {
  const text = c.sentText ?? c.text;
  if (c.toolCalls.length === 0) return cleanText(text);
  const calls = c.toolCalls.map((t) => ({ name: t.function.name, arguments: t.function.arguments }));
  return cleanText(`${text}${text === '' ? '' : '\n'}[tool_calls] ${JSON.stringify(calls)}`);
}

/** `i`, moved back one when it would split a surrogate pair. */
function boundary(s: string, i: number): number {
  const code = s.charCodeAt(i);
  return i > 0 && code >= 0xdc00 && code <= 0xdfff ? i - 1 : i;
}

/** `sent` as a repair keeps it, cut around where `kept` (the turn as repaired) first differs from it. */
export function beforeOf(sent: string, kept: string, limit = REPAIR_BEFORE_CHARS): Before {
  if (sent.length <= limit) return { before: sent };
  let point = 0;
  while (point < sent.length && point < kept.length && sent.charCodeAt(point) === kept.charCodeAt(point)) point++;
  const quarter = Math.floor(limit / 4);
  const around = Math.max(quarter, Math.min(point - quarter, sent.length - 3 * quarter));
  // Head, around the point, tail: merged where they meet, a marker in each gap.
  const spans: [number, number][] = [
    [0, quarter],
    [around, around + 2 * quarter],
    [sent.length - quarter, sent.length],
  ];
  let out = '';
  let at = 0;
  for (const [from, to] of spans) {
    const start = boundary(sent, Math.max(from, at));
    const end = boundary(sent, to);
    if (start > at) out += `\n[… ${(start - at).toLocaleString('en-US')} characters cut …]\n`;
    if (end > start) out += sent.slice(start, end);
    at = Math.max(at, end);
  }
  return { before: out, before_truncated: true };
}
