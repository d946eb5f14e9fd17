/**
 * The checks that need no model: the evidence is verbatim (every quote is in its document), the
 * answer does not leak into the question, and the question does not overlap an eval set. They
 * run before the judge is asked anything: a draft they reject costs no more requests.
 */
import type { CheckResult } from '../../schemas/index.js';
import { matchTokens } from '../core/judge/cascade.js';
import { scanRow, type EvalIndex } from '../dataset/decontaminate.js';
import type { Draft } from './draft.js';
import type { Seed } from './seed.js';

const pass = (reason: string): CheckResult => ({ verdict: 'pass', reason });
const fail = (reason: string): CheckResult => ({ verdict: 'fail', reason });
const cut = (s: string, n = 120): string => (s.length <= n ? s : `${s.slice(0, n - 1)}…`);

/** Whitespace runs as one space, NFKC: a quote may reflow a line, nothing else. */
const flat = (s: string): string => s.normalize('NFKC').replace(/\s+/g, ' ').trim();

const sameAnswer = (a: string, b: string): boolean => matchTokens(a).join(' ') === matchTokens(b).join(' ');

/**
 * documents: every quote names a document of the seed and is found in its text, verbatim.
 * graph: the evidence is the walk itself (every triple is in the graph); the answer must be
 * where the walk ends.
 */
export function verbatimCheck(seed: Seed, d: Draft): CheckResult {
  if (seed.kind === 'graph') {
    const end = seed.triples.at(-1)!.object;
    if ([d.answer, ...d.aliases].some((a) => sameAnswer(a, end))) return pass(`the evidence is the walk's ${seed.triples.length} triples, each in the graph; the answer is where it ends ("${cut(end)}")`);
    return fail(`the answer "${cut(d.answer)}" is not where the walk ends ("${cut(end)}")`);
  }
  if (d.quotes.length === 0) return fail('the draft gives no quotes');
  for (const [i, q] of d.quotes.entries()) {
    const doc = seed.docs.find((x) => x.id === q.doc_id);
    if (doc === undefined) return fail(`quote ${i + 1} cites "${cut(q.doc_id)}", not a document of this seed (${seed.docs.map((x) => x.id).join(', ')})`);
    if (!flat(doc.text).includes(flat(q.quote))) return fail(`quote ${i + 1} is not in document ${doc.id} verbatim: "${cut(q.quote)}"`);
  }
  return pass(`${d.quotes.length} quote${d.quotes.length === 1 ? '' : 's'}, each found verbatim in ${d.quotes.length === 1 ? 'its document' : 'their documents'}`);
}

/** Whether `tokens` holds `run` as consecutive tokens. */
function holdsRun(tokens: readonly string[], run: readonly string[]): boolean {
  outer: for (let i = 0; i + run.length <= tokens.length; i++) {
    for (let j = 0; j < run.length; j++) if (tokens[i + j] !== run[j]) continue outer;
    return true;
  }
  return false;
}

/**
 * A text's words as the leak check compares them: NFKC, and every mark a word break (so
 * `Chrome-57` holds `57`) but a decimal point or thousands separator between digits (`1.3` is
 * not `1`); then as the judge's cascade compares answers: case and articles dropped, numbers in
 * one spelling (`four` = `4`, `1,000` = `1000`, `57.0` = `57`).
 */
export function leakTokens(text: string): string[] {
  const spaced = text.normalize('NFKC').replace(/[^\p{L}\p{N}\s]/gu, (c, i: number, s: string) => ((c === '.' || c === ',') && /\d/.test(s[i - 1] ?? '') && /\d/.test(s[i + 1] ?? '') ? c : ' '));
  return matchTokens(spaced);
}

/** The answer and each alias must not appear in the question as a run of words, both seen by `leakTokens`. */
export function leakCheck(question: string, answer: string, aliases: readonly string[]): CheckResult {
  const q = leakTokens(question);
  if (leakTokens(answer).length === 0) return fail(`the answer "${cut(answer)}" has no words once normalised: nothing a grader could match`);
  for (const form of [answer, ...aliases]) {
    const t = leakTokens(form);
    if (t.length > 0 && holdsRun(q, t)) return fail(`the question contains the ${form === answer ? 'answer' : 'alias'} "${cut(form)}" (normalised: "${t.join(' ')}")`);
  }
  const forms = aliases.length === 0 ? 'the answer does not' : `neither the answer nor ${aliases.length === 1 ? 'its alias' : `its ${aliases.length} aliases`}`;
  return pass(`${forms} appear in the question, normalised`);
}

/** decontaminate's rule (13-gram overlap with the item's content words), on the question. */
export function contaminationCheck(question: string, index: EvalIndex): CheckResult {
  const hit = scanRow({ question }, index)[0];
  if (hit === undefined) return pass(`no overlap with ${index.summary.checked} eval items (${index.options.n}-grams)`);
  const m = hit.match;
  return fail(`the question overlaps eval item ${m.eval_id} of ${m.eval_file} (${m.ngrams} of its ${m.of} ${index.options.n}-grams)`);
}
