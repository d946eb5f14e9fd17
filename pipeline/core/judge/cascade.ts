/**
 * The cheap steps of the judge's cascade: exact, normalised, token F1. They only ever say
 * "correct"; an answer none of them accepts goes to the LLM judge (judge.ts).
 * No cheap step says "incorrect": "1990" is not "the treaty was signed in 1990", and "4" is
 * "four", so a mismatch of strings proves nothing.
 *
 * Each gold alternative is tried (the question's `answer`, `meta.answers` when the row gave a
 * list, and `meta.aliases`, a synthesized question's other spellings of its answer), against the
 * final answer and, when it holds one, the content of its last `\boxed{}`.
 *
 * - exact: the answer, trimmed, equals the gold, trimmed.
 * - normalised: equal token lists after `matchTokens`: SQuAD's normalisation (NFKC, lower case,
 *   tags, punctuation and the articles a/an/the removed, whitespace collapsed; a decimal point
 *   between digits kept), then numbers made canonical: "1,000" → "1000" (the comma is
 *   punctuation), "3.50" → "3.5", "007" → "7", "5.0" → "5", and the number words zero to twenty
 *   → digits ("four" → "4").
 * - f1: SQuAD token F1 of those token lists ≥ `validation.f1_threshold` (default 0.8).
 */
import { extractBoxed, normalizeAnswer, tokenF1 } from '../validator.js';

export type CheapStep = 'exact' | 'normalised' | 'f1';

const NUMBER_WORDS: Readonly<Record<string, string>> = {
  zero: '0', one: '1', two: '2', three: '3', four: '4', five: '5', six: '6', seven: '7', eight: '8', nine: '9', ten: '10',
  eleven: '11', twelve: '12', thirteen: '13', fourteen: '14', fifteen: '15', sixteen: '16', seventeen: '17', eighteen: '18', nineteen: '19', twenty: '20',
};

/** A number token in one spelling: no leading zeros, no trailing decimal zeros. */
function canonicalNumber(token: string): string {
  const word = NUMBER_WORDS[token];
  if (word !== undefined) return word;
  if (!/^\d+(?:\.\d+)?$/.test(token)) return token;
  let [int, frac = ''] = token.split('.') as [string, string?];
  int = int.replace(/^0+(?=\d)/, '');
  frac = frac.replace(/0+$/, '');
  return frac === '' ? int : `${int}.${frac}`;
}

/** SQuAD-normalised tokens with numbers canonical: what the normalised and f1 steps compare. */
export function matchTokens(text: string): string[] {
  return normalizeAnswer(text).map(canonicalNumber);
}

/** The gold answers of a row: its `gold_answer`, the strings of `meta.answers` (a list the question gave) and of `meta.aliases` (synthesize). */
export function goldsOf(t: { readonly gold_answer?: string | undefined; readonly meta?: Readonly<Record<string, unknown>> | undefined }): string[] {
  const out: string[] = [];
  const add = (g: unknown): void => {
    if (typeof g === 'string' && g.trim() !== '' && !out.includes(g)) out.push(g);
  };
  add(t.gold_answer);
  for (const list of [t.meta?.answers, t.meta?.aliases]) if (Array.isArray(list)) for (const a of list) add(a);
  return out;
}

export interface CheapResult {
  /** The step that accepted the answer; undefined when none did (the LLM judge decides). */
  readonly step?: CheapStep | undefined;
  /** The best token F1 over the golds and answer forms. */
  readonly f1: number;
}

/** Runs exact → normalised → f1 over every gold and answer form; the first step that accepts wins. */
export function cheapSteps(answer: string, golds: readonly string[], f1Threshold: number): CheapResult {
  const boxed = extractBoxed(answer);
  const forms = boxed === undefined ? [answer] : [answer, boxed];
  for (const g of golds) for (const a of forms) if (a.trim() === g.trim()) return { step: 'exact', f1: 1 };
  const goldTokens = golds.map(matchTokens);
  const formTokens = forms.map(matchTokens);
  for (const g of goldTokens) for (const a of formTokens) if (g.length > 0 && a.join(' ') === g.join(' ')) return { step: 'normalised', f1: 1 };
  let best = 0;
  for (const g of goldTokens) for (const a of formTokens) if (g.length > 0) best = Math.max(best, tokenF1(a, g));
  return best >= f1Threshold && best > 0 ? { step: 'f1', f1: best } : { f1: best };
}
