/**
 * Text → words → hashes: how `dedup` and `decontaminate` see a text.
 *
 * Normalisation (both commands): NFKC (full-width and compatibility forms fold to their plain
 * ones: `Ｑ１` → `q1`, `ﬁ` → `fi`), lowercase, every run of Unicode punctuation (`\p{P}`:
 * quotes, dashes, hyphens, apostrophes, brackets, `?`) and of the symbols markup glues to words
 * (`<`, `>`, `=`, `|`, `` ` ``: `<snippet id="3">How`, `text</snippet>`, `a|b`, `id=x`) replaced
 * by one space, whitespace collapsed. Other symbols (`+`, `$`, `°`) and digits stay. `What's
 * the U.S. "GDP"?` → words `what s the u s gdp`. Case, punctuation, quotes, markup and spacing
 * therefore never count as a difference; a hyphen dropped inside a word (`e-mail` → `email`) does.
 * (Unicode files `<>=|` and the backtick under symbols, not punctuation: counted as letters, they
 * glued a tool output's first and last words to its tags, and an eval item starting or ending
 * there was missed.)
 *
 * Clauses (dedup's second view of a question): before the punctuation goes, the text is cut
 * where a clause or sentence ends: `, ; : . ? !` (and their full-width and CJK forms) followed
 * by whitespace or the end, and line breaks. `In 2019, how…?` has two clauses; `3.5` and
 * `U.S.A` are not cut.
 *
 * Shingles are word k-grams, each text (or clause) padded with k−1 start and end markers, so
 * that every word sits in exactly k shingles. Without the padding a word at either end sits in
 * one, and two questions of one template whose slot is the last word (`…first supported the
 * object X`) look far more alike than two that differ in the middle (measured on
 * data/questions.jsonl: 0.85 against 0.54 for the same one-word difference, k = 3).
 *
 * Synonyms (dedup only, `canon`): a content word may be hashed as its WordNet meaning instead
 * of its letters (pipeline/dataset/synonyms.ts), so `biggest` and `largest` shingle alike; the
 * hash of the content words as written is kept beside it for the slot guard.
 *
 * Hashes are 32-bit and seeded by nothing but the text: the same text hashes the same in every
 * run and process, which is what makes dedup's output stable across runs.
 */

/** A run of punctuation or markup symbols, replaced by a space. */
const PUNCTUATION = /[\p{P}<>=|`]+/gu;
/** Where a clause ends: its mark must be followed by whitespace or the end, so `3.5` is one word. */
const CLAUSE_END = /[.,;:?!。、，；：？！]+(?=\s|$)|[\r\n]+/u;

/** The normalised form of `text`: NFKC, lowercase, punctuation and markup symbols to spaces, whitespace collapsed. */
export function normalise(text: string): string {
  return text.normalize('NFKC').toLowerCase().replace(PUNCTUATION, ' ').replace(/\s+/g, ' ').trim();
}

/** The normalised words of `text`. */
export function words(text: string): string[] {
  const n = normalise(text);
  return n === '' ? [] : n.split(' ');
}

/** The normalised words of each clause of `text`; clauses with no words are left out. */
export function clauseWords(text: string): string[][] {
  const out: string[][] = [];
  for (const part of text.normalize('NFKC').split(CLAUSE_END)) {
    const w = words(part);
    if (w.length > 0) out.push(w);
  }
  return out;
}

/** murmur3's finaliser: a bijection on 32-bit words that mixes every input bit into every output bit. */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h | 0;
}

/** FNV-1a over the UTF-16 code units, finished with fmix32. */
export function hashWord(word: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < word.length; i++) h = Math.imul(h ^ word.charCodeAt(i), 0x01000193);
  return fmix32(h);
}

/** The padding markers' hashes: no word hashes to them except by a 2^-32 chance. */
const START = 0x5f3759df | 0;
const END = 0x2545f491 | 0;

/** One shingle's hash from its k word hashes, in order (`a b c` ≠ `c b a`). */
function shingleHash(hashes: readonly number[], from: number, k: number): number {
  let h = k;
  for (let i = 0; i < k; i++) h = Math.imul(((h << 5) | (h >>> 27)) ^ hashes[from + i]!, 0x9e3779b1);
  return fmix32(h);
}

/** Appends the padded k-shingle hashes of one word sequence to `out`. */
function pushShingles(wordHashes: readonly number[], k: number, out: number[]): void {
  const padded: number[] = [];
  for (let i = 1; i < k; i++) padded.push(START);
  for (const h of wordHashes) padded.push(h);
  for (let i = 1; i < k; i++) padded.push(END);
  for (let i = 0; i + k <= padded.length; i++) out.push(shingleHash(padded, i, k));
}

export interface ShingleSet {
  /** Distinct shingle hashes, ascending (as signed 32-bit integers), at most `cap` of them: the smallest. */
  readonly hashes: Int32Array;
  /** Whether `hashes` is the whole set, or the `cap` smallest of a larger one. */
  readonly whole: boolean;
}

/** Sorted, distinct, and cut to the `cap` smallest: a bottom-k sketch, the whole set when it fits. */
function toSet(values: number[], cap: number): ShingleSet {
  const all = Int32Array.from(values).sort();
  let n = 0;
  for (let i = 0; i < all.length; i++) if (i === 0 || all[i] !== all[i - 1]) all[n++] = all[i]!;
  return { hashes: all.slice(0, Math.min(n, cap)), whole: n <= cap };
}

/**
 * Words that a rewording swaps without changing the question: articles, pronouns, forms of be,
 * have and do, modals, the lightest prepositions and conjunctions, what/which, and the pieces
 * contractions leave (`what's` → `what s`). Every other word is a content word, and dedup's slot
 * guard requires near-duplicates to have the same content words. Words that carry meaning stay
 * out of this list even when they are short: negations (not, no, without; `isn't` leaves
 * `isn`), quantifiers (all, some, each), comparatives (more, less), the other question words
 * (who, when, where, why, how) and prepositions with an opposite (before/after, over/under).
 */
export const STOPWORDS: ReadonlySet<string> = new Set(
  (
    'a an the this that these those it its they them their theirs he him his she her hers we us our ours you your yours i me my mine ' +
    'is are was were be been being am do does did done doing has have had having will would shall should can could may might must ' +
    'of in on at by for to from into onto with as via per about and or but so than what which please kindly s t d ll re ve m'
  ).split(' '),
);

/**
 * Whether a word of the raw text is a slot value by its form: a number or anything with a digit
 * (`52`, `HbA1c`, `v8`), a capital after the first word (`Chrome`, `CSS`, `iOS`), or a mark
 * inside it (`-webkit-perspective`, `<position>`, `(A`). Trailing sentence marks do not count.
 */
function slotLike(token: string, first: boolean): boolean {
  const t = token.replace(/[?!.,;:"'»”’)]+$/u, '');
  return /\d/u.test(t) || (!first && /\p{Lu}/u.test(t)) || /\p{Lu}/u.test(t.slice(1)) || /[^\p{L}]/u.test(t);
}

/** A hash of a sequence of word hashes, in order. */
function sequenceKey(hashes: Iterable<number>, seed: number): number {
  let h = seed;
  for (const x of hashes) h = fmix32(Math.imul(h, 0x9e3779b1) ^ x);
  return h;
}

export interface TextShingles {
  /** Shingles of the text as one word sequence. */
  readonly plain: ShingleSet;
  /** Shingles of each clause on its own; undefined when the text is one clause (then it equals `plain`). */
  readonly clauses: ShingleSet | undefined;
  /**
   * A hash of the distinct content words (not in STOPWORDS, numbers included): equal for texts
   * with the same content words. With a `canon`, of their canonical hashes (synonyms equal).
   */
  readonly content: number;
  /** The same over the words as written (equal to `content` without a `canon`): where it differs and `content` does not, synonyms made the match. */
  readonly rawContent: number;
  /** Words in the text. */
  readonly words: number;
  /** A hash of the text's words as a multiset: equal for two texts that only order them differently. */
  readonly bag: number;
  /** A hash of the words of its slot-like tokens (`slotLike`), in order. */
  readonly slots: number;
}

/** Punctuation and markup symbols at either end of a raw token: `"largest"`, `(A`, `<position>`. */
const EDGE_MARKS = /^[\p{P}<>=|`]+|[\p{P}<>=|`]+$/gu;

/**
 * Whether a synonym may stand for word `w`: a content word of two letters or more, without a
 * digit, and not part of a raw token that holds a digit or a mark inside it once the marks at
 * its ends are set aside (`HTMLMediaElement.load`, `-webkit-perspective`, `e-mail`: names of
 * things, whose words are kept as written). Case plays no part, so an upper-case copy of a
 * text gets the same hashes as the text.
 */
function replaceable(w: string, fixed: ReadonlySet<string>): boolean {
  return w.length >= 2 && !STOPWORDS.has(w) && !/\d/u.test(w) && !fixed.has(w);
}

/** The words of `text`'s raw tokens with a digit or an inner mark (`replaceable`); usually none. */
function fixedWords(text: string): Set<string> {
  const out = new Set<string>();
  for (const token of text.normalize('NFKC').split(/\s+/u)) {
    if (/[^\p{L}]/u.test(token.replace(EDGE_MARKS, ''))) for (const w of words(token)) out.add(w);
  }
  return out;
}

/**
 * Both views of `text` as k-shingle sets of at most `cap` hashes each, and its numbers. With
 * `canon` (dedup's synonyms: pipeline/dataset/synonyms.ts), each content word of two letters
 * or more without a digit is hashed by `canon` instead of `hashWord`, so synonyms shingle alike.
 */
export function textShingles(text: string, k: number, cap: number, withClauses = true, canon?: (word: string) => number): TextShingles {
  const parts = clauseWords(text);
  const all: string[] = parts.length === 1 ? parts[0]! : parts.flat();
  const raw = all.map(hashWord);
  let hashes = raw;
  if (canon !== undefined) {
    const fixed = fixedWords(text);
    hashes = all.map((w, i) => (replaceable(w, fixed) ? canon(w) : raw[i]!));
  }
  const plain: number[] = [];
  pushShingles(hashes, k, plain);
  let clauses: ShingleSet | undefined;
  if (withClauses && parts.length > 1) {
    const per: number[] = [];
    let at = 0;
    for (const p of parts) {
      pushShingles(hashes.slice(at, at + p.length), k, per);
      at += p.length;
    }
    clauses = toSet(per, cap);
  }
  const content = contentKey(all, hashes);
  return {
    plain: all.length === 0 ? { hashes: new Int32Array(0), whole: true } : toSet(plain, cap),
    clauses,
    content,
    rawContent: canon === undefined ? content : contentKey(all, raw),
    words: all.length,
    bag: sequenceKey(Int32Array.from(hashes).sort(), 0x1b873593 ^ hashes.length),
    slots: slotKey(text),
  };
}

/** The hash of the normalised words of `text`'s slot-like tokens, in order. */
function slotKey(text: string): number {
  const out: number[] = [];
  text.normalize('NFKC').split(/\s+/u).filter(Boolean).forEach((token, i) => {
    if (slotLike(token, i === 0)) for (const w of words(token)) out.push(hashWord(w));
  });
  return sequenceKey(out, 0x68e31da4);
}

/** The hashes of the distinct content words (not in STOPWORDS) of `ws`, ascending; `hashes[i]` is `ws[i]`'s. */
export function contentHashes(ws: readonly string[], hashes: readonly number[]): Int32Array {
  const content: number[] = [];
  ws.forEach((w, i) => {
    if (!STOPWORDS.has(w)) content.push(hashes[i]!);
  });
  return toSet(content, Infinity).hashes;
}

function contentKey(ws: readonly string[], hashes: readonly number[]): number {
  const set = contentHashes(ws, hashes);
  return sequenceKey(set, 0x3c6ef372 ^ set.length);
}

// ---------------------------------------------------------------------------------------
// n-grams for decontamination

/** Second-lane word hash: independent of the first, so a 64-bit n-gram hash has two 32-bit halves that collide separately. */
function lane2(h: number): number {
  return fmix32(h ^ 0x27d4eb2f);
}

const BASE1 = 0x01000193;
const BASE2 = 0x9e3779b1 | 0;

/** `base^(len−1)` mod 2^32: what the word leaving a window of `len` words weighs. */
function topPower(base: number, len: number): number {
  let p = 1;
  for (let i = 1; i < len; i++) p = Math.imul(p, base);
  return p;
}

/**
 * Calls `each(hi, lo)` with the 64-bit hash of every window of `len` consecutive words, in
 * order: a polynomial rolling hash in two 32-bit lanes (bases odd, word hashes mixed), then
 * mixed with the length, so a window costs O(1) however long `len` is. A text with fewer than
 * `len` words has no window.
 */
export function forEachNgram(wordHashes: readonly number[], len: number, each: (hi: number, lo: number) => void): void {
  if (wordHashes.length < len) return;
  const p1 = topPower(BASE1, len);
  const p2 = topPower(BASE2, len);
  let h1 = 0;
  let h2 = 0;
  for (let i = 0; i < wordHashes.length; i++) {
    const w = wordHashes[i]!;
    if (i >= len) {
      const out = wordHashes[i - len]!;
      h1 = (h1 - Math.imul(out, p1)) | 0;
      h2 = (h2 - Math.imul(lane2(out), p2)) | 0;
    }
    h1 = (Math.imul(h1, BASE1) + w) | 0;
    h2 = (Math.imul(h2, BASE2) + lane2(w)) | 0;
    if (i >= len - 1) each(fmix32(h1 ^ len), fmix32(h2 + Math.imul(len, 0x165667b1)));
  }
}
