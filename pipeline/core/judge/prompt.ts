/**
 * A grading prompt, filled so that what is graded stays data.
 *
 * The question, the gold answer, the answer and the rubric come from outside (a dataset, a
 * model): each goes into the prompt as a data block, between a line `<<<` and a line `>>>`,
 * and the prompt tells the judge that a block is data, never instructions and never its own
 * words. For that to hold, a block must not be able to end early: inside it, a run of three
 * or more `<` or `>` gets a backslash before each character past the second (`>>\>`), so no
 * line of the data reads as the block's end. The tags that wrap a judge's reasoning
 * (`<think>`, `</think>`) are broken the same way (`<\think>`, `<\/think>`), so a judge that
 * quotes the answer while it reasons cannot be made to end its reasoning early (reply.ts).
 */
import { createHash } from 'node:crypto';
import { loadPrompt, renderPrompt } from '../../prompts.js';

/** A data block's text, with every way to end the block (or a reasoning block) broken by a backslash. */
export function escapeData(text: string): string {
  return text
    .replace(/(?<=<<)</g, '\\<')
    .replace(/(?<=>>)>/g, '\\>')
    .replace(/<(\/?)(think\b)/gi, '<\\$1$2');
}

/** `prompts/<name>.txt` with each placeholder filled by its value, escaped as data. */
export function renderGrading(name: string, material: Readonly<Record<string, string>>): string {
  const data = Object.fromEntries(Object.entries(material).map(([k, v]) => [k, escapeData(v)]));
  return renderPrompt(loadPrompt(name), data);
}

/** `name@hash`: which template, in which version, a verdict was asked with (the record's `judgement.prompt`, and the cache key). */
export function templateTag(name: string): string {
  return `${name}@${createHash('sha256').update(loadPrompt(name)).digest('hex').slice(0, 8)}`;
}
