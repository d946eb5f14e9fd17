/**
 * A memo of pre-tokenised piece → token ids in front of Hugging Face's JavaScript tokenizer,
 * because token export spent three quarters of its time in the tokenizer's per-piece work
 * (the byte-level mapping of every piece through TextEncoder, arrays made and flattened for
 * every piece and token), although the BPE merges themselves were already cached (#28).
 *
 * Why a memo gives the same ids: the tokenizer cuts the text at its added tokens
 * (`<|im_end|>`…), normalises what lies between, and its pre-tokenizer cuts that into pieces
 * with a first step (Qwen's and Llama 3's `Split` regex); every later step (`ByteLevel`) and
 * the BPE model then work on each piece alone. So a text's ids are its pieces' ids, one after
 * another, and a piece seen before needs no work; and a section (the text between two added
 * tokens) seen before needs not even the pre-tokenizer's regular expression: token export
 * renders the same messages in every stretch of a split row, and the system prompt and tools
 * in every row. The cutting follows the library (its
 * added tokens, longest first, as its splitter cuts; its own normaliser and first
 * pre-tokenizer step), and a piece seen for the first time goes through the library's own
 * later steps and model.
 *
 * That holds by construction only for some pipelines: `pieceMemo` returns undefined for any
 * other (a model that fuses unknown tokens across pieces, a Metaspace step, added tokens that
 * strip the spaces beside them, a post-processor that changes tokens…), and the caller then
 * uses the library as it is. tests/core/tokens/piece-memo.test.ts compares the two on hostile
 * text for Qwen3 and Llama 3.1.
 */
import * as tokenizers from '@huggingface/tokenizers';
import type { Tokenizer } from '@huggingface/tokenizers';
import { TOKEN_LIMITS, type TokenLimits } from './limits.js';

/** A pre-tokenizer step as the library runs it. */
interface PreTokenizer {
  pre_tokenize_text(text: string, options?: { section_index?: number }): string[];
  pre_tokenize(text: string[], options?: { section_index?: number }): string[];
}
/** The BPE model as the library runs it: called on pre-tokens, it gives token strings. */
interface BpeModel {
  (tokens: string[]): string[];
  readonly fuse_unk: boolean;
  readonly tokens_to_ids: Map<string, number>;
  readonly unk_token_id?: number;
}
type Class = abstract new (...args: never[]) => object;
// Classes the package exports at run time that its type declarations do not reach under nodenext resolution.
const { BPE, SequencePreTokenizer } = tokenizers as unknown as { BPE: Class; SequencePreTokenizer: Class };

/** A text's ids, and each token's length in UTF-8 bytes (undefined when one cannot be told from its token). */
export interface PieceIds {
  readonly ids: number[];
  readonly byteLengths: number[] | undefined;
}

/** The memo's bounds (limits.ts); the sections' bound defaults to TOKEN_LIMITS'. */
type MemoLimits = Pick<TokenLimits, 'memoPieces' | 'memoPieceChars'> & Partial<Pick<TokenLimits, 'memoSectionChars'>>;

/** A section's ids and their tokens' byte lengths (-1 where a token is not spelt in byte-level characters), 4 bytes each, not a JS array's 8. */
interface Section {
  readonly ids: Int32Array;
  readonly lengths: Int32Array;
  readonly byteLevel: boolean;
}

/**
 * A map from text bounded by the characters of its keys, in two generations: when the young
 * one holds `generationChars`, it becomes the old one (the old one is dropped), so what is in
 * use survives. A key longer than a sixteenth of a generation is not kept.
 */
class CharBoundedMemo<V> {
  readonly #generationChars: number;
  #young = new Map<string, V>();
  #old = new Map<string, V>();
  #youngChars = 0;

  constructor(generationChars: number) {
    this.#generationChars = generationChars;
  }

  get(key: string): V | undefined {
    const v = this.#young.get(key);
    if (v !== undefined) return v;
    const old = this.#old.get(key);
    if (old !== undefined) this.set(key, old);
    return old;
  }

  set(key: string, value: V): void {
    if (key.length * 16 > this.#generationChars) return;
    // A copy of its own: the key is cut from a whole rendering, and V8's cut strings keep their whole parent alive.
    key = `${key} `.slice(0, -1);
    if (this.#youngChars + key.length > this.#generationChars) {
      this.#old = this.#young;
      this.#young = new Map();
      this.#youngChars = 0;
    }
    this.#young.set(key, value);
    this.#youngChars += key.length;
  }
}

/** What of the library's tokenizer the memo reads, past its typed surface (checked at run time). */
interface TokenizerInside {
  added_tokens?: { content: string; id: number; lstrip: boolean; rstrip: boolean; normalized: boolean }[];
  remove_space?: unknown;
  do_lowercase_and_remove_accent?: unknown;
}

/**
 * Cuts text at the added tokens as the library's splitter does (at each place the longest
 * added token that starts there, leftmost first), with one regular expression: the library's
 * splitter walks a trie character by character, which cost as much as the memo saved.
 * Empty strings between adjacent tokens are left in; the caller skips them, as the library does.
 */
function addedSplitter(contents: readonly string[]): (text: string) => string[] {
  const words = contents.filter((c) => c !== '').sort((a, b) => b.length - a.length);
  if (words.length === 0) return (text) => [text];
  const re = new RegExp(`(${words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|')})`);
  return (text) => text.split(re);
}

/** Post-processors that, without special tokens added, hand tokens back unchanged. */
function keepsTokens(config: unknown): boolean {
  const c = config as { type?: string; processors?: unknown[]; single?: Record<string, unknown>[] } | null;
  if (c === null || c === undefined) return true;
  if (c.type === 'ByteLevel') return true;
  if (c.type === 'Sequence') return Array.isArray(c.processors) && c.processors.every(keepsTokens);
  if (c.type === 'TemplateProcessing') {
    const seqs = (c.single ?? []).filter((item) => 'Sequence' in item);
    return seqs.length === 1 && (c.single ?? []).every((item) => 'Sequence' in item || 'SpecialToken' in item);
  }
  return false;
}

export class PieceMemo {
  readonly #split: (text: string) => string[];
  readonly #normalize: ((text: string) => string) | undefined;
  readonly #first: PreTokenizer;
  readonly #rest: PreTokenizer[];
  readonly #model: (tokens: string[]) => string[];
  readonly #idOf: (token: string) => number | undefined;
  /** Added tokens: id by text, and their lengths in bytes by id (their text is not byte-level encoded). */
  readonly #added: Map<string, number>;
  readonly #addedBytes: Map<number, number>;
  /** Byte length of each id's token; -1 where its token is not spelt in byte-level characters. */
  readonly #byteLength = new Map<number, number>();
  readonly #tokenBytes: (token: string) => number;
  /** Two generations: when the young one is full it becomes the old one, so pieces in use survive. */
  #young = new Map<string, readonly number[]>();
  #old = new Map<string, readonly number[]>();
  readonly #generation: number;
  readonly #longest: number;
  /** Whole sections' ids, bounded by their characters (see `memoSectionChars`). */
  readonly #sections: CharBoundedMemo<Section>;

  constructor(parts: {
    split: (text: string) => string[];
    normalize: ((text: string) => string) | undefined;
    first: PreTokenizer;
    rest: PreTokenizer[];
    model: (tokens: string[]) => string[];
    idOf: (token: string) => number | undefined;
    added: Map<string, number>;
    tokenBytes: (token: string) => number;
    limits: MemoLimits;
  }) {
    this.#split = parts.split;
    this.#normalize = parts.normalize;
    this.#first = parts.first;
    this.#rest = parts.rest;
    this.#model = parts.model;
    this.#idOf = parts.idOf;
    this.#added = parts.added;
    this.#addedBytes = new Map([...parts.added].map(([text, id]) => [id, Buffer.byteLength(text, 'utf8')]));
    this.#tokenBytes = parts.tokenBytes;
    this.#generation = Math.max(1, Math.floor(parts.limits.memoPieces / 2));
    this.#longest = parts.limits.memoPieceChars;
    this.#sections = new CharBoundedMemo(parts.limits.memoSectionChars ?? TOKEN_LIMITS.memoSectionChars);
  }

  /** The ids of `text` as the library's `encode(text, { add_special_tokens: false })` gives them; undefined if a piece maps to no id. */
  encode(text: string): PieceIds | undefined {
    const ids: number[] = [];
    const lengths: number[] = [];
    let byteLevel = true;
    const sections = this.#split(text);
    for (let s = 0; s < sections.length; s++) {
      const section = sections[s]!;
      if (section.length === 0) continue;
      // An added token is one id, whether it is the section as cut or (as the library also checks) as normalised.
      const normal = this.#added.has(section) || this.#normalize === undefined ? section : this.#normalize(section);
      if (normal.length === 0) continue;
      const added = this.#added.get(normal);
      if (added !== undefined) {
        ids.push(added);
        lengths.push(this.#lengthOf(added, normal));
        continue;
      }
      const done = this.#section(normal, s);
      if (done === undefined) return undefined;
      for (let i = 0; i < done.ids.length; i++) {
        ids.push(done.ids[i]!);
        lengths.push(done.lengths[i]!);
      }
      if (!done.byteLevel) byteLevel = false;
    }
    return { ids, byteLengths: byteLevel ? lengths : undefined };
  }

  /** One section's ids (the text between two added tokens): remembered whole, or piece by piece. */
  #section(normal: string, index: number): Section | undefined {
    let done = this.#sections.get(normal);
    if (done !== undefined) return done;
    const ids: number[] = [];
    const lengths: number[] = [];
    let byteLevel = true;
    for (const piece of this.#first.pre_tokenize_text(normal, { section_index: index })) {
      const pieceIds = this.#piece(piece, index);
      if (pieceIds === undefined) return undefined;
      for (const id of pieceIds) {
        ids.push(id);
        const n = this.#byteLength.get(id)!;
        if (n < 0) byteLevel = false;
        lengths.push(n);
      }
    }
    done = { ids: Int32Array.from(ids), lengths: Int32Array.from(lengths), byteLevel };
    this.#sections.set(normal, done);
    return done;
  }

  #lengthOf(id: number, token: string): number {
    let n = this.#byteLength.get(id);
    if (n === undefined) {
      n = this.#addedBytes.get(id) ?? this.#tokenBytes(token);
      this.#byteLength.set(id, n);
    }
    return n;
  }

  /** One piece's ids: remembered, or through the library's later pre-tokenizer steps and its model. */
  #piece(piece: string, section: number): readonly number[] | undefined {
    let ids = this.#young.get(piece);
    if (ids !== undefined) return ids;
    ids = this.#old.get(piece);
    if (ids === undefined) {
      let words = [piece];
      for (const step of this.#rest) words = step.pre_tokenize(words, { section_index: section });
      const tokens = this.#model(words);
      const out: number[] = [];
      for (const t of tokens) {
        const id = this.#added.get(t) ?? this.#idOf(t);
        if (id === undefined) return undefined;
        out.push(id);
        this.#lengthOf(id, t);
      }
      ids = out;
      if (piece.length > this.#longest) return ids;
    }
    if (this.#young.size >= this.#generation) {
      this.#old = this.#young;
      this.#young = new Map();
    }
    this.#young.set(piece, ids);
    return ids;
  }
}

/**
 * The memo for `tok`, or undefined when its pipeline is not one where a text's ids are its
 * pieces' ids (see the file comment). `json` and `config` are its tokenizer.json and
 * tokenizer_config.json; `tokenBytes` is a vocabulary token's length in bytes (-1 if unknown).
 */
export function pieceMemo(
  tok: Tokenizer,
  json: Record<string, unknown>,
  config: Record<string, unknown>,
  tokenBytes: (token: string) => number,
  limits: MemoLimits = TOKEN_LIMITS,
): PieceMemo | undefined {
  const inside = tok as unknown as TokenizerInside;
  const model = tok.model as unknown as BpeModel | null;
  const pre = tok.pre_tokenizer as unknown as { tokenizers?: (PreTokenizer | null)[] } | null;
  if (model === null || !(tok.model instanceof BPE) || model.fuse_unk || pre === null || !(tok.pre_tokenizer instanceof SequencePreTokenizer)) return undefined;
  if (!Array.isArray(pre.tokenizers)) return undefined;
  if (!keepsTokens(json.post_processor)) return undefined;
  if (inside.remove_space === true || inside.do_lowercase_and_remove_accent === true || config.remove_space === true || config.do_lowercase_and_remove_accent === true) return undefined;
  const steps = pre.tokenizers as (PreTokenizer | null)[];
  // Metaspace is the one step whose pieces depend on where their section is.
  if (steps.length === 0 || steps.some((s) => s === null) || JSON.stringify(json.pre_tokenizer).includes('"Metaspace"')) return undefined;
  const addedTokens = inside.added_tokens;
  if (!Array.isArray(addedTokens)) return undefined;
  // Tokens that strip the spaces beside them, or are matched after normalising, are cut by rules the memo does not follow.
  if (addedTokens.some((a) => a.lstrip || a.rstrip || (a.normalized && tok.normalizer !== null))) return undefined;
  const added = new Map<string, number>();
  for (const a of addedTokens) added.set(a.content, a.id);
  const normalizer = tok.normalizer as unknown as ((text: string) => string) | null;
  return new PieceMemo({
    split: addedSplitter([...added.keys()]),
    normalize: normalizer === null ? undefined : (text) => normalizer(text),
    first: steps[0]!,
    rest: steps.slice(1) as PreTokenizer[],
    model: (tokens) => model(tokens),
    idOf: (token) => model.tokens_to_ids.get(token) ?? model.unk_token_id,
    added,
    tokenBytes,
    limits,
  });
}
