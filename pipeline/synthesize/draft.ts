/**
 * The writing stages: draft (a question, its answer, aliases and evidence from the seed:
 * prompts/synth-draft-documents.txt or synth-draft-graph.txt) and obfuscate (the same question
 * with names, titles and dates replaced by descriptions: prompts/synth-obfuscate.txt). Each
 * reply is one JSON object at its start (after any reasoning); a writer may decline a seed
 * (`{"error": "…"}`), which rejects it with its reason.
 */
import type { CheckResult } from '../../schemas/index.js';
import { readJsonReply } from '../core/judge/reply.js';
import { askStage, type AskDeps } from './ask.js';
import { descriptionsBlock, documentsBlock, linksBlock, seedBlock, triplesBlock } from './render.js';
import type { Seed } from './seed.js';

export interface Quote {
  readonly doc_id: string;
  readonly quote: string;
}

export interface Draft {
  readonly question: string;
  readonly answer: string;
  readonly aliases: readonly string[];
  /** documents: the writer's quotes (a graph's evidence is its walk). */
  readonly quotes: readonly Quote[];
}

/** A stage's outcome: what it made, or the check result that rejects the seed. */
export type Staged<T> = { readonly ok: T } | { readonly rejected: CheckResult };

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const text = (v: unknown): string | undefined => (typeof v === 'string' && v.trim() !== '' ? v.trim() : typeof v === 'number' && Number.isFinite(v) ? String(v) : undefined);

function readDraft(value: unknown): Draft | { declined: string } | undefined {
  if (!isObj(value)) return undefined;
  const question = text(value.question);
  const answer = text(value.answer);
  if (question === undefined || answer === undefined) return typeof value.error === 'string' ? { declined: value.error } : undefined;
  const aliases = Array.isArray(value.aliases) ? value.aliases.flatMap((a) => text(a) ?? []).filter((a) => a !== answer) : [];
  const quotes = Array.isArray(value.evidence)
    ? value.evidence.flatMap((e) => (isObj(e) && text(e.doc_id) !== undefined && typeof e.quote === 'string' && e.quote.trim() !== '' ? [{ doc_id: text(e.doc_id)!, quote: e.quote }] : []))
    : [];
  return { question, answer, aliases: [...new Set(aliases)], quotes };
}

export async function draft(seed: Seed, deps: AskDeps): Promise<Staged<Draft>> {
  const asked =
    seed.kind === 'documents'
      ? await askStage(deps, 'synth-draft-documents', { documents: documentsBlock(seed.docs), links: linksBlock(seed.links), hops: String(seed.docs.length) }, (r) => readJsonReply(r, readDraft), 'draft (a JSON object with question and answer)')
      : await askStage(deps, 'synth-draft-graph', { triples: triplesBlock(seed.triples), descriptions: descriptionsBlock(seed.descriptions), hops: String(seed.triples.length) }, (r) => readJsonReply(r, readDraft), 'draft (a JSON object with question and answer)');
  if ('unreadable' in asked) return { rejected: { verdict: 'error', reason: asked.unreadable } };
  if ('declined' in asked.value) return { rejected: { verdict: 'fail', reason: `the writer declined the seed: ${asked.value.declined}` } };
  return { ok: asked.value };
}

export async function obfuscate(seed: Seed, d: Draft, deps: AskDeps): Promise<Staged<string>> {
  const read = (r: string): string | undefined => readJsonReply(r, (v) => (isObj(v) ? text(v.question) : undefined));
  const asked = await askStage(deps, 'synth-obfuscate', { question: d.question, answer: d.answer, evidence: seedBlock(seed) }, read, 'question (a JSON object with question)');
  if ('unreadable' in asked) return { rejected: { verdict: 'error', reason: asked.unreadable } };
  return { ok: asked.value };
}
