/**
 * What `trajforge validate` prints: a failed row in words (its issues, where in the row), the
 * summary by rule, and a row as one JSON line (`--json`). Text quoted from a row (ids, issue
 * messages) is printed with its control characters escaped (printable.ts).
 */
import type { ValidationIssue } from '../../schemas/index.js';
import { printable } from '../printable.js';
import type { RowResult, ValidateSummary } from './validate.js';

function where(i: ValidationIssue): string {
  const at = [i.turn === undefined ? '' : `turn ${i.turn}`, i.call_index === undefined ? '' : `call ${i.call_index}`, i.offset === undefined ? '' : `offset ${i.offset}`].filter(Boolean);
  return at.length ? `  [${at.join(', ')}]` : '';
}

/** A failed row: `FAIL id (file:line)`, then an issue a line. */
export function readableRow(r: RowResult): string[] {
  const lines = [`FAIL ${r.id}  (${r.file}:${r.line})`];
  const width = Math.max(...r.validation.issues.map((i) => i.rule.length));
  for (const i of r.validation.issues) lines.push(`  ${i.severity.padEnd(5)}  ${i.rule.padEnd(width)}  ${i.message}${where(i)}`);
  return lines.map((l) => printable(l));
}

/** The summary: the counts, then a table of rules by the rows they failed, then the judge's verdicts. */
export function readableSummary(s: ValidateSummary, input: string): string[] {
  const lines = [
    `${input}: ${s.rows} rows, ${s.passed} passed (${s.warned} with warnings), ${s.failed} failed${s.bad_rows ? `; ${s.bad_rows} unreadable rows skipped` : ''}`,
  ];
  const ids = Object.keys(s.rules).sort((a, b) => s.rules[b]!.rows - s.rules[a]!.rows || a.localeCompare(b));
  if (ids.length) {
    const w = Math.max(4, ...ids.map((id) => id.length));
    lines.push('', `${'rule'.padEnd(w)}  ${'error'.padStart(6)}  ${'warn'.padStart(6)}  ${'rows'.padStart(6)}`);
    for (const id of ids) {
      const c = s.rules[id]!;
      lines.push(`${id.padEnd(w)}  ${String(c.error).padStart(6)}  ${String(c.warn).padStart(6)}  ${String(c.rows).padStart(6)}`);
    }
  }
  if (s.judge) {
    const j = s.judge;
    lines.push('', `judge: ${j.graded} graded: ${j.CORRECT} CORRECT, ${j.INCORRECT} INCORRECT, ${j.NOT_ATTEMPTED} NOT_ATTEMPTED, ${j.unreadable} unreadable, ${j.failed} failed requests`);
  }
  return lines.map((l) => printable(l));
}

/** A row as `--json` prints it: `{id, file, line, passed, issues, judge?}`. */
export function jsonRow(r: RowResult): Record<string, unknown> {
  const line: Record<string, unknown> = { id: r.id, file: r.file, line: r.line, passed: r.validation.passed, issues: r.validation.issues };
  if (r.judge) line.judge = r.judge;
  return line;
}
