/**
 * Validation rules with stable ids. `error` rejects a trajectory, `warn` keeps and flags it.
 * Runs inline after each rollout, and offline on any dataset (`trajforge validate`).
 *
 * Every rule is a pure function of the row and the options, so outcomes are deterministic;
 * the one rule that is not (`gold.judge`, an LLM's grading) lives in judge.ts and is added
 * to a Validation afterwards. Work per row is linear in its size, except `limits.tokens`,
 * which runs a BPE tokenizer and is only evaluated when a token limit is set.
 */
import type { ToolCallRecord, Trajectory, Validation, ValidationIssue } from '../../schemas/index.js';
import { extractBoxed } from '../dialects/mcp-xml.js';
import type { Dialect, Segment, ToolResultView } from '../dialects/types.js';
import { O200K, TOKEN_ENCODING, type TokenCounter } from './tokens/count.js';
import { clipLine } from '../text.js';

// One definition of "the box" for the dialect that answers in boxes and for gold matching.
export { extractBoxed };

export interface RuleInfo {
  readonly severity: 'error' | 'warn';
  readonly description: string;
}

export const RULES = {
  'answer.missing': { severity: 'error', description: 'the trajectory ends without a non-empty answer' },
  'answer.unclosed': { severity: 'error', description: 'the answer is not closed' },
  'structure.output_without_call': { severity: 'error', description: 'a tool output with no call right before it (one the model wrote itself)' },
  'structure.call_without_output': { severity: 'error', description: 'a call that never got its tool output' },
  'structure.output_count': { severity: 'error', description: 'the number of tool outputs differs from the number of tool call records' },
  'structure.output_mismatch': { severity: 'error', description: "a tool output differs from its record: its output_text, or the record's own evidence (the call failed, or returned other snippet ids)" },
  'citations.unresolved': { severity: 'error', description: 'the answer cites an id that no earlier tool output showed' },
  'tools.over_limit': { severity: 'error', description: 'a tool ran more times than its per-trajectory limit' },
  'gold.mismatch': { severity: 'error', description: 'the final answer does not match the gold answer' },
  'answer.final_mismatch': { severity: 'warn', description: "the answer in interleaved_text and the record's final_answer differ (neither holds the other)" },
  'calls.repeated': { severity: 'warn', description: 'a call repeats an earlier one: same tool, same normalised query' },
  'limits.turns': { severity: 'error', description: 'more model turns than the turn limit' },
  'limits.tokens': { severity: 'error', description: `interleaved_text has more tokens (${TOKEN_ENCODING}, or the tokenizer given) than the token limit` },
  'gold.judge': { severity: 'error', description: 'an LLM judge graded the answer INCORRECT (NOT_ATTEMPTED or an unreadable grading: warn at most)' },
  'agent.report_mismatch': { severity: 'error', description: "a sub-agent's answer in interleaved_text is not its final_answer, the report its caller was given" },
  'family.report_mismatch': { severity: 'error', description: "a call to a sub-agent whose tool output is not the dialect's rendering of that sub-agent's report (or, when it failed, not an error)" },
  'family.link': { severity: 'error', description: 'a call to a sub-agent whose session is not in the family or does not point back to the call; or a sub-agent session that no call of its parent started' },
  'family.duplicate': { severity: 'error', description: 'a session (id and attempt) that a dataset holds twice' },
} as const satisfies Record<string, RuleInfo>;

export type RuleId = keyof typeof RULES;
export type RuleSeverity = 'error' | 'warn' | 'off';

export function isRuleId(id: string): id is RuleId {
  return Object.hasOwn(RULES, id);
}

/** The severity a rule reports with under `severities` (its default when not overridden). */
export function ruleSeverity(rule: RuleId, severities?: Readonly<Record<string, RuleSeverity>>): RuleSeverity {
  return severities?.[rule] ?? RULES[rule].severity;
}

/**
 * How a gold answer is compared (all on SQuAD-normalised tokens):
 * - `exact`: the whole answer equals the gold;
 * - `contains`: the gold's tokens appear as a contiguous run in the answer;
 * - `boxed`: when the answer holds `\boxed{…}`, the last box's content must equal the gold;
 *   an answer without a box is compared as `contains`;
 * - `f1`: token F1 (SQuAD) between answer and gold ≥ `f1Threshold`, or `contains`
 *   (a long correct answer has a low F1 only because it says more).
 */
export type GoldMode = 'exact' | 'contains' | 'boxed' | 'f1';

export const DEFAULT_F1_THRESHOLD = 0.8;

export interface ValidateOptions {
  readonly dialect: Dialect;
  /** Calls per tool name per trajectory (`tools.over_limit`). */
  readonly limits?: Readonly<Record<string, number>> | undefined;
  readonly goldMatch?: GoldMode | 'off' | undefined;
  /** For `goldMatch: 'f1'`; default 0.8. */
  readonly f1Threshold?: number | undefined;
  /** `limits.turns`: more turns than this is an issue. Unset: not checked. */
  readonly maxTurns?: number | undefined;
  /** `limits.tokens`: more tokens in interleaved_text than this is an issue. Unset: not checked (and no tokenizer runs). */
  readonly maxTokens?: number | undefined;
  /** What counts the tokens of `limits.tokens`; default o200k_base. */
  readonly tokenCounter?: TokenCounter | undefined;
  /** Rule id → severity override; `off` disables a rule. */
  readonly severities?: Readonly<Record<string, RuleSeverity>> | undefined;
}

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= '0' && c <= '9';

/**
 * SQuAD-style: NFKC, lower case, tags, punctuation and articles removed, whitespace collapsed.
 * One departure: a decimal point between digits is kept, or "3.5" would become "35" and
 * match a different version number (the bundled question bank is full of them).
 */
export function normalizeAnswer(s: string): string[] {
  return s
    .normalize('NFKC')
    .toLowerCase()
    .replace(/<[^<>]{0,200}>/g, ' ')
    .replace(/[\p{P}\p{S}]/gu, (ch: string, at: number, all: string) => (ch === '.' && isDigit(all[at - 1]) && isDigit(all[at + 1]) ? '.' : ''))
    .split(/\s+/)
    .filter((w) => w !== '' && w !== 'a' && w !== 'an' && w !== 'the');
}

function containsRun(a: readonly string[], g: readonly string[]): boolean {
  outer: for (let i = 0; i + g.length <= a.length; i++) {
    for (let j = 0; j < g.length; j++) if (a[i + j] !== g[j]) continue outer;
    return true;
  }
  return false;
}

/** SQuAD token F1 between two normalised token lists (bag of tokens, counted with multiplicity). */
export function tokenF1(answer: readonly string[], gold: readonly string[]): number {
  if (answer.length === 0 || gold.length === 0) return answer.length === gold.length ? 1 : 0;
  const counts = new Map<string, number>();
  for (const w of gold) counts.set(w, (counts.get(w) ?? 0) + 1);
  let common = 0;
  for (const w of answer) {
    const c = counts.get(w);
    if (c) {
      common++;
      counts.set(w, c - 1);
    }
  }
  if (common === 0) return 0;
  const precision = common / answer.length;
  const recall = common / gold.length;
  return (2 * precision * recall) / (precision + recall);
}

/** How an answer compared with a gold answer, with what a message needs to say why. */
export interface GoldComparison {
  readonly matched: boolean;
  readonly mode: GoldMode;
  /** `boxed`: the box's content, when the answer had one. */
  readonly boxed?: string | undefined;
  /** `f1`: the score. */
  readonly f1?: number | undefined;
}

export function compareGold(answer: string, gold: string, mode: GoldMode, f1Threshold = DEFAULT_F1_THRESHOLD): GoldComparison {
  const g = normalizeAnswer(gold);
  if (mode === 'boxed') {
    const boxed = extractBoxed(answer);
    if (boxed !== undefined) return { matched: g.length === 0 || normalizeAnswer(boxed).join(' ') === g.join(' '), mode, boxed };
  }
  const a = normalizeAnswer(answer);
  if (g.length === 0 || a.join(' ') === g.join(' ')) return { matched: true, mode };
  if (mode === 'exact') return { matched: false, mode };
  if (mode === 'f1') {
    const f1 = tokenF1(a, g);
    return { matched: f1 >= f1Threshold || containsRun(a, g), mode, f1 };
  }
  return { matched: containsRun(a, g), mode };
}

/** Normalised exact match, the gold's tokens as a contiguous run inside the answer, a box's content, or token F1. */
export function goldMatches(answer: string, gold: string, mode: GoldMode, f1Threshold = DEFAULT_F1_THRESHOLD): boolean {
  return compareGold(answer, gold, mode, f1Threshold).matched;
}

function goldMessage(c: GoldComparison, gold: string, f1Threshold: number): string {
  switch (c.mode) {
    case 'exact':
      return `the answer does not equal the gold answer "${gold}"`;
    case 'contains':
      return `the answer does not contain the gold answer "${gold}"`;
    case 'boxed':
      return c.boxed === undefined
        ? `the answer has no \\boxed{} and does not contain the gold answer "${gold}"`
        : `the answer's \\boxed{${clipLine(c.boxed, 80)}} does not equal the gold answer "${gold}"`;
    case 'f1':
      return `token F1 ${(c.f1 ?? 0).toFixed(2)} < ${f1Threshold} against the gold answer "${gold}", which it does not contain either`;
  }
}

/**
 * A query as a search engine sees it: NFKC, lower case, punctuation gone, each word once, in
 * sorted order. "NLR PLR prognosis" and "prognosis: PLR, NLR" ask the same thing.
 */
export function normalizeQuery(q: string): string {
  const words = q
    .normalize('NFKC')
    .toLowerCase()
    .replace(/[\p{P}\p{S}]+/gu, ' ')
    .split(/\s+/)
    .filter((w) => w !== '');
  return [...new Set(words)].sort().join(' ');
}

const squash = (s: string): string => s.replace(/\s+/g, ' ').trim();

/** The text inside a tool output's tags. */
function outputBody(text: string): string {
  return text
    .replace(/^\s*<[^<>]{0,200}>/, '')
    .replace(/<\/[^<>]{0,60}>\s*$/, '')
    .trim();
}

/** The error a tool output shows the model, when it is one ("Error: …", as trajforge and the DR Tulu generators render failures). */
function outputError(text: string): string | undefined {
  const body = outputBody(text);
  return /^error\b/i.test(body) ? body : undefined;
}

/** A record's error: its `error` field, or an `error` string in its raw result (rows other generators wrote). */
function recordError(rec: ToolCallRecord): string | undefined {
  if (rec.error !== undefined && rec.error !== '') return rec.error;
  const r = rec.result as { error?: unknown } | null | undefined;
  return r !== null && typeof r === 'object' && typeof r.error === 'string' && r.error !== '' ? r.error : undefined;
}

/** Whether the raw result holds `text` (as a JSON string would spell it): a tool may return "Error: …" as an ordinary result. */
function resultHolds(result: unknown, text: string): boolean {
  const probe = JSON.stringify(text.split('\n', 1)[0]!.slice(0, 60)).slice(1, -1);
  if (probe === '') return true;
  if (typeof result === 'string') return result.includes(text.split('\n', 1)[0]!.slice(0, 60));
  try {
    return (JSON.stringify(result) ?? '').includes(probe);
  } catch {
    return true; // a result that cannot be serialised cannot be held against the output
  }
}

/**
 * A tool output against its record's own evidence: whether the call failed (`error`, or an
 * `error` in the raw result), and, when the record has no rendered `output_text`, which
 * snippet ids it returned. This is what catches rows other generators wrote, whose readers
 * can only take `output_text` from the text itself: an output the model invented next to a
 * call that timed out, or an error shown to the model for a call that returned a page.
 */
function outputDisagrees(out: Extract<Segment, { kind: 'output' }>, rec: ToolCallRecord, i: number): string | undefined {
  const shownError = outputError(out.text);
  const recError = recordError(rec);
  const name = `record ${i} (${rec.tool_name})`;
  if (shownError === undefined && recError !== undefined) {
    const what = out.snippetIds.length ? `${out.snippetIds.length} snippets (${clipLine(out.snippetIds.join(', '), 60)})` : `"${clipLine(outputBody(out.text), 60)}"`;
    return `tool output ${i} shows ${what} but ${name} failed: "${clipLine(recError, 80)}"`;
  }
  if (shownError !== undefined && recError === undefined && !resultHolds(rec.result, shownError)) {
    return `tool output ${i} shows the model an error ("${clipLine(shownError, 80)}") but ${name} holds a result and no error`;
  }
  if (rec.output_text === '' && rec.snippet_ids.length > 0) {
    const shown = new Set(out.snippetIds);
    const returned = new Set(rec.snippet_ids);
    const invented = [...shown].filter((id) => !returned.has(id));
    const dropped = [...returned].filter((id) => !shown.has(id));
    if (invented.length || dropped.length) {
      const parts = [];
      if (invented.length) parts.push(`shows ids ${name} did not return: ${clipLine(invented.join(', '), 80)}`);
      if (dropped.length) parts.push(`leaves out ids it returned: ${clipLine(dropped.join(', '), 80)}`);
      return `tool output ${i} ${parts.join('; ')}`;
    }
  }
  return undefined;
}

/** Where two strings first differ. */
function firstDifference(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

/** The answer the training view holds (the dialect's parse of interleaved_text); undefined when it has none. */
export function answerInText(t: Trajectory, dialect: Dialect): string | undefined {
  for (const seg of dialect.parseTrajectory(t.interleaved_text).segments) if (seg.kind === 'answer') return seg.answer;
  return undefined;
}

/**
 * A sub-agent's report as its caller's tool result: plain text, one snippet (`{call_id}-0`)
 * where the dialect shows snippets, so a tulu parent can cite it. The family rule renders it
 * again with the parent's dialect and compares.
 */
export function reportView(report: string, callId: string): ToolResultView {
  return { text: report, textId: `${callId}-0` };
}

/** A session of a family: a record written by a run with `agents` (its `parent_id` names the session that called it). */
export function isSubAgent(t: Trajectory): boolean {
  return t.parent_id !== undefined;
}

export interface FamilyOptions {
  /** The dialect a record is written in. */
  readonly dialectOf: (name: Trajectory['dialect']) => Dialect;
  readonly severities?: Readonly<Record<string, RuleSeverity>> | undefined;
  /**
   * Offline, over a dataset that may hold only accepted sessions: a sub-agent session that
   * failed on its own is in failures.jsonl while its accepted caller is not, and the call shows
   * the error the caller saw. With this set, such a call (one with `error`) whose session is
   * absent is no issue. Inline the family is whole, and it is.
   */
  readonly failedChildrenElsewhere?: boolean | undefined;
}

/**
 * The rules that need a whole family (a root session and every session below it): each call
 * with a `child_id` has that session in the family, pointing back at the call (`parent_id`,
 * `parent_call`), and its output is the parent dialect's rendering of the child's report (an
 * error, when the child failed on its own); each sub-agent session was started by a call of its
 * parent. Issues by the id of the record they are about. Inline when a family is assembled;
 * offline over a run's records grouped by `family_id`.
 */
export function validateFamily(records: readonly Trajectory[], opts: FamilyOptions): Map<string, ValidationIssue[]> {
  const out = new Map<string, ValidationIssue[]>();
  const report = (id: string, rule: RuleId, message: string, where: Omit<ValidationIssue, 'rule' | 'severity' | 'message'> = {}): void => {
    const severity = ruleSeverity(rule, opts.severities);
    if (severity === 'off') return;
    out.set(id, [...(out.get(id) ?? []), { rule, severity, message, ...where }]);
  };
  const byId = new Map(records.map((r) => [r.id, r]));
  for (const parent of records) {
    parent.tool_calls.forEach((call, i) => {
      if (call.child_id === undefined) return;
      const where = { call_index: i, turn: call.turn };
      const child = byId.get(call.child_id);
      if (child === undefined && call.error !== undefined && opts.failedChildrenElsewhere) return;
      if (child === undefined) return report(parent.id, 'family.link', `call ${i} (${call.tool_name}) started session ${call.child_id}, which is not in the family`, where);
      if (child.parent_id !== parent.id || child.parent_call !== i) {
        return report(parent.id, 'family.link', `call ${i} (${call.tool_name}) started session ${child.id}, which points at ${child.parent_id ?? 'no parent'} call ${child.parent_call ?? '?'}`, where);
      }
      // A child failed only because its family did (parent_failed) gave its report all the same.
      if (child.status === 'failed' && child.reason !== 'parent_failed') {
        if (call.error === undefined) report(parent.id, 'family.report_mismatch', `call ${i} (${call.tool_name}) shows a result, but its session ${child.id} failed (${child.reason})`, where);
        return;
      }
      const expected = opts.dialectOf(parent.dialect).renderToolOutput(reportView(child.final_answer, call.call_id)).text;
      if (call.output_text !== expected) {
        const at = firstDifference(call.output_text, expected);
        report(parent.id, 'family.report_mismatch', `call ${i} (${call.tool_name}): its tool output differs from session ${child.id}'s report from character ${at} on: "${clipLine(call.output_text.slice(at), 50)}" vs "${clipLine(expected.slice(at), 50)}"`, where);
      }
    });
  }
  for (const child of records) {
    if (!isSubAgent(child)) continue;
    const parent = byId.get(child.parent_id!);
    const call = parent?.tool_calls[child.parent_call ?? -1];
    if (parent === undefined || call?.child_id !== child.id) report(child.id, 'family.link', `no call of ${child.parent_id} started this session (parent_call ${child.parent_call ?? '?'})`);
  }
  return out;
}

export function validateTrajectory(t: Trajectory, opts: ValidateOptions): Validation {
  const issues: ValidationIssue[] = [];
  const report = (rule: RuleId, message: string, where: Omit<ValidationIssue, 'rule' | 'severity' | 'message'> = {}): void => {
    const severity = ruleSeverity(rule, opts.severities);
    if (severity === 'off') return;
    issues.push({ rule, severity, message, ...where });
  };
  const on = (rule: RuleId): boolean => ruleSeverity(rule, opts.severities) !== 'off';

  const parsed = opts.dialect.parseTrajectory(t.interleaved_text);
  const segments = parsed.segments;
  const records = t.tool_calls;

  // Calls and outputs pair up in order: each output right after its call.
  const calls: Extract<Segment, { kind: 'call' }>[] = [];
  const outputs: Extract<Segment, { kind: 'output' }>[] = [];
  let pending: Extract<Segment, { kind: 'call' }> | undefined;
  const shown = new Set<string>();
  let answer: Extract<Segment, { kind: 'answer' }> | undefined;
  for (const seg of segments) {
    if (seg.kind === 'call') {
      if (pending) report('structure.call_without_output', `call ${calls.length - 1} (${pending.call.toolName}) has no tool output`, { call_index: calls.length - 1, offset: pending.offset });
      calls.push(seg);
      pending = seg;
    } else if (seg.kind === 'output') {
      if (!pending) report('structure.output_without_call', `tool output ${outputs.length} has no call before it`, { offset: seg.offset });
      outputs.push(seg);
      pending = undefined;
      for (const id of seg.snippetIds) shown.add(id);
    } else if (seg.kind === 'answer') {
      answer ??= seg;
    }
  }
  if (pending) report('structure.call_without_output', `call ${calls.length - 1} (${pending.call.toolName}) has no tool output`, { call_index: calls.length - 1, offset: pending.offset });

  // Records are compared only when the row has some: rows other generators wrote may keep
  // none (the text rules above still see calls without outputs and outputs without calls).
  // A record's output_text is compared exactly; then its own evidence (error, result,
  // snippet ids), which still means something when a reader had to take output_text from
  // the text.
  if (records.length > 0) {
    if (outputs.length !== records.length) {
      // The place: the first output with no record, or the first record with no output.
      const extra = outputs[records.length];
      const missing = records[outputs.length];
      const where = extra !== undefined ? { offset: extra.offset } : missing !== undefined ? { call_index: outputs.length, turn: missing.turn } : {};
      report('structure.output_count', `${outputs.length} tool outputs in the text, ${records.length} tool call records`, where);
    }
    const n = Math.min(outputs.length, records.length);
    for (let i = 0; i < n; i++) {
      const rec = records[i]!;
      const out = outputs[i]!;
      if (rec.output_text !== '' && out.text !== rec.output_text) {
        report('structure.output_mismatch', `tool output ${i} differs from record ${rec.call_id}'s output_text`, { call_index: i, turn: rec.turn, offset: out.offset });
        continue;
      }
      const why = outputDisagrees(out, rec, i);
      if (why !== undefined) report('structure.output_mismatch', why, { call_index: i, turn: rec.turn, offset: out.offset });
    }
  }

  const finalAnswer = answer?.answer ?? t.final_answer;
  if (!answer || finalAnswer.trim() === '') report('answer.missing', 'no non-empty answer');
  else if (!answer.closed) report('answer.unclosed', 'the answer is not closed', { offset: answer.offset });

  if (answer) {
    const unresolved = opts.dialect.citedIds(answer.text).filter((id) => !shown.has(id));
    if (unresolved.length) report('citations.unresolved', `cited ids no tool output showed: ${unresolved.join(', ')}`, { offset: answer.offset });
  }

  // The training view and the record's final_answer must tell the same answer. A dialect may
  // keep only part of the final message as its answer (a \boxed{} value), so containment
  // either way is agreement.
  if (on('answer.final_mismatch') && answer && answer.answer !== '' && t.final_answer.trim() !== '') {
    const inText = squash(answer.answer);
    const recorded = squash(t.final_answer);
    if (!inText.includes(recorded) && !recorded.includes(inText)) {
      const at = firstDifference(inText, recorded);
      report(
        'answer.final_mismatch',
        `the answer in the text (${inText.length} characters) and final_answer (${recorded.length} characters) differ from character ${at} on: "${clipLine(inText.slice(at), 50)}" vs "${clipLine(recorded.slice(at), 50)}"`,
        { offset: answer.offset },
      );
    }
  }

  if (on('calls.repeated')) {
    const seen = new Map<string, number>();
    const aligned = calls.length === records.length;
    for (let i = 0; i < calls.length; i++) {
      const c = calls[i]!;
      const key = `${c.call.toolName}\u0000${normalizeQuery(c.call.query)}`;
      const first = seen.get(key);
      if (first === undefined) {
        seen.set(key, i);
        continue;
      }
      const turn = aligned ? records[i]!.turn : undefined;
      report('calls.repeated', `call ${i} (${c.call.toolName}) repeats call ${first}'s query "${clipLine(c.call.query, 80)}"`, {
        call_index: i,
        offset: c.offset,
        ...(turn === undefined ? {} : { turn }),
      });
    }
  }

  if (opts.limits) {
    const ran = new Map<string, number>();
    // The place: the record of the first call past the limit.
    const firstOver = new Map<string, number>();
    for (let i = 0; i < records.length; i++) {
      const rec = records[i]!;
      if (rec.skipped) continue;
      const count = (ran.get(rec.tool_name) ?? 0) + 1;
      ran.set(rec.tool_name, count);
      const limit = opts.limits[rec.tool_name];
      if (limit !== undefined && count === limit + 1) firstOver.set(rec.tool_name, i);
    }
    for (const [tool, count] of ran) {
      const limit = opts.limits[tool];
      if (limit === undefined || count <= limit) continue;
      const i = firstOver.get(tool)!;
      report('tools.over_limit', `${tool} ran ${count} times; the limit is ${limit}`, { call_index: i, turn: records[i]!.turn });
    }
  }

  if (opts.maxTurns !== undefined && t.turns > opts.maxTurns) {
    // Turns count from 0: the first turn past the limit is number maxTurns.
    report('limits.turns', `${t.turns} turns; the limit is ${opts.maxTurns}`, { turn: opts.maxTurns });
  }

  // The tokenizer is the one costly check: it runs only when a limit is set and the rule is on.
  if (opts.maxTokens !== undefined && on('limits.tokens')) {
    const counter = opts.tokenCounter ?? O200K;
    const over = counter.over(t.interleaved_text, opts.maxTokens);
    if (over !== undefined) {
      report('limits.tokens', `interleaved_text is ${over.count} tokens (${counter.name}); the limit is ${opts.maxTokens}, passed near character ${over.offset}`, { offset: over.offset });
    }
  }

  // A sub-agent's answer is its report (no \boxed{} needed): the one its caller was shown, whole.
  // (The wrapper `<answer>` around a report escapes an `<answer` inside it: read back, it is the report's own.)
  const reportInText = answer === undefined ? '' : squash(answer.answer.replace(/&lt;(\/?answer)/gi, '<$1'));
  if (isSubAgent(t) && answer && t.final_answer.trim() !== '' && reportInText !== squash(t.final_answer)) {
    const inText = reportInText;
    const recorded = squash(t.final_answer);
    const at = firstDifference(inText, recorded);
    report('agent.report_mismatch', `the report in the text and final_answer differ from character ${at} on: "${clipLine(inText.slice(at), 50)}" vs "${clipLine(recorded.slice(at), 50)}"`, { offset: answer.offset });
  }

  const mode = opts.goldMatch ?? 'contains';
  // A sub-agent answers a subtask: the question's gold answer is not its to match.
  if (mode !== 'off' && !isSubAgent(t) && t.gold_answer !== undefined && t.gold_answer.trim() !== '' && answer) {
    const threshold = opts.f1Threshold ?? DEFAULT_F1_THRESHOLD;
    const c = compareGold(finalAnswer, t.gold_answer, mode, threshold);
    if (!c.matched) report('gold.mismatch', goldMessage(c, t.gold_answer, threshold), { offset: answer.offset });
  }

  return { passed: !issues.some((i) => i.severity === 'error'), issues };
}
