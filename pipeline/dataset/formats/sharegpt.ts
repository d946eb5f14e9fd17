/**
 * `--format sharegpt`: rows LLaMA-Factory loads (`formatting: sharegpt`, columns
 * `conversations`, `system`, `tools`), written to the rules of its own loading code, read at
 * hiyouga/LLaMA-Factory ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30 (src/llamafactory/data/
 * converter.py `SharegptDatasetConverter`, formatter.py `FunctionFormatter`, tool_utils.py,
 * template.py) and checked by tests/dataset/export-sharegpt.test.ts:
 *
 * - `conversations` alternates: human or observation at even places, gpt or function_call at
 *   odd places, and ends on a model entry (an even count). A row that breaks this is skipped
 *   by LLaMA-Factory ("Skipping this abnormal example"), so consecutive tool results of
 *   parallel calls are ONE observation, joined as LLaMA-Factory's own OpenAI converter joins
 *   them (`\n</tool_response>\n<tool_response>\n`), and a prompt the loop sent right after a
 *   tool result (a force-answer prompt) is joined to it in one human entry.
 * - A `function_call` value is JSON `{"name", "arguments"}` (a list of them for parallel
 *   calls). What the model wrote before its calls (reasoning, prose) comes first and the JSON
 *   is wrapped in `<tool_call>…</tool_call>`, LLaMA-Factory's default `tool_call_words`: the
 *   formatter then keeps that text as the turn's thought and renders the calls in the
 *   template's own tool format. Native reasoning is written in its `thought_words`
 *   (`<think>\n…\n</think>\n\n`). `<` and `>` in the JSON are `\u003c`/`\u003e` (the same
 *   JSON), so no argument can close the `<tool_call>`; a turn whose own text holds
 *   `<tool_call>` cannot be expressed (LLaMA-Factory would take it for the call) and is an
 *   unexportable row.
 * - `tools` is a JSON string (its ToolFormatter `json.loads` it) of OpenAI-style function
 *   specs; `system` the system prompt as sent.
 * - Every model entry is trained (LLaMA-Factory has no per-turn flag), so a turn the model was
 *   nudged for is left out with the nudge that answered it (turns.ts `withoutUntrained`).
 *
 * `calls: 'text'` keeps an XML dialect's calls as the model wrote them, in `gpt` entries (a
 * gpt entry followed by an observation is valid too) with no `tools` column: the row then
 * renders as the endpoint was sent it, but LLaMA-Factory's tool formatting is not used.
 */
import type { Trajectory } from '../../../schemas/index.js';
import { trainingView, type ViewOptions } from '../training-view.js';
import { UnexportableRow } from '../unexportable-row.js';
import type { Counter } from '../export-formats.js';
import { exchangesOf, toolsOf, withoutUntrained, type Exchange, type ModelExchange } from './turns.js';

export type ShareGptCalls = 'json' | 'text';
export const SHAREGPT_CALLS: readonly ShareGptCalls[] = ['json', 'text'];

export type ShareGptFrom = 'human' | 'gpt' | 'function_call' | 'observation';

export interface ShareGptRow {
  id: string;
  system?: string;
  /** JSON text of the tools offered (OpenAI function specs). */
  tools?: string;
  conversations: { from: ShareGptFrom; value: string }[];
  tokens: number;
  train_tokens: number;
}

export interface ShareGptOptions extends ViewOptions {
  readonly calls?: ShareGptCalls | undefined;
}

/** How LLaMA-Factory's OpenAI converter joins consecutive tool results into one observation. */
export const OBSERVATION_JOIN = '\n</tool_response>\n<tool_response>\n';
/** LLaMA-Factory's default `thought_words`. */
const THOUGHT_OPEN = '<think>\n';
const THOUGHT_CLOSE = '\n</think>\n\n';
/** LLaMA-Factory's default `tool_call_words`. */
const TOOL_CALL_OPEN = '<tool_call>';
const TOOL_CALL_CLOSE = '</tool_call>';

type Entry = ShareGptRow['conversations'][number];

const isModel = (from: ShareGptFrom): boolean => from === 'gpt' || from === 'function_call';

function head(e: ModelExchange, native: boolean): string {
  const reasoning = native && e.message.reasoning_content !== undefined ? `${THOUGHT_OPEN}${e.message.reasoning_content}${THOUGHT_CLOSE}` : '';
  return reasoning + e.head;
}

function modelEntry(e: ModelExchange, t: Trajectory, calls: ShareGptCalls): Entry {
  const native = t.dialect === 'native';
  if (e.calls.length === 0 || (calls === 'text' && !native)) {
    return { from: 'gpt', value: native ? head(e, true) : e.message.content };
  }
  const json = e.calls.map((c) => ({ name: c.name, arguments: c.arguments }));
  // `<` and `>` as JSON escapes: a tag inside an argument can then never end the `<tool_call>` LLaMA-Factory looks for.
  const body = JSON.stringify(json.length === 1 ? json[0] : json).replace(/</g, '\\u003c').replace(/>/g, '\\u003e');
  const before = head(e, native);
  if (before.includes(TOOL_CALL_OPEN)) throw new UnexportableRow(`the model's text before its call holds ${TOOL_CALL_OPEN}, which LLaMA-Factory would read as the call`);
  return { from: 'function_call', value: before.trim() === '' ? body : `${before}${TOOL_CALL_OPEN}${body}${TOOL_CALL_CLOSE}` };
}

function entriesOf(exchanges: readonly Exchange[], t: Trajectory, calls: ShareGptCalls): { system: string | undefined; entries: Entry[] } {
  let system: string | undefined;
  const entries: Entry[] = [];
  for (const e of exchanges) {
    if (e.kind === 'system') system = e.text;
    else if (e.kind === 'output') entries.push({ from: 'observation', value: e.text });
    else if (e.kind !== 'model') entries.push({ from: 'human', value: e.text });
    else {
      entries.push(modelEntry(e, t, calls));
      for (const r of e.results) entries.push({ from: 'observation', value: r.content });
    }
  }
  return { system, entries };
}

/** Joins neighbours LLaMA-Factory would reject, drops what follows the last model entry; throws where no join keeps the row true. */
function alternate(entries: readonly Entry[]): Entry[] {
  const out: Entry[] = [];
  for (const e of entries) {
    const last = out.at(-1);
    if (last === undefined || isModel(last.from) !== isModel(e.from)) {
      out.push({ ...e });
    } else if (isModel(e.from)) {
      throw new UnexportableRow('two model turns follow each other with no prompt or tool result between them; LLaMA-Factory needs them to alternate');
    } else if (last.from === 'observation' && e.from === 'observation') {
      last.value += OBSERVATION_JOIN + e.value;
    } else {
      last.from = 'human';
      last.value += `\n\n${e.value}`;
    }
  }
  if (out.length > 0 && isModel(out[0]!.from)) throw new UnexportableRow('the conversation starts with a model turn; LLaMA-Factory needs a human entry first');
  while (out.length > 0 && !isModel(out.at(-1)!.from)) out.pop();
  if (out.length === 0) throw new UnexportableRow('no model turn to train on');
  return out;
}

export function toShareGpt(t: Trajectory, count: Counter, opts: ShareGptOptions = {}): ShareGptRow {
  const view = trainingView(t, { view: opts.view, toolRole: opts.toolRole });
  const calls = opts.calls ?? 'json';
  const all = exchangesOf(t, view);
  const { system, entries } = entriesOf(withoutUntrained(all), t, calls);
  const conversations = alternate(entries);
  let tokens = system === undefined ? 0 : count.system(system);
  let train = 0;
  for (const c of conversations) {
    const n = count.count(c.value);
    tokens += n;
    if (isModel(c.from)) train += n;
  }
  const withTools = t.dialect === 'native' || calls === 'json';
  const tools = withTools ? toolsOf(t, view, all) : [];
  return {
    id: t.id,
    ...(system === undefined ? {} : { system }),
    ...(tools.length === 0 ? {} : { tools: JSON.stringify(tools) }),
    conversations,
    tokens,
    train_tokens: train,
  };
}
