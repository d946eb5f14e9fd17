/**
 * A model's own chat template, rendered with Hugging Face's Jinja implementation
 * (`@huggingface/jinja`) exactly as `apply_chat_template` renders it: the messages, `tools`
 * when there are any, `add_generation_prompt`, and the special tokens tokenizer_config.json
 * names (`bos_token`, `eos_token`…). The template is the one the tokenizer's files ship
 * (tokenizer_config.json's `chat_template`, or chat_template.jinja), or a file given instead;
 * never re-derived here.
 */
import { readFileSync } from 'node:fs';
import { Template } from '@huggingface/jinja';
import { TrajforgeError } from '../../errors.js';
import type { HfTokenizer } from './tokenizer.js';
import type { NativeToolCall } from '../../../schemas/index.js';

/** A message as a chat template reads it (OpenAI's shape, with `reasoning_content` for think). */
export interface TemplateMessage {
  role: string;
  content: string;
  reasoning_content?: string;
  tool_calls?: NativeToolCall[];
  tool_call_id?: string;
}

export class ChatTemplate {
  readonly #template: Template;
  readonly #tokens: Readonly<Record<string, string>>;

  /** `file`: a Jinja file to use instead of the tokenizer's own template. */
  constructor(tokenizer: HfTokenizer, file?: string) {
    let source = tokenizer.chatTemplate;
    let where = `${tokenizer.name} (tokenizer_config.json chat_template)`;
    if (file !== undefined) {
      try {
        source = readFileSync(file, 'utf8');
      } catch (err) {
        throw new TrajforgeError('BAD_USAGE', `--chat-template: cannot read ${file}: ${(err as Error).message}`, { field: 'chat-template', file });
      }
      where = file;
    }
    if (source === undefined) {
      throw new TrajforgeError('BAD_USAGE', `--tokenizer ${tokenizer.name}: no chat template (neither tokenizer_config.json's chat_template nor chat_template.jinja); give one with --chat-template FILE`, { field: 'tokenizer' });
    }
    try {
      this.#template = new Template(source);
    } catch (err) {
      throw new TrajforgeError('BAD_USAGE', `${where}: the chat template does not parse: ${(err as Error).message}`, { field: 'chat-template' });
    }
    this.#tokens = tokenizer.templateTokens;
  }

  /** The conversation as the template writes it; throws what the template raises (`raise_exception`). */
  render(messages: readonly TemplateMessage[], tools: readonly unknown[] | undefined, addGenerationPrompt: boolean): string {
    return this.#template.render({
      ...this.#tokens,
      messages,
      ...(tools !== undefined && tools.length > 0 ? { tools } : {}),
      add_generation_prompt: addGenerationPrompt,
    });
  }
}
