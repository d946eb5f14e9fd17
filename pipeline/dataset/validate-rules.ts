/**
 * The rules `trajforge validate` checks by: the `--rules` file (its schema is
 * `ValidationRules` in schemas/index.ts), read and checked against the validator's rule ids,
 * and turned into the validator's options.
 */
import { readFileSync } from 'node:fs';
import { ValidationRules } from '../../schemas/index.js';
import { parseConfigText, zodProblem } from '../core/config.js';
import { isRuleId, RULES, type ValidateOptions } from '../core/validator.js';
import { TrajforgeError } from '../errors.js';

/** The schema, with the rule ids checked: an unknown one is an error that lists the known ones. */
const CheckedRules = ValidationRules.extend({
  severities: ValidationRules.shape.severities.superRefine((sev, ctx) => {
    for (const id of Object.keys(sev)) {
      if (!isRuleId(id)) ctx.addIssue({ code: 'custom', path: [id], message: `unknown rule (rules: ${Object.keys(RULES).join(', ')})` });
    }
  }),
});

/** The rules when no file is given: every rule at its own severity. */
export function defaultRules(): ValidationRules {
  return ValidationRules.parse({});
}

/** Reads a rules file; an unreadable one, or one the schema refuses, is a config error naming the file and the field. */
export function loadRules(file: string): ValidationRules {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new TrajforgeError('BAD_CONFIG', `${file}: cannot read rules: ${(err as Error).message}`, { file });
  }
  const raw = parseConfigText(text, file) ?? {};
  const parsed = CheckedRules.safeParse(raw);
  if (!parsed.success) throw zodProblem(parsed.error, file);
  return parsed.data;
}

export function validateOptionsFrom(rules: ValidationRules): Omit<ValidateOptions, 'dialect'> {
  return {
    limits: rules.limits.tools,
    goldMatch: rules.gold.mode,
    f1Threshold: rules.gold.f1_threshold,
    maxTurns: rules.limits.turns,
    maxTokens: rules.limits.tokens,
    severities: rules.severities,
  };
}
