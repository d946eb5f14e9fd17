/**
 * `messages` rows that keep every trained turn's think when a trainer renders them whole.
 *
 * TRL's SFTTrainer applies the chat template to a whole `messages` row (docs/export.md cites the
 * source). Qwen3's template drops the `<think>` of every assistant turn before the last user turn,
 * so a row with a user turn in its middle (a tool result sent as a user turn, a nudge, a summary
 * prompt) is trained with the earlier turns' reasoning gone. With the trainee's chat template
 * (`--tokenizer DIR`), each row is rendered whole as the trainer renders it; when a trained turn's
 * think is not in the rendering, the row is written as one row per stretch between the user turns
 * that follow a model turn (the rule `--format tokens` splits by): each holds the conversation up
 * to the end of its stretch, as the template shows it (the earlier stretches as the model saw them
 * at inference), with `train: true` on that stretch's turns only. Every row says `part` of `parts`.
 */
import type { TokenExportOptions } from './token-export.js';
import { TokenPool } from './token-pool.js';
import { messagesRow, type Counter, type MessagesRow } from './export-formats.js';
import type { ViewMessage } from './training-view.js';
import { UnexportableRow } from './unexportable-row.js';

/** The reasoning a turn wrote: its `reasoning_content`, or the inside of a leading `<think>…</think>`; undefined when none. */
export function thinkOf(m: ViewMessage): string | undefined {
  if (m.reasoning_content !== undefined && m.reasoning_content.trim() !== '') return m.reasoning_content.trim();
  const open = m.content.indexOf('<think>');
  const close = m.content.indexOf('</think>');
  if (open === -1 || close < open) return undefined;
  const inner = m.content.slice(open + 7, close).trim();
  return inner === '' ? undefined : inner;
}

/** Where each stretch ends: before every user turn that follows a model turn of the stretch. */
function stretches(messages: readonly ViewMessage[]): number[][] {
  const out: number[][] = [[]];
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!;
    if (m.role === 'assistant') out[out.length - 1]!.push(i);
    else if (m.role === 'user' && out[out.length - 1]!.length > 0) out.push([]);
  }
  return out.filter((s) => s.length > 0);
}

/** The trainee's tokenizer (a Hugging Face folder), a template to use instead of its own, token export's bounds on a rendering, and the input's size (how many workers start at once). */
export type KeeperOptions = Pick<TokenExportOptions, 'tokenizerPath' | 'chatTemplate' | 'limits' | 'inputBytes'>;

export class ThinkKeeper {
  readonly #opts: KeeperOptions;
  /** The chat template runs in token export's worker processes, under their bounds (a template is code from outside); started with the first row. */
  #pool: TokenPool | undefined;

  constructor(opts: KeeperOptions) {
    this.#opts = opts;
  }

  /** The first trained turn whose think the whole row's rendering lost, or undefined. */
  async lostThink(messages: readonly ViewMessage[], tools: readonly unknown[] | undefined): Promise<number | undefined> {
    this.#pool ??= new TokenPool({ tokenizerPath: this.#opts.tokenizerPath, chatTemplate: this.#opts.chatTemplate, options: {}, limits: this.#opts.limits, inputBytes: this.#opts.inputBytes });
    const text = await this.#pool.render(messages.map(({ train: _, ...m }) => m), tools);
    let at = 0;
    for (let i = 0; i < messages.length; i++) {
      const m = messages[i]!;
      const think = m.role === 'assistant' && m.train ? thinkOf(m) : undefined;
      if (think === undefined) continue;
      const found = text.indexOf(think, at);
      if (found === -1) return i;
      at = found + think.length;
    }
    return undefined;
  }

  /** `row` itself when its rendering keeps every trained think, else one row per stretch (see the file comment); each with `part` and `parts`. */
  async rows(row: MessagesRow, count: Counter): Promise<MessagesRow[]> {
    const { messages, tools } = row;
    if ((await this.lostThink(messages, tools)) === undefined) return [{ ...row, part: 0, parts: 1 }];
    const parts: MessagesRow[] = [];
    for (const stretch of stretches(messages)) {
      const own = new Set(stretch);
      if (!stretch.some((i) => messages[i]!.train)) continue;
      const upTo = messages.slice(0, stretch.at(-1)! + 1).map((m, i) => (m.role === 'assistant' && m.train && !own.has(i) ? { ...m, train: false } : m));
      const lost = await this.lostThink(upTo, tools);
      if (lost !== undefined) throw new UnexportableRow(`the chat template drops the think of message ${lost} even in a row that ends with its stretch`);
      parts.push(messagesRow(row.id, upTo, tools, count, row.metadata));
    }
    return parts.map((p, i) => ({ ...p, part: i, parts: parts.length }));
  }

  async close(): Promise<void> {
    await this.#pool?.close();
  }
}
