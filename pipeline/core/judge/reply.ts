/**
 * A judge's reply, read at its fixed place and nowhere else.
 *
 * A judge that grades an answer often quotes it, and an answer can hold "Verdict: CORRECT" or
 * "grade: A". A verdict read from anywhere in the reply is a verdict the answer can write
 * (issue #23 item 5: the last labelled verdict won, so a quoted one did). So the prompts ask
 * for the verdict on the reply's first line (prompts/judge-simpleqa.txt), or for a JSON object
 * that starts the reply (prompts/judge-rubric.txt), and only that place is read: what follows
 * it is the rationale, whatever it quotes.
 *
 * Reasoning may come first (`<think>…</think>`, which is also how the model client hands
 * over a `reasoning` field), and it may quote the answer, closing tag and all. So each
 * `</think>` is a place where the reasoning may end; the readings after each must agree, or the
 * reply is unreadable. A quote can make a reply unreadable (asked again, then unjudged), never
 * turn its verdict around.
 *
 * Other questions (kinds.ts) answer with a label of their own (`SUPPORTED`, `NOT_UNIQUE`), read
 * the same way, at the same place (`readLabel`).
 */
import { jsonrepair } from 'jsonrepair';

export type Verdict = 'CORRECT' | 'INCORRECT' | 'NOT_ATTEMPTED';

export interface VerdictReading {
  readonly verdict: Verdict;
  readonly rationale: string;
}

const VERDICT_WORD = String.raw`NOT[_ -]?ATTEMPTED|INCORRECT|CORRECT`;
const LABEL = String.raw`verdict|grade|grading|judge?ment|classification`;
// "Verdict: CORRECT", "**Verdict:** INCORRECT", "## Grade = [NOT_ATTEMPTED]" at the start of the line.
const LABELLED = new RegExp(String.raw`^[\s*_#]*(?:${LABEL})[\s*_"'\x60]*[:：=][\s*_"'\x60\[(]*(${VERDICT_WORD})(?![\w-])`, 'i');
// SimpleQA's letters (A/B/C) after a label, alone on the line: "Grade: A", never "Verdict: A wrong answer".
const LETTER = new RegExp(String.raw`^[\s*_#]*(?:${LABEL})[\s*_"'\x60]*[:：=][\s*_"'\x60\[(]*([ABC])[\s*_"'\x60\]).]*$`, 'i');
// The verdict alone on the line, in capitals: "INCORRECT", "**CORRECT**".
const BARE = new RegExp(String.raw`^[\s*_"'\x60\[(]*(NOT[_ ]ATTEMPTED|INCORRECT|CORRECT)[\s*_"'\x60\]).!]*$`);
// Capitals only: "the answer is not correct" in a rationale is prose, not a second verdict.
const ANOTHER = /(?<![A-Za-z_])(?:NOT[_ ]ATTEMPTED|INCORRECT|CORRECT)(?![A-Za-z_])/;
const RATIONALE = /^[\s*_.,;:)\]—–-]*(?:(?:rationale|reason(?:ing)?|explanation|justification)\b["'*_\s]*[:：=]\s*["'*_]*)?/i;
const LETTERS: Readonly<Record<string, Verdict>> = { A: 'CORRECT', B: 'INCORRECT', C: 'NOT_ATTEMPTED' };

function canonical(word: string): Verdict {
  const w = word.toUpperCase();
  return w.startsWith('NOT') ? 'NOT_ATTEMPTED' : w === 'INCORRECT' ? 'INCORRECT' : 'CORRECT';
}

/** Whitespace collapsed, cut to `n` characters with an ellipsis. */
export function clip(s: string, n: number): string {
  const one = s.replace(/\s+/g, ' ').trim();
  return one.length <= n ? one : `${one.slice(0, n - 1)}…`;
}

/** The places a reply's own words may start: after each `</think>` when it opens with reasoning, else its start. */
function bodies(reply: string): string[] {
  const text = reply.trimStart();
  if (!/^<think>/i.test(text)) return [text];
  const out: string[] = [];
  for (const m of text.matchAll(/<\/think>/gi)) out.push(text.slice(m.index + m[0].length));
  return out;
}

/**
 * `read` at each place the reply's own words may start; the reading, when every place that
 * gives one gives the same (`same`), else undefined.
 */
function atFixedPlace<T>(reply: string, read: (body: string) => T | undefined, same: (a: T, b: T) => boolean): T | undefined {
  const readings = bodies(reply).map(read).filter((r): r is T => r !== undefined);
  const first = readings[0];
  return first !== undefined && readings.every((r) => same(first, r)) ? first : undefined;
}

/** The verdict on a body's first line, and what follows it as the rationale. */
function verdictLine(body: string): VerdictReading | undefined {
  const text = body.trimStart();
  if (text.startsWith('{') || text.startsWith('```')) return verdictJson(text);
  const nl = text.indexOf('\n');
  const line = nl < 0 ? text : text.slice(0, nl);
  const others = nl < 0 ? '' : text.slice(nl + 1);
  let verdict: Verdict | undefined;
  let rest = '';
  const labelled = LABELLED.exec(line) ?? BARE.exec(line);
  const letter = labelled ? null : LETTER.exec(line);
  if (labelled) {
    verdict = canonical(labelled[1]!);
    rest = line.slice(labelled.index + labelled[0].length);
    // "Verdict: CORRECT or INCORRECT": a template echoed, not a verdict.
    if (ANOTHER.test(rest)) return undefined;
  } else if (letter) verdict = LETTERS[letter[1]!.toUpperCase()];
  if (verdict === undefined) return undefined;
  const rationale = `${rest}\n${others}`.replace(RATIONALE, '').replace(/["'*_}\s]+$/, '');
  return { verdict, rationale: clip(rationale, 500) };
}

/** `{"verdict": "CORRECT", "rationale": "…"}` starting the body: its top-level fields only. */
function verdictJson(body: string): VerdictReading | undefined {
  const value = jsonAtStart(body);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const o = value as Record<string, unknown>;
  const said = typeof o.verdict === 'string' ? o.verdict : typeof o.grade === 'string' ? o.grade : undefined;
  if (said === undefined) return undefined;
  const word = new RegExp(String.raw`^\s*(${VERDICT_WORD})\s*$`, 'i').exec(said);
  const verdict = word ? canonical(word[1]!) : LETTERS[said.trim().toUpperCase()];
  if (verdict === undefined) return undefined;
  const why = ['rationale', 'reason', 'reasoning', 'explanation', 'justification'].map((k) => o[k]).find((v) => typeof v === 'string');
  return { verdict, rationale: clip(typeof why === 'string' ? why : '', 500) };
}

/**
 * The verdict of a grading reply: on its first line (after any reasoning), or in the `verdict`
 * field of a JSON object that starts it; undefined when there is none there, never a guess.
 */
export function readVerdict(reply: string): VerdictReading | undefined {
  return atFixedPlace(reply, verdictLine, (a, b) => a.verdict === b.verdict);
}

/** Where the JSON value that starts `text` ends (the index after it), or -1 when it never closes. */
function endOfValue(text: string): number {
  let depth = 0;
  let quote = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quote !== '') {
      if (c === '\\') i++;
      else if (c === quote) quote = '';
    } else if (c === '"' || c === "'") quote = c;
    else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      if (--depth === 0) return i + 1;
    }
  }
  return -1;
}

/**
 * The JSON value (object or array) that starts `text`, or is the first thing inside a
 * ```json fence that starts it; repaired the way models write JSON (single quotes, trailing
 * commas). Undefined when the text starts with anything else: JSON further on is not read.
 */
export function jsonAtStart(text: string): unknown {
  let src = text.trimStart();
  const fence = /^```(?:json)?[^\S\n]*\n?/i.exec(src);
  if (fence) src = src.slice(fence[0].length).trimStart();
  if (!src.startsWith('{') && !src.startsWith('[')) return undefined;
  const end = endOfValue(src);
  const body = end < 0 ? src : src.slice(0, end);
  try {
    return JSON.parse(body);
  } catch {
    try {
      return JSON.parse(jsonrepair(body));
    } catch {
      return undefined;
    }
  }
}

/** The JSON value that starts a reply's own words (after any reasoning), read as `read` reads it; undefined when the places disagree. */
export function readJsonReply<T>(reply: string, read: (value: unknown) => T | undefined): T | undefined {
  return atFixedPlace(
    reply,
    (body) => {
      const value = jsonAtStart(body);
      return value === undefined ? undefined : read(value);
    },
    (a, b) => JSON.stringify(a) === JSON.stringify(b),
  );
}

export interface LabelReading<L extends string> {
  readonly label: L;
  readonly rationale: string;
}

/** A label as written, in one spelling: `not supported`, `Not-Supported` → `NOT_SUPPORTED`. */
const labelSpelling = (s: string): string => s.trim().toUpperCase().replace(/[\s-]+/g, '_');

/** The label on a body's first line (`Verdict: LABEL`, or the label alone), or in the `verdict` field of a JSON object that starts it. */
function labelLine<L extends string>(body: string, labels: readonly L[]): LabelReading<L> | undefined {
  const text = body.trimStart();
  const find = (said: string): L | undefined => labels.find((l) => labelSpelling(l) === labelSpelling(said));
  if (text.startsWith('{') || text.startsWith('```')) {
    const value = jsonAtStart(text);
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
    const o = value as Record<string, unknown>;
    const label = typeof o.verdict === 'string' ? find(o.verdict) : undefined;
    const why = ['rationale', 'reason', 'reasoning', 'explanation'].map((k) => o[k]).find((v) => typeof v === 'string');
    return label === undefined ? undefined : { label, rationale: clip(typeof why === 'string' ? why : '', 500) };
  }
  const nl = text.indexOf('\n');
  const line = (nl < 0 ? text : text.slice(0, nl)).replace(/[*_#`"'[\]().!]/g, ' ');
  const m = new RegExp(String.raw`^\s*(?:(?:${LABEL}|label|answer)\s*[:：=])?\s*([A-Za-z][A-Za-z _-]*?)\s*$`, 'i').exec(line);
  const label = m ? find(m[1]!) : undefined;
  if (label === undefined) return undefined;
  const rationale = (nl < 0 ? '' : text.slice(nl + 1)).replace(RATIONALE, '').replace(/["'*_}\s]+$/, '');
  return { label, rationale: clip(rationale, 500) };
}

/**
 * A reply that answers with one of `labels` at the fixed place: its first line, after any
 * reasoning (`Verdict: NOT_SUPPORTED`), or the `verdict` field of a JSON object that starts it.
 * Undefined when it holds none of them there, or two readings disagree.
 */
export function readLabel<L extends string>(reply: string, labels: readonly L[]): LabelReading<L> | undefined {
  return atFixedPlace(reply, (body) => labelLine(body, labels), (a, b) => a.label === b.label);
}
