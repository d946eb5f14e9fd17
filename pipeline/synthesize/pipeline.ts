/**
 * One seed, from draft to verdict: draft → obfuscate → the checks, cheapest first, the first
 * that fails rejecting the seed:
 *
 *   verbatim → no_leak → contamination → entailment → unique → closed_book → near_duplicate → solvable
 *
 * (no model, then one judge request each, then the endpoint and a grading, then k rollouts).
 * Each check's verdict and reason is recorded on the seed's line, kept or rejected. A check
 * that is off is not run and not recorded. A failure of the machinery (Unfinished, LlmError)
 * is thrown: the seed gets no line and is redone by the next run.
 */
import { SCHEMA_VERSION, type CheckResult, type Question, type SynthesisCheck, type SynthesisConfig } from '../../schemas/index.js';
import type { Judge } from '../core/judge/judge.js';
import type { LlmClient } from '../core/llm/llm.js';
import type { EvalIndex } from '../dataset/decontaminate.js';
import type { AskDeps } from './ask.js';
import { contaminationCheck, leakCheck, verbatimCheck } from './checks.js';
import { CostMeter } from './cost.js';
import { draft, obfuscate, type Draft } from './draft.js';
import { shortHash } from './draws.js';
import { closedBookCheck, entailmentCheck, uniqueCheck } from './judged.js';
import type { NearDuplicates } from './near-duplicates.js';
import { keptRow, rejectedRow, type Made, type Provenance } from './record.js';
import type { Seed } from './seed.js';
import { SEED_META, Solvability } from './solvable.js';

export interface SeedContext {
  readonly synthesis: SynthesisConfig;
  readonly sourcePath: string;
  /** The writer (draft, obfuscate) and the endpoint (the closed-book solver). */
  readonly writer: LlmClient;
  readonly solver: LlmClient;
  readonly judge: Judge;
  readonly evalIndex: EvalIndex | undefined;
  readonly near: NearDuplicates | undefined;
  readonly solve: Solvability | undefined;
  readonly provenance: Provenance;
  readonly signal: AbortSignal;
}

export type SeedOutcome = ReturnType<typeof keptRow> | ReturnType<typeof rejectedRow>;

/** A question's id: the seed's and the question's, so a redone seed asking the same question finds its rollouts, and two seeds never share one. */
export function questionId(seedId: string, question: string): string {
  return `sq-${shortHash(`${seedId}\u0000${question}`)}`;
}

interface Step {
  readonly name: SynthesisCheck;
  run(): CheckResult | Promise<CheckResult>;
}

export async function runSeed(seed: Seed, ctx: SeedContext): Promise<SeedOutcome> {
  const meter = new CostMeter();
  const made: Made = { seed, checks: {}, meter, prompts: new Set<string>(), closedBook: null, passRate: null, k: 0 };
  const deps: AskDeps = { llm: ctx.writer, retries: ctx.synthesis.unreadable_retries, signal: ctx.signal, meter, prompts: made.prompts };
  const drafted = await draft(seed, deps);
  if ('rejected' in drafted) return rejectedRow(ctx, made, 'draft', drafted.rejected);
  const d = drafted.ok;
  made.draft = d;
  const pieces = seed.kind === 'graph' ? `the walk's ${seed.triples.length} triples` : `${d.quotes.length} quote${d.quotes.length === 1 ? '' : 's'}`;
  made.checks.draft = { verdict: 'pass', reason: `a question, its answer and ${pieces} as evidence` };
  const obfuscated = await obfuscate(seed, d, deps);
  if ('rejected' in obfuscated) return rejectedRow(ctx, made, 'obfuscate', obfuscated.rejected);
  const question = obfuscated.ok;
  made.question = question;
  made.id = questionId(seed.id, question);
  made.checks.obfuscate = { verdict: 'pass', reason: question === d.question ? 'the writer left the question as drafted' : 'names and dates replaced by descriptions' };
  let reserved: number | undefined;
  try {
    for (const step of steps(ctx, seed, d, made, { ...deps, llm: ctx.solver }, (h) => (reserved = h))) {
      const result = await step.run();
      made.checks[step.name] = result;
      if (result.verdict === 'fail' || result.verdict === 'error') {
        if (reserved !== undefined) ctx.near!.release(reserved);
        return rejectedRow(ctx, made, step.name, result);
      }
    }
  } catch (err) {
    if (reserved !== undefined) ctx.near!.release(reserved);
    throw err;
  }
  return keptRow(ctx, made, reserved === undefined ? undefined : () => ctx.near!.release(reserved!));
}

/** The checks the config turns on, in order. */
function steps(ctx: SeedContext, seed: Seed, d: Draft, made: Made, deps: AskDeps, reserve: (handle: number) => void): Step[] {
  const { checks } = ctx.synthesis;
  const q = made.question!;
  const out: Step[] = [
    { name: 'verbatim', run: () => verbatimCheck(seed, d) },
    { name: 'no_leak', run: () => leakCheck(q, d.answer, d.aliases) },
  ];
  if (ctx.evalIndex) out.push({ name: 'contamination', run: () => contaminationCheck(q, ctx.evalIndex!) });
  if (checks.entailment) out.push({ name: 'entailment', run: () => entailmentCheck(ctx.judge, seed, q, d, deps) });
  if (checks.unique) out.push({ name: 'unique', run: () => uniqueCheck(ctx.judge, seed, q, d, deps) });
  if (checks.closed_book !== 'off') {
    const mode = checks.closed_book;
    out.push({
      name: 'closed_book',
      run: async () => {
        const cb = await closedBookCheck(ctx.judge, q, d, mode, deps);
        made.closedBook = cb.correct ?? null;
        return cb.result;
      },
    });
  }
  if (ctx.near) out.push({ name: 'near_duplicate', run: () => nearDuplicateCheck(ctx.near!, made.id!, q, reserve) });
  const solvable = checks.solvable;
  if (solvable !== false && ctx.solve) {
    out.push({
      name: 'solvable',
      run: async () => {
        const r = await ctx.solve!.rate(rolloutQuestion(made.id!, q, d, seed.id), made.meter);
        made.passRate = r.passRate;
        made.k = solvable.k;
        return Solvability.verdict(r.passRate, r.correct, solvable.k, solvable);
      },
    });
  }
  return out;
}

function nearDuplicateCheck(near: NearDuplicates, id: string, question: string, reserve: (handle: number) => void): CheckResult {
  const hit = near.find(question);
  if (hit !== undefined) return { verdict: 'fail', reason: `a near-duplicate of ${hit.id}, kept or being checked (similarity ${hit.similarity.toFixed(2)})` };
  reserve(near.add(id, question));
  return { verdict: 'pass', reason: 'no question kept so far is a near-duplicate' };
}

/** The question as a rollout gets it: a Question, its aliases as gold alternatives, its seed named (solvable.ts reads it back). */
function rolloutQuestion(id: string, question: string, d: Draft, seed: string): Question {
  return { schema_version: SCHEMA_VERSION, id, question, answer: d.answer, meta: { ...(d.aliases.length > 0 ? { aliases: [...d.aliases] } : {}), [SEED_META]: seed } };
}
