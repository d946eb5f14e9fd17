/**
 * Token counts with a real BPE tokenizer. By default gpt-tokenizer's o200k_base (the GPT-4o /
 * o-series vocabulary): a stated, reproducible yardstick. A run config's `tokenizer` (or a
 * dataset command's `--tokenizer`) names the trainee's own instead — a Hugging Face tokenizer
 * from local files (tokenizer.ts) — and then the context guard, `limits.tokens`, `stats` and
 * `export --max-tokens` all count with it. The counter's name is in every message that
 * reports a count.
 */
import { createRequire } from 'node:module';
import { TrajforgeError } from '../../errors.js';
import { builtFile } from '../../paths.js';
import { loadHfTokenizer, tokenizerFiles, type HfTokenizer } from './tokenizer.js';

export const TOKEN_ENCODING = 'o200k_base';

/** The encodings known by name; anything else is the path of a Hugging Face tokenizer. */
export const TOKEN_ENCODINGS = ['o200k_base', 'cl100k_base'] as const;

/** A way to count tokens, named for messages. */
export interface TokenCounter {
  /** `o200k_base`, `cl100k_base`, or the tokenizer path as given. */
  readonly name: string;
  count(text: string): number;
  /** The count when `text` has more than `limit` tokens, otherwise undefined. */
  over(text: string, limit: number): TokensOver | undefined;
  /**
   * Where tokens end in `text`, as UTF-16 offsets, ascending, the last one `text.length` (a
   * token that ends inside a character counts as ending after it); undefined when the
   * tokens cannot be mapped back to the text.
   */
  boundaries(text: string): number[] | undefined;
}

/** Token ends from a stream of decoded pieces, each ending on a character boundary. */
function endsOf(pieces: Iterable<string>, length: number): number[] | undefined {
  const ends: number[] = [];
  let at = 0;
  for (const p of pieces) {
    at += p.length;
    ends.push(at);
  }
  return at === length ? ends : undefined;
}

/**
 * Where the build puts an encoding of gpt-tokenizer, bundled into one CommonJS file of its own
 * (build/bundle.ts), without the extension: the package itself is not installed with trajforge.
 */
export function vendoredEncoding(name: (typeof TOKEN_ENCODINGS)[number]): string {
  return `vendor/gpt-tokenizer/${name}`;
}

/**
 * An encoding, loaded on first use, synchronously (the validator is synchronous): loading a merge
 * table takes about half a second and 60 MB, which every run and every `validate` without a token
 * limit would otherwise pay for nothing.
 */
function loadEncoding<E>(name: (typeof TOKEN_ENCODINGS)[number]): E {
  return createRequire(import.meta.url)(builtFile(`${vendoredEncoding(name)}.cjs`)) as E;
}

type Encoding = typeof import('gpt-tokenizer/encoding/o200k_base');
let encoding: Encoding | undefined;

function o200k(): Encoding {
  return (encoding ??= loadEncoding<Encoding>('o200k_base'));
}

// Text is data, never control: a trajectory that quotes `<|endoftext|>` must be counted as
// the characters it is, not rejected (the library's default throws on special tokens).
const AS_TEXT = { disallowedSpecial: new Set<string>() };

export function countTokens(text: string): number {
  return o200k().countTokens(text, AS_TEXT);
}

export interface TokensOver {
  readonly count: number;
  /** About where token `limit + 1` starts, as a character offset into the text. */
  readonly offset: number;
}

/**
 * The token count when `text` has more than `limit` tokens, otherwise undefined.
 *
 * Encoding runs at a few MB/s, far below the validator's throughput, so the cheap bound goes
 * first: byte-level BPE never makes more tokens than UTF-8 bytes, so text of at most `limit`
 * bytes cannot be over. Longer text is encoded only until the limit is passed; the whole
 * encoding is done only for text that is over, to put the count and the place in the message.
 */
export function tokensOver(text: string, limit: number): TokensOver | undefined {
  if (text.length <= limit && Buffer.byteLength(text, 'utf8') <= limit) return undefined;
  const enc = o200k();
  if (enc.isWithinTokenLimit(text, limit, AS_TEXT) !== false) return undefined;
  const tokens = enc.encode(text, AS_TEXT);
  // A token can end inside a multi-byte character; the decoded prefix is then off by one or two.
  return { count: tokens.length, offset: Math.min(text.length, enc.decode(tokens.slice(0, limit)).length) };
}

export const O200K: TokenCounter = {
  name: TOKEN_ENCODING,
  count: countTokens,
  over: tokensOver,
  boundaries: (text) => endsOf(o200k().decodeGenerator(o200k().encode(text, AS_TEXT)), text.length),
};

type Cl100k = typeof import('gpt-tokenizer/encoding/cl100k_base');
let cl100k: TokenCounter | undefined;

function cl100kCounter(): TokenCounter {
  if (cl100k === undefined) {
    // Loaded only when asked for: its merge table costs as much as o200k's.
    const enc = loadEncoding<Cl100k>('cl100k_base');
    const count = (text: string): number => enc.countTokens(text, AS_TEXT);
    cl100k = {
      name: 'cl100k_base',
      count,
      over: (text, limit) => overBy(count, text, limit),
      boundaries: (text) => endsOf(enc.decodeGenerator(enc.encode(text, AS_TEXT)), text.length),
    };
  }
  return cl100k;
}

/** `tokensOver` for a counter without an early exit: the byte bound first, then the whole count. */
function overBy(count: (text: string) => number, text: string, limit: number): TokensOver | undefined {
  if (text.length <= limit && Buffer.byteLength(text, 'utf8') <= limit) return undefined;
  const n = count(text);
  if (n <= limit) return undefined;
  // Tokens are spread about evenly: the place is an estimate, said so in the message.
  return { count: n, offset: Math.min(text.length, Math.floor((text.length * limit) / n)) };
}

/**
 * The counter `spec` names: undefined → o200k_base; `o200k_base` or `cl100k_base`; otherwise
 * the path of a Hugging Face tokenizer (a folder, or its tokenizer.json). A path that holds no
 * tokenizer is a BAD_USAGE error that names `field` and the path, here; the vocabulary itself
 * (a second or so) loads at the first count, as the encodings do: a command that never counts
 * with it (`export --format tokens` tokenises in its workers) does not pay for it; one that
 * must know it loads before it starts asks for `loadedTokenCounter`.
 */
export function tokenCounter(spec: string | undefined, field = 'tokenizer'): TokenCounter {
  if (spec === undefined || spec === TOKEN_ENCODING) return O200K;
  if (spec === 'cl100k_base') return cl100kCounter();
  if (/^[a-z0-9]+_base$/.test(spec)) {
    throw new TrajforgeError('BAD_USAGE', `${field}: unknown encoding "${spec}" (known: ${TOKEN_ENCODINGS.join(', ')}, or the path of a Hugging Face tokenizer)`, { field });
  }
  const hinted = <T>(f: () => T): T => {
    try {
      return f();
    } catch (err) {
      if (!(err instanceof TrajforgeError)) throw err;
      throw new TrajforgeError(err.code, `${err.message}; or one of the encodings ${TOKEN_ENCODINGS.join(', ')}`, { field, file: err.file });
    }
  };
  hinted(() => tokenizerFiles(spec, field));
  let loaded: HfTokenizer | undefined;
  const hf = (): HfTokenizer => (loaded ??= hinted(() => loadHfTokenizer(spec, field)));
  const count = (text: string): number => hf().count(text);
  return { name: spec, count, over: (text, limit) => overBy(count, text, limit), boundaries: (text) => hfBoundaries(hf(), text) };
}

/**
 * `tokenCounter(spec)` with a Hugging Face tokenizer's vocabulary loaded now, for a command that
 * must stop before it starts when the tokenizer does not load (`generate`); the bundled encodings
 * still load at their first count.
 */
export function loadedTokenCounter(spec: string | undefined, field = 'tokenizer'): TokenCounter {
  const counter = tokenCounter(spec, field);
  if (!(TOKEN_ENCODINGS as readonly string[]).includes(counter.name)) counter.count('');
  return counter;
}

/** Byte ends of a Hugging Face tokenizer's tokens → UTF-16 offsets (a token ending inside a character ends after it). */
function hfBoundaries(hf: HfTokenizer, text: string): number[] | undefined {
  const { byteEnds } = hf.encodeWithOffsets(text);
  if (byteEnds === undefined) return undefined;
  const ends: number[] = [];
  let unit = 0;
  let byte = 0;
  for (const end of byteEnds) {
    while (byte < end && unit < text.length) {
      const c = text.codePointAt(unit)!;
      byte += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
      unit += c >= 0x10000 ? 2 : 1;
    }
    if (ends.at(-1) !== unit) ends.push(unit);
  }
  return ends;
}

/** What one chat message costs beyond its text (role and separators), as OpenAI's format counts it. */
export const MESSAGE_OVERHEAD_TOKENS = 4;
/** Tokens that prime the reply. */
const REPLY_PRIMING_TOKENS = 3;

/**
 * The prompt tokens of a chat request: each message's content (and, for native function
 * calling, its tool calls' names and arguments) plus a fixed overhead per message, plus the
 * JSON of the `tools` offered. The context guard and the sim's context window both count
 * with this one function, so they agree on where a window ends.
 */
export function estimateRequestTokens(
  messages: readonly { readonly content?: unknown; readonly tool_calls?: readonly { readonly function: { readonly name: string; readonly arguments: string } }[] | undefined }[],
  tools?: unknown,
  counter: TokenCounter = O200K,
): number {
  let n = REPLY_PRIMING_TOKENS;
  for (const m of messages) n += messageTokens(m, counter);
  if (tools !== undefined && !(Array.isArray(tools) && tools.length === 0)) n += counter.count(JSON.stringify(tools));
  return n;
}

/** One message's share of `estimateRequestTokens`. */
export function messageTokens(
  m: { readonly content?: unknown; readonly tool_calls?: readonly { readonly function: { readonly name: string; readonly arguments: string } }[] | undefined },
  counter: TokenCounter = O200K,
): number {
  let n = MESSAGE_OVERHEAD_TOKENS;
  if (typeof m.content === 'string') n += counter.count(m.content);
  else if (Array.isArray(m.content)) {
    for (const part of m.content) {
      const text = (part as { text?: unknown } | null)?.text;
      if (typeof text === 'string') n += counter.count(text);
    }
  }
  for (const c of m.tool_calls ?? []) n += counter.count(c.function.name) + counter.count(c.function.arguments);
  return n;
}
