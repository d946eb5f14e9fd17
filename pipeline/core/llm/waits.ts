/**
 * What this process's model clients are waiting for right now: a `Retry-After`, a back-off after
 * a failure, a back-off another worker was sent (shared limits). The progress line says the
 * longest of them, so that a run held back for minutes says why instead of `ETA ?` in silence.
 */

interface Wait {
  /** When it ends, on performance.now(). */
  readonly until: number;
  readonly why: string;
}

const current = new Set<Wait>();

/** Notes a wait of `ms` for `why`; call what it returns when the wait is over (or cut short). */
export function startWait(ms: number, why: string): () => void {
  const w = { until: performance.now() + ms, why };
  current.add(w);
  return () => void current.delete(w);
}

/** The wait that ends last, with the time left, or undefined when nothing waits. */
export function longestWait(now = performance.now()): { ms: number; why: string } | undefined {
  let last: Wait | undefined;
  for (const w of current) if (last === undefined || w.until > last.until) last = w;
  return last === undefined ? undefined : { ms: Math.max(0, last.until - now), why: last.why };
}
