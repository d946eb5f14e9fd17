/**
 * A tool output against its call's record: whether the record's own evidence (an error, the
 * snippet ids it returned) agrees with what the output showed the model. What catches rows other
 * generators wrote, whose readers can only take `output_text` from the text itself.
 */
import type { ToolCallRecord } from '../../schemas/index.js';
import type { Segment } from '../dialects/types.js';
import { clipLine } from '../text.js';

/** The text inside a tool output's tags. */
function outputBody(text: string): string {
  return text
    .replace(/^\s*<[^<>]{0,200}>/, '')
    .replace(/<\/[^<>]{0,60}>\s*$/, '')
    .trim();
}

/** The error a tool output shows the model, when it is one ("Error: …", as trajforge and the DR Tulu generators render failures). */
function outputError(text: string): string | undefined {
  const body = outputBody(text);
  return /^error\b/i.test(body) ? body : undefined;
}

/** A record's error: its `error` field, or an `error` string in its raw result (rows other generators wrote). */
function recordError(rec: ToolCallRecord): string | undefined {
  if (rec.error !== undefined && rec.error !== '') return rec.error;
  const r = rec.result as { error?: unknown } | null | undefined;
  return r !== null && typeof r === 'object' && typeof r.error === 'string' && r.error !== '' ? r.error : undefined;
}

/** Whether the raw result holds `text` (as a JSON string would spell it): a tool may return "Error: …" as an ordinary result. */
function resultHolds(result: unknown, text: string): boolean {
  const probe = JSON.stringify(text.split('\n', 1)[0]!.slice(0, 60)).slice(1, -1);
  if (probe === '') return true;
  if (typeof result === 'string') return result.includes(text.split('\n', 1)[0]!.slice(0, 60));
  try {
    return (JSON.stringify(result) ?? '').includes(probe);
  } catch {
    return true; // a result that cannot be serialised cannot be held against the output
  }
}

/**
 * A tool output against its record's own evidence: whether the call failed (`error`, or an
 * `error` in the raw result), and, when the record has no rendered `output_text`, which
 * snippet ids it returned. This is what catches rows other generators wrote, whose readers
 * can only take `output_text` from the text itself: an output the model invented next to a
 * call that timed out, or an error shown to the model for a call that returned a page.
 */
export function outputDisagrees(out: Extract<Segment, { kind: 'output' }>, rec: ToolCallRecord, i: number): string | undefined {
  const shownError = outputError(out.text);
  const recError = recordError(rec);
  const name = `record ${i} (${rec.tool_name})`;
  if (shownError === undefined && recError !== undefined) {
    const what = out.snippetIds.length ? `${out.snippetIds.length} snippets (${clipLine(out.snippetIds.join(', '), 60)})` : `"${clipLine(outputBody(out.text), 60)}"`;
    return `tool output ${i} shows ${what} but ${name} failed: "${clipLine(recError, 80)}"`;
  }
  if (shownError !== undefined && recError === undefined && !resultHolds(rec.result, shownError)) {
    return `tool output ${i} shows the model an error ("${clipLine(shownError, 80)}") but ${name} holds a result and no error`;
  }
  if (rec.output_text === '' && rec.snippet_ids.length > 0) {
    const shown = new Set(out.snippetIds);
    const returned = new Set(rec.snippet_ids);
    const invented = [...shown].filter((id) => !returned.has(id));
    const dropped = [...returned].filter((id) => !shown.has(id));
    if (invented.length || dropped.length) {
      const parts = [];
      if (invented.length) parts.push(`shows ids ${name} did not return: ${clipLine(invented.join(', '), 80)}`);
      if (dropped.length) parts.push(`leaves out ids it returned: ${clipLine(dropped.join(', '), 80)}`);
      return `tool output ${i} ${parts.join('; ')}`;
    }
  }
  return undefined;
}
