/**
 * Python's `repr()` of a JSON value, as MiroThinker shows a tool's input schema: its prompt
 * writes `f"Input JSON schema: {tool['schema']}"`, a Python dict, so a model trained on MiroVerse
 * has read `{'type': 'string', 'default': None}`, never JSON. Written from the language's rules
 * (CPython's `unicode_repr` and `float_repr`), not from anyone's code:
 * - dict `{'k': v, 'k2': v2}`, list `[a, b]`, `True`/`False`/`None`;
 * - str in single quotes, or double quotes when it holds `'` and no `"`; `\\`, the quote, `\t`,
 *   `\n`, `\r` escaped; other non-printable code points as `\xNN`, `\uNNNN` or `\UNNNNNNNN`
 *   (printable non-ASCII text is kept, as Python 3 keeps it);
 * - an integer (a safe one: JSON numbers arrive as doubles) as digits; any other number as
 *   Python's shortest float repr (`0.5`, `1e-05`, `1e+16`, `inf`, `nan`).
 */

/** Python's repr of a value parsed from JSON. */
export function pythonRepr(value: unknown): string {
  if (value === null || value === undefined) return 'None';
  if (value === true) return 'True';
  if (value === false) return 'False';
  if (typeof value === 'number') return numberRepr(value);
  if (typeof value === 'string') return stringRepr(value);
  if (Array.isArray(value)) return `[${value.map(pythonRepr).join(', ')}]`;
  if (typeof value === 'object') {
    return `{${Object.entries(value as Record<string, unknown>)
      .map(([k, v]) => `${stringRepr(k)}: ${pythonRepr(v)}`)
      .join(', ')}}`;
  }
  return stringRepr(String(value));
}

/** Python's `repr(float(x))`, or `repr(int(x))` for a safe integer. */
export function numberRepr(x: number): string {
  if (Number.isNaN(x)) return 'nan';
  if (!Number.isFinite(x)) return x > 0 ? 'inf' : '-inf';
  if (Number.isSafeInteger(x)) return Object.is(x, -0) ? '-0.0' : String(x);
  // The shortest digits that round-trip (JavaScript and Python agree on them), then Python's layout:
  // positional for a decimal exponent from -4 to 15, else d.ddde±XX.
  const [mantissa, expPart] = x.toExponential().split('e') as [string, string];
  const exp = Number(expPart);
  const negative = mantissa.startsWith('-');
  const digits = mantissa.replace('-', '').replace('.', '');
  const sign = negative ? '-' : '';
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
    const whole = digits.slice(0, exp + 1).padEnd(exp + 1, '0');
    const frac = digits.slice(exp + 1);
    return `${sign}${whole}.${frac === '' ? '0' : frac}`;
  }
  const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${m}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
}

/** Code points Python's `str.isprintable()` refuses: controls, format, surrogates, private use, unassigned, separators but the space. */
const NON_PRINTABLE = /^(?:\p{C}|\p{Zl}|\p{Zp}|\p{Zs})$/u;

/** Python's `repr(str)`. */
export function stringRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  // By code point; a lone surrogate comes through on its own, as Python shows one.
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    if (ch === '\\') out += '\\\\';
    else if (ch === quote) out += `\\${quote}`;
    else if (ch === '\t') out += '\\t';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (cp < 0x20 || cp === 0x7f) out += `\\x${hex(cp, 2)}`;
    else if (cp > 0x7f && NON_PRINTABLE.test(ch)) out += cp <= 0xff ? `\\x${hex(cp, 2)}` : cp <= 0xffff ? `\\u${hex(cp, 4)}` : `\\U${hex(cp, 8)}`;
    else out += ch;
  }
  return out + quote;
}

function hex(n: number, width: number): string {
  return n.toString(16).padStart(width, '0');
}
