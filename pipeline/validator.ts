/**
 * Validation rules with stable ids. `error` rejects a trajectory, `warn` keeps and flags it.
 * Runs inline after each rollout, and offline on any dataset.
 */
import type { Trajectory, Validation, ValidationIssue } from '../schemas/index.js';
import type { Dialect, Segment } from './dialects/types.js';

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
  'structure.output_mismatch': { severity: 'error', description: "a tool output differs from its record's output_text" },
  'citations.unresolved': { severity: 'error', description: 'the answer cites an id that no earlier tool output showed' },
  'tools.over_limit': { severity: 'error', description: 'a tool ran more times than its per-trajectory limit' },
  'gold.mismatch': { severity: 'error', description: 'the final answer does not match the gold answer' },
} as const satisfies Record<string, RuleInfo>;

export type RuleId = keyof typeof RULES;

export interface ValidateOptions {
  readonly dialect: Dialect;
  readonly limits?: Readonly<Record<string, number>> | undefined;
  readonly goldMatch?: 'exact' | 'contains' | 'off' | undefined;
  /** Rule id → severity override; `off` disables a rule. */
  readonly severities?: Readonly<Record<string, 'error' | 'warn' | 'off'>> | undefined;
}

/** SQuAD-style: NFKC, lower case, tags, punctuation and articles removed, whitespace collapsed. */
export function normalizeAnswer(s: string): string[] {
  return s
    .normalize('NFKC')
    .toLowerCase()
    .replace(/<[^<>]{0,200}>/g, ' ')
    .replace(/[\p{P}\p{S}]/gu, '')
    .split(/\s+/)
    .filter((w) => w !== '' && w !== 'a' && w !== 'an' && w !== 'the');
}

/** Normalised exact match, or the gold's tokens as a contiguous run inside the answer. */
export function goldMatches(answer: string, gold: string, mode: 'exact' | 'contains'): boolean {
  const a = normalizeAnswer(answer);
  const g = normalizeAnswer(gold);
  if (g.length === 0) return true;
  if (a.join(' ') === g.join(' ')) return true;
  if (mode === 'exact') return false;
  outer: for (let i = 0; i + g.length <= a.length; i++) {
    for (let j = 0; j < g.length; j++) if (a[i + j] !== g[j]) continue outer;
    return true;
  }
  return false;
}

export function validateTrajectory(t: Trajectory, opts: ValidateOptions): Validation {
  const issues: ValidationIssue[] = [];
  const report = (rule: RuleId, message: string, where: Omit<ValidationIssue, 'rule' | 'severity' | 'message'> = {}): void => {
    const severity = opts.severities?.[rule] ?? RULES[rule].severity;
    if (severity === 'off') return;
    issues.push({ rule, severity, message, ...where });
  };

  const parsed = opts.dialect.parseTrajectory(t.interleaved_text);
  const segments = parsed.segments;

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

  if (outputs.length !== t.tool_calls.length) {
    report('structure.output_count', `${outputs.length} tool outputs in the text, ${t.tool_calls.length} tool call records`);
  }
  const n = Math.min(outputs.length, t.tool_calls.length);
  for (let i = 0; i < n; i++) {
    const rec = t.tool_calls[i]!;
    if (outputs[i]!.text !== rec.output_text) {
      report('structure.output_mismatch', `tool output ${i} differs from record ${rec.call_id}'s output_text`, { call_index: i, turn: rec.turn, offset: outputs[i]!.offset });
    }
  }

  const finalAnswer = answer?.answer ?? t.final_answer;
  if (!answer || finalAnswer.trim() === '') report('answer.missing', 'no non-empty answer');
  else if (!answer.closed) report('answer.unclosed', 'the answer is not closed', { offset: answer.offset });

  if (answer) {
    const unresolved = opts.dialect.citedIds(answer.text).filter((id) => !shown.has(id));
    if (unresolved.length) report('citations.unresolved', `cited ids no tool output showed: ${unresolved.join(', ')}`, { offset: answer.offset });
  }

  if (opts.limits) {
    const ran = new Map<string, number>();
    for (const rec of t.tool_calls) if (!rec.skipped) ran.set(rec.tool_name, (ran.get(rec.tool_name) ?? 0) + 1);
    for (const [tool, count] of ran) {
      const limit = opts.limits[tool];
      if (limit !== undefined && count > limit) report('tools.over_limit', `${tool} ran ${count} times; the limit is ${limit}`);
    }
  }

  const mode = opts.goldMatch ?? 'contains';
  if (mode !== 'off' && t.gold_answer !== undefined && t.gold_answer.trim() !== '' && answer && !goldMatches(finalAnswer, t.gold_answer, mode)) {
    report('gold.mismatch', `the answer does not ${mode === 'exact' ? 'equal' : 'contain'} the gold answer "${t.gold_answer}"`);
  }

  return { passed: !issues.some((i) => i.severity === 'error'), issues };
}
