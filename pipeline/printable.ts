/**
 * Text an error message quotes from its input (a line of a file, a key, a path), made safe to
 * print on a terminal: a file can hold a NUL, a bell, an escape sequence that moves the cursor
 * or recolours the screen, or a bidirectional override that makes one text read as another.
 * Each such character is written as an escape instead (`\x00`, `\x1b`, `\u202e`), so the
 * message shows what is in the file and the terminal stays as it was.
 */

/** C0 controls but tab and line feed, DEL, C1 controls, line/paragraph separators, bidi embeddings, overrides and isolates. */
const UNSAFE = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
/** The same, and tab and line feed too: a message that must stay on one line. */
const UNSAFE_ONE_LINE = /[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

function escape(c: string): string {
  const code = c.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
}

/** `s` with every character that could disturb a terminal written as an escape; with `oneLine`, newlines and tabs too. */
export function printable(s: string, opts: { readonly oneLine?: boolean } = {}): string {
  const re = opts.oneLine ? UNSAFE_ONE_LINE : UNSAFE;
  re.lastIndex = 0;
  return re.test(s) ? s.replace(re, escape) : s;
}
