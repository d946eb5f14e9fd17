/**
 * dedup's synonyms (pipeline/dataset/synonyms.ts) on a hostile, hand-written set: questions
 * that differ by one common word and its synonym must be found; questions of one template with
 * another slot value (a name, a number, a named entity WordNet lists under one synset with
 * another, an antonym, a lowercase value of the same kind) must stay apart. Every pair was
 * written from general knowledge, not taken from the code's output; each is deduplicated on its
 * own (a bank of two rows). Then the real banks: the bundled one and DR Tulu's, with
 * hand-written synonym rewordings of some of their questions.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { DedupOptions } from '../../schemas/index.js';
import { indexNearDuplicates } from '../../pipeline/dataset/dedup.js';
import { FIXTURES, QUESTIONS, readJsonl, runCli, tempDir } from '../helpers.js';
import { loadSynonyms, SYNONYMS_FILE } from '../../pipeline/dataset/synonyms.js';
import { buildSynonyms } from '../../data/build/build-synonyms.js';

/** One word (or its inflection) replaced by a synonym: the same question. */
const SYNONYMS: ReadonlyArray<readonly [string, string]> = [
  ['What is the largest city in Texas?', 'What is the biggest city in Texas?'],
  ['Who was the first doctor to perform a heart transplant?', 'Who was the first physician to perform a heart transplant?'],
  ['When did the company buy its first factory?', 'When did the company purchase its first factory?'],
  ['Which movie won the Academy Award in 1998?', 'Which film won the Academy Award in 1998?'],
  ['How many cars were sold in Germany in 2020?', 'How many automobiles were sold in Germany in 2020?'],
  ['When did construction of the Golden Gate Bridge begin?', 'When did construction of the Golden Gate Bridge start?'],
  ['How large is the Pacific Ocean?', 'How big is the Pacific Ocean?'],
  ['Who is the author of the novel Dracula?', 'Who is the writer of the novel Dracula?'],
  ['What is the main cause of malaria?', 'What is the chief cause of malaria?'],
  ['How did King Harold die at Hastings?', 'How did King Harold perish at Hastings?'],
  ['How many children did Queen Victoria have?', 'How many kids did Queen Victoria have?'],
  ['Who helped the refugees cross the Alps?', 'Who assisted the refugees cross the Alps?'],
  ['What is the top speed of a cheetah?', 'What is the top velocity of a cheetah?'],
  ['How many students attend Harvard?', 'How many pupils attend Harvard?'],
  ['Which nation has the largest army in Europe?', 'Which country has the largest army in Europe?'],
  ['What happened to the Titanic after it struck the iceberg?', 'What occurred to the Titanic after it struck the iceberg?'],
  ['Which shop in Paris sells the oldest books?', 'Which store in Paris sells the oldest books?'],
  ['What is the average weight of an adult elephant?', 'What is the average weight of a grownup elephant?'],
  ['What is the fastest way to learn Spanish?', 'What is the quickest way to learn Spanish?'],
  ['Which stone was used to build the pyramids of Giza?', 'Which rock was used to build the pyramids of Giza?'],
  ['What is the correct dose of ibuprofen for adults?', 'What is the right dose of ibuprofen for adults?'],
  ['Which insects can lift the heaviest loads?', 'Which bugs can lift the heaviest loads?'],
  ['How did the ancient Romans heat their baths?', 'How did the antique Romans heat their baths?'],
  ['What illness killed Frederic Chopin?', 'What disease killed Frederic Chopin?'],
  ['What is the reason the sky looks blue?', 'What is the cause the sky looks blue?'],
  ['Which areas of Japan were hit by the 2011 tsunami?', 'Which regions of Japan were hit by the 2011 tsunami?'],
];

/** One template, two slot values: two questions, whatever WordNet says about the values. */
const SLOTS: ReadonlyArray<readonly [string, string]> = [
  ['In which version of Chrome was the CSS property gap first supported?', 'In which version of Firefox was the CSS property gap first supported?'],
  ['How does semaglutide compare with placebo over 52 weeks?', 'How does semaglutide compare with placebo over 26 weeks?'],
  ['What is the population of Holland?', 'What is the population of the Netherlands?'],
  ['When did Burma gain independence from Britain?', 'When did Myanmar gain independence from Britain?'],
  ['What is the capital of France?', 'What is the capital of Germany?'],
  ['Who won the 1998 World Cup?', 'Who won the 2002 World Cup?'],
  ['How many moons does Mars have?', 'How many moons does Jupiter have?'],
  ['Which drug lowers blood pressure in adults?', 'Which drug lowers blood pressure in children?'],
  ['What is the boiling point of water at sea level?', 'What is the melting point of water at sea level?'],
  ['What is the largest city in Texas?', 'What is the smallest city in Texas?'],
  ['How many cars were sold in Germany in 2020?', 'How many trucks were sold in Germany in 2020?'],
  ['When did World War I begin?', 'When did World War I end?'],
  ['What is the chemical symbol for gold?', 'What is the chemical symbol for silver?'],
  ['How many legs does a spider have?', 'How many legs does an ant have?'],
  ['Who discovered penicillin?', 'Who discovered insulin?'],
  ['Which version of Python added f-strings?', 'Which version of Python added match statements?'],
  ['Who was the wife of Henry VIII?', 'Who was the wife of Henry VII?'],
  ['What is the tallest mountain in Asia?', 'What is the tallest mountain in Europe?'],
  ['Which Web API event fires on HTMLMediaElement.seeked?', 'Which Web API event fires on HTMLMediaElement.seeking?'],
  ['What does the API member HTMLMediaElement.load return?', 'What does the API member HTMLMediaElement.loading return?'],
  ['Which planet is closest to the Sun?', 'Which planet is farthest from the Sun?'],
  ['How many goals did Pele score for Brazil?', 'How many goals did Pele score for Santos?'],
  ['What was the price of gold in 1980?', 'What was the price of gold in 1908?'],
  ['Who painted the ceiling of the Sistine Chapel?', 'Who painted the floor of the Sistine Chapel?'],
  // From the curate bench's MDN questions: WordNet files `null` and `void` under one adjective synset.
  ['In which version of Safari was the JavaScript operator null first supported?', 'In which version of Safari was the JavaScript operator void first supported?'],
];

const dir = tempDir('tf-dedup-syn-');
const DRTULU = join(FIXTURES, 'drtulu-questions.jsonl');
let file = 0;

/** Whether dedup finds the two questions near-duplicates, each pair a bank of its own. */
async function found([a, b]: readonly [string, string], options: DedupOptions): Promise<boolean> {
  const input = join(dir, `pair-${file++}.jsonl`);
  writeFileSync(input, `${JSON.stringify({ id: 'a', question: a })}\n${JSON.stringify({ id: 'b', question: b })}\n`);
  return (await indexNearDuplicates([input], {}, options, true)).summary.clusters === 1;
}

describe('dedup with synonyms, on a hand-written hostile set at the default threshold', () => {
  const on = DedupOptions.parse({});
  const off = DedupOptions.parse({ synonyms: false });
  const result = { synonyms: [] as boolean[], slots: [] as boolean[], synonymsExact: [] as boolean[] };

  beforeAll(async () => {
    for (const p of SYNONYMS) {
      result.synonyms.push(await found(p, on));
      result.synonymsExact.push(await found(p, off));
    }
    for (const p of SLOTS) result.slots.push(await found(p, on));
    const tp = result.synonyms.filter(Boolean).length;
    const fp = result.slots.filter(Boolean).length;
    process.stderr.write(
      `dedup synonyms: ${tp}/${SYNONYMS.length} synonym pairs found (${result.synonymsExact.filter(Boolean).length} with --exact-words), ${fp}/${SLOTS.length} slot pairs merged; ` +
        `precision ${(tp / Math.max(1, tp + fp)).toFixed(3)}, recall ${(tp / SYNONYMS.length).toFixed(3)}\n` +
        `missed: ${SYNONYMS.filter((_, i) => !result.synonyms[i]).map(([a, b]) => `${a} / ${b}`).join(' | ')}\n`,
    );
  }, 120_000);

  it('holds at least 20 pairs of each kind', () => {
    expect(SYNONYMS.length).toBeGreaterThanOrEqual(20);
    expect(SLOTS.length).toBeGreaterThanOrEqual(20);
  });

  it('finds none of the synonym pairs with words as written (--exact-words: the behaviour before)', () => {
    expect(result.synonymsExact.filter(Boolean).length).toBe(0);
  });

  it('finds at least 17 of the 26 synonym pairs (the misses: an irregular plural, and words whose most frequent meanings differ)', () => {
    expect(result.synonyms.filter(Boolean).length).toBeGreaterThanOrEqual(17);
  });

  it('keeps every slot pair apart: names (even one synset: Holland / Netherlands), numbers, antonyms, lowercase values, inflected API names', () => {
    expect(SLOTS.filter((_, i) => result.slots[i])).toEqual([]);
  });
});

describe('dedup with synonyms on real banks', () => {
  it('keeps all 255 bundled questions and all 40 DR Tulu questions apart', async () => {
    for (const [bank, rows] of [[QUESTIONS, 255], [DRTULU, 40]] as const) {
      const index = await indexNearDuplicates([bank], {}, DedupOptions.parse({}), true);
      expect(index.summary, bank).toMatchObject({ rows, kept: rows, clusters: 0 });
    }
  });

  it('finds hand-written synonym rewordings of DR Tulu questions, and --exact-words does not', async () => {
    const drtulu = readFileSync(DRTULU, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).question as string);
    const reworded = [
      [3, 'In patients with nonvalvular atrial fibrillation, how do apixaban and rivaroxaban compare for major bleeding hazard in phase III randomized trials?'],
      [10, 'In moderate-to-severe plaque psoriasis, how does risankizumab compare with secukinumab in reaching PASI 90 at one year in phase III trials?'],
      [18, 'In COPD phase III trials, does triple inhaler therapy (ICS/LABA/LAMA) cut exacerbations more than dual bronchodilator therapy (LABA/LAMA) in patients with a history of exacerbations?'],
      [1, 'In patients with type 2 diabetes and cardiovascular risk, how does empagliflozin compare with dapagliflozin in reducing hospitalization for heart failure in big phase III outcomes trials?'],
      [7, 'In phase III trials for hypercholesterolemia, how does bempedoic acid compare with ezetimibe in LDL-C decrease in statin-intolerant patients?'],
    ] as const;
    for (const [i, text] of reworded) expect(text, `row ${i}`).not.toBe(drtulu[i]);
    const bank = join(dir, 'drtulu-reworded.jsonl');
    writeFileSync(bank, [...drtulu.map((q, i) => ({ id: `q${i}`, question: q })), ...reworded.map(([i, q]) => ({ id: `r${i}`, question: q }))].map((r) => JSON.stringify(r)).join('\n') + '\n');
    const out = join(dir, 'drtulu-kept.jsonl');
    const r = await runCli(['dedup', bank, '--out', out, '--clusters', join(dir, 'drtulu-clusters.jsonl'), '--json']);
    expect(r.code, r.stderr).toBe(0);
    const clusters = readJsonl(join(dir, 'drtulu-clusters.jsonl')).map((c) => c.members.map((m: { id: string }) => m.id).join(','));
    process.stderr.write(`dedup synonyms, DR Tulu rewordings: ${clusters.length} of ${reworded.length} found (${clusters.join('; ')})\n`);
    expect(clusters.length).toBeGreaterThanOrEqual(1);
    for (const c of clusters) expect(c).toMatch(/^q(\d+),r\1$/);
    const exact = await runCli(['dedup', bank, '--out', join(dir, 'drtulu-exact.jsonl'), '--exact-words', '--json']);
    expect(exact.code, exact.stderr).toBe(0);
    expect(JSON.parse(exact.stdout)).toMatchObject({ rows: 45, kept: 45, clusters: 0 });
  });
});

describe('the bundled synonym table', () => {
  it('is what the build script derives from the installed WordNet, with its licence notice, and holds the common words of the hostile set', () => {
    const shipped = readFileSync(SYNONYMS_FILE, 'utf8');
    expect(shipped).toBe(buildSynonyms());
    expect(shipped).toContain('Copyright 2006 by Princeton University');
    expect(readFileSync(join(SYNONYMS_FILE, '..', 'WORDNET-LICENSE'), 'utf8')).toContain('THIS SOFTWARE AND DATABASE IS PROVIDED "AS IS"');
    const table = loadSynonyms();
    // Pairs WordNet gives one dominant synset (car / automobile: {car, auto, automobile, machine, motorcar}).
    for (const [a, b] of [['car', 'automobile'], ['doctor', 'physician'], ['buy', 'purchase'], ['movie', 'film']]) {
      expect(table.get(a), a).toBeDefined();
      expect(table.get(a), `${a} / ${b}`).toBe(table.get(b));
    }
    expect(table.get('machine')).not.toBe(table.get('car'));
  });
});
