/**
 * What a judge is set up with, read from a run config: its `validation.judge` section, or, for
 * `validate --judge` with a config that has none, its endpoint (the model that graded before
 * the judge had a section of its own), with the judge's defaults for the rest.
 *
 * `section` says where the options were set, so that a message names the option that governs
 * it (`validation.judge.max_response_bytes`, `endpoint.api_key_env`): the judge's limits are
 * its own, never the policy endpoint's.
 */
import { EndpointConfig, JudgeConfig, type RunConfig } from '../../../schemas/index.js';
import { keyFromEnv } from '../config.js';
import { defaultCacheDir } from '../cache.js';

export interface JudgeSettings extends JudgeConfig {
  /** Where these options are set in the config. */
  readonly section: 'validation.judge' | 'endpoint';
  /** The tool cache's directory: verdicts go to `<cache_dir>/judge` (with `cache`). */
  readonly cache_dir: string;
  /** The cascade's F1 step: an answer with this token F1 against a gold answer is correct without a request. */
  readonly f1_threshold: number;
}

/** Options a caller may set over the config's: `validate --judge`'s rules file, `check`'s test grading. */
export type JudgeOverrides = Partial<Omit<JudgeSettings, 'section'>>;

const defined = <T extends object>(o: T): Partial<T> => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;

/**
 * The judge of a run config: `validation.judge`, else (with `orEndpoint`) its endpoint, else
 * undefined (the config has no judge).
 */
export function judgeSettings(config: RunConfig, opts: { env: NodeJS.ProcessEnv; orEndpoint?: boolean; overrides?: JudgeOverrides }): JudgeSettings | undefined {
  const own = config.validation.judge;
  if (own === undefined && !opts.orEndpoint) return undefined;
  const base: JudgeConfig = own ?? fromEndpoint(config.endpoint);
  return {
    ...base,
    section: own === undefined ? 'endpoint' : 'validation.judge',
    cache_dir: config.executor.cache_dir ?? defaultCacheDir(opts.env),
    f1_threshold: config.validation.f1_threshold,
    ...defined(opts.overrides ?? {}),
  };
}

/** An endpoint as a judge: its URL, model, key, sampling, timeouts, retries and limits. */
function fromEndpoint(e: EndpointConfig): JudgeConfig {
  return JudgeConfig.parse({
    base_url: e.base_url,
    model: e.model,
    api_key_env: e.api_key_env,
    temperature: e.temperature,
    max_tokens: e.max_tokens,
    extra_body: e.extra_body,
    timeout_ms: e.timeout_ms,
    max_response_bytes: e.max_response_bytes,
    max_retries: e.max_retries,
    retry_base_ms: e.retry_base_ms,
    retry_max_ms: e.retry_max_ms,
    fail_fast_after: e.fail_fast_after,
  });
}

/** The judge's options as an endpoint for LlmClient: a verdict is short and read whole (no stream, no stop strings, no loop to resample). */
export function judgeEndpoint(s: JudgeConfig): EndpointConfig {
  return EndpointConfig.parse({
    base_url: s.base_url,
    model: s.model,
    api_key_env: s.api_key_env,
    temperature: s.temperature,
    max_tokens: s.max_tokens,
    extra_body: s.extra_body,
    timeout_ms: s.timeout_ms,
    max_response_bytes: s.max_response_bytes,
    max_retries: s.max_retries,
    retry_base_ms: s.retry_base_ms,
    retry_max_ms: s.retry_max_ms,
    stream: false,
    repetition_retries: 0,
  });
}

/** The judge's key, from the environment only (config.ts's rule for every key); a loopback judge may need none. */
export function resolveJudgeKey(s: JudgeConfig & { readonly section?: string | undefined }, env: NodeJS.ProcessEnv): string {
  return keyFromEnv(s, s.section ?? 'validation.judge', env);
}
