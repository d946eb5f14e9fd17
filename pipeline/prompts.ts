/**
 * Prompt templates live in `prompts/*.txt` so they can be read and edited without touching
 * code; this module finds them from source and from `dist/` alike and fills their
 * `{placeholders}`.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PACKAGE_ROOT } from './paths.js';

const cache = new Map<string, string>();

/** The text of `prompts/<name>.txt`. Read once per process: prompts are fetched on every turn. */
export function loadPrompt(name: string): string {
  // A name is a file stem, never a path: config values end up here.
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(name) || name.includes('..')) {
    throw new Error(`invalid prompt name ${JSON.stringify(name)}`);
  }
  let text = cache.get(name);
  if (text === undefined) {
    const file = join(PACKAGE_ROOT, 'prompts', `${name}.txt`);
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new Error(`prompt ${JSON.stringify(name)} not found at ${file}`, { cause: err });
    }
    cache.set(name, text);
  }
  return text;
}

const PLACEHOLDER = /\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/**
 * Fills `{key}` placeholders in one pass, so a value that itself contains `{…}` (a tool
 * description, a question) is never expanded again. Braces around anything that is not an
 * identifier (JSON examples, `{ }`) are left alone. A placeholder without a value is an
 * error rather than an empty string: a silently blank prompt section is hard to notice.
 */
export function renderPrompt(template: string, vars: Readonly<Record<string, string>>): string {
  const missing: string[] = [];
  const out = template.replace(PLACEHOLDER, (whole, key: string) => {
    if (Object.hasOwn(vars, key)) {
      const value = vars[key];
      if (typeof value === 'string') return value;
    }
    if (!missing.includes(key)) missing.push(key);
    return whole;
  });
  if (missing.length > 0) {
    throw new Error(`prompt placeholder${missing.length > 1 ? 's' : ''} ${missing.map((k) => `{${k}}`).join(', ')} ha${missing.length > 1 ? 've' : 's'} no value`);
  }
  return out;
}

/**
 * The placeholder that stands for tool result `ordinal` (0-based) in a request that holds only
 * the last `keep` results in full. One function for the requests (context.ts) and for the
 * export that shows the conversation as the last request showed it. `prompt`: a dialect layout's own.
 */
export function omittedResultText(ordinal: number, keep: number, prompt = 'tool-result-omitted'): string {
  return renderPrompt(loadPrompt(prompt), { index: String(ordinal + 1), keep: String(keep) }).trim();
}
