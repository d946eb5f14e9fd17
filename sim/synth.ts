/**
 * The sim as `trajforge synthesize`'s models, told apart by the prompts synthesis sends
 * (prompts/synth-*.txt): the writer (a draft from documents or from a walk), the obfuscator,
 * the closed-book solver (synth-memory.ts), and the judge of synthesis's two questions
 * (entailment, unique). Deterministic from the seed and what each prompt holds.
 *
 * Documents: the writer asks for a number a sentence of the last document states, as a cloze
 * that only that number fills in the seed's documents: `Which value fills the blank in
 * "Chrome first supported it in version ___, released 2017-03-09." in the document "CSS
 * property: grid"?`; the obfuscator replaces the title by another sentence of the document
 * (`the document that says "Firefox first supported it in version 52, …"`). Graph: `What is
 * the r2 of the r1 of "X"?`, X replaced by its description.
 *
 * It misbehaves at the rates `plant` sets, at most one defect per seed (drawn from the seed and
 * the seed's documents or triples, so the draft and the obfuscation agree), and records what it
 * planted (`planted()`), so tests measure each check against it:
 * - bad_quote: the draft's last quote is not verbatim (a word inserted);
 * - leak: the obfuscated question describes the document by the very sentence of the answer;
 * - ambiguous: the cloze cut to a few words before the blank, which several values fill;
 * - easy: the question left as drafted, its document named: the closed-book solver recalls it.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { matchTokens } from '../pipeline/core/judge/cascade.js';
import { TrajforgeError } from '../pipeline/errors.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { loadPrompt } from '../pipeline/prompts.js';
import { messageText } from './dialects.js';
import { section } from './judge.js';
import type { ChatMessage } from './policy.js';
import { Memory } from './synth-memory.js';
import { clozeIn, factsOf, fills, mentions, nameOf, namesIt, parseDocuments, parseGraph, quoted, type Fact, type SimDoc } from './synth-facts.js';

export const PLANTED_DEFECTS = ['bad_quote', 'leak', 'ambiguous', 'easy'] as const;
export type PlantedDefect = (typeof PLANTED_DEFECTS)[number];
export type PlantRates = Partial<Record<PlantedDefect, number>>;

export interface Planted {
  /** The seed's documents' ids, or its triples as JSON, one a line: `plantKey` of a row. */
  readonly key: string;
  readonly defect: PlantedDefect;
}

export interface SynthRoleOptions {
  readonly seed: number;
  readonly plant?: PlantRates | undefined;
  /** JSONL files the closed-book solver remembers (documents, triples). Default: the bundled corpus. */
  readonly knowledge?: readonly string[] | undefined;
}

const KINDS = {
  'synth-draft-documents': 'draft-documents',
  'synth-draft-graph': 'draft-graph',
  'synth-obfuscate': 'obfuscate',
  'synth-closed-book': 'closed-book',
  'synth-entailment': 'entailment',
  'synth-unique': 'unique',
} as const;
type Kind = (typeof KINDS)[keyof typeof KINDS];

/** `KIND=RATE[,KIND=RATE…]` (`all=RATE` for each kind) → rates; throws BAD_USAGE on a bad spec or rates that add up past 1. */
export function parsePlant(spec: string): PlantRates {
  const rates: PlantRates = {};
  for (const item of spec.split(',')) {
    const [kind = '', raw = ''] = item.split('=').map((x) => x.trim());
    const rate = Number(raw);
    if (raw === '' || !Number.isFinite(rate) || rate < 0 || rate > 1) throw new TrajforgeError('BAD_USAGE', `trajforge sim: --plant takes KIND=RATE with a rate from 0 to 1, got '${item}'`);
    if (kind === 'all') for (const d of PLANTED_DEFECTS) rates[d] = rate;
    else if ((PLANTED_DEFECTS as readonly string[]).includes(kind)) rates[kind as PlantedDefect] = rate;
    else throw new TrajforgeError('BAD_USAGE', `trajforge sim: --plant: unknown defect '${kind}'; known: all, ${PLANTED_DEFECTS.join(', ')}`);
  }
  return rates;
}

/** The key a seed's plant is drawn from and recorded under: its document ids, or its triples. */
export function plantKey(docIds: readonly string[] | undefined, triples?: readonly { subject: string; relation: string; object: string }[]): string {
  return docIds !== undefined ? docIds.join('\n') : (triples ?? []).map((t) => JSON.stringify([t.subject, t.relation, t.object])).join('\n');
}

const reply = (v: unknown): string => JSON.stringify(v);
const verdict = (word: string, why: string): string => `Verdict: ${word}\nRationale: ${why}`;
const rel = (r: string): string => r.replace(/_/g, ' ');

export class SynthRoles {
  readonly #seed: number;
  readonly #rates: PlantRates;
  readonly #knowledge: readonly string[];
  #memory: Memory | undefined;
  #prefixes: [Kind, string][] | undefined;
  readonly #planted = new Map<string, PlantedDefect>();

  constructor(opts: SynthRoleOptions) {
    this.#seed = opts.seed;
    this.#rates = opts.plant ?? {};
    const sum = Object.values(this.#rates).reduce((a, b) => a + (b ?? 0), 0);
    if (sum > 1) throw new TrajforgeError('BAD_CONFIG', `sim: plant rates add up to ${sum}; a seed gets one defect at most, so they must add up to 1 or less`);
    this.#knowledge = opts.knowledge ?? [join(PACKAGE_ROOT, 'data', 'corpus.jsonl')];
  }

  planted(): Planted[] {
    return [...this.#planted].map(([key, defect]) => ({ key, defect }));
  }

  /** The reply to a synthesis request, or null when the request is none (the policy or the judge answers it). */
  reply(messages: readonly ChatMessage[]): string | null {
    const last = [...messages].reverse().find((m) => m.role === 'user');
    const text = last === undefined ? '' : messageText(last.content);
    this.#prefixes ??= Object.entries(KINDS).map(([name, kind]) => [kind, loadPrompt(name).split(/\{[A-Za-z_]\w*\}/)[0]!.trim()]);
    const kind = this.#prefixes.find(([, p]) => text.startsWith(p))?.[0];
    if (kind === undefined) return null;
    const s = (label: string): string => section(text, label) ?? '';
    switch (kind) {
      case 'draft-documents':
        return this.#draftDocuments(parseDocuments(s('Documents')), s('Links'));
      case 'draft-graph':
        return this.#draftGraph(`${s('Triples ([subject, relation, object], in path order)')}\n${s('Descriptions of the entities, where known')}`);
      case 'obfuscate':
        return this.#obfuscate(s('Question'), s('Answer'), s('Evidence'));
      case 'closed-book':
        return this.#recall(s('Question'));
      case 'entailment':
        return entails(s('Answer'), s('Evidence'));
      case 'unique':
        return unique(s('Question'), s('Answer'), s('Evidence'));
    }
  }

  /** The defect this seed gets, if it is one of `allowed` (one draw per seed, shared by its stages). */
  #defect(key: string, allowed: readonly PlantedDefect[]): PlantedDefect | undefined {
    const u = createHash('sha256').update(`${this.#seed}\u0000plant\u0000${key}`).digest().readUInt32LE(0) / 2 ** 32;
    let acc = 0;
    for (const d of PLANTED_DEFECTS) {
      acc += this.#rates[d] ?? 0;
      if (u < acc) return allowed.includes(d) ? d : undefined;
    }
    return undefined;
  }

  #plant(key: string, defect: PlantedDefect): void {
    this.#planted.set(key, defect);
  }

  #draftDocuments(docs: SimDoc[], links: string): string {
    if (docs.length === 0) return reply({ error: 'no documents' });
    const via = [...links.matchAll(/^document \d+ -> document \d+: (.*)$/gm)].map((m) => m[1]!);
    const t0 = docs[0]!.title ?? docs[0]!.id;
    // The question also says the first title and the links: none may hold the answer.
    const plan = planDocuments(docs, plantKey(docs.map((d) => d.id)), [t0, ...via]);
    if (plan === undefined) return reply({ error: 'no fact in the last document that a description can ask for' });
    const where = via.length === 0 ? `the document "${t0}"` : `the document reached from the document "${t0}" by following ${via.map((l) => `"${l}"`).join(', then ')}`;
    const quotes = via.flatMap((l, i) => [docs[i]!, docs[i + 1]!].flatMap((d) => d.sentences.filter((x) => x.includes(l)).slice(0, 1).map((quote) => ({ doc_id: d.id, quote }))));
    const target = docs.at(-1)!;
    const key = plantKey(docs.map((d) => d.id));
    let last = plan.fact.sentence;
    if (this.#defect(key, ['bad_quote']) === 'bad_quote') {
      this.#plant(key, 'bad_quote');
      last = last.replace(/^(\S+)/, '$1 reportedly');
    }
    return reply({ question: `Which value fills the blank in "${plan.fact.cloze}" in ${where}?`, answer: plan.fact.value, aliases: [], evidence: [...quotes, { doc_id: target.id, quote: last }] });
  }

  #draftGraph(block: string): string {
    const { triples, descriptions } = parseGraph(block);
    if (triples.length === 0) return reply({ error: 'no triples' });
    const s0 = triples[0]!.subject;
    const answer = triples.at(-1)!.object;
    const desc = descriptions.get(s0);
    const question = `What is the ${[...triples].reverse().map((t) => rel(t.relation)).join(' of the ')} of "${s0}"?`;
    if (desc === undefined || desc.includes('"') || mentions(desc, answer) || mentions(question, answer)) return reply({ error: `no description of "${s0}" that keeps the answer out` });
    return reply({ question, answer, aliases: [] });
  }

  #obfuscate(question: string, answer: string, evidence: string): string {
    const docs = parseDocuments(evidence);
    if (docs.length > 0) return reply({ question: this.#obfuscateDocuments(question, answer, docs) });
    const { triples, descriptions } = parseGraph(evidence);
    const s0 = triples[0]?.subject ?? '';
    const needle = `of "${s0}"?`;
    if (!question.endsWith(needle)) return reply({ question });
    const key = plantKey(undefined, triples);
    const defect = this.#defect(key, ['leak', 'ambiguous', 'easy']);
    if (defect !== undefined) this.#plant(key, defect);
    const desc = descriptions.get(s0) ?? '';
    const end =
      defect === 'easy' ? needle : defect === 'leak' ? `of the entity described as "${desc}", which leads to ${answer}?` : defect === 'ambiguous' ? 'of some entity?' : `of the entity described as "${desc}"?`;
    return reply({ question: question.slice(0, -needle.length) + end });
  }

  #obfuscateDocuments(question: string, answer: string, docs: SimDoc[]): string {
    const needle = `the document "${docs[0]!.title ?? docs[0]!.id}"`;
    const cloze = clozeIn(question);
    const key = plantKey(docs.map((d) => d.id));
    const description = cloze === undefined ? undefined : describe(docs[0]!, { sentence: cloze.replace('___', answer), value: answer }, key);
    if (!question.includes(needle) || cloze === undefined || description === undefined) return question;
    const defect = this.#defect(key, ['leak', 'ambiguous', 'easy']);
    if (defect === 'easy') {
      this.#plant(key, 'easy');
      return question;
    }
    if (defect === 'leak') {
      this.#plant(key, 'leak');
      return question.replace(needle, `the document that says "${cloze.replace('___', answer)}"`);
    }
    const clean = question.replace(needle, `the document that says "${description}"`);
    const window = defect === 'ambiguous' ? ambiguousWindow(cloze, docs.flatMap((d) => d.sentences)) : undefined;
    if (window === undefined) return clean;
    this.#plant(key, 'ambiguous');
    return clean.replace(`"${cloze}"`, `"${window}"`);
  }

  /** The closed-book solver: what memory gives for a thing the question names plainly, else "I do not know." */
  #recall(question: string): string {
    this.#memory ??= Memory.load(this.#knowledge);
    const mem = this.#memory;
    const cloze = clozeIn(question);
    for (const q of quoted(question)) {
      const doc = mem.titles.get(q);
      const value = doc !== undefined && cloze !== undefined ? mem.recallCloze(cloze, doc) : undefined;
      if (value !== undefined) return value;
    }
    const m = /^What is the (.*) of "([^"]+)"\?$/.exec(question.trim());
    const found = m === null ? undefined : mem.follow(m[2]!, m[1]!.split(' of the ').reverse());
    return found ?? 'I do not know.';
  }
}

/** `items` starting at a place drawn from `key`: the seed's own choice, the same for every stage that reads its documents. */
function rotated<T>(items: readonly T[], key: string): T[] {
  const at = items.length === 0 ? 0 : createHash('sha256').update(`rotate\u0000${key}`).digest().readUInt32LE(0) % items.length;
  return [...items.slice(at), ...items.slice(0, at)];
}

/** A fact of the last document whose cloze only its value fills in the seed's documents, and a sentence of the first that describes it. */
function planDocuments(docs: SimDoc[], key: string, alsoSaid: readonly string[]): { fact: Fact; description: string } | undefined {
  const target = docs.at(-1)!;
  const all = docs.flatMap((d) => d.sentences);
  const name = nameOf(target.title ?? target.id);
  for (const s of rotated(target.sentences, key)) {
    if (s.includes('"') || namesIt(s, name)) continue;
    for (const fact of factsOf(s)) {
      const only = fills(fact.cloze, all);
      if (only.size !== 1 || !only.has(fact.value) || [fact.cloze, ...alsoSaid].some((t) => mentions(t, fact.value))) continue;
      const description = describe(docs[0]!, fact, key);
      if (description !== undefined) return { fact, description };
    }
  }
  return undefined;
}

/**
 * What describes the document without naming it or giving the fact's value: another sentence of
 * it with a number of its own, up to its first comma (`Edge first supported it in version 79`),
 * a fact that few other documents share and that leaves the question's own words to the cloze.
 */
function describe(doc: SimDoc, fact: Pick<Fact, 'sentence' | 'value'>, key: string): string | undefined {
  const name = nameOf(doc.title ?? doc.id);
  for (const s of rotated(doc.sentences, `${key}\u0000describe`)) {
    const head = s.split(', ')[0]!;
    const d = factsOf(head).length > 0 ? head : s;
    if (s !== fact.sentence && !d.includes('"') && !namesIt(d, name) && !mentions(d, fact.value) && factsOf(d).length > 0) return d;
  }
  return undefined;
}

/** The last 2–4 words of the cloze up to its blank, when several values fill them. */
function ambiguousWindow(cloze: string, sentences: readonly string[]): string | undefined {
  const words = cloze.split(' ');
  const at = words.findIndex((w) => w.includes('___'));
  for (const m of [3, 2, 1]) {
    const w = words.slice(Math.max(0, at - m), at + 1).join(' ');
    if (fills(w, sentences).size >= 2) return w;
  }
  return undefined;
}

function entails(answer: string, evidence: string): string {
  const said = matchTokens(answer).join(' ');
  for (const [i, line] of evidence.split('\n').entries()) {
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      continue;
    }
    const quote = Array.isArray(v) ? String(v[2]) : typeof (v as { quote?: unknown })?.quote === 'string' ? (v as { quote: string }).quote : '';
    if (Array.isArray(v) ? matchTokens(quote).join(' ') === said : mentions(quote, answer)) return verdict('SUPPORTED', `line ${i + 1} of the evidence states "${answer}".`);
  }
  return verdict('NOT_SUPPORTED', `no line of the evidence states "${answer}".`);
}

function unique(question: string, answer: string, evidence: string): string {
  const docs = parseDocuments(evidence);
  if (docs.length > 0) {
    const cloze = clozeIn(question);
    if (cloze === undefined) return verdict('NOT_UNIQUE', 'the question gives no statement to complete.');
    const values = [...fills(cloze, docs.flatMap((d) => d.sentences))];
    if (values.length === 1 && matchTokens(values[0]!).join(' ') === matchTokens(answer).join(' ')) return verdict('UNIQUE', `only "${values[0]}" fills the blank in the documents.`);
    return verdict('NOT_UNIQUE', `the blank takes ${values.length} values in the documents: ${values.slice(0, 5).join(', ')}.`);
  }
  const { triples, descriptions } = parseGraph(evidence);
  const s0 = triples[0]?.subject ?? '';
  const desc = descriptions.get(s0);
  if (question.endsWith(`of "${s0}"?`) || (desc !== undefined && question.includes(`described as "${desc}"`))) return verdict('UNIQUE', `the question starts from ${s0} and follows the path.`);
  return verdict('NOT_UNIQUE', 'the question does not single out the entity it starts from.');
}
