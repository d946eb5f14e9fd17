/**
 * The row formats of `trajforge export` built from strings (the `tokens` format, built through
 * the chat template, is token-rows.ts). Each row has `id`, `tokens` (the token counts of the
 * row's strings, summed: a chat template's own tokens are not in it; `tokens` rows count
 * those) and `train_tokens` (the part with loss on), counted with the chosen tokenizer.
 *
 * - `messages`: the training view (training-view.ts) as OpenAI chat messages, each with
 *   `train`; native rows keep `reasoning_content`, `tool_calls`, `tool_call_id` and the
 *   row's `tools` with their descriptions and parameter schemas.
 * - `sharegpt`: LLaMA-Factory's rows, formats/sharegpt.ts.
 * - `text`: `{id, question, text, mask_spans}`, DR Tulu's training text (loss on everything but
 *   the tool outputs): for a row with a transcript, the turns after the question as they were
 *   sent, read from the record (tool results by their records, never by tags: MiroThinker's plain
 *   user-turn results are results too, and no `<tool_output>` or `<answer>` is added that was not
 *   sent); for a row without one (DR Tulu's generator rows), `interleaved_text` as is.
 *   `mask_spans` is the `[start, end)` of every tool output (and prompt, and nudged turn),
 *   widened to whole tokens of the chosen tokenizer (a
 *   token that holds the end of an output and the newline after it, such as `>\n`, is masked
 *   whole), counted in Unicode code points (Python's `text[start:end]`).
 */
import type { ChatMessage, NativeToolCall, Trajectory } from '../../schemas/index.js';
import type { TokenCounter } from '../core/tokens/count.js';
import { textSteps, trainingView, withoutUntrainedTurns, type ReasoningNote, type ToolRole, type TrainingView, type UnsentReasoning, type UntrainedTurns, type ViewMessage, type ViewMode } from './training-view.js';
import { UnexportableRow } from './unexportable-row.js';
export { toShareGpt, type ShareGptRow } from './formats/sharegpt.js';

export interface MessagesRow {
  id: string;
  messages: ViewMessage[];
  tools?: unknown[] | undefined;
  tokens: number;
  train_tokens: number;
  /** With the trainee's chat template (`--tokenizer DIR`): 0-based, of `parts` rows the trajectory was split into (export-split.ts). */
  part?: number;
  parts?: number;
  /** What the row did with reasoning the endpoint was not sent back (training-view.ts). */
  metadata?: { reasoning?: ReasoningNote };
}

export interface TextRow {
  id: string;
  question: string;
  text: string;
  /** `[start, end)` in code points, on token boundaries. */
  mask_spans: [number, number][];
  tokens: number;
  train_tokens: number;
}

/** A token counter, with a memo for system prompts: often a row's longest string, and the same in every row. */
export class Counter {
  readonly counter: TokenCounter;
  #lastSystem: string | undefined;
  #lastCount = 0;

  constructor(counter: TokenCounter) {
    this.counter = counter;
  }

  count(text: string): number {
    return this.counter.count(text);
  }

  system(text: string): number {
    if (text !== this.#lastSystem) {
      this.#lastSystem = text;
      this.#lastCount = this.counter.count(text);
    }
    return this.#lastCount;
  }
}

export interface ViewChoice {
  readonly view?: ViewMode | undefined;
  readonly toolRole?: ToolRole | undefined;
  readonly unsentReasoning?: UnsentReasoning | undefined;
  /** `messages`: untrained turns (nudged) left out (default) or kept with their `train: false`. */
  readonly untrained?: UntrainedTurns | undefined;
}

function messageTokens(m: ViewMessage, count: Counter): number {
  let n = m.role === 'system' ? count.system(m.content) : count.count(m.content);
  if (m.reasoning_content !== undefined) n += count.count(m.reasoning_content);
  if (m.tool_calls !== undefined) n += count.count(JSON.stringify(m.tool_calls.map((c) => c.function)));
  return n;
}

/** A `messages` row of these messages, its token counts made. */
export function messagesRow(id: string, messages: ViewMessage[], tools: unknown[] | undefined, count: Counter, metadata?: MessagesRow['metadata']): MessagesRow {
  let tokens = 0;
  let train = 0;
  for (const m of messages) {
    const n = messageTokens(m, count);
    tokens += n;
    if (m.train) train += n;
  }
  return { id, messages, ...(tools ? { tools } : {}), tokens, train_tokens: train, ...(metadata ? { metadata } : {}) };
}

export function toMessages(t: Trajectory, count: Counter, choice: ViewChoice = {}, whole: TrainingView = trainingView(t, choice)): MessagesRow {
  // TRL trains every assistant turn of a row: a turn not to learn is left out unless asked for.
  const view = choice.untrained === 'keep' ? whole : withoutUntrainedTurns(whole);
  return messagesRow(t.id, view.messages, view.tools, count, view.reasoning ? { reasoning: view.reasoning } : undefined);
}

/** UTF-16 offsets → code point offsets, for the (sorted) offsets given. */
function toCodePoints(text: string, offsets: readonly number[]): number[] {
  // Text without surrogates (nearly all) needs no walk.
  if (!/[\uD800-\uDFFF]/.test(text)) return [...offsets];
  const out: number[] = [];
  let cp = 0;
  let unit = 0;
  for (const target of offsets) {
    while (unit < target) {
      const c = text.charCodeAt(unit);
      unit += c >= 0xd800 && c <= 0xdbff && unit + 1 < text.length && (text.charCodeAt(unit + 1) & 0xfc00) === 0xdc00 ? 2 : 1;
      cp++;
    }
    out.push(cp);
  }
  return out;
}

/** The `[start, end)` UTF-16 spans of the tool outputs of a row without a transcript (DR Tulu's generator rows). */
function outputSpans(t: Trajectory): [number, number][] {
  const text = t.interleaved_text;
  if (t.dialect !== 'native') {
    return textSteps(t).flatMap((s) => (s.kind === 'output' ? [[s.start, s.end] as [number, number]] : []));
  }
  // No parser for native text: each record's output, found in order.
  const spans: [number, number][] = [];
  let from = 0;
  for (const r of t.tool_calls ?? []) {
    if (!r.output_text) continue;
    const at = text.indexOf(r.output_text, from);
    if (at < 0) throw new UnexportableRow(`tool output of call ${r.call_id} is not in interleaved_text, so it cannot be masked`);
    spans.push([at, at + r.output_text.length]);
    from = at + r.output_text.length;
  }
  return spans;
}

/** Spans widened to whole tokens: the start to the token it falls in, the end to the end of its token. */
function onTokens(spans: readonly [number, number][], ends: readonly number[]): [number, number][] {
  let k = 0;
  return spans.map(([s, e]) => {
    // The largest token end at or before s is where the token holding s starts.
    while (k < ends.length && ends[k]! <= s) k++;
    const start = k === 0 ? 0 : Math.min(s, ends[k - 1]!);
    let j = k;
    while (j < ends.length && ends[j]! < e) j++;
    const end = j < ends.length ? ends[j]! : e;
    return [start, end] as [number, number];
  });
}

/** A native turn's calls as its text is written (`<tool_call>` JSON, as the served model's template writes them): the name and the arguments the model wrote. */
function nativeCallText(c: NativeToolCall): string {
  return `<tool_call>\n{"name": ${JSON.stringify(c.function.name)}, "arguments": ${c.function.arguments.trim() === '' ? '{}' : c.function.arguments}}\n</tool_call>`;
}

/** A model turn as the model wrote it: its reasoning (sent, or its last), its text, and (native) its calls. */
function writtenTurn(source: ChatMessage, shown: ViewMessage): string {
  const think = shown.reasoning_content !== undefined && source.reasoning_content !== undefined ? `<think>${shown.reasoning_content}</think>\n` : '';
  const calls = (source.tool_calls ?? []).map(nativeCallText);
  return think + [source.content, ...calls].filter((x) => x !== '').join('\n');
}

/**
 * The text of a row with a transcript, read from the record, not from tags: every turn after the
 * question, as it was sent (the view of `--view`), joined by newlines as `interleaved_text` joins
 * them. What the model did not write for this loss (tool results, which the records place, the
 * loop's prompts, a turn it was nudged for) is a masked span; the rest is what the model wrote.
 */
function transcriptPieces(t: Trajectory, choice: ViewChoice): { text: string; spans: [number, number][] } {
  const view = trainingView(t, { view: choice.view, unsentReasoning: choice.unsentReasoning });
  let text = '';
  const spans: [number, number][] = [];
  view.messages.forEach((m, i) => {
    const kind = view.kinds[i]!;
    if (kind === 'system' || kind === 'question') return;
    const piece = kind === 'model' ? writtenTurn(t.messages[i]!, m) : m.content;
    if (piece === '') return;
    if (text !== '') text += '\n';
    if (kind !== 'model' || !m.train) spans.push([text.length, text.length + piece.length]);
    text += piece;
  });
  return { text, spans };
}

export function toText(t: Trajectory, count: Counter, choice: ViewChoice = {}): TextRow {
  const fromRecord = Array.isArray(t.messages) && t.messages.length > 0 ? transcriptPieces(t, choice) : undefined;
  const text = fromRecord?.text ?? t.interleaved_text;
  let spans = fromRecord?.spans ?? outputSpans(t);
  const ends = spans.length > 0 ? count.counter.boundaries(text) : undefined;
  if (ends !== undefined) spans = onTokens(spans, ends);
  let train = 0;
  let pos = 0;
  for (const [s, e] of spans) {
    if (s > pos) train += count.count(text.slice(pos, s));
    pos = Math.max(pos, e);
  }
  if (pos < text.length) train += count.count(text.slice(pos));
  const cps = toCodePoints(text, spans.flat());
  const mask: [number, number][] = spans.map((_, i) => [cps[2 * i]!, cps[2 * i + 1]!]);
  return { id: t.id, question: t.question, text, mask_spans: mask, tokens: count.count(t.question) + count.count(text), train_tokens: train };
}
