/**
 * The limits of token export (`export --format tokens`), with their defaults, in one place;
 * docs/export.md ("Limits of token export") says the same. A chat template is code from
 * outside (a tokenizer folder, `--chat-template`): a loop of a billion steps must fail its row,
 * not hang the command or take the process down, so each row is rendered and tokenised on a
 * worker process with a deadline, a memory bound and a bound on the text a template may write.
 */
import { availableParallelism } from 'node:os';

export interface TokenLimits {
  /** Worker processes that render and tokenise rows, at most (`--threads`); one starts (one per 16 MB of an input file: token-pool.ts), more once rows wait. Default: the cores, at most 4. */
  readonly threads: number;
  /** A row that takes longer to render and tokenise fails (`--row-timeout-ms`): its worker is ended and replaced. */
  readonly rowTimeoutMs: number;
  /** Characters a chat template may write for one rendering of a row; more fails the row. */
  readonly renderMaxChars: number;
  /** Heap of each worker process, MB: a template that allocates past it fails its row, the worker is replaced. */
  readonly workerHeapMb: number;
  /** Pieces the tokenizer's memo remembers (piece-memo.ts); pieces longer than `memoPieceChars` are not kept. */
  readonly memoPieces: number;
  readonly memoPieceChars: number;
  /**
   * Characters of whole sections (the text between two added tokens: a message's body, a
   * think, a call) whose ids the memo also remembers, in two generations of this many each; a
   * section longer than a sixteenth of it is not kept. A row split into stretches renders the
   * same messages in each, and every row repeats the system prompt and the tools.
   */
  readonly memoSectionChars: number;
}

export const TOKEN_LIMITS: TokenLimits = {
  threads: Math.max(1, Math.min(4, availableParallelism())),
  rowTimeoutMs: 60_000,
  renderMaxChars: 16 * 1024 * 1024,
  workerHeapMb: 1024,
  memoPieces: 200_000,
  memoPieceChars: 128,
  memoSectionChars: 2 * 1024 * 1024,
};
