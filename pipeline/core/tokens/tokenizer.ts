/**
 * The trainee's own tokenizer, from local files: a Hugging Face tokenizer folder (tokenizer.json
 * and tokenizer_config.json, and chat_template.jinja when the model ships its template that
 * way) or a tokenizer.json with its tokenizer_config.json beside it. Read with Hugging Face's
 * JavaScript tokenizer (`@huggingface/tokenizers`); nothing is ever fetched from the network.
 *
 * Besides ids, training needs to know which characters each token covers, so that a loss mask
 * drawn on characters lands on token boundaries. `encodeWithOffsets` gives both: for
 * byte-level BPE (Qwen, Llama 3, GPT-2 and most current models) each token's bytes are read
 * back from its string; where that does not add up to the text (another model family, a
 * normaliser that changed the text) the caller is told so and tokenises piece by piece.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { TrajforgeError } from '../../errors.js';
import { pieceMemo, type PieceMemo } from './piece-memo.js';

/** What a tokenizer's files say beyond the vocabulary: the chat template and the tokens it names. */
export interface TokenizerFiles {
  readonly tokenizerJson: string;
  readonly configJson: string | undefined;
  readonly templateFile: string | undefined;
}

/** Where a `--tokenizer PATH` (a folder or a tokenizer.json) keeps its files; an error names what is missing. */
export function tokenizerFiles(path: string, field = 'tokenizer'): TokenizerFiles {
  const full = resolve(path);
  const st = statSync(full, { throwIfNoEntry: false });
  if (st === undefined) throw new TrajforgeError('BAD_USAGE', `${field}: ${path}: no such file or folder (a Hugging Face tokenizer folder, or its tokenizer.json)`, { field });
  const dir = st.isDirectory() ? full : dirname(full);
  const tokenizerJson = st.isDirectory() ? join(full, 'tokenizer.json') : full;
  if (!existsSync(tokenizerJson)) throw new TrajforgeError('BAD_USAGE', `${field}: ${path} holds no tokenizer.json`, { field, file: path });
  const config = join(dir, 'tokenizer_config.json');
  const template = join(dir, 'chat_template.jinja');
  return { tokenizerJson, configJson: existsSync(config) ? config : undefined, templateFile: existsSync(template) ? template : undefined };
}

function readJson(file: string, field: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new TrajforgeError('BAD_USAGE', `${field}: cannot read ${file}: ${(err as Error).message}`, { field, file });
  }
  try {
    const v: unknown = JSON.parse(text);
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('expected a JSON object');
    return v as Record<string, unknown>;
  } catch (err) {
    throw new TrajforgeError('BAD_USAGE', `${field}: ${file} is not a tokenizer file: ${(err as Error).message}`, { field, file });
  }
}

/** A token named in tokenizer_config.json: a string, or an AddedToken object with `content`. */
function tokenText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (typeof v === 'object' && v !== null && typeof (v as { content?: unknown }).content === 'string') return (v as { content: string }).content;
  return undefined;
}

/** GPT-2's byte ↔ printable-character table, which byte-level BPE vocabularies are written in. */
const BYTE_OF = ((): Map<number, number> => {
  const bytes: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bytes.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bytes.push(b);
  for (let b = 0xae; b <= 0xff; b++) bytes.push(b);
  const chars = [...bytes];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bytes.includes(b)) {
      bytes.push(b);
      chars.push(256 + n++);
    }
  }
  return new Map(chars.map((c, i) => [c, bytes[i]!]));
})();

/** A vocabulary token's length in bytes when it is spelt in GPT-2's byte characters, else -1. */
function byteLevelLength(token: string): number {
  let n = 0;
  for (const ch of token) {
    if (!BYTE_OF.has(ch.codePointAt(0)!)) return -1;
    n++;
  }
  return n;
}

export interface EncodedText {
  readonly ids: number[];
  /** UTF-8 byte offset where each token ends, in the text as given; undefined when they cannot be read back. */
  readonly byteEnds: number[] | undefined;
}

export class HfTokenizer {
  /** The path it was loaded from, as given: named in counts and messages. */
  readonly name: string;
  readonly chatTemplate: string | undefined;
  /** The special tokens of tokenizer_config.json (bos_token, eos_token, pad_token, unk_token), as a template sees them. */
  readonly templateTokens: Readonly<Record<string, string>>;
  /** Text of every added token marked special: text holding one cannot be tokenised as the characters it is. */
  readonly specialTexts: readonly string[];
  /** The Unicode normal form the tokenizer applies first (NFC for Qwen), when it applies only that. */
  readonly normalForm: 'NFC' | 'NFKC' | 'NFD' | 'NFKD' | undefined;
  readonly #tok: Tokenizer;
  readonly #byteLevel: boolean;
  /** Byte length of each added token, by id (their strings are not byte-level encoded). */
  readonly #added = new Map<number, number>();
  readonly #vocab = new Map<number, number>();
  /** Ids of pieces seen before (piece-memo.ts); undefined for a pipeline where it would not give the library's ids. */
  readonly #memo: PieceMemo | undefined;

  constructor(path: string, field = 'tokenizer') {
    const files = tokenizerFiles(path, field);
    const json = readJson(files.tokenizerJson, field);
    const config = files.configJson === undefined ? {} : readJson(files.configJson, field);
    try {
      this.#tok = new Tokenizer(json, config);
    } catch (err) {
      throw new TrajforgeError('BAD_USAGE', `${field}: ${files.tokenizerJson} cannot be loaded: ${(err as Error).message}`, { field, file: files.tokenizerJson });
    }
    this.name = path;
    const template = files.templateFile !== undefined ? readFileSync(files.templateFile, 'utf8') : config.chat_template;
    this.chatTemplate = typeof template === 'string' ? template : Array.isArray(template) ? namedTemplate(template) : undefined;
    const named: Record<string, string> = {};
    for (const k of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) {
      const t = tokenText(config[k]);
      if (t !== undefined) named[k] = t;
    }
    this.templateTokens = named;
    const specials: string[] = [];
    for (const [id, t] of this.#tok.get_added_tokens_decoder()) {
      this.#added.set(id, Buffer.byteLength(t.content, 'utf8'));
      if (t.special) specials.push(t.content);
    }
    this.specialTexts = specials;
    const types = (v: unknown): string[] => {
      const o = v as { type?: unknown; normalizers?: unknown; pretokenizers?: unknown; decoders?: unknown } | null;
      if (o === null || typeof o !== 'object') return [];
      const inner = (o.normalizers ?? o.pretokenizers ?? o.decoders) as unknown[] | undefined;
      return [String(o.type), ...(Array.isArray(inner) ? inner.flatMap(types) : [])];
    };
    const norms = types(json.normalizer).filter((t) => t !== 'Sequence');
    this.normalForm = norms.length === 1 && ['NFC', 'NFKC', 'NFD', 'NFKD'].includes(norms[0]!) ? (norms[0] as 'NFC') : undefined;
    this.#byteLevel = types(json.decoder).includes('ByteLevel') && (norms.length === 0 || this.normalForm !== undefined);
    this.#memo = pieceMemo(this.#tok, json, config, byteLevelLength);
  }

  encode(text: string): number[] {
    return this.#memo?.encode(text)?.ids ?? this.#tok.encode(text, { add_special_tokens: false }).ids;
  }

  count(text: string): number {
    return this.encode(text).length;
  }

  decode(ids: readonly number[]): string {
    return this.#tok.decode([...ids], { skip_special_tokens: false });
  }

  /**
   * Ids and where each token ends in the text, in UTF-8 bytes. The ends are read from the
   * tokens themselves (byte-level vocabularies spell a token's bytes); when they do not add up
   * to the text's own length (a normaliser changed it, or the vocabulary is not byte-level)
   * `byteEnds` is undefined and the caller must not guess.
   */
  encodeWithOffsets(text: string): EncodedText {
    const memo = this.#memo?.encode(text);
    if (memo !== undefined) {
      const lengths = memo.byteLengths;
      if (!this.#byteLevel || lengths === undefined) return { ids: memo.ids, byteEnds: undefined };
      const ends: number[] = new Array(lengths.length);
      let at = 0;
      for (let i = 0; i < lengths.length; i++) ends[i] = at += lengths[i]!;
      return { ids: memo.ids, byteEnds: at === Buffer.byteLength(text, 'utf8') ? ends : undefined };
    }
    const { ids, tokens } = this.#tok.encode(text, { add_special_tokens: false });
    if (!this.#byteLevel) return { ids, byteEnds: undefined };
    const ends: number[] = new Array(ids.length);
    let at = 0;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      let n = this.#added.get(id) ?? this.#vocab.get(id);
      if (n === undefined) {
        n = 0;
        for (const ch of tokens[i]!) {
          if (!BYTE_OF.has(ch.codePointAt(0)!)) return { ids, byteEnds: undefined };
          n++;
        }
        this.#vocab.set(id, n);
      }
      at += n;
      ends[i] = at;
    }
    return { ids, byteEnds: at === Buffer.byteLength(text, 'utf8') ? ends : undefined };
  }
}

function namedTemplate(list: unknown[]): string | undefined {
  for (const t of list) {
    const o = t as { name?: unknown; template?: unknown };
    if (o?.name === 'default' && typeof o.template === 'string') return o.template;
  }
  return undefined;
}

const loaded = new Map<string, HfTokenizer>();

/** The tokenizer at `path`, loaded once per process (a large vocabulary takes about half a second). */
export function loadHfTokenizer(path: string, field = 'tokenizer'): HfTokenizer {
  const key = resolve(path);
  let t = loaded.get(key);
  if (t === undefined) {
    t = new HfTokenizer(path, field);
    loaded.set(key, t);
  }
  return t;
}
