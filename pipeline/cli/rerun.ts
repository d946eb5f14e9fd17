/** `trajforge rerun <run>`: re-run the failed samples of a run, each with attempt + 1. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FailureReason, type RunConfig } from '../../schemas/index.js';
import { loadConfig, resolveApiKey, resolveConfig, type ConfigOverrides } from '../core/config.js';
import { TrajforgeError } from '../errors.js';
import { fsReason } from '../files.js';
import { stderrSink } from '../generate/progress.js';
import { DEFAULT_MAX_ATTEMPTS, rerun } from '../dataset/rerun.js';
import { assertJudgeReachable, assertReachable } from '../core/llm/probe.js';
import { resolveJudgeKey } from '../core/judge/settings.js';
import { MANIFEST } from '../core/run-dir/names.js';
import { configWarnings } from '../generate/warnings.js';
import { int, runInterruptibly } from './generate.js';
import { parseFlags } from './flags.js';

const USAGE = `trajforge rerun <run> [options]

Re-runs only the samples of <run> whose attempts all failed, each with attempt + 1, and
appends the results to the run. The questions come from the failure records.

  --reason R          only failures with this reason (repeatable): ${FailureReason.options.join(', ')}
  --max-attempts N    attempts an id may have in all, the first included (default ${DEFAULT_MAX_ATTEMPTS})
  --config F          the run config (default: the one recorded in the run's manifest)
  --base-url URL      the endpoint, when it moved since the run began
  --concurrency N     model requests in flight (default: the config's concurrency, 32)
  --allow-config-change   go on although the config changes what a sample is (recorded in the manifest)
`;

/** The config recorded in the manifest; secrets were redacted there, so a run that had some needs --config. */
function configFromManifest(dir: string): RunConfig {
  const file = join(dir, MANIFEST);
  let manifest: { config?: unknown };
  try {
    manifest = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code === 'ENOENT' ? `no ${MANIFEST}` : err instanceof SyntaxError ? `${MANIFEST} is not valid JSON` : fsReason(err);
    throw new TrajforgeError('BAD_INPUT', `${dir}: not a run directory (${why})`, { file });
  }
  // `[redacted]` (a whole value) or `[redacted:NAME]` (a secret inside one).
  if (JSON.stringify(manifest.config ?? {}).includes('[redacted')) {
    throw new TrajforgeError('BAD_USAGE', `${file}: the recorded config had secrets, which were redacted; pass the original with --config`, { file });
  }
  return resolveConfig(manifest.config, file);
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('rerun', argv, {
    reason: { type: 'string', multiple: true },
    'max-attempts': { type: 'string' },
    config: { type: 'string' },
    'base-url': { type: 'string' },
    concurrency: { type: 'string' },
    'allow-config-change': { type: 'boolean' },
  }, { help: USAGE });
  if (!parsed) return 0;
  const { values, positionals } = parsed;
  const [dir, ...extra] = positionals;
  if (!dir || extra.length) throw new TrajforgeError('BAD_USAGE', `rerun: expected one run directory\n\n${USAGE}`);
  const reasons = (values.reason ?? []).map((r) => {
    const parsed = FailureReason.safeParse(r);
    if (!parsed.success) throw new TrajforgeError('BAD_USAGE', `--reason: unknown reason "${r}" (one of ${FailureReason.options.join(', ')})`);
    return parsed.data;
  });
  const maxAttempts = int('max-attempts', values['max-attempts']);
  if (maxAttempts === 0) throw new TrajforgeError('BAD_USAGE', '--max-attempts: at least 1');
  const overrides: ConfigOverrides = { baseUrl: values['base-url'], concurrency: int('concurrency', values.concurrency) };
  const base = values.config ? loadConfig(values.config, overrides) : resolveConfig(configFromManifest(dir), join(dir, MANIFEST), overrides);
  for (const w of configWarnings(base)) process.stderr.write(`warning: ${w.message}\n`);
  // One GET before any attempt is spent: a run's endpoint (a demo's sim above all) may be long gone.
  // Samples left unjudged need only the judge: their rollouts are on record.
  const judge = base.validation.judge;
  if (judge !== undefined && reasons.length > 0 && reasons.every((r) => r === 'unjudged')) {
    await assertJudgeReachable(judge, resolveJudgeKey(judge, process.env), base.endpoint.probe_timeout_ms);
  } else {
    await assertReachable(base.endpoint, resolveApiKey(base, process.env));
  }
  return runInterruptibly((signal) => rerun({ dir, config: base, reasons, maxAttempts, signal, progress: stderrSink(), allowConfigChange: values['allow-config-change'] }));
}
