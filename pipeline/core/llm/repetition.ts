/**
 * Degenerate repetition in a completion: a model stuck in a loop repeats one phrase until
 * `max_tokens`. The client (llm.ts) cuts such a tail and resamples, and stops reading a stream
 * as soon as one shows.
 */
/**
 * Degenerate repetition: the tail of a completion is one phrase (a period of 1 to
 * MAX_PERIOD characters) repeated at least MIN_REPEATS times and over at least MIN_CHARS
 * characters. Looked for only in the last WINDOW characters, so a check costs at most
 * MAX_PERIOD × WINDOW character comparisons whatever the length of the text, and no regular
 * expression runs over it.
 */
export const REPETITION = { maxPeriod: 300, minRepeats: 8, minChars: 400, window: 4096 } as const;

/**
 * When the tail of `text` repeats, the period and where the repeating run starts (the start
 * of its first copy); otherwise undefined. The smallest qualifying period wins.
 */
export function degenerateTail(text: string, limits: { maxPeriod: number; minRepeats: number; minChars: number; window: number } = REPETITION): { period: number; start: number } | undefined {
  const end = text.length;
  for (let p = 1; p <= limits.maxPeriod && 2 * p <= end; p++) {
    const need = Math.max(limits.minRepeats * p, limits.minChars);
    if (need > end || need > limits.window) continue;
    // Characters (from the end) equal to the character one period earlier.
    let run = 0;
    const max = Math.min(end - p, limits.window);
    while (run < max && text.charCodeAt(end - 1 - run) === text.charCodeAt(end - 1 - run - p)) run++;
    if (run + p < need) continue;
    // Qualifies: find where the run really starts, past the window (one linear pass).
    while (end - 1 - run - p >= 0 && text.charCodeAt(end - 1 - run) === text.charCodeAt(end - 1 - run - p)) run++;
    return { period: p, start: end - run - p };
  }
  return undefined;
}

/** The text before a repeating tail plus one copy of the repeated phrase. */
export function cutRepetition(text: string, tail: { period: number; start: number }): string {
  return text.slice(0, tail.start + tail.period);
}
