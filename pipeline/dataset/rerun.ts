/**
 * `rerun`: roll out again only the samples of a run whose attempts all failed, each with
 * `attempt + 1`, appending to the same run. The questions come from the failure records
 * themselves, so the original questions file is not needed; with `retry.experience` (the
 * default) each new attempt is seeded with a summary of the failure it follows.
 *
 * An `unjudged` sample (the judge could not be reached) is not rolled out again: its recorded
 * answer is judged, and the record written with the same attempt number (the rollout is the
 * same one). `--max-attempts` does not hold it back, since no attempt is spent.
 */
import { createReadStream, existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { SCHEMA_VERSION, type FailureReason, type RunConfig, type Trajectory } from '../../schemas/index.js';
import { fingerprintFields, redactConfig } from '../core/config.js';
import { inputError, TrajforgeError } from '../errors.js';
import { lineProblem, maxLineBytes, readLines } from '../core/lines.js';
import { runPlan, type GenerateOptions, type GenerateSummary, type PlannedSample } from '../generate/run.js';
import { FAILURES, MANIFEST } from '../core/run-dir/names.js';
import { RunStore } from '../generate/store.js';

export interface RerunOptions extends GenerateOptions {
  /** The run directory; it overrides `config.output.dir`. */
  readonly dir: string;
  /** Only failures with one of these reasons; default all. */
  readonly reasons?: readonly FailureReason[] | undefined;
  /** Attempts an id may have in all, the first included. Default 3. */
  readonly maxAttempts?: number | undefined;
}

export const DEFAULT_MAX_ATTEMPTS = 3;

/** The index after `#` in a sample id made with `--samples K`; 0 otherwise. */
function sampleIndex(id: string): number {
  const m = /#(\d+)$/.exec(id);
  return m ? Number(m[1]) : 0;
}

export async function rerun(opts: RerunOptions): Promise<GenerateSummary> {
  const { dir } = opts;
  if (!existsSync(join(dir, MANIFEST))) throw new TrajforgeError('BAD_INPUT', `${dir}: not a run directory (no ${MANIFEST})`, { file: dir });
  const config: RunConfig = { ...opts.config, output: { ...opts.config.output, dir } };
  const maxAttempts = opts.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  const reasons = opts.reasons?.length ? new Set<string>(opts.reasons) : undefined;
  return runPlan({
    ...opts,
    config,
    total: null,
    openStore: (scrubber) =>
      RunStore.open({
        dir,
        fingerprintFields: fingerprintFields(config, opts.env ?? process.env),
        allowConfigChange: opts.allowConfigChange,
        scrubber,
        config: redactConfig(config, opts.env ?? process.env),
        fresh: () => {
          throw new TrajforgeError('BAD_INPUT', `${dir}: not a run directory`, { file: dir });
        },
      }),
    samples: (store) => {
      // Decided before anything runs: the attempts appended during this rerun are not rerun again.
      const due = new Map<string, number>();
      for (const [id, { attempt, reason }] of store.failed) {
        if ((attempt + 1 < maxAttempts || reason === 'unjudged') && (!reasons || reasons.has(reason))) due.set(id, attempt);
      }
      const file = join(dir, FAILURES);
      const size = existsSync(file) ? statSync(file).size : 0;
      async function* samples(): AsyncGenerator<PlannedSample> {
        if (size === 0 || due.size === 0) return;
        const max = maxLineBytes();
        for await (const l of readLines(createReadStream(file, { highWaterMark: 1 << 20, end: size - 1 }), { maxLineBytes: max })) {
          const problem = lineProblem(l, max);
          if (problem !== undefined) throw inputError(file, l.line, undefined, problem);
          const rec = JSON.parse(l.text) as Trajectory;
          if (due.get(rec.id) !== rec.attempt) continue;
          due.delete(rec.id);
          yield {
            sample_id: rec.id,
            sample_index: sampleIndex(rec.id),
            question: {
              schema_version: SCHEMA_VERSION,
              id: rec.question_id,
              question: rec.question,
              ...(rec.gold_answer === undefined ? {} : { answer: rec.gold_answer }),
              ...(rec.meta === undefined ? {} : { meta: rec.meta }),
            },
            // With retry.experience, the new attempt starts from a summary of this failure
            // (not for reasons outside retry.on: an endpoint that was down taught nothing).
            ...(config.retry.experience && rec.reason !== undefined && config.retry.on.includes(rec.reason) ? { failed: rec } : {}),
            ...(rec.reason === 'unjudged' ? { rejudge: rec } : {}),
          };
        }
      }
      return { samples: samples(), skipped: () => 0 };
    },
  });
}
