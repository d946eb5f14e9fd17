/**
 * `trajforge export --format dpo`: preference pairs for TRL's DPOTrainer, in its
 * conversational preference shape:
 *
 *   {"prompt":   [system?, user: the question, …],     the conversation both rollouts share
 *    "chosen":   [assistant],                          the turn a judged-correct rollout wrote next
 *    "rejected": [assistant],                          the turn a judged-incorrect one wrote
 *    "completion": "diverge" | "final", "id": question id, "chosen_id": "q#1", "rejected_id": "q#0", "tools"?: […]}
 *
 * DPO puts every completion token in the loss, so a completion holds only model-written text:
 * with `--dpo-turn diverge` (default) the first assistant turn where the two rollouts differ,
 * after the conversation they share (tool results included); with `final` each one's final
 * answer turn, after the chosen rollout's conversation (`DpoTurn`). A pair whose rollouts first
 * differ in a tool result has no such turn and is left out, counted. TRL renders `prompt` with
 * the generation prompt and keeps what `prompt + chosen` adds; extra columns are passed over.
 * The messages are the training view (training-view.ts: `--view`, `--tool-role`) without the
 * `train` flags.
 *
 * Candidates, per question id, from the latest state of each sample id, as `merge` and `stats`
 * read a run: accepted beats failed, then the higher attempt, then the later row (a run
 * directory, and a file cut from one by `filter` or `decontaminate`, holds an id's earlier
 * attempts, and a re-judged sample's unjudged record):
 * - chosen: accepted and judged correct (`status ok`, `judgement.verdict correct`);
 * - rejected: judged incorrect or not attempted, accepted or not (a wrong answer to a gold
 *   question fails its sample; a rubric question scored under `rubric_pass` is accepted).
 *   Samples that failed otherwise (max_turns, invalid…) and unjudged ones are not candidates:
 *   a rollout that broke is not a preference about answers.
 * - `--keep`/`--drop` select candidates first (`rubric_score >= 0.5`, `tool_calls >= 2`).
 *
 * Pairing: only rollouts whose prompts are the same (an attempt seeded by an earlier failure
 * has another first user turn). Within a question, chosen and rejected are each in sample
 * order (`q#0`, `q#1`, …); the pairs are first (c0, r0), (c1, r1), … — every rollout once —
 * and then the other combinations, row by row; at most `--max-pairs` per question (default 1;
 * `all` for every combination). Deterministic: the same run gives the same file.
 *
 * Memory: one pass over the input; each candidate's view goes to a temporary file, and only
 * its offset and a few fields stay in memory, so a run of millions of rollouts fits.
 */
import { closeSync, mkdtempSync, openSync, readSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import type { Trajectory } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import type { JsonlWriter } from '../core/jsonl.js';
import type { DatasetRow } from './readers.js';
import { trainingView, type ToolRole, type ViewMessage, type ViewMode } from './training-view.js';
import { UnexportableRow } from './unexportable-row.js';
import { ForeignCheck } from './foreign.js';
import { cleanJson } from '../text.js';

/** A message as TRL's chat templates read it: the view's, without the `train` flag. */
export type DpoMessage = Omit<ViewMessage, 'train'>;

export interface DpoRow {
  id: string;
  /** Which turn the completions hold (`DpoTurn`). */
  completion: DpoTurn;
  chosen_id: string;
  rejected_id: string;
  prompt: DpoMessage[];
  chosen: DpoMessage[];
  rejected: DpoMessage[];
  tools?: unknown[];
  /** Rubric questions: the two rubric scores. */
  chosen_score?: number;
  rejected_score?: number;
}

/**
 * Which model-written turn a pair compares (DPO puts every completion token in the loss, so a
 * completion holds only what the model wrote):
 * - `diverge` (default): the first assistant turn where the two rollouts differ; the prompt is
 *   the conversation they share up to it (tool results included), as both models saw it.
 * - `final`: each rollout's final answer turn; the prompt is the chosen rollout's conversation
 *   up to its answer (the rejected answer was written after its own, other conversation).
 */
export type DpoTurn = 'diverge' | 'final';
export const DPO_TURNS: readonly DpoTurn[] = ['diverge', 'final'];

export interface DpoOptions {
  readonly turn?: DpoTurn | undefined;
  readonly view?: ViewMode | undefined;
  readonly toolRole?: ToolRole | undefined;
  /** Pairs per question at most; Infinity for every combination. Default 1. */
  readonly maxPairs?: number | undefined;
  readonly onBadRow?: 'error' | 'skip' | undefined;
}

export interface DpoCounts {
  in: number;
  /** Rows left out by the selection (earlier attempts, --keep/--drop). */
  notSelected: number;
  chosen: number;
  rejected: number;
  /** Rows neither chosen nor rejected: not judged, unjudged, or failed for another reason. */
  notCandidates: number;
  /** Rows of a sample id that a later row of it replaced. */
  superseded: number;
  unexportable: number;
  questions: number;
  /** Questions with a pair written. */
  paired: number;
  onlyCorrect: number;
  onlyIncorrect: number;
  /** Questions with both sides, but never under the same prompt. */
  promptMismatch: number;
  /** Pairs left out under `diverge`: the rollouts first differ in a turn the model did not write (a tool result). */
  noModelDivergence: number;
  pairs: number;
}

interface Candidate {
  /** False once a later state of the same sample id came. */
  live: boolean;
  readonly chosen: boolean;
  readonly id: string;
  readonly index: number;
  readonly prompt: string;
  readonly offset: number;
  readonly length: number;
}

const sampleIndex = (t: Trajectory): number => {
  if (typeof t.sampling?.index === 'number') return t.sampling.index;
  const m = /#(\d+)$/.exec(t.id);
  return m ? Number(m[1]) : 0;
};

/** Which side a row can stand on, if any. */
function sideOf(t: Trajectory): 'chosen' | 'rejected' | undefined {
  const v = t.judgement?.verdict;
  if (v === 'correct') return t.status === 'ok' ? 'chosen' : undefined;
  if (v === 'incorrect' || v === 'not_attempted') return t.status === 'ok' || t.reason === 'wrong_answer' ? 'rejected' : undefined;
  return undefined;
}

const bare = (m: ViewMessage): DpoMessage => {
  const { train: _train, ...rest } = m;
  return rest;
};

/** The order pairs are taken in: (c0, r0), (c1, r1), … then the other combinations row by row. */
export function pairOrder(chosen: number, rejected: number): [number, number][] {
  const out: [number, number][] = [];
  const n = Math.min(chosen, rejected);
  for (let i = 0; i < n; i++) out.push([i, i]);
  for (let i = 0; i < chosen; i++) for (let j = 0; j < rejected; j++) if (i !== j || i >= n) out.push([i, j]);
  return out;
}

/** The views of the candidates, spilled to a temporary file (they can be many and long), each read back by its place when it is paired. */
class Spill {
  readonly #dir = mkdtempSync(join(tmpdir(), 'trajforge-dpo-'));
  readonly #fd = openSync(join(this.#dir, 'views.jsonl'), 'w+');
  #written = 0;

  /** Appends one view; where it is. */
  add(view: SpilledView): { offset: number; length: number } {
    const line = Buffer.from(`${JSON.stringify(view)}\n`, 'utf8');
    writeSync(this.#fd, line, 0, line.length, this.#written);
    const at = { offset: this.#written, length: line.length };
    this.#written += line.length;
    return at;
  }

  read(c: { offset: number; length: number }): SpilledView {
    const buf = Buffer.alloc(c.length);
    readSync(this.#fd, buf, 0, c.length, c.offset);
    return JSON.parse(buf.toString('utf8'));
  }

  close(): void {
    closeSync(this.#fd);
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

/** What a candidate's view keeps: the prompt (up to its first model turn), the rest, the tools, the rubric score. */
interface SpilledView {
  prompt: DpoMessage[];
  rest: DpoMessage[];
  tools?: unknown[];
  score?: number;
}

/** Question id → its candidates, in input order; a Map keeps the questions in first-seen order. */
type Questions = Map<string, Candidate[]>;

/**
 * Pass 1: every row's latest state (an earlier attempt of a sample is superseded, and so is a
 * candidate it made), the selection, its side, and its view spilled: the candidates by question.
 */
async function collectCandidates(rows: AsyncIterable<DatasetRow>, spill: Spill, counts: DpoCounts, opts: DpoOptions, keep: ((row: DatasetRow) => boolean) | undefined): Promise<Questions> {
  const foreign = new ForeignCheck({});
  const questions: Questions = new Map();
  /** Sample id → its latest state so far, and that row's candidate if it was one. */
  const latest = new Map<string, { ok: boolean; attempt: number; candidate?: Candidate | undefined }>();
  const supersede = (t: Trajectory): boolean => {
    const attempt = Number.isInteger(t.attempt) ? t.attempt : 0;
    const ok = t.status === 'ok';
    const prev = latest.get(t.id);
    if (prev !== undefined && (prev.ok !== ok ? prev.ok : attempt < prev.attempt)) return false;
    if (prev?.candidate !== undefined) {
      prev.candidate.live = false;
      if (prev.candidate.chosen) counts.chosen--;
      else counts.rejected--;
      counts.superseded++;
    }
    latest.set(t.id, { ok, attempt });
    return true;
  };
  for await (const row of rows) {
    counts.in++;
    foreign.check(row);
    const t = cleanJson(row.trajectory);
    if (!supersede(t)) {
      counts.superseded++;
      continue;
    }
    // The selection reads a sample's latest state: one it leaves out is no candidate.
    if (keep && !keep(row)) {
      counts.notSelected++;
      continue;
    }
    const side = sideOf(t);
    if (side === undefined) {
      counts.notCandidates++;
      continue;
    }
    try {
      const view = trainingView(t, { view: opts.view, toolRole: opts.toolRole });
      const first = view.messages.findIndex((m) => m.role === 'assistant');
      if (first < 1) throw new UnexportableRow('the view has no model turn after a prompt');
      if (view.messages[first - 1]!.role !== 'user') throw new UnexportableRow(`the turn before the first model turn is ${view.messages[first - 1]!.role}, not the user's (TRL renders the prompt with the generation prompt after a user turn)`);
      const prompt = view.messages.slice(0, first).map(bare);
      const rest = view.messages.slice(first).map(bare);
      const score = t.judgement?.rubric_score;
      const at = spill.add({ prompt, rest, ...(view.tools === undefined ? {} : { tools: view.tools }), ...(score === undefined ? {} : { score }) });
      const promptKey = createHash('sha256').update(JSON.stringify([prompt, view.tools ?? null])).digest('hex').slice(0, 16);
      let list = questions.get(t.question_id);
      if (list === undefined) questions.set(t.question_id, (list = []));
      const candidate: Candidate = { live: true, chosen: side === 'chosen', id: t.id, index: sampleIndex(t), prompt: promptKey, ...at };
      list.push(candidate);
      latest.get(t.id)!.candidate = candidate;
      if (side === 'chosen') counts.chosen++;
      else counts.rejected++;
    } catch (err) {
      if (!(err instanceof UnexportableRow)) throw err;
      const place = `${row.file === '-' ? '<stdin>' : row.file}:${row.line}`;
      if (opts.onBadRow !== 'skip') throw new TrajforgeError('BAD_INPUT', `${place}: cannot export as dpo: ${err.message}`, { file: row.file, line: row.line });
      counts.unexportable++;
    }
  }
  return questions;
}

type Spilled = { prompt: DpoMessage[]; rest: DpoMessage[] };

/** The pair's prompt and one-turn completions (see `DpoTurn`), or undefined when the rollouts first differ where the model did not write. */
function completionTurns(cv: Spilled, rv: Spilled, turn: DpoTurn): { prompt: DpoMessage[]; chosen: DpoMessage[]; rejected: DpoMessage[] } | undefined {
  const c = [...cv.prompt, ...cv.rest];
  const r = [...rv.prompt, ...rv.rest];
  if (turn === 'final') {
    const lastC = c.findLastIndex((m) => m.role === 'assistant');
    const lastR = r.findLastIndex((m) => m.role === 'assistant');
    return { prompt: c.slice(0, lastC), chosen: [c[lastC]!], rejected: [r[lastR]!] };
  }
  let k = cv.prompt.length;
  while (k < c.length && k < r.length && JSON.stringify(c[k]) === JSON.stringify(r[k])) k++;
  if (c[k]?.role !== 'assistant' || r[k]?.role !== 'assistant') return undefined;
  return { prompt: c.slice(0, k), chosen: [c[k]!], rejected: [r[k]!] };
}

const bySample = (a: Candidate, b: Candidate): number => a.index - b.index || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** Pass 2: per question, up to `maxPairs` pairs of a chosen and a rejected candidate under the same prompt. */
async function writePairs(questions: Questions, spill: Spill, out: JsonlWriter, counts: DpoCounts, maxPairs: number, turn: DpoTurn): Promise<void> {
  for (const [qid, all] of questions) {
    const list = all.filter((c) => c.live);
    if (list.length === 0) continue;
    counts.questions++;
    const hasChosen = list.some((c) => c.chosen);
    const hasRejected = list.some((c) => !c.chosen);
    if (!hasRejected) counts.onlyCorrect++;
    if (!hasChosen) counts.onlyIncorrect++;
    if (!hasChosen || !hasRejected) continue;
    let made = 0;
    // Prompt groups in the order their first candidate came.
    const groups = [...new Set(list.map((c) => c.prompt))];
    for (const key of groups) {
      if (made >= maxPairs) break;
      const chosen = list.filter((c) => c.chosen && c.prompt === key).sort(bySample);
      const rejected = list.filter((c) => !c.chosen && c.prompt === key).sort(bySample);
      for (const [i, j] of pairOrder(chosen.length, rejected.length)) {
        if (made >= maxPairs) break;
        const c = chosen[i]!;
        const r = rejected[j]!;
        const cv = spill.read(c);
        const rv = spill.read(r);
        const turns = completionTurns(cv, rv, turn);
        if (turns === undefined) {
          counts.noModelDivergence++;
          continue;
        }
        const row: DpoRow = {
          id: qid,
          completion: turn,
          chosen_id: c.id,
          rejected_id: r.id,
          ...turns,
          ...(cv.tools === undefined ? {} : { tools: cv.tools }),
          ...(cv.score === undefined ? {} : { chosen_score: cv.score }),
          ...(rv.score === undefined ? {} : { rejected_score: rv.score }),
        };
        const p = out.write(row);
        if (p) await p;
        counts.pairs++;
        made++;
      }
    }
    if (made > 0) counts.paired++;
    else counts.promptMismatch++;
  }
}

export async function exportDpo(rows: AsyncIterable<DatasetRow>, out: JsonlWriter, opts: DpoOptions = {}, keep?: (row: DatasetRow) => boolean): Promise<DpoCounts> {
  const counts: DpoCounts = { in: 0, notSelected: 0, chosen: 0, rejected: 0, notCandidates: 0, superseded: 0, unexportable: 0, questions: 0, paired: 0, onlyCorrect: 0, onlyIncorrect: 0, promptMismatch: 0, noModelDivergence: 0, pairs: 0 };
  const spill = new Spill();
  try {
    const questions = await collectCandidates(rows, spill, counts, opts, keep);
    await writePairs(questions, spill, out, counts, opts.maxPairs ?? 1, opts.turn ?? 'diverge');
  } finally {
    spill.close();
  }
  return counts;
}

/** The line the command prints to stderr. */
export function formatDpoCounts(c: DpoCounts, bad: number): string {
  const parts = [
    `${c.in} rows in`,
    `${c.chosen} chosen and ${c.rejected} rejected candidates in ${c.questions} questions`,
    `${c.pairs} pairs written from ${c.paired} questions`,
  ];
  if (c.onlyCorrect) parts.push(`${c.onlyCorrect} questions only correct`);
  if (c.onlyIncorrect) parts.push(`${c.onlyIncorrect} only incorrect`);
  if (c.promptMismatch) parts.push(`${c.promptMismatch} with no chosen and rejected under the same prompt`);
  if (c.noModelDivergence) parts.push(`${c.noModelDivergence} pairs left out: the rollouts first differ in a tool result`);
  if (c.notCandidates) parts.push(`${c.notCandidates} rows neither (not judged, unjudged, or failed otherwise)`);
  if (c.superseded) parts.push(`${c.superseded} rows superseded by a later state of their sample id`);
  if (c.notSelected) parts.push(`${c.notSelected} not selected (--keep/--drop)`);
  if (c.unexportable) parts.push(`${c.unexportable} not exportable`);
  if (bad) parts.push(`${bad} bad rows skipped`);
  return `export: ${parts.join(', ')}\n`;
}
