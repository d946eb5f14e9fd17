/**
 * What the sim's synthesis roles (synth.ts) know how to read and write: the documents and
 * triples trajforge puts in its synthesis prompts (pipeline/synthesize/render.ts), the facts a
 * document states as a sentence with a number in it, and the cloze that asks for that number
 * ("Chrome first supported it in version ___, released 2017-03-09."), matched against
 * sentences to tell whether one value, or several, fill its blank.
 */
import { leakTokens } from '../pipeline/synthesize/checks.js';

export interface SimDoc {
  readonly id: string;
  readonly title: string | undefined;
  readonly sentences: readonly string[];
}

export interface SimTriple {
  readonly subject: string;
  readonly relation: string;
  readonly object: string;
}

/** A text's sentences: its lines, each cut after `.`, `!` or `?` before a capital, digit or quote. */
export function sentencesOf(text: string): string[] {
  return text
    .split(/\n+/)
    .flatMap((line) => line.trim().split(/(?<=[.!?])\s+(?=[\p{Lu}\p{N}"'(\[])/u))
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/** The documents block of a synthesis prompt: `Document N`, `id:`, `title:`, `url:`, `text:` and the text. */
export function parseDocuments(block: string): SimDoc[] {
  return block.split(/\n\n(?=Document \d+\nid: )/).flatMap((part) => {
    const m = /^Document \d+\nid: (.*)\n(?:title: (.*)\n)?(?:url: .*\n)?text:\n([\s\S]*)$/.exec(part);
    return m === null ? [] : [{ id: m[1]!, title: m[2], sentences: sentencesOf(m[3]!) }];
  });
}

/** The triples (`["s","r","o"]` lines) and descriptions (`{"entity","description"}` lines) of a block. */
export function parseGraph(block: string): { triples: SimTriple[]; descriptions: Map<string, string> } {
  const triples: SimTriple[] = [];
  const descriptions = new Map<string, string>();
  for (const line of block.split('\n')) {
    try {
      const v = JSON.parse(line) as unknown;
      if (Array.isArray(v) && v.length === 3) triples.push({ subject: String(v[0]), relation: String(v[1]), object: String(v[2]) });
      else if (v !== null && typeof v === 'object' && 'entity' in v) descriptions.set(String((v as { entity: unknown }).entity), String((v as { description?: unknown }).description ?? ''));
    } catch {
      // not a line of either kind (`(none)`)
    }
  }
  return { triples, descriptions };
}

/** Whether `tokens` holds `run` as consecutive tokens. */
export function holdsRun(tokens: readonly string[], run: readonly string[]): boolean {
  if (run.length === 0) return false;
  outer: for (let i = 0; i + run.length <= tokens.length; i++) {
    for (let j = 0; j < run.length; j++) if (tokens[i + j] !== run[j]) continue outer;
    return true;
  }
  return false;
}

/** Whether `text` holds `value` as trajforge's leak check compares them. */
export function mentions(text: string, value: string): boolean {
  return holdsRun(leakTokens(text), leakTokens(value));
}

/** What follows the last `: ` of a title (`CSS property: grid` → `grid`): the name a description must not give away. */
export function nameOf(title: string): string {
  const at = title.lastIndexOf(': ');
  return at < 0 ? title : title.slice(at + 2);
}

export function namesIt(sentence: string, name: string): boolean {
  const n = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(?<![\\p{L}\\p{N}])${n}(?![\\p{L}\\p{N}])`, 'iu').test(sentence);
}

/** A number standing alone in a sentence (not inside a date or a name): a value a question can ask for. */
const VALUE = /(?<=^|\s)(\d+(?:\.\d+)?)(?=[,.;:!?)]*(?:\s|$))/g;

export interface Fact {
  readonly sentence: string;
  readonly value: string;
  /** The sentence with the value replaced by `___`. */
  readonly cloze: string;
}

export function factsOf(sentence: string): Fact[] {
  return [...sentence.matchAll(VALUE)].map((m) => ({ sentence, value: m[1]!, cloze: `${sentence.slice(0, m.index)}___${sentence.slice(m.index + m[1]!.length)}` }));
}

/** Every value that fills the cloze's blank in one of the sentences. */
export function fills(cloze: string, sentences: Iterable<string>): Set<string> {
  const pattern = new RegExp(cloze.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace('___', '(\\S+?)'));
  const out = new Set<string>();
  for (const s of sentences) {
    const m = pattern.exec(s);
    if (m) out.add(m[1]!);
  }
  return out;
}

/** The quoted strings of a question, in order. */
export function quoted(question: string): string[] {
  return [...question.matchAll(/"([^"]+)"/g)].map((m) => m[1]!);
}

/** The cloze a question asks to fill: its quoted string with a blank. */
export function clozeIn(question: string): string | undefined {
  return quoted(question).find((q) => q.includes('___'));
}
