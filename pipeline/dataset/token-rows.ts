/**
 * `export --format tokens`: a training view rendered through the trainee's chat template and
 * tokenised by the trainee's tokenizer, with `labels` (-100 where no loss) on token
 * boundaries.
 *
 * Where an assistant turn sits in the rendering is read from the template itself, not
 * assumed: the turn starts where the template's rendering of the conversation before it, with
 * the generation prompt, ends (that rendering must be a prefix of the whole, or the row is
 * refused), and it runs through the first special token after it (Qwen's `<|im_end|>`,
 * Llama's `<|eot_id|>`), which the model must learn to write. A token is trained when it
 * covers any character of a trained turn; tool outputs and prompts are other turns, kept
 * apart by special tokens, so none of their characters is ever in a trained token.
 *
 * Every trained turn is then checked: what the model wrote (its reasoning, the text around
 * think tags, its calls' names and arguments) must all be in the turn's span, in order. A
 * template can drop part of a turn: Qwen3's drops `<think>` from every assistant turn before
 * the last user turn, so a nudge or a summary prompt in the middle of a trajectory would
 * strip the reasoning of every turn before it. Such a row is written as one row per stretch
 * between the user turns in question (`part` of `parts`): each holds the conversation up to
 * the end of its stretch, exactly as the template renders it (the earlier stretches as the
 * model saw them at inference), with loss on that stretch's turns only. A row whose turns the
 * template drops even so (a template that cannot render tool calls) is refused, not written.
 */
import type { HfTokenizer } from '../core/tokens/tokenizer.js';
import { ChatTemplate, type TemplateMessage } from '../core/tokens/chat-template.js';
import { TOKEN_LIMITS } from '../core/tokens/limits.js';
import type { TrainingView, ViewMessage } from './training-view.js';
import { UnexportableRow } from './unexportable-row.js';

export type MaskStrategy = 'train_on_assistant' | 'train_on_last' | 'train_on_all';
export const MASK_STRATEGIES: readonly MaskStrategy[] = ['train_on_assistant', 'train_on_last', 'train_on_all'];

/** The empty think block Qwen3's template writes for a turn without reasoning, and MiroTrain inserts. */
export const EMPTY_THINK = '<think>\n\n</think>\n\n';

export interface TokensOptions {
  readonly strategy?: MaskStrategy | undefined;
  /**
   * MiroTrain's handling of turns without think for Qwen3 thinking templates: each trained turn
   * that has no reasoning gets an empty think block (`<think>\n\n</think>\n\n`) where the
   * template wrote none, and that block is masked (where the template wrote one, it is masked).
   */
  readonly emptyThink?: boolean | undefined;
}

export interface TokensRow {
  id: string;
  /** 0-based; a trajectory is several rows only when the template hides earlier turns' text (see the file comment). */
  part: number;
  parts: number;
  /** The row renders the first `message_count` messages of the trajectory's `messages` export. */
  message_count: number;
  input_ids: number[];
  /** `input_ids` where loss is on, -100 elsewhere. */
  labels: number[];
  num_tokens: number;
  /** Tokens with loss on. */
  train_tokens: number;
}

const IGNORE = -100;

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** The pieces of a turn the model wrote, in order: reasoning, the text around think tags, each call. */
function writtenPieces(m: ViewMessage): string[] {
  const out: string[] = [];
  if (m.reasoning_content !== undefined) out.push(m.reasoning_content);
  out.push(...m.content.split(/<\/?think>/));
  for (const c of m.tool_calls ?? []) out.push(c.function.name, c.function.arguments);
  return out.map((p) => p.trim()).filter((p) => p !== '');
}

/**
 * `Buffer.byteLength(text.slice(0, pos))` for each `pos` asked, in one pass over the text when
 * they come in order (the cuts of a row do); an earlier one starts again from the beginning.
 * A position inside a surrogate pair counts the lone half as the 3 bytes of U+FFFD, as the
 * slice would, and the next one counts the pair whole.
 */
export function byteOffsets(text: string): (pos: number) => number {
  let at = 0;
  let bytes = 0;
  return (pos) => {
    if (pos < at) at = bytes = 0;
    const splitsPair = pos > 0 && pos < text.length && isHighSurrogate(text.charCodeAt(pos - 1)) && isLowSurrogate(text.charCodeAt(pos));
    const upTo = splitsPair ? pos - 1 : pos;
    bytes += Buffer.byteLength(text.slice(at, upTo), 'utf8');
    at = upTo;
    return splitsPair ? bytes + 3 : bytes;
  };
}

const isHighSurrogate = (c: number): boolean => c >= 0xd800 && c <= 0xdbff;
const isLowSurrogate = (c: number): boolean => c >= 0xdc00 && c <= 0xdfff;

interface Span {
  /** Message index in the view. */
  readonly message: number;
  readonly start: number;
  readonly end: number;
}

export class TokenRows {
  readonly #tok: HfTokenizer;
  readonly #template: ChatTemplate;
  readonly #special: RegExp | undefined;
  readonly #emptyThinkOk: boolean;
  readonly #renderMaxChars: number;

  /** `renderMaxChars`: a rendering longer than this fails its row (a template is code from outside). */
  constructor(tokenizer: HfTokenizer, templateFile?: string, renderMaxChars = TOKEN_LIMITS.renderMaxChars) {
    this.#tok = tokenizer;
    this.#renderMaxChars = renderMaxChars;
    this.#template = new ChatTemplate(tokenizer, templateFile);
    const specials = [...tokenizer.specialTexts].sort((a, b) => b.length - a.length);
    this.#special = specials.length === 0 ? undefined : new RegExp(specials.map(escapeRegExp).join('|'));
    // The block must be the tokenizer's own think tokens, or inserting it would teach text the model never writes.
    this.#emptyThinkOk = tokenizer.encode('<think>').length === 1 && tokenizer.encode('</think>').length === 1;
  }

  get tokenizerName(): string {
    return this.#tok.name;
  }

  /** The template's messages for a view: strings in the tokenizer's normal form, and no text that is a special token. */
  #templateMessages(view: TrainingView): TemplateMessage[] {
    const form = this.#tok.normalForm;
    const norm = (s: string): string => (form === undefined ? s : s.normalize(form));
    return view.messages.map((m, i) => {
      const texts = [m.content, m.reasoning_content ?? '', ...(m.tool_calls ?? []).flatMap((c) => [c.function.name, c.function.arguments])];
      if (this.#special !== undefined) {
        for (const text of texts) {
          const hit = this.#special.exec(text);
          if (hit !== null) throw new UnexportableRow(`message ${i} (${m.role}) holds the text of the special token ${hit[0]}, which a tokenizer reads as that token, not as the characters`);
        }
      }
      const out: TemplateMessage = { role: m.role, content: norm(m.content) };
      if (m.reasoning_content !== undefined) out.reasoning_content = norm(m.reasoning_content);
      if (m.tool_calls !== undefined) out.tool_calls = m.tool_calls.map((c) => ({ ...c, function: { name: norm(c.function.name), arguments: norm(c.function.arguments) } }));
      if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
      return out;
    });
  }

  #render(messages: readonly TemplateMessage[], tools: readonly unknown[] | undefined, gen: boolean): string {
    let text: string;
    try {
      text = this.#template.render(messages, tools, gen);
    } catch (err) {
      throw new UnexportableRow(`the chat template refused the conversation: ${(err as Error).message}`);
    }
    if (text.length > this.#renderMaxChars) {
      throw new UnexportableRow(`the chat template wrote ${text.length} characters for this row, more than ${this.#renderMaxChars} (--render-max-chars)`);
    }
    return text;
  }

  /**
   * The spans of the trained turns in `text`, the template's rendering of the first messages
   * (`prefix(n, gen)` renders the first n, with the generation prompt or not);
   * or, for a turn the template renders differently once more follows it, a message saying so.
   */
  #spans(prefix: (count: number, gen: boolean) => string, text: string, turns: readonly number[]): Span[] | string {
    const spans: Span[] = [];
    for (const i of turns) {
      const before = prefix(i, true);
      if (!text.startsWith(before)) return `message ${i}: the conversation before it renders differently once it follows`;
      const start = before.length;
      const hit = this.#special === undefined ? null : this.#special.exec(text.slice(start));
      const end = hit === null ? text.length : start + hit.index + hit[0].length;
      spans.push({ message: i, start, end });
    }
    return spans;
  }

  /** The first trained turn whose written text the rendering lost, with what it lost; undefined when none did. */
  #lost(view: TrainingView, text: string, spans: readonly Span[]): string | undefined {
    const form = this.#tok.normalForm;
    for (const s of spans) {
      const region = text.slice(s.start, s.end);
      let at = 0;
      for (const piece of writtenPieces(view.messages[s.message]!)) {
        const p = form === undefined ? piece : piece.normalize(form);
        const found = region.indexOf(p, at);
        if (found === -1) return `message ${s.message}: ${JSON.stringify(p.length > 60 ? `${p.slice(0, 60)}…` : p)}`;
        at = found + p.length;
      }
    }
    return undefined;
  }

  /** Where each stretch of the conversation ends: before every user turn that follows a model turn. */
  #stretches(view: TrainingView): number[][] {
    const out: number[][] = [[]];
    let sawModel = false;
    view.kinds.forEach((k, i) => {
      if (k === 'model') {
        sawModel = true;
        out[out.length - 1]!.push(i);
      } else if (sawModel && view.messages[i]!.role === 'user' && out[out.length - 1]!.length > 0) out.push([]);
    });
    return out.filter((s) => s.length > 0);
  }

  /** The tokens rows of one trajectory's view (none when nothing in it is trained). */
  rows(id: string, view: TrainingView, opts: TokensOptions = {}): TokensRow[] {
    const strategy = opts.strategy ?? 'train_on_assistant';
    if (opts.emptyThink && !this.#emptyThinkOk) throw new UnexportableRow(`--empty-think: ${this.#tok.name} has no <think> and </think> tokens; the option is for thinking templates (Qwen3)`);
    const messages = this.#templateMessages(view);
    const trained = view.kinds.flatMap((k, i) => (k === 'model' && view.messages[i]!.train ? [i] : []));
    const lastTrained = trained.at(-1);
    const chosen = (turns: readonly number[]): number[] =>
      strategy === 'train_on_last' ? turns.filter((i) => i === lastTrained) : strategy === 'train_on_all' ? [...turns] : turns.filter((i) => view.messages[i]!.train);
    // Each rendering of the first n messages is made once per row: a row split into stretches needs the same ones again.
    const rendered = new Map<number, string>();
    const prefix = (n: number, gen: boolean): string => {
      const key = gen ? -1 - n : n;
      let text = rendered.get(key);
      if (text === undefined) {
        text = this.#render(messages.slice(0, n), view.tools, gen);
        rendered.set(key, text);
      }
      return text;
    };

    const attempt = (groups: number[][]): TokensRow[] | string => {
      const rows: TokensRow[] = [];
      for (const group of groups) {
        const turns = chosen(group);
        const lastModel = strategy === 'train_on_all' ? group.at(-1) : turns.at(-1);
        if (lastModel === undefined) continue;
        const count = lastModel + 1;
        let text = prefix(count, false);
        const found = this.#spans(prefix, text, turns);
        if (typeof found === 'string') return found;
        let spans = found;
        const lost = this.#lost(view, text, spans);
        if (lost !== undefined) return lost;
        const masked: [number, number][] = [];
        if (opts.emptyThink) ({ text, spans } = this.#fillThink(view, text, spans, masked));
        rows.push(this.#tokenise(id, count, text, strategy === 'train_on_all' ? [{ message: -1, start: 0, end: text.length }] : spans, masked));
      }
      return rows;
    };

    const whole = attempt([view.kinds.flatMap((k, i) => (k === 'model' ? [i] : []))]);
    let rows: TokensRow[];
    if (typeof whole !== 'string') rows = whole;
    else {
      const split = attempt(this.#stretches(view));
      if (typeof split === 'string') throw new UnexportableRow(`the chat template does not show the text the model wrote, in ${split}`);
      rows = split;
    }
    rows = rows.filter((r) => r.train_tokens > 0);
    rows.forEach((r, i) => {
      r.part = i;
      r.parts = rows.length;
    });
    return rows;
  }

  /** MiroTrain's empty think: inserted (and masked) where a trained turn without reasoning has none; masked where the template wrote it. */
  #fillThink(view: TrainingView, text: string, spans: Span[], masked: [number, number][]): { text: string; spans: Span[] } {
    let shift = 0;
    let out = '';
    let from = 0;
    const moved: Span[] = [];
    for (const s of spans) {
      const m = view.messages[s.message]!;
      const hasThink = (m.reasoning_content !== undefined && m.reasoning_content.trim() !== '') || m.content.includes('<think>');
      const start = s.start + shift;
      if (!hasThink) {
        if (text.startsWith(EMPTY_THINK, s.start)) masked.push([start, start + EMPTY_THINK.length]);
        else {
          out += text.slice(from, s.start) + EMPTY_THINK;
          from = s.start;
          masked.push([start, start + EMPTY_THINK.length]);
          shift += EMPTY_THINK.length;
          moved.push({ message: s.message, start, end: s.end + shift });
          continue;
        }
      }
      moved.push({ message: s.message, start, end: s.end + shift });
    }
    return { text: out + text.slice(from), spans: moved };
  }

  #tokenise(id: string, count: number, text: string, spans: readonly Span[], masked: readonly [number, number][]): TokensRow {
    // Character ranges with loss on: the spans, less what is masked inside them.
    const cuts: [number, number][] = [];
    for (const s of spans) {
      let from = s.start;
      for (const [a, b] of masked) {
        if (b <= from || a >= s.end) continue;
        if (a > from) cuts.push([from, a]);
        from = Math.max(from, b);
      }
      if (from < s.end) cuts.push([from, s.end]);
    }
    const { ids, byteEnds } = this.#tok.encodeWithOffsets(text);
    // A copy of the ids, filled: `new Array(n)` has holes, and an array with holes serialises at half the speed.
    const labels = ids.slice().fill(IGNORE);
    if (byteEnds !== undefined) {
      // Byte offsets of the ranges: tokens are byte sequences, and a token may end inside a character.
      const byteAt = byteOffsets(text);
      let t = 0;
      for (const [a, b] of cuts) {
        const ba = byteAt(a);
        const bb = byteAt(b);
        while (t < ids.length && byteEnds[t]! <= ba) t++;
        for (let k = t; k < ids.length && (k === 0 ? 0 : byteEnds[k - 1]!) < bb; k++) labels[k] = ids[k]!;
      }
    } else {
      // Not a byte-level vocabulary (or a normaliser changed the text): tokenise range by range, and
      // accept that only when it is the same tokenisation as the whole text's.
      const bounds = [...new Set([0, ...cuts.flat(), text.length])].sort((x, y) => x - y);
      const pieces: number[] = [];
      const trainedPiece: boolean[] = [];
      for (let i = 0; i + 1 < bounds.length; i++) {
        const a = bounds[i]!;
        const piece = this.#tok.encode(text.slice(a, bounds[i + 1]));
        const on = cuts.some(([x, y]) => a >= x && a < y);
        for (const tokenId of piece) {
          pieces.push(tokenId);
          trainedPiece.push(on);
        }
      }
      if (pieces.length !== ids.length || pieces.some((x, i) => x !== ids[i])) {
        throw new UnexportableRow(`${this.#tok.name}: a loss-mask boundary falls inside a token, and this tokenizer's tokens cannot be mapped back to characters`);
      }
      trainedPiece.forEach((on, i) => {
        if (on) labels[i] = ids[i]!;
      });
    }
    const train = labels.reduce((n, l) => n + (l === IGNORE ? 0 : 1), 0);
    return { id, part: 0, parts: 1, message_count: count, input_ids: ids, labels, num_tokens: ids.length, train_tokens: train };
  }
}
