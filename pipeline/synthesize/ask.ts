/**
 * One request of a synthesis stage (draft, obfuscate, the closed-book solver): the stage's
 * prompt filled with its material as data blocks (the judge's renderGrading: a block cannot be
 * closed from inside, so a document cannot instruct the writer), the reply cleaned, read by the
 * stage's reader, and asked again while nothing readable came back (`unreadable_retries`).
 * A request that fails (the endpoint down past its retries) throws LlmError: the seed is left
 * for the next run, not rejected.
 */
import { cleanText } from '../text.js';
import { renderGrading, templateTag } from '../core/judge/prompt.js';
import { clip } from '../core/judge/reply.js';
import type { LlmClient } from '../core/llm/llm.js';
import type { CostMeter } from './cost.js';

export interface AskDeps {
  readonly llm: LlmClient;
  /** Replies with nothing readable asked again. */
  readonly retries: number;
  readonly signal: AbortSignal;
  readonly meter: CostMeter;
  /** The prompts used, `name@hash`, for the seed's provenance. */
  readonly prompts: Set<string>;
}

const tags = new Map<string, string>();
/** `name@hash` of a prompt, once per process. */
export function promptTag(name: string): string {
  let tag = tags.get(name);
  if (tag === undefined) tags.set(name, (tag = templateTag(name)));
  return tag;
}

export type Answered<T> = { readonly value: T } | { readonly unreadable: string };

export async function askStage<T>(deps: AskDeps, prompt: string, material: Readonly<Record<string, string>>, read: (reply: string) => T | undefined, wants: string): Promise<Answered<T>> {
  deps.prompts.add(promptTag(prompt));
  const text = renderGrading(prompt, material);
  let raw = '';
  for (let tries = 0; tries <= deps.retries; tries++) {
    const c = await deps.llm.complete({ messages: [{ role: 'user', content: text }], stop: [], signal: deps.signal });
    deps.meter.charge(c);
    const reply = cleanText(c.text);
    const value = read(reply);
    if (value !== undefined) return { value };
    raw = clip(reply, 300);
  }
  return { unreadable: `no readable ${wants} in ${deps.retries + 1} replies (the last: "${raw}")` };
}
