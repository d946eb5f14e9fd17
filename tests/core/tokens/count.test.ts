/**
 * The token counter loads gpt-tokenizer's encodings from the copies the build bundles into
 * dist/vendor (build/bundle.ts), not from the package, which is not installed with trajforge.
 * The package (a devDependency here) is the oracle: the bundled copy must count, encode and
 * place limits exactly as it does.
 */
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { O200K, tokenCounter, tokensOver } from '../../../pipeline/core/tokens/count.js';
import { PACKAGE_ROOT } from '../../../pipeline/paths.js';

type Enc = { countTokens(t: string, o: unknown): number; encode(t: string, o: unknown): number[] };
const pkg = (name: string): Enc => createRequire(import.meta.url)(`gpt-tokenizer/encoding/${name}`) as Enc;
const AS_TEXT = { disallowedSpecial: new Set<string>() };

/** Texts of several scripts and shapes: the bundled corpus's first documents, special-token text, emoji, CJK. */
const texts = [
  ...readFileSync(join(PACKAGE_ROOT, 'data', 'corpus.jsonl'), 'utf8').split('\n').slice(0, 40).filter(Boolean),
  '<|endoftext|> <|im_start|>user\nhi<|im_end|>',
  'naïve café — 東京の天気は？ 🤖🧪 \u0000\u200b',
  ' '.repeat(300) + 'x'.repeat(5000),
];

describe('token counts from the bundled encodings', () => {
  it('o200k_base counts every text as gpt-tokenizer does', () => {
    const oracle = pkg('o200k_base');
    for (const t of texts) expect(O200K.count(t)).toBe(oracle.countTokens(t, AS_TEXT));
  });

  it('cl100k_base counts every text as gpt-tokenizer does, and differently from o200k_base', () => {
    const oracle = pkg('cl100k_base');
    const cl = tokenCounter('cl100k_base');
    for (const t of texts) expect(cl.count(t)).toBe(oracle.countTokens(t, AS_TEXT));
    expect(texts.some((t) => cl.count(t) !== O200K.count(t))).toBe(true);
  });

  it('a limit is placed on the token the package puts there', () => {
    const text = texts[0]!.repeat(20);
    const ids = pkg('o200k_base').encode(text, AS_TEXT);
    const over = tokensOver(text, 100);
    expect(over?.count).toBe(ids.length);
    expect(O200K.boundaries(text)?.length).toBe(ids.length);
  });

  it('the build bundles each encoding into one file of its own', () => {
    for (const name of ['o200k_base', 'cl100k_base']) {
      const src = readFileSync(join(PACKAGE_ROOT, 'dist', 'vendor', 'gpt-tokenizer', `${name}.cjs`), 'utf8');
      // Self-contained: it requires nothing from gpt-tokenizer's package.
      expect(src).not.toMatch(/require\(["']gpt-tokenizer/);
    }
  });
});
