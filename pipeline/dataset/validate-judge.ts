/**
 * The judge of `validate --judge --config F`: the config's judge in the loop
 * (`validation.judge`) when it has one, else its endpoint, with the rules file's judge settings
 * (model, temperature, max_tokens, concurrency) over it (core/judge/rows.ts). Its modules (the
 * model client, the run config) load only when it is asked for.
 */
import type { ValidationRules } from '../../schemas/index.js';
import type { Grader } from './validate.js';

/** The grader, or undefined when the rules turn `gold.judge` off. */
export async function loadGrader(configFile: string, rules: ValidationRules): Promise<Grader | undefined> {
  if (rules.severities['gold.judge'] === 'off') return undefined;
  const [rows, { loadConfig }] = await Promise.all([import('../core/judge/rows.js'), import('../core/config.js')]);
  const judge = rows.openRowJudge(loadConfig(configFile), { ...rules.judge, f1_threshold: rules.gold.f1_threshold }, process.env);
  return { judge, judgeRow: rows.judgeRow };
}
