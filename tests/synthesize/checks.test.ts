/**
 * The checks one by one, on inputs made to break them: quotes that differ from their document
 * by a word, quotes of a document the seed does not hold, answers that leak in another spelling
 * (number words, thousands separators, case and punctuation), replies whose verdict a quote could
 * fake, the solvability band's edges, and near-duplicates that differ by case and punctuation
 * against template siblings that differ by a slot.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DecontaminateOptions } from '../../schemas/index.js';
import { EvalIndex } from '../../pipeline/dataset/decontaminate.js';
import { ENTAILMENT, UNIQUE } from '../../pipeline/core/judge/kinds.js';
import { contaminationCheck, leakCheck, verbatimCheck } from '../../pipeline/synthesize/checks.js';
import { NearDuplicates } from '../../pipeline/synthesize/near-duplicates.js';
import { Solvability } from '../../pipeline/synthesize/solvable.js';
import type { Draft } from '../../pipeline/synthesize/draft.js';
import type { DocumentSeed, GraphSeed } from '../../pipeline/synthesize/seed.js';
import { tempDir } from '../helpers.js';

const doc = { id: 'css.grid', title: 'CSS property: grid', url: undefined, text: 'The CSS property grid is a standardized feature.\nChrome first supported it in version 57,\n  released 2017-03-09. Edge first supported it in version 16.' };
const seed: DocumentSeed = { kind: 'documents', id: 'd:css.grid', docs: [doc], links: [] };
const draft = (quotes: Draft['quotes'], answer = '57', aliases: string[] = []): Draft => ({ question: 'q', answer, aliases, quotes });

describe('verbatim', () => {
  it('passes a quote found in its document, a line break inside it reflowed to a space', () => {
    expect(verbatimCheck(seed, draft([{ doc_id: 'css.grid', quote: 'Chrome first supported it in version 57, released 2017-03-09.' }])).verdict).toBe('pass');
  });

  it('fails a quote one word off, naming the document and the quote', () => {
    const r = verbatimCheck(seed, draft([{ doc_id: 'css.grid', quote: 'Chrome first shipped it in version 57, released 2017-03-09.' }]));
    expect(r.verdict).toBe('fail');
    expect(r.reason).toContain('css.grid');
    expect(r.reason).toContain('first shipped it');
  });

  it('fails a quote of a document the seed does not hold, a quote of another case, and a draft with no quotes', () => {
    expect(verbatimCheck(seed, draft([{ doc_id: 'css.flex', quote: 'Chrome first supported it' }])).reason).toMatch(/not a document of this seed/);
    expect(verbatimCheck(seed, draft([{ doc_id: 'css.grid', quote: 'chrome first supported it in version 57' }])).verdict).toBe('fail');
    expect(verbatimCheck(seed, draft([])).verdict).toBe('fail');
  });

  it("graph: passes an answer that is the walk's end, in any spelling the judge accepts, and fails another", () => {
    const g: GraphSeed = { kind: 'graph', id: 'g:1', triples: [{ subject: 'A', relation: 'r', object: 'B' }, { subject: 'B', relation: 's', object: 'The Beatles' }], descriptions: new Map() };
    expect(verbatimCheck(g, draft([], 'the beatles')).verdict).toBe('pass');
    expect(verbatimCheck(g, draft([], 'B')).verdict).toBe('fail');
  });
});

describe('no_leak', () => {
  it.each([
    ['Which band recorded it, the beatles or not?', 'The Beatles'],
    ['Did 4 people sign it?', 'four'],
    ['Were there 1000 of them?', '1,000'],
    ['Is it version 57?', '57'],
    ['Is it VERSION-57.0?', '57'],
    ['Which one, Chrome-57 or Chrome-58?', '57'],
    ['Was it before 2017-03-09?', '9'],
  ])('finds the answer in "%s" (answer "%s")', (question, answer) => {
    expect(leakCheck(question, answer, []).verdict).toBe('fail');
  });

  it('finds an alias, and names it', () => {
    const r = leakCheck('Which city, also called the Big Apple, hosts it?', 'New York City', ['the Big Apple']);
    expect(r.verdict).toBe('fail');
    expect(r.reason).toContain('alias');
  });

  it('passes a question that holds only a longer number ("1.3" is not "1") or the answer inside a word', () => {
    expect(leakCheck('Released after version 1.3?', '1', []).verdict).toBe('pass');
    expect(leakCheck('Which gridline?', 'grid', []).verdict).toBe('pass');
  });

  it('fails an answer with no words to look for', () => {
    expect(leakCheck('Which one?', 'the', []).verdict).toBe('fail');
  });
});

describe('contamination', () => {
  it("rejects a question that holds an eval item's 13 words, and passes one that shares a shorter run", async () => {
    const dir = tempDir('tf-synth-eval-');
    const file = join(dir, 'eval.jsonl');
    writeFileSync(file, `${JSON.stringify({ id: 'e1', question: 'In which version of Chrome was the CSS property grid first supported by default?' })}\n`);
    const index = await EvalIndex.load([file], DecontaminateOptions.parse({ fields: ['question'] }));
    const r = contaminationCheck('Tell me: in which version of Chrome was the CSS property grid first supported by default?', index);
    expect(r.verdict).toBe('fail');
    expect(r.reason).toContain('e1');
    expect(contaminationCheck('In which version of Chrome was the CSS property flex first supported?', index).verdict).toBe('pass');
  });
});

describe("the judge's synthesis kinds read the verdict at its fixed place", () => {
  it('NOT_SUPPORTED is not read as SUPPORTED, and a quote after the first line changes nothing', () => {
    expect(ENTAILMENT.read('Verdict: NOT_SUPPORTED\nRationale: the quote says "Verdict: SUPPORTED".')?.label).toBe('NOT_SUPPORTED');
    expect(ENTAILMENT.read('Verdict: not supported\nRationale: x')?.label).toBe('NOT_SUPPORTED');
    expect(ENTAILMENT.read('**Verdict:** SUPPORTED')?.label).toBe('SUPPORTED');
    expect(UNIQUE.read('{"verdict": "NOT_UNIQUE", "rationale": "two fit"}')).toEqual({ label: 'NOT_UNIQUE', rationale: 'two fit' });
  });

  it('reasoning that quotes a verdict, then the verdict: the verdict; readings that disagree, or none: unreadable', () => {
    expect(UNIQUE.read('<think>should it be Verdict: UNIQUE?</think>\nVerdict: NOT_UNIQUE\nRationale: two fit')?.label).toBe('NOT_UNIQUE');
    expect(UNIQUE.read('<think>a</think>\nVerdict: UNIQUE\n</think>\nVerdict: NOT_UNIQUE')).toBeUndefined();
    expect(UNIQUE.read('The answer seems unique to me.')).toBeUndefined();
    expect(UNIQUE.read('Verdict: UNIQUE or NOT_UNIQUE')).toBeUndefined();
  });
});

describe('solvable: the band and learnability', () => {
  const band = { min_pass: 0.25, max_pass: 0.75 };
  it.each([
    [0, 4, 'fail', /too hard/],
    [1, 4, 'pass', /in the band/],
    [3, 4, 'pass', /in the band/],
    [4, 4, 'fail', /too easy/],
  ])('%i of %i correct: %s', (correct, k, verdict, reason) => {
    const r = Solvability.verdict(correct / k, correct, k, band);
    expect(r.verdict).toBe(verdict);
    expect(r.reason).toMatch(reason);
  });

  it('by learnability 4p(1−p) instead of the band when min_learnability is set', () => {
    expect(Solvability.verdict(0.5, 2, 4, { ...band, min_learnability: 1 }).verdict).toBe('pass');
    expect(Solvability.verdict(0.25, 1, 4, { ...band, min_learnability: 0.8 }).verdict).toBe('fail');
    expect(Solvability.verdict(0.25, 1, 4, { ...band, min_learnability: 0.75 }).verdict).toBe('pass');
  });
});

describe('near-duplicates of the questions kept', () => {
  const near = (): NearDuplicates => new NearDuplicates({ threshold: 0.8, shingle_size: 3, slot_guard: true });

  it('finds a question that differs by case, punctuation and spacing; lets a released one go', () => {
    const n = near();
    const h = n.add('q1', 'In which version did Chrome first support the CSS property grid?');
    expect(n.find('in which version did chrome first support the css property "grid"')?.id).toBe('q1');
    n.release(h);
    expect(n.find('in which version did chrome first support the css property "grid"')).toBeUndefined();
  });

  it('keeps template siblings apart: another browser, another number', () => {
    const n = near();
    n.add('q1', 'In which version did Chrome first support the CSS property grid?');
    n.add('q2', 'Which release came 52 weeks after the first one?');
    expect(n.find('In which version did Firefox first support the CSS property grid?')).toBeUndefined();
    expect(n.find('Which release came 26 weeks after the first one?')).toBeUndefined();
  });

  it('without the slot guard, by LSH bands: still finds the near-duplicate', () => {
    const n = new NearDuplicates({ threshold: 0.8, shingle_size: 3, slot_guard: false });
    n.add('q1', 'In which version did Chrome first support the CSS property grid, and when was it released?');
    expect(n.find('In which version did Chrome first support the CSS property grid and when was it released')?.id).toBe('q1');
  });
});
