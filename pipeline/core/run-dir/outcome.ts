/**
 * What every run's summary opens with, `generate`'s and `synthesize`'s alike: which run
 * directory, whether this invocation resumed it, how it ended, and what opening it repaired
 * or found. The CLI reads these fields for the exit code and the closing lines.
 */
import type { RunManifest } from '../../../schemas/index.js';

export interface RunOutcome {
  readonly dir: string;
  readonly runId: string;
  readonly resumed: boolean;
  readonly status: RunManifest['status'];
  /**
   * Set when the run stopped early because of the endpoint or the judge: it refused the
   * requests (401, 403, 404, 400), or every request of `fail_fast_after` samples in a row failed.
   */
  readonly fatal?: string | undefined;
  /** Set when the invocation ran to its end but failed as a whole; says why, with the main reason. */
  readonly failure?: string | undefined;
  /** What opening the run repaired or found (a cut last line moved aside, a config change…). */
  readonly notices: readonly string[];
}

/** A run store as a summary names it. */
interface OpenedRun {
  readonly dir: string;
  readonly resumed: boolean;
  readonly manifest: { readonly run_id: string };
}

/** The outcome's fields of an invocation that ended with `status`. */
export function runOutcome(store: OpenedRun, status: RunManifest['status'], ended: Pick<RunOutcome, 'fatal' | 'failure' | 'notices'>): RunOutcome {
  return { dir: store.dir, runId: store.manifest.run_id, resumed: store.resumed, status, fatal: ended.fatal, failure: ended.failure, notices: ended.notices };
}
