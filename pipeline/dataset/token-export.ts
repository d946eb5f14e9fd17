/**
 * The `tokens` format's side of `exportRows`: each row's training view is made here, on the
 * command's process (it reads the whole record), and rendered and tokenised in the worker processes
 * of token-pool.ts, several rows at once; `exportRows` writes them back in input order. The
 * tokenizer and the template are also loaded here, once, so that a bad `--tokenizer` or
 * `--chat-template` fails before anything is read.
 */
import type { Trajectory } from '../../schemas/index.js';
import { loadHfTokenizer } from '../core/tokens/tokenizer.js';
import { TOKEN_LIMITS, type TokenLimits } from '../core/tokens/limits.js';
import { TokenPool, type TokenJobResult } from './token-pool.js';
import { TokenRows, type TokensOptions } from './token-rows.js';
import { trainingView, type ViewOptions } from './training-view.js';
import type { FamilyMetadata } from './export.js';

/** Rows in the works per worker the export may have: how far ahead of the writer rows are built. */
const AHEAD_PER_THREAD = 3;

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
}

export class TokenExport {
  readonly #opts: TokenExportOptions;
  #pool: TokenPool | undefined;

  constructor(opts: TokenExportOptions) {
    this.#opts = opts;
    // Loaded (and checked) here, in the command's process; the workers load the same files again.
    new TokenRows(loadHfTokenizer(opts.tokenizerPath, '--tokenizer'), opts.chatTemplate, opts.limits.renderMaxChars);
  }

  /** How many rows may be in the works at once. */
  get window(): number {
    return rowsAhead(this.#opts.limits);
  }

  /** The rows of `t`, rendered and tokenised on a worker; the view is made here and throws here (`UnexportableRow`). */
  build(t: Trajectory, metadata: FamilyMetadata | undefined): Promise<TokenJobResult> {
    const view = trainingView(t, this.#opts.view);
    this.#pool ??= new TokenPool({ tokenizerPath: this.#opts.tokenizerPath, chatTemplate: this.#opts.chatTemplate, options: this.#opts.tokens, limits: this.#opts.limits });
    return this.#pool.run(t.id, view, metadata);
  }

  async close(): Promise<void> {
    await this.#pool?.close();
  }
}
