/**
 * A worker process of token export (token-pool.ts starts it, with its setup as JSON in
 * argv[2]): renders rows through the chat template and tokenises them, and sends back each
 * row as the JSON line to write. Rows are rendered here, not in the command's process, for two
 * reasons: two cores tokenise twice as fast as one, and a chat template is code from outside.
 * One that loops for ever or allocates without end takes down this process (the pool kills it
 * at the row's deadline, or V8 aborts it at its heap limit), never the command: the pool fails
 * the row and starts another worker. A process, not a worker thread: a thread that grows one
 * array past its heap limit aborts the whole process (nodejs/node#47224), which is exactly
 * what `{% for i in range(1000000000) %}` does.
 */
import { TrajforgeError } from '../errors.js';
import { ChatTemplate, type TemplateMessage } from '../core/tokens/chat-template.js';
import { loadHfTokenizer } from '../core/tokens/tokenizer.js';
import { TokenRows, type TokensOptions } from './token-rows.js';
import type { TrainingView } from './training-view.js';
import { UnexportableRow } from './unexportable-row.js';
import type { FamilyMetadata } from './export.js';

/** What the pool gives a worker when it starts it. */
export interface WorkerSetup {
  readonly tokenizerPath: string;
  readonly chatTemplate: string | undefined;
  readonly renderMaxChars: number;
  readonly options: TokensOptions;
}

/** One row to render and tokenise. */
export interface TokenJobMessage {
  readonly seq: number;
  readonly id: string;
  readonly view: TrainingView;
  readonly metadata: FamilyMetadata | undefined;
}

/** One conversation to render whole through the chat template, nothing tokenised (`messages` rows checked for lost thinks: export-split.ts). */
export interface RenderJobMessage {
  readonly seq: number;
  readonly render: { readonly messages: readonly TemplateMessage[]; readonly tools: readonly unknown[] | undefined };
}

export type JobMessage = TokenJobMessage | RenderJobMessage;

/** What a worker says: ready (or not) once loaded, then one answer per job, in the order given. */
export type WorkerReply =
  | { readonly type: 'ready' }
  | { readonly type: 'load-failed'; readonly code: string; readonly message: string; readonly field: string | undefined; readonly file: string | undefined }
  | { readonly type: 'rows'; readonly seq: number; readonly lines: string[]; readonly tokens: number[] }
  | { readonly type: 'rendered'; readonly seq: number; readonly text: string }
  | { readonly type: 'unexportable'; readonly seq: number; readonly message: string };

function serve(): void {
  const send = (reply: WorkerReply): void => {
    process.send!(reply);
  };
  // The command went away (it ended, or was killed): so does its worker.
  process.on('disconnect', () => process.exit(0));
  const setup = JSON.parse(process.argv[2]!) as WorkerSetup;
  let rows: TokenRows;
  let template: ChatTemplate;
  try {
    const tokenizer = loadHfTokenizer(setup.tokenizerPath, '--tokenizer');
    rows = new TokenRows(tokenizer, setup.chatTemplate, setup.renderMaxChars);
    template = new ChatTemplate(tokenizer, setup.chatTemplate);
  } catch (err) {
    const e = err instanceof TrajforgeError ? err : new TrajforgeError('BAD_USAGE', (err as Error).message);
    send({ type: 'load-failed', code: e.code, message: e.message, field: e.field, file: e.file });
    return;
  }
  process.on('message', (job: JobMessage) => {
    let reply: WorkerReply;
    try {
      if ('render' in job) {
        send({ type: 'rendered', seq: job.seq, text: rendered(template, job.render.messages, job.render.tools, setup.renderMaxChars) });
        return;
      }
      const lines: string[] = [];
      const tokens: number[] = [];
      for (const r of rows.rows(job.id, job.view, setup.options)) {
        lines.push(JSON.stringify(job.metadata === undefined ? r : { ...r, metadata: job.metadata }));
        tokens.push(r.num_tokens);
      }
      reply = { type: 'rows', seq: job.seq, lines, tokens };
    } catch (err) {
      // Anything else is a defect: it ends this worker, and the pool reports it.
      if (!(err instanceof UnexportableRow)) throw err;
      reply = { type: 'unexportable', seq: job.seq, message: err.message };
    }
    send(reply);
  });
  send({ type: 'ready' });
}

/** The whole conversation as the template writes it; a template that raises, or writes past `maxChars`, fails the row. */
function rendered(template: ChatTemplate, messages: readonly TemplateMessage[], tools: readonly unknown[] | undefined, maxChars: number): string {
  let text: string;
  try {
    text = template.render(messages, tools, false);
  } catch (err) {
    throw new UnexportableRow(`the chat template refused the conversation: ${(err as Error).message}`);
  }
  if (text.length > maxChars) throw new UnexportableRow(`the chat template wrote ${text.length} characters for this row, more than ${maxChars}`);
  return text;
}

serve();
