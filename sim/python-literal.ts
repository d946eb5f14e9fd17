/**
 * Reads a Python literal (dict, list, str, int, float, True/False/None): the sim's side of a
 * MiroThinker prompt, which lists each tool's input schema as Python dict text
 * (pipeline/dialects/python-repr.ts writes it). Only what `repr()` of JSON-like data produces;
 * anything else is undefined, as a schema the sim cannot read.
 */

/** The literal starting at `start` of `text`, or undefined when it is not one. */
export function readPythonLiteral(text: string, start: number): unknown {
  try {
    return new Reader(text, start).value();
  } catch {
    return undefined;
  }
}

const ESCAPES: Readonly<Record<string, string>> = { n: '\n', t: '\t', r: '\r', '\\': '\\', "'": "'", '"': '"', '0': '\0' };

class Reader {
  constructor(
    readonly text: string,
    public at: number,
  ) {}

  value(depth = 0): unknown {
    if (depth > 100) throw new Error('too deep');
    this.space();
    const ch = this.text[this.at];
    if (ch === '{') return this.sequence('}', depth, true);
    if (ch === '[') return this.sequence(']', depth, false);
    if (ch === "'" || ch === '"') return this.string(ch);
    for (const [word, v] of [['True', true], ['False', false], ['None', null]] as const) {
      if (this.text.startsWith(word, this.at)) {
        this.at += word.length;
        return v;
      }
    }
    const m = /^-?(?:inf|nan|\d+(?:\.\d*)?(?:e[+-]?\d+)?)/.exec(this.text.slice(this.at, this.at + 64));
    if (m === null) throw new Error('not a literal');
    this.at += m[0].length;
    return m[0].endsWith('inf') ? (m[0].startsWith('-') ? -Infinity : Infinity) : m[0] === 'nan' ? NaN : Number(m[0]);
  }

  sequence(close: string, depth: number, dict: boolean): unknown {
    this.at++;
    const obj: Record<string, unknown> = {};
    const list: unknown[] = [];
    for (;;) {
      this.space();
      if (this.text[this.at] === close) break;
      const v = this.value(depth + 1);
      if (dict) {
        this.space();
        if (this.text[this.at++] !== ':' || typeof v !== 'string') throw new Error('bad key');
        obj[v] = this.value(depth + 1);
      } else list.push(v);
      this.space();
      if (this.text[this.at] === ',') this.at++;
      else if (this.text[this.at] !== close) throw new Error('bad separator');
    }
    this.at++;
    return dict ? obj : list;
  }

  string(quote: string): string {
    let out = '';
    for (this.at++; this.at < this.text.length; this.at++) {
      const ch = this.text[this.at]!;
      if (ch === quote) {
        this.at++;
        return out;
      }
      if (ch !== '\\') {
        out += ch;
        continue;
      }
      const e = this.text[++this.at]!;
      const width = e === 'x' ? 2 : e === 'u' ? 4 : e === 'U' ? 8 : 0;
      if (width > 0) {
        out += String.fromCodePoint(parseInt(this.text.slice(this.at + 1, this.at + 1 + width), 16));
        this.at += width;
      } else out += ESCAPES[e] ?? `\\${e}`;
    }
    throw new Error('unclosed string');
  }

  space(): void {
    while (this.at < this.text.length && ' \t\n\r'.includes(this.text[this.at]!)) this.at++;
  }
}
