/**
 * The validation rules' table: each rule's stable id, default severity (`error` rejects a
 * trajectory, `warn` keeps and flags it) and description, what a config may set them to, and
 * how the rules word where two texts part. The rules themselves are in validator.ts (one
 * trajectory), family-rules.ts (a family of sessions) and judge/ (`gold.judge`).
 */
import type { ValidationIssue } from '../../schemas/index.js';
import { clipLine } from '../text.js';
import { TOKEN_ENCODING } from './tokens/count.js';

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
  'agent.report_unusable': { severity: 'error', description: 'a sub-agent\'s report is empty (no word in it) or a refusal ("I\'m sorry, but I can\'t help with that."): its caller learns nothing from it' },
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

/** Where an issue is: a call's index, a turn, an offset in interleaved_text. */
export type IssuePlace = Omit<ValidationIssue, 'rule' | 'severity' | 'message'>;

/** Where two strings first differ. */
export function firstDifference(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

/** `from character N on: "…" vs "…"`: where two texts part, and 50 characters of each from there. */
export function wherePart(a: string, b: string): string {
  const at = firstDifference(a, b);
  return `from character ${at} on: "${clipLine(a.slice(at), 50)}" vs "${clipLine(b.slice(at), 50)}"`;
}
