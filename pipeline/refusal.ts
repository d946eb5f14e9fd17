/**
 * What a refusal looks like: a text that opens with an apology or an "I can't help" — the
 * shape of "I'm sorry, but I can't help with that.", which a model's safety layer writes in
 * place of a turn or a report. One pattern for the rollout (a refusing turn is rolled back) and
 * the validator (a sub-agent's report that refuses is flagged, `agent.report_unusable`).
 */

/** The opening words of a refusal. */
export const REFUSAL = /^\s*(?:I'?m sorry|I am sorry|I apologi[sz]e|I can(?:not|'t|’t) (?:help|assist|answer|comply)|I'?m (?:unable|not able) to)/i;

/**
 * A report longer than this is not a refusal even when it opens like one ("I'm sorry, the
 * documents disagree: …" goes on to report): a refusal is a sentence or two.
 */
export const REFUSAL_MAX_CHARS = 300;

/** Whether a whole text (a sub-agent's report) is a refusal: short, and opening like one. */
export function isRefusal(text: string): boolean {
  const t = text.trim();
  return t.length <= REFUSAL_MAX_CHARS && REFUSAL.test(t);
}
