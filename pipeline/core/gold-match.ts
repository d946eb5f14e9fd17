/**
 * Gold answers: how an answer is compared with the question's gold answer (`gold.match`), on
 * SQuAD-normalised tokens, and how a mismatch is worded. Also used by the judge's cascade,
 * which settles the cases these comparisons can.
 */
import { extractBoxed } from '../dialects/mcp-xml.js';
import { clipLine } from '../text.js';

/**
 * How a gold answer is compared (all on SQuAD-normalised tokens):
 * - `exact`: the whole answer equals the gold;
 * - `contains`: the gold's tokens appear as a contiguous run in the answer;
 * - `boxed`: when the answer holds `\boxed{…}`, the last box's content must equal the gold;
 *   an answer without a box is compared as `contains`;
 * - `f1`: token F1 (SQuAD) between answer and gold ≥ `f1Threshold`, or `contains`
 *   (a long correct answer has a low F1 only because it says more).
 */
export type GoldMode = 'exact' | 'contains' | 'boxed' | 'f1';

export const DEFAULT_F1_THRESHOLD = 0.8;

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= '0' && c <= '9';

/**
 * SQuAD-style: NFKC, lower case, tags, punctuation and articles removed, whitespace collapsed.
 * One departure: a decimal point between digits is kept, or "3.5" would become "35" and
 * match a different version number (the bundled question bank is full of them).
 */
export function normalizeAnswer(s: string): string[] {
  return s
    .normalize('NFKC')
    .toLowerCase()
    .replace(/<[^<>]{0,200}>/g, ' ')
    .replace(/[\p{P}\p{S}]/gu, (ch: string, at: number, all: string) => (ch === '.' && isDigit(all[at - 1]) && isDigit(all[at + 1]) ? '.' : ''))
    .split(/\s+/)
    .filter((w) => w !== '' && w !== 'a' && w !== 'an' && w !== 'the');
}

function containsRun(a: readonly string[], g: readonly string[]): boolean {
  outer: for (let i = 0; i + g.length <= a.length; i++) {
    for (let j = 0; j < g.length; j++) if (a[i + j] !== g[j]) continue outer;
    return true;
  }
  return false;
}

/** SQuAD token F1 between two normalised token lists (bag of tokens, counted with multiplicity). */
export function tokenF1(answer: readonly string[], gold: readonly string[]): number {
  if (answer.length === 0 || gold.length === 0) return answer.length === gold.length ? 1 : 0;
  const counts = new Map<string, number>();
  for (const w of gold) counts.set(w, (counts.get(w) ?? 0) + 1);
  let common = 0;
  for (const w of answer) {
    const c = counts.get(w);
    if (c) {
      common++;
      counts.set(w, c - 1);
    }
  }
  if (common === 0) return 0;
  const precision = common / answer.length;
  const recall = common / gold.length;
  return (2 * precision * recall) / (precision + recall);
}

/** How an answer compared with a gold answer, with what a message needs to say why. */
export interface GoldComparison {
  readonly matched: boolean;
  readonly mode: GoldMode;
  /** `boxed`: the box's content, when the answer had one. */
  readonly boxed?: string | undefined;
  /** `f1`: the score. */
  readonly f1?: number | undefined;
}

export function compareGold(answer: string, gold: string, mode: GoldMode, f1Threshold = DEFAULT_F1_THRESHOLD): GoldComparison {
  const g = normalizeAnswer(gold);
  if (mode === 'boxed') {
    const boxed = extractBoxed(answer);
    if (boxed !== undefined) return { matched: g.length === 0 || normalizeAnswer(boxed).join(' ') === g.join(' '), mode, boxed };
  }
  const a = normalizeAnswer(answer);
  if (g.length === 0 || a.join(' ') === g.join(' ')) return { matched: true, mode };
  if (mode === 'exact') return { matched: false, mode };
  if (mode === 'f1') {
    const f1 = tokenF1(a, g);
    return { matched: f1 >= f1Threshold || containsRun(a, g), mode, f1 };
  }
  return { matched: containsRun(a, g), mode };
}

/** Normalised exact match, the gold's tokens as a contiguous run inside the answer, a box's content, or token F1. */
export function goldMatches(answer: string, gold: string, mode: GoldMode, f1Threshold = DEFAULT_F1_THRESHOLD): boolean {
  return compareGold(answer, gold, mode, f1Threshold).matched;
}

/** Why an answer does not match its gold answer, as `gold.mismatch` says it. */
export function goldMessage(c: GoldComparison, gold: string, f1Threshold: number): string {
  switch (c.mode) {
    case 'exact':
      return `the answer does not equal the gold answer "${gold}"`;
    case 'contains':
      return `the answer does not contain the gold answer "${gold}"`;
    case 'boxed':
      return c.boxed === undefined
        ? `the answer has no \\boxed{} and does not contain the gold answer "${gold}"`
        : `the answer's \\boxed{${clipLine(c.boxed, 80)}} does not equal the gold answer "${gold}"`;
    case 'f1':
      return `token F1 ${(c.f1 ?? 0).toFixed(2)} < ${f1Threshold} against the gold answer "${gold}", which it does not contain either`;
  }
}
