/**
 * The closing line of a dataset command that reads rows and writes rows (export, filter, dedup,
 * decontaminate): `export: 48 rows in, 63 written, …; 9 rows split into 24 (…why)`. One format,
 * so that every count a reader sees adds up: rows in = rows written from + rows left out, and
 * when one row became several the line says how many and why, instead of leaving "63 written"
 * from "48 rows in" to be guessed at.
 */

export interface RowAccount {
  /** Rows read (bad rows not included). */
  readonly in: number;
  /** Rows written, and what the command calls them (`written`, `kept`). */
  readonly written: number;
  readonly writtenAs?: string | undefined;
  /** What became of the other rows, in order: `0 dropped over max tokens`, `1 failed skipped`; empty strings are left out. */
  readonly outcomes: readonly string[];
  /** Rows written as several rows each: how many rows, how many rows they made, and why. */
  readonly split?: { readonly rows: number; readonly into: number; readonly why: string } | undefined;
}

/** `command: N rows in, W written, …outcomes; S rows split into P (why)`, with a newline. */
export function rowAccountLine(command: string, a: RowAccount): string {
  const parts = [`${a.in} rows in`, `${a.written} ${a.writtenAs ?? 'written'}`, ...a.outcomes.filter((o) => o !== '')];
  const split = a.split && a.split.rows > 0 ? `; ${a.split.rows} rows split into ${a.split.into} (${a.split.why})` : '';
  return `${command}: ${parts.join(', ')}${split}\n`;
}
