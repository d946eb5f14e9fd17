/**
 * The baseline of decontaminate's memory in bench/curate.ts: a process that holds nothing but a
 * plain set of the eval items' 13-grams (normalised words joined by spaces, JavaScript strings in
 * a Set), the least any n-gram decontamination must hold. Prints the set's size.
 *
 *   node dist/bench/plain-ngrams.js EVAL.jsonl [N]
 */
import { readFileSync } from 'node:fs';
import { words } from '../pipeline/dataset/shingles.js';

const [file, n = '13'] = process.argv.slice(2);
const len = Number(n);
const grams = new Set<string>();
for (const line of readFileSync(file!, 'utf8').split('\n')) {
  if (line.trim() === '') continue;
  const w = words((JSON.parse(line) as { question: string }).question);
  for (let i = 0; i + len <= w.length; i++) grams.add(w.slice(i, i + len).join(' '));
}
process.stdout.write(`${grams.size}\n`);
