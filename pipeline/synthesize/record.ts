/**
 * The seed's one line: a kept question (SynthesizedQuestion, which `generate` reads as a
 * question bank row: id, question, answer, the rest as meta) or a rejected draft
 * (RejectedDraft, with the check that rejected it), each with every check run, what the seed
 * cost and what made it (models, prompts, trajforge's version).
 */
import { SCHEMA_VERSION, type CheckResult, type RejectedDraft, type SynthesisCheck, type SynthesizedQuestion } from '../../schemas/index.js';
import { PACKAGE_VERSION } from '../paths.js';
import type { CostMeter } from './cost.js';
import type { Draft } from './draft.js';
import type { Seed } from './seed.js';

export interface Provenance {
  readonly model: string;
  readonly writer_model: string;
  readonly judge_model: string;
}

/** What a seed has made so far. */
export interface Made {
  readonly seed: Seed;
  draft?: Draft;
  question?: string;
  id?: string;
  readonly checks: Partial<Record<SynthesisCheck, CheckResult>>;
  readonly meter: CostMeter;
  readonly prompts: Set<string>;
  closedBook: boolean | null;
  passRate: number | null;
  k: number;
}

interface Context {
  readonly sourcePath: string;
  readonly provenance: Provenance;
}

function common(ctx: Context, m: Made): Pick<SynthesizedQuestion, 'schema_version' | 'source' | 'checks' | 'provenance' | 'cost'> {
  const s = m.seed;
  return {
    schema_version: SCHEMA_VERSION,
    source: { kind: s.kind, path: ctx.sourcePath, seed: s.id, ...(s.kind === 'documents' ? { docs: s.docs.map((d) => d.id) } : {}) },
    checks: m.checks,
    provenance: { ...ctx.provenance, prompts: [...m.prompts].sort(), trajforge_version: PACKAGE_VERSION },
    cost: m.meter.record(),
  };
}

function evidence(m: Made): SynthesizedQuestion['evidence'] {
  return m.seed.kind === 'graph' ? [...m.seed.triples] : m.draft!.quotes.map((q) => ({ doc_id: q.doc_id, quote: q.quote }));
}

/** `release`: what to undo when the line is not written after all (the kept budget was reached first). */
export function keptRow(ctx: Context, m: Made, release?: () => void): { readonly kept: SynthesizedQuestion; readonly release?: (() => void) | undefined } {
  const d = m.draft!;
  const { schema_version, ...rest } = common(ctx, m);
  // The question first, as a reader of the bank wants it; then what made it.
  const kept: SynthesizedQuestion = {
    schema_version,
    id: m.id!,
    question: m.question!,
    answer: d.answer,
    ...(d.aliases.length > 0 ? { aliases: [...d.aliases] } : {}),
    evidence: evidence(m),
    hops: m.seed.kind === 'graph' ? m.seed.triples.length : m.seed.docs.length,
    draft_question: d.question,
    difficulty: { closed_book_correct: m.closedBook, pass_rate: m.passRate, k: m.k },
    ...rest,
  };
  return { kept, release };
}

export function rejectedRow(ctx: Context, m: Made, by: SynthesisCheck, result: CheckResult): { readonly rejected: RejectedDraft } {
  m.checks[by] = result;
  const d = m.draft;
  const { schema_version, ...rest } = common(ctx, m);
  return {
    rejected: {
      schema_version,
      ...(m.id === undefined ? {} : { id: m.id }),
      rejected_by: by,
      reason: result.reason,
      ...(m.question === undefined ? {} : { question: m.question }),
      ...(d === undefined ? {} : { draft_question: d.question, answer: d.answer, ...(d.aliases.length > 0 ? { aliases: [...d.aliases] } : {}), evidence: evidence(m) }),
      ...(m.question === undefined ? {} : { difficulty: { closed_book_correct: m.closedBook, pass_rate: m.passRate, k: m.k } }),
      ...rest,
    },
  };
}
