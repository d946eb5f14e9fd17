/**
 * What rows from other systems (DR Tulu generator rows, chat rows) share when they become
 * trajectories: their ids, the fields a record has that they lack (usage, timing, a pending
 * validation), `meta` for the fields they have that a record does not, and what is read from
 * the parsed text (outputs, the answer, citations that resolve to no snippet).
 *
 * Ids: the source's id, or for a chat row without one the sampler's stable hash of the
 * question. Sources repeat ids (the DR Tulu fixture has two different questions under one
 * `sample_id`), so a repeated id gets `#2`, `#3`… in order of reading and `meta.source_id`
 * always holds the id as the source wrote it. `question_id` is the unique id too: a repeated
 * source id does not mean the same question.
 */
import { SCHEMA_VERSION, type ToolCallRecord, type Trajectory } from '../../schemas/index.js';
import type { Segment } from '../dialects/types.js';
import type { Obj } from './row-shapes.js';

export interface ReadContext {
  /** Ids handed out to external rows, with the last suffix used for each source id. */
  readonly ids: Map<string, number>;
  renamed: number;
}

export function uniqueId(source: string, ctx: ReadContext): string {
  let n = ctx.ids.get(source);
  if (n === undefined) {
    ctx.ids.set(source, 1);
    return source;
  }
  let id: string;
  do {
    n++;
    id = `${source}#${n}`;
  } while (ctx.ids.has(id));
  ctx.ids.set(source, n);
  ctx.ids.set(id, 1);
  ctx.renamed++;
  return id;
}

export function idOf(v: unknown): string | undefined {
  if (typeof v === 'string' && v.trim() !== '') return v;
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  return undefined;
}

export function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

/** A fresh object per row: the validator's callers fill it in place. */
function pendingValidation(): Trajectory['validation'] {
  return { passed: true, issues: [] };
}

/** Extra source fields for `meta`; fromEntries, not assignment, so a `__proto__` key stays data. */
export function metaFrom(entries: Iterable<[string, unknown]>, extra: Obj): Obj {
  return Object.fromEntries([...entries, ...Object.entries(extra)]);
}

function externalUsage(): Trajectory['usage'] {
  return { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: 0, estimated: true };
}

function timingAt(when: string | undefined): Trajectory['timing'] {
  return { started_at: when ?? '', finished_at: when ?? '', duration_ms: 0, llm_ms: 0, tool_ms: 0 };
}

export function outputsOf(segments: readonly Segment[]): Extract<Segment, { kind: 'output' }>[] {
  const out: Extract<Segment, { kind: 'output' }>[] = [];
  for (const s of segments) if (s.kind === 'output') out.push(s);
  return out;
}

export function firstAnswer(segments: readonly Segment[]): Extract<Segment, { kind: 'answer' }> | undefined {
  for (const s of segments) if (s.kind === 'answer') return s;
  return undefined;
}

export function unresolved(cited: readonly string[], outputs: readonly { snippetIds: readonly string[] }[]): string[] {
  if (cited.length === 0) return [];
  const shown = new Set<string>();
  for (const o of outputs) for (const id of o.snippetIds) shown.add(id);
  return cited.filter((id) => !shown.has(id));
}

export function toolsUsed(records: readonly ToolCallRecord[]): string[] {
  return [...new Set(records.map((r) => r.tool_name))];
}

/**
 * A record's opening fields, as a row from elsewhere fills them: its id, which is also its
 * question id (a repeated source id does not mean the same question), the question, the gold
 * answer (the row's `gold_answer` or `answer`) and `meta`.
 */
export function externalHead(row: Obj, id: string, question: string, meta: Obj): Pick<Trajectory, 'schema_version' | 'id' | 'question_id' | 'question' | 'gold_answer' | 'meta'> {
  const gold = str(row.gold_answer) ?? str(row.answer);
  return { schema_version: SCHEMA_VERSION, id, question_id: id, question, ...(gold !== undefined ? { gold_answer: gold } : {}), meta };
}

/** A record's closing fields, which a row from elsewhere has nothing for: no repairs, no usage counted, a validation still to run. */
export function externalTail(when: string | undefined): Pick<Trajectory, 'repairs' | 'rollbacks' | 'validation' | 'usage' | 'timing' | 'attempt' | 'run_id'> {
  return { repairs: [], rollbacks: [], validation: pendingValidation(), usage: externalUsage(), timing: timingAt(when), attempt: 0, run_id: 'external' };
}
