/**
 * The fields that change what a synthesis run makes; resuming with other values is refused
 * (unless `--allow-config-change`), as `generate` refuses. They are the rollouts' own (the
 * endpoint's model and sampling, tools, dialect, budgets, the judge: core/config.ts
 * `fingerprintFields`), the synthesis section but for what only decides how much and how fast
 * (seeds drawn, budgets, seeds in flight, retries), the writer's model and sampling, and the
 * synthesis prompts (`synth-*.txt`) by a hash of their text.
 */
import { resolve } from 'node:path';
import type { RunConfig } from '../../schemas/index.js';
import { fingerprintFields, prefixedPromptHashes } from '../core/config.js';
import { solveConfig } from './solvable.js';

export function synthesisFingerprint(config: RunConfig, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const syn = config.synthesis!;
  const { budgets: _b, seeds: _s, seeds_in_flight: _f, fail_fast_after: _ff, unreadable_retries: _u, writer, source, ...what } = syn;
  const k = syn.checks.solvable === false ? 1 : syn.checks.solvable.k;
  const { 'questions.path': _p, ...rollouts } = fingerprintFields(solveConfig(config, '', k), env);
  return {
    ...rollouts,
    'synthesis.source': { ...source, path: resolve(source.path), ...(source.descriptions === undefined ? {} : { descriptions: resolve(source.descriptions) }) },
    synthesis: what,
    'synthesis.writer': writer === undefined ? null : { model: writer.model, temperature: writer.temperature, top_p: writer.top_p, max_tokens: writer.max_tokens, seed: writer.seed ?? null, extra_body: writer.extra_body },
    'synthesis.prompts': prefixedPromptHashes('synth-'),
  };
}
