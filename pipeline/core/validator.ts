/**
 * Validation of one trajectory: each rule (validation-rules.ts has their ids, severities and
 * descriptions) a small function of the row, its parse and the options, run in a fixed order.
 * Runs inline after each rollout, and offline on any dataset (`trajforge validate`).
 *
 * Every rule is a pure function of the row and the options, so outcomes are deterministic;
 * the one rule that is not (`gold.judge`, an LLM's grading) lives in judge/ and is added
 * to a Validation afterwards. Work per row is linear in its size, except `limits.tokens`,
 * which runs a BPE tokenizer and is only evaluated when a token limit is set. The rules of a
 * whole family are in family-rules.ts; gold matching in gold-match.ts.
 */
import type { ToolCallRecord, Trajectory, Validation, ValidationIssue } from '../../schemas/index.js';
import type { Dialect, Segment } from '../dialects/types.js';
import { isRefusal } from '../refusal.js';
import { clipLine } from '../text.js';
import { isSubAgent } from './family-rules.js';
import { compareGold, DEFAULT_F1_THRESHOLD, goldMessage, type GoldMode } from './gold-match.js';
import { outputDisagrees } from './output-evidence.js';
import { O200K, type TokenCounter } from './tokens/count.js';
import { ruleSeverity, wherePart, type IssuePlace, type RuleId, type RuleSeverity } from './validation-rules.js';

// What the rest of trajforge takes from the validator, wherever it is written.
export { extractBoxed } from '../dialects/mcp-xml.js';
export { isSubAgent, reportView, validateFamily, type FamilyOptions } from './family-rules.js';
export { compareGold, DEFAULT_F1_THRESHOLD, goldMatches, normalizeAnswer, tokenF1, type GoldComparison, type GoldMode } from './gold-match.js';
export { isRuleId, RULES, ruleSeverity, type RuleId, type RuleInfo, type RuleSeverity } from './validation-rules.js';

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

/** The answer the training view holds (the dialect's parse of interleaved_text); undefined when it has none. */
export function answerInText(t: Trajectory, dialect: Dialect): string | undefined {
  for (const seg of dialect.parseTrajectory(t.interleaved_text).segments) if (seg.kind === 'answer') return seg.answer;
  return undefined;
}

const squash = (s: string): string => s.replace(/\s+/g, ' ').trim();

type CallSegment = Extract<Segment, { kind: 'call' }>;
type OutputSegment = Extract<Segment, { kind: 'output' }>;
type AnswerSegment = Extract<Segment, { kind: 'answer' }>;
type Report = (rule: RuleId, message: string, where?: IssuePlace) => void;

/** What every rule of one trajectory reads: the row, the options, its parse, and where issues go. */
interface Check {
  readonly t: Trajectory;
  readonly opts: ValidateOptions;
  readonly report: Report;
  /** Whether a rule is on (a rule that costs something is skipped when it is off). */
  readonly on: (rule: RuleId) => boolean;
  readonly records: readonly ToolCallRecord[];
  readonly calls: readonly CallSegment[];
  readonly outputs: readonly OutputSegment[];
  /** Every snippet id a tool output showed. */
  readonly shown: ReadonlySet<string>;
  /** The first answer in the text. */
  readonly answer: AnswerSegment | undefined;
}

export function validateTrajectory(t: Trajectory, opts: ValidateOptions): Validation {
  const issues: ValidationIssue[] = [];
  const report: Report = (rule, message, where = {}) => {
    const severity = ruleSeverity(rule, opts.severities);
    if (severity === 'off') return;
    issues.push({ rule, severity, message, ...where });
  };
  const on = (rule: RuleId): boolean => ruleSeverity(rule, opts.severities) !== 'off';
  const parsed = pairCallsAndOutputs(opts.dialect.parseTrajectory(t.interleaved_text).segments, report);
  const c: Check = { t, opts, report, on, records: t.tool_calls, ...parsed };
  // In this order: the issues are listed as the rules run.
  checkRecords(c);
  checkAnswer(c);
  checkFinalAnswer(c);
  checkRepeatedCalls(c);
  checkToolLimits(c);
  checkTurnLimit(c);
  checkTokenLimit(c);
  checkReport(c);
  checkReportUsable(c);
  checkGold(c);
  return { passed: !issues.some((i) => i.severity === 'error'), issues };
}

/** `structure.*`: calls and outputs pair up in order, each output right after its call. */
function pairCallsAndOutputs(segments: readonly Segment[], report: Report): Pick<Check, 'calls' | 'outputs' | 'shown' | 'answer'> {
  const calls: CallSegment[] = [];
  const outputs: OutputSegment[] = [];
  let pending: CallSegment | undefined;
  const shown = new Set<string>();
  let answer: AnswerSegment | undefined;
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
  return { calls, outputs, shown, answer };
}

/**
 * `structure.output_count`, `structure.output_mismatch`: records are compared only when the row
 * has some (rows other generators wrote may keep none; the text rules still see calls without
 * outputs and outputs without calls). A record's output_text is compared exactly; then its own
 * evidence (error, result, snippet ids), which still means something when a reader had to take
 * output_text from the text.
 */
function checkRecords({ records, outputs, report }: Check): void {
  if (records.length === 0) return;
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

/** `answer.missing`, `answer.unclosed`, `citations.unresolved`. */
function checkAnswer({ t, opts, answer, shown, report }: Check): void {
  const finalAnswer = answer?.answer ?? t.final_answer;
  if (!answer || finalAnswer.trim() === '') report('answer.missing', 'no non-empty answer');
  else if (!answer.closed) report('answer.unclosed', 'the answer is not closed', { offset: answer.offset });
  if (answer) {
    const unresolved = opts.dialect.citedIds(answer.text).filter((id) => !shown.has(id));
    if (unresolved.length) report('citations.unresolved', `cited ids no tool output showed: ${unresolved.join(', ')}`, { offset: answer.offset });
  }
}

/**
 * `answer.final_mismatch`: the training view and the record's final_answer must tell the same
 * answer. A dialect may keep only part of the final message as its answer (a \boxed{} value), so
 * containment either way is agreement.
 */
function checkFinalAnswer({ t, answer, on, report }: Check): void {
  if (!on('answer.final_mismatch') || !answer || answer.answer === '' || t.final_answer.trim() === '') return;
  const inText = squash(answer.answer);
  const recorded = squash(t.final_answer);
  if (inText.includes(recorded) || recorded.includes(inText)) return;
  report('answer.final_mismatch', `the answer in the text (${inText.length} characters) and final_answer (${recorded.length} characters) differ ${wherePart(inText, recorded)}`, {
    offset: answer.offset,
  });
}

/** `calls.repeated`: the same tool with the same normalised query as an earlier call. */
function checkRepeatedCalls({ calls, records, on, report }: Check): void {
  if (!on('calls.repeated')) return;
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

/** `tools.over_limit`: calls that ran (not those refused) per tool against its limit. */
function checkToolLimits({ opts, records, report }: Check): void {
  if (!opts.limits) return;
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

/** `limits.turns`. Turns count from 0: the first turn past the limit is number maxTurns. */
function checkTurnLimit({ t, opts, report }: Check): void {
  if (opts.maxTurns !== undefined && t.turns > opts.maxTurns) report('limits.turns', `${t.turns} turns; the limit is ${opts.maxTurns}`, { turn: opts.maxTurns });
}

/** `limits.tokens`: the tokenizer is the one costly check, so it runs only when a limit is set and the rule is on. */
function checkTokenLimit({ t, opts, on, report }: Check): void {
  if (opts.maxTokens === undefined || !on('limits.tokens')) return;
  const counter = opts.tokenCounter ?? O200K;
  const over = counter.over(t.interleaved_text, opts.maxTokens);
  if (over !== undefined) {
    report('limits.tokens', `interleaved_text is ${over.count} tokens (${counter.name}); the limit is ${opts.maxTokens}, passed near character ${over.offset}`, { offset: over.offset });
  }
}

/**
 * `agent.report_mismatch`: a sub-agent's answer is its report (no \boxed{} needed), the one its
 * caller was shown, whole. (The wrapper `<answer>` around a report escapes an `<answer` inside
 * it: read back, it is the report's own.)
 */
function checkReport({ t, answer, report }: Check): void {
  const reportInText = answer === undefined ? '' : squash(answer.answer.replace(/&lt;(\/?answer)/gi, '<$1'));
  if (!isSubAgent(t) || !answer || t.final_answer.trim() === '' || reportInText === squash(t.final_answer)) return;
  report('agent.report_mismatch', `the report in the text and final_answer differ ${wherePart(reportInText, squash(t.final_answer))}`, { offset: answer.offset });
}

/**
 * `agent.report_unusable`: a sub-agent's report with no word in it, or a refusal. Its caller
 * would be shown nothing it can use; the agent's `unusable_report` policy says what the caller
 * sees instead (agents.ts).
 */
function checkReportUsable({ t, report }: Check): void {
  if (!isSubAgent(t) || t.status === 'failed') return;
  const why = unusableReport(t.final_answer);
  if (why !== undefined) report('agent.report_unusable', why);
}

/** Why a report is unusable (empty, a refusal), or undefined when it is not. */
export function unusableReport(text: string): string | undefined {
  if (!/[\p{L}\p{N}]/u.test(text)) return `the report is empty${text.trim() === '' ? '' : ` (${JSON.stringify(clipLine(text.trim(), 40))})`}`;
  if (isRefusal(text)) return `the report is a refusal: ${JSON.stringify(clipLine(text.trim(), 80))}`;
  return undefined;
}

/** `gold.mismatch`. A sub-agent answers a subtask: the question's gold answer is not its to match. */
function checkGold({ t, opts, answer, report }: Check): void {
  const mode = opts.goldMatch ?? 'contains';
  if (mode === 'off' || isSubAgent(t) || t.gold_answer === undefined || t.gold_answer.trim() === '' || !answer) return;
  const threshold = opts.f1Threshold ?? DEFAULT_F1_THRESHOLD;
  const c = compareGold(answer.answer, t.gold_answer, mode, threshold);
  if (!c.matched) report('gold.mismatch', goldMessage(c, t.gold_answer, threshold), { offset: answer.offset });
}
