/** The judge's cheap steps and rubric reading, on the inputs an outside party controls: answers, gold answers, rubrics, grader replies. */
import { describe, expect, it } from 'vitest';
import { cheapSteps, goldsOf, matchTokens } from '../../../pipeline/core/judge/cascade.js';
import { criteriaForPrompt, parseRubricReply, readRubrics, weightedScore, type Criterion } from '../../../pipeline/core/judge/rubrics.js';

describe('the cheap steps of the cascade', () => {
  it('exact, then normalised, then token F1 at the threshold, each gold alternative and the box tried', () => {
    expect(cheapSteps('  Paris ', ['Paris'], 0.8).step).toBe('exact');
    expect(cheapSteps('  "PARIS!"', ['Paris'], 0.8).step).toBe('normalised');
    expect(cheapSteps('The answer: paris!', ['Paris'], 0.8).step).toBeUndefined();
    // "version" and "safari" share two of three gold tokens: F1 = 2·(2/3·2/2)/(2/3+1) = 0.8.
    expect(cheapSteps('Safari version', ['Safari version 9'], 0.8)).toEqual({ step: 'f1', f1: 0.8 });
    expect(cheapSteps('Safari version', ['Safari version 9'], 0.81).step).toBeUndefined();
    expect(cheapSteps('Lutetia', ['Paris', 'Lutetia'], 0.8).step).toBe('exact');
    expect(cheapSteps('so the result is \\boxed{42}', ['42'], 0.8).step).toBe('exact');
  });

  it('numbers in one spelling: separators, leading and trailing zeros, number words', () => {
    expect(matchTokens('1,000 and 3.50 and 007 and 5.0 and four')).toEqual(['1000', 'and', '3.5', 'and', '7', 'and', '5', 'and', '4']);
    expect(cheapSteps('Four', ['4'], 0.8).step).toBe('normalised');
    expect(cheapSteps('3.50', ['3.5'], 0.8).step).toBe('normalised');
    // A decimal point is not a separator: 3.5 is not 35.
    expect(cheapSteps('35', ['3.5'], 0.8).step).toBeUndefined();
  });

  it('never says incorrect, and never accepts a mismatch: a different number, a gold inside a longer claim, an empty gold', () => {
    expect(cheapSteps('1991', ['1990'], 0.8)).toEqual({ f1: 0 });
    // The gold is in the answer, but so is more: the cheap steps leave it to the LLM.
    const r = cheapSteps('It was not 1990 but 1991, in Paris, after the war ended', ['1990'], 0.8);
    expect(r.step).toBeUndefined();
    expect(r.f1).toBeGreaterThan(0);
    expect(cheapSteps('anything', [' ', ''], 0.8).step).toBeUndefined();
    expect(cheapSteps('', ['the'], 0.8).step).toBeUndefined();
  });

  it('golds: gold_answer and the strings of meta.answers, each once, blanks and non-strings left out', () => {
    expect(goldsOf({ gold_answer: 'a', meta: { answers: ['a', 'b', '', 3, null] } })).toEqual(['a', 'b']);
    expect(goldsOf({ meta: { answers: 'not a list' } })).toEqual([]);
  });
});

describe('rubrics', () => {
  it("reads DR Tulu's shape (description, weight, title), `criterion` for description, strings, and RaR's `rubric` key", () => {
    expect(readRubrics({ rubrics: [{ description: 'Names the drug', weight: 5, title: 'Drug' }, { criterion: 'Cites a trial', weight: -1 }, 'Is concise'] })).toEqual([
      { description: 'Names the drug', weight: 5, title: 'Drug' },
      { description: 'Cites a trial', weight: -1 },
      { description: 'Is concise', weight: 1 },
    ]);
    expect(readRubrics({ rubric: [{ description: 'x' }] })).toEqual([{ description: 'x', weight: 1 }]);
    expect(readRubrics({ other: 1 })).toBeUndefined();
    expect(readRubrics({ rubrics: 'a string is not a rubric' })).toBeUndefined();
  });

  it('a list that is not a rubric says which criterion and field', () => {
    expect(readRubrics({ rubrics: [] })).toEqual({ field: 'rubrics', message: 'an empty list of criteria' });
    expect(readRubrics({ rubrics: [{ description: 'a' }, { weight: 2 }] })).toEqual({ field: 'rubrics[1].description', message: expect.stringContaining('non-empty description') });
    expect(readRubrics({ rubrics: [{ description: 'a', weight: '5' }] })).toEqual({ field: 'rubrics[0].weight', message: 'expected a number, got "5"' });
    expect(readRubrics({ rubrics: [{ description: 'a', weight: 0 }] })).toMatchObject({ field: 'rubrics' });
    expect(readRubrics({ rubrics: [42] })).toMatchObject({ field: 'rubrics[0]' });
  });

  const criteria: Criterion[] = [
    { description: 'names semaglutide', weight: 3 },
    { description: 'gives the trial name', weight: 1 },
    { description: 'claims it cures diabetes', weight: -2 },
  ];

  it('weighted score: Σ score·weight over the positive weights, a pitfall met lowers it, clamped to 0..1', () => {
    expect(weightedScore(criteria, [1, 1, 0])).toBe(1);
    expect(weightedScore(criteria, [1, 0, 0])).toBe(0.75);
    expect(weightedScore(criteria, [1, 1, 1])).toBe(0.5);
    expect(weightedScore(criteria, [0, 0, 1])).toBe(0);
    // Only pitfalls: 1 when none is met.
    expect(weightedScore([{ description: 'p', weight: -1 }, { description: 'q', weight: -3 }], [0, 1])).toBe(0.25);
  });

  it('reads a reply with a score per criterion, in any order, fenced or not, after a think block', () => {
    const reply = '<think>{"scores": []}</think>```json\n{"scores": [{"criterion": 2, "score": 0, "reason": "no trial"}, {"criterion": 1, "score": 1}, {"criterion": 3, "score": "0.5"}]}\n```';
    expect(parseRubricReply(reply, criteria)).toEqual([
      { criterion: 'names semaglutide', weight: 3, score: 1 },
      { criterion: 'gives the trial name', weight: 1, score: 0, reasoning: 'no trial' },
      { criterion: 'claims it cures diabetes', weight: -2, score: 0.5 },
    ]);
    expect(parseRubricReply('[1, 0.5, 0]', criteria)?.map((c) => c.score)).toEqual([1, 0.5, 0]);
    // A trailing comma and single quotes, as models write JSON.
    expect(parseRubricReply("{'scores': [{'criterion': 1, 'score': 1}, {'criterion': 2, 'score': 1}, {'criterion': 3, 'score': 0},]}", criteria)).toHaveLength(3);
  });

  it('anything short of a score in 0..1 for every criterion exactly once is unreadable, never a guess', () => {
    for (const bad of [
      'They all look good.',
      '{"scores": [{"criterion": 1, "score": 1}, {"criterion": 2, "score": 1}]}',
      '{"scores": [{"criterion": 1, "score": 1}, {"criterion": 1, "score": 1}, {"criterion": 3, "score": 0}]}',
      '{"scores": [{"criterion": 1, "score": 7}, {"criterion": 2, "score": 1}, {"criterion": 3, "score": 0}]}',
      '{"scores": [{"criterion": 1, "score": -0.5}, {"criterion": 2, "score": 1}, {"criterion": 3, "score": 0}]}',
      '{"scores": [{"criterion": 4, "score": 1}, {"criterion": 2, "score": 1}, {"criterion": 3, "score": 0}]}',
      '{"scores": [{"criterion": 1, "score": null}, {"criterion": 2, "score": 1}, {"criterion": 3, "score": 0}]}',
      '{"scores": "all 1"}',
    ]) {
      expect(parseRubricReply(bad, criteria), bad).toBeUndefined();
    }
  });

  it('the prompt lists criteria numbered from 1, without weights', () => {
    const listed = JSON.parse(criteriaForPrompt([{ description: 'a', weight: 5, title: 'T' }, { description: 'b', weight: -1 }]));
    expect(listed).toEqual([{ criterion: 1, title: 'T', description: 'a' }, { criterion: 2, description: 'b' }]);
  });
});
