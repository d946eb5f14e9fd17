/**
 * The `tokens` format's side of `exportRows`: each row's training view is made here, on the
 * command's process (it reads the whole record), and rendered and tokenised in the worker processes
 * of token-pool.ts, several rows at once; `exportRows` writes them back in input order. The
 * first worker starts at once, and `ready` waits for it to load the tokenizer and the template,
 * so that a bad `--tokenizer` or `--chat-template` fails before anything is read; this process
 * never loads the vocabulary itself (about half a second before the first row could start).
 */
import type { Trajectory } from '../../schemas/index.js';
import { TOKEN_LIMITS, type TokenLimits } from '../core/tokens/limits.js';
import { TokenPool, type TokenJobResult } from './token-pool.js';
import type { TokensOptions } from './token-rows.js';
import { trainingView, type ViewOptions } from './training-view.js';
import type { FamilyMetadata } from './export.js';

/**
 * Rows in the works per worker the export may have: how far ahead of the writer rows are built.
 * Twice what a worker holds (token-pool.ts's DEPTH), so the next rows are ready to hand out.
 */
const AHEAD_PER_THREAD = 8;

/** How many rows may be in the works at once with these limits (tokens, and messages checked by the template). */
export function rowsAhead(limits: Partial<TokenLimits>): number {
  return (limits.threads ?? TOKEN_LIMITS.threads) * AHEAD_PER_THREAD;
}

export interface TokenExportOptions {
  readonly tokenizerPath: string;
  readonly chatTemplate: string | undefined;
  readonly view: ViewOptions;
  readonly tokens: TokensOptions;
  readonly limits: Partial<TokenLimits>;
  /** How large the input is, when known: a large one starts several workers at once. */
  readonly inputBytes?: number | undefined;
}

export class TokenExport {
  readonly #opts: TokenExportOptions;
  readonly #pool: TokenPool;

  constructor(opts: TokenExportOptions) {
    this.#opts = opts;
    this.#pool = new TokenPool({ tokenizerPath: opts.tokenizerPath, chatTemplate: opts.chatTemplate, options: opts.tokens, limits: opts.limits, inputBytes: opts.inputBytes });
  }

  /** Once the first worker has loaded the tokenizer and the template; rejects with why it could not. */
  ready(): Promise<void> {
    return this.#pool.ready();
  }

  /** How many rows may be in the works at once. */
  get window(): number {
    return rowsAhead(this.#opts.limits);
  }

  /** The rows of `t`, rendered and tokenised on a worker; the view is made here and throws here (`UnexportableRow`). */
  build(t: Trajectory, metadata: FamilyMetadata | undefined): Promise<TokenJobResult> {
    return this.#pool.run(t.id, trainingView(t, this.#opts.view), metadata);
  }

  async close(): Promise<void> {
    await this.#pool.close();
  }
}
