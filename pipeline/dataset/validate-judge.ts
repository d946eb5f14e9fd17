/**
 * The judge of `validate --judge --config F`: the config's judge in the loop
 * (`validation.judge`) when it has one, else its endpoint, with the rules file's judge settings
 * (model, temperature, max_tokens, concurrency). Its modules (the model client, the run config)
 * load only when it is asked for.
 */
import type { ValidationRules } from '../../schemas/index.js';
import type { Grader } from './validate.js';

/** The grader, or undefined when the rules turn `gold.judge` off. */
export async function loadGrader(configFile: string, rules: ValidationRules): Promise<Grader | undefined> {
  if (rules.severities['gold.judge'] === 'off') return undefined;
  const [judgeMod, { loadConfig, resolveApiKey }, judging] = await Promise.all([import('../core/judge/judge.js'), import('../core/config.js'), import('../core/judge/judging.js')]);
  const cfg = loadConfig(configFile);
  // The config's judge when it has one (validation.judge), else its endpoint.
  const inLoop = cfg.validation.judge;
  const from = inLoop === undefined ? cfg.endpoint : judging.judgeEndpoint(inLoop);
  const endpoint = {
    ...from,
    model: rules.judge.model ?? from.model,
    temperature: rules.judge.temperature,
    ...(rules.judge.max_tokens === undefined ? {} : { max_tokens: rules.judge.max_tokens }),
  };
  const apiKey = inLoop === undefined ? resolveApiKey(cfg, process.env) : judging.resolveJudgeKey(inLoop, process.env);
  return { judge: new judgeMod.Judge({ endpoint, apiKey, concurrency: rules.judge.concurrency }), withJudge: judgeMod.withJudge };
}
