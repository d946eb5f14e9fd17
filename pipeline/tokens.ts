/**
 * Token counts with a real BPE tokenizer: gpt-tokenizer's o200k_base (the GPT-4o / o-series
 * vocabulary). Trajectories are trained on many tokenizers; o200k_base is a stated, reproducible
 * yardstick, not the trainee's own count. Named in every message that reports a count.
 */
import { createRequire } from 'node:module';

export const TOKEN_ENCODING = 'o200k_base';

type Encoding = typeof import('gpt-tokenizer/encoding/o200k_base');
let encoding: Encoding | undefined;

/**
 * Loaded on first use, synchronously (the validator is synchronous): loading the merge table
 * takes about half a second and 60 MB, which every run and every `validate` without a token
 * limit would otherwise pay for nothing.
 */
function o200k(): Encoding {
  return (encoding ??= createRequire(import.meta.url)('gpt-tokenizer/encoding/o200k_base') as Encoding);
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
): number {
  let n = REPLY_PRIMING_TOKENS;
  for (const m of messages) n += messageTokens(m);
  if (tools !== undefined && !(Array.isArray(tools) && tools.length === 0)) n += countTokens(JSON.stringify(tools));
  return n;
}

/** One message's share of `estimateRequestTokens`. */
export function messageTokens(m: { readonly content?: unknown; readonly tool_calls?: readonly { readonly function: { readonly name: string; readonly arguments: string } }[] | undefined }): number {
  let n = MESSAGE_OVERHEAD_TOKENS;
  if (typeof m.content === 'string') n += countTokens(m.content);
  else if (Array.isArray(m.content)) {
    for (const part of m.content) {
      const text = (part as { text?: unknown } | null)?.text;
      if (typeof text === 'string') n += countTokens(text);
    }
  }
  for (const c of m.tool_calls ?? []) n += countTokens(c.function.name) + countTokens(c.function.arguments);
  return n;
}
