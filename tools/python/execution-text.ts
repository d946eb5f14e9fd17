/**
 * What a run looks like to the model: the text MiroThinker's `run_python_code` returns, which
 * is `str()` of E2B's `Execution`:
 *
 *   Execution(Results: [Result(42)], Logs: Logs(stdout: ['hi\n'], stderr: []), Error: None)
 *
 * and, when the cell raised, `Error: ExecutionError(name='…', value='…', traceback='…')` (a
 * dataclass repr). Strings inside are Python reprs, so they are written here as Python writes
 * them. Output cut at the sandbox's cap says so inside its stream; the whole text is cut at
 * `maxResultChars` with MiroThinker's own marker.
 */

export interface CellError {
  readonly name: string;
  readonly value: string;
  readonly traceback: string;
}

/** One stream of a run: the text kept and how many bytes the code wrote in all. */
export interface StreamText {
  readonly text: string;
  readonly keptBytes: number;
  readonly totalBytes: number;
}

export interface CellOutcome {
  readonly stdout: StreamText;
  readonly stderr: StreamText;
  /** `repr()` of the last expression, or null when there was none (or it was None). */
  readonly value: string | null;
  readonly error: CellError | null;
}

/** MiroThinker's marker for a result cut to its length limit. */
export const RESULT_CUT_MARKER = ' [Result truncated due to length limit]';

// Python's str.isprintable() is false for these (the space alone excepted).
const NON_PRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;

/** `repr(s)` as CPython writes it: quote choice, escapes, non-printable characters as \x, \u, \U. */
export function pyRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    if (ch === quote || ch === '\\') out += `\\${ch}`;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch !== ' ' && NON_PRINTABLE.test(ch)) {
      const cp = ch.codePointAt(0)!;
      out += cp < 0x100 ? `\\x${hex(cp, 2)}` : cp < 0x10000 ? `\\u${hex(cp, 4)}` : `\\U${hex(cp, 8)}`;
    } else out += ch;
  }
  return out + quote;
}

const hex = (n: number, width: number): string => n.toString(16).padStart(width, '0');

/**
 * The stream's text; when the code wrote more than was kept, a first line says so (first, so
 * that the cut of the whole result cannot take it away).
 */
export function streamText(s: StreamText): string {
  if (s.totalBytes <= s.keptBytes) return s.text;
  return `[output truncated: ${s.totalBytes} bytes written, the first ${s.keptBytes} kept]\n${s.text}`;
}

const logList = (s: StreamText): string => {
  const text = streamText(s);
  return text === '' ? '[]' : `[${pyRepr(text)}]`;
};

/** The Execution text of one run, cut to `maxResultChars`. */
export function executionText(o: CellOutcome, maxResultChars: number): string {
  const results = o.value === null ? '[]' : `[Result(${o.value})]`;
  const error =
    o.error === null ? 'None' : `ExecutionError(name=${pyRepr(o.error.name)}, value=${pyRepr(o.error.value)}, traceback=${pyRepr(o.error.traceback)})`;
  const text = `Execution(Results: ${results}, Logs: Logs(stdout: ${logList(o.stdout)}, stderr: ${logList(o.stderr)}), Error: ${error})`;
  return text.length > maxResultChars ? text.slice(0, maxResultChars) + RESULT_CUT_MARKER : text;
}
