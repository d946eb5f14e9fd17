/**
 * What the report embeds per trajectory: one line of the `rows` block,
 * `SUMMARY <tab> DETAIL`, both JSON.
 *
 * - SUMMARY is what the list, the search, the filters, the family tree and the grouping by
 *   question need, parsed for every row when the page opens: `[id, status, reason, rules,
 *   question, tool_calls, turns, tokens, repairs, rollbacks, agent, parent, parent_call,
 *   question_id, verdict, rubric_score, sample_index]` (an array: 50,000 rows of key names
 *   would be noise; a string the record lacks is '', a number null).
 * - DETAIL is what the viewer needs, parsed only when a trajectory is opened: the segments
 *   of the interleaved text with their kinds, and the answer, issues, repairs and rollbacks.
 *   Tool outputs longer than `outputChars` (and any other segment longer than `textChars`)
 *   are cut, and the viewer says by how much: the outputs are most of a trajectory's bytes
 *   and the least of what a person reads, and the dataset keeps them whole. A session of a
 *   family (runs with agents) adds `fam` (its agent, parent, the parent's call, depth, family)
 *   and `ch` (per call, in order, the id of the sub-agent session it started, or null), so the
 *   viewer links a call to its session and the session back to the call. Per call, `cl`
 *   holds what the viewer shows beside it (tool, arguments, latency, cached, error), and per
 *   segment `tu` the turn it belongs to, so repairs and rollbacks sit at their turn. A repair
 *   whose record kept the completion before it (`before`) carries that text and whether it
 *   was cut; the text after is the turn's segments, which the viewer already holds.
 *
 * JSON never holds a raw tab or newline, so the tab and the line are unambiguous; every `<`
 * is written `\u003c` (still JSON) so no text can end the script element early, whether it
 * is `</script>` or the `<!--`/`<script` pair that changes how HTML reads a script.
 */
import type { Trajectory } from '../../../schemas/index.js';
import { getDialect } from '../../dialects/index.js';
import type { Segment } from '../../dialects/types.js';

export interface RowOptions {
  /** Characters of a tool output kept in the viewer. */
  readonly outputChars: number;
  /** Characters of any other segment kept in the viewer. */
  readonly textChars: number;
}

export const DEFAULT_ROW_OPTIONS: RowOptions = { outputChars: 1500, textChars: 20_000 };

/** Segment kinds as the page names them. */
const KIND: Record<Segment['kind'], string> = { text: 't', think: 'k', call: 'c', output: 'o', answer: 'a' };

type Obj = Record<string, unknown>;
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string => (typeof v === 'string' ? v : '');
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** JSON that is safe inside a script element. */
export function scriptJson(v: unknown): string {
  return JSON.stringify(v).replace(/</g, '\\u003c');
}

function rulesOf(t: Partial<Trajectory>): string[] {
  const rules = new Set<string>();
  for (const i of arr(t.validation?.issues)) {
    const rule = (i as Obj | null)?.rule;
    if (typeof rule === 'string') rules.add(rule);
  }
  return [...rules];
}

export function summaryOf(t: Partial<Trajectory>): unknown[] {
  const calls = num(t.total_tool_calls) ?? arr(t.tool_calls).length;
  const j = (t.judgement ?? {}) as Obj;
  return [
    str(t.id), str(t.status) || 'unknown', str(t.reason), rulesOf(t), str(t.question), calls, num(t.turns), num(t.usage?.total_tokens), arr(t.repairs).length, arr(t.rollbacks).length, str(t.agent),
    str(t.parent_id), num(t.parent_call), str(t.question_id), str(j.verdict), num(j.rubric_score), num((t.sampling as Obj | undefined)?.index),
  ];
}

/** The segments to show: the dialect's parse, or the whole text as one when there is no parser. */
function segmentsOf(t: Partial<Trajectory>): readonly { kind: Segment['kind']; text: string }[] {
  const text = str(t.interleaved_text);
  try {
    return getDialect(t.dialect ?? 'tulu').parseTrajectory(text).segments;
  } catch {
    return text === '' ? [] : [{ kind: 'text', text }];
  }
}

/** `text` cut to `limit` characters: `[text]`, or `[kept, characters cut]`. */
function cut(text: string, limit: number): [string, number?] {
  return text.length > limit ? [text.slice(0, limit), text.length - limit] : [text];
}

/**
 * The turn of each segment: a call's own (`tool_calls[i].turn`), its output's the same, the
 * text before a call the call's, and what follows the last call (the answer) the turn after it,
 * or the record's last turn. A record whose calls do not match its text gets none.
 */
function turnsOf(kinds: readonly string[], calls: readonly unknown[], turns: number | null): (number | null)[] {
  const out: (number | null)[] = [];
  let pending = 0;
  let last: number | null = null;
  let callNo = 0;
  for (const k of kinds) {
    if (k === 'c') {
      const turn = num((calls[callNo++] as Obj | null)?.turn);
      for (; pending > 0; pending--) out.push(turn);
      out.push(turn);
      last = turn;
    } else if (k === 'o' && last !== null) {
      for (; pending > 0; pending--) out.push(last);
      out.push(last);
    } else pending++;
  }
  if (callNo !== calls.length) return kinds.map(() => null);
  const tail = last === null ? (turns === null ? 0 : Math.max(0, turns - 1)) : Math.max(last + 1, turns === null ? 0 : turns - 1);
  for (; pending > 0; pending--) out.push(tail);
  return out;
}

/** Per call: `[tool, arguments as JSON, latency ms, cached, error, skipped, truncated]`. */
function callsOf(calls: readonly unknown[], opts: RowOptions): unknown[] {
  return calls.map((c) => {
    const x = (c ?? {}) as Obj;
    let args: string;
    try {
      args = JSON.stringify(x.arguments ?? x.parameters ?? {}) ?? '';
    } catch {
      args = '';
    }
    return [str(x.tool_name), ...cut(args, opts.textChars).slice(0, 1), num(x.duration_ms), x.cached === true, str(x.error), x.skipped === true, x.truncated === true];
  });
}

/** The judge's verdict, step, score, rationale and rubric criteria `[title, weight, score]`. */
function judgementOf(j: unknown, opts: RowOptions): Obj | undefined {
  if (j === null || typeof j !== 'object') return undefined;
  const x = j as Obj;
  const criteria = arr(x.criteria).map((c) => {
    const y = (c ?? {}) as Obj;
    return [str(y.title) || str(y.criterion), num(y.weight), num(y.score)];
  });
  return { v: str(x.verdict), st: str(x.step), sc: num(x.rubric_score), f1: num(x.f1), r: cut(str(x.reasoning), opts.textChars)[0], e: str(x.error), cr: criteria };
}

export function detailOf(t: Partial<Trajectory>, opts: RowOptions): Obj {
  const seg: [string, string, number?][] = [];
  for (const s of segmentsOf(t)) {
    // The newlines that join turns and outputs carry nothing to read.
    if (s.kind === 'text' && s.text.trim() === '') continue;
    seg.push([KIND[s.kind], ...cut(s.text, s.kind === 'output' ? opts.outputChars : opts.textChars)]);
  }
  const issues = arr(t.validation?.issues).map((i) => {
    const x = (i ?? {}) as Obj;
    return [str(x.rule), str(x.severity), str(x.message)];
  });
  const repairs = arr(t.repairs).map((r) => {
    const x = (r ?? {}) as Obj;
    const base = [num(x.turn), str(x.kind), str(x.detail)];
    if (typeof x.before !== 'string') return base;
    const [before, more] = cut(x.before, opts.textChars);
    return [...base, before, x.before_truncated === true || more !== undefined];
  });
  const rollbacks = arr(t.rollbacks).map((r) => {
    const x = (r ?? {}) as Obj;
    return [num(x.turn), str(x.condition), str(x.detail), cut(str(x.discarded), opts.textChars)[0]];
  });
  const calls = arr(t.tool_calls);
  const d: Obj = {
    m: str(t.model), dl: str(t.dialect), at: num(t.attempt), fa: str(t.final_answer), seg, iss: issues, rep: repairs, rb: rollbacks,
    tu: turnsOf(seg.map((s) => s[0]), calls, num(t.turns)), cl: callsOf(calls, opts), ms: num(t.timing?.duration_ms),
  };
  const j = judgementOf(t.judgement, opts);
  if (j) d.j = j;
  if (typeof t.gold_answer === 'string') d.g = t.gold_answer;
  if (typeof t.error === 'string' && t.error !== '') d.e = t.error;
  const cited = arr(t.cited_ids).length;
  if (cited) d.ci = [cited, arr(t.unresolved_cited_ids).length];
  if (typeof t.agent === 'string' || typeof t.parent_id === 'string' || typeof t.family_id === 'string') {
    d.fam = { ag: str(t.agent), p: typeof t.parent_id === 'string' ? t.parent_id : null, pc: num(t.parent_call), dp: num(t.depth), f: str(t.family_id) };
  }
  if (calls.some((c) => typeof (c as Obj | null)?.child_id === 'string')) d.ch = calls.map((c) => (typeof (c as Obj | null)?.child_id === 'string' ? (c as Obj).child_id : null));
  return d;
}

/** One line of the `rows` block. */
export function rowLine(t: Partial<Trajectory>, opts: RowOptions): string {
  return `${scriptJson(summaryOf(t))}\t${scriptJson(detailOf(t, opts))}`;
}
