/**
 * The export command's flags made into the options of `exportRows` and `exportDpo`: each value
 * checked against what it may be, and each flag against the formats it is for, so a flag given to
 * the wrong format is a usage error naming it before anything is read or written.
 */
import { TrajforgeError } from '../errors.js';
import { TOKEN_ENCODINGS, type TokenCounter } from '../core/tokens/count.js';
import type { TokenLimits } from '../core/tokens/limits.js';
import type { ExportFormat, ExportOptions } from '../dataset/export.js';
import { choiceFlag } from './flags.js';
import { DPO_TURNS, type DpoOptions } from '../dataset/export-dpo.js';
import { SHAREGPT_CALLS } from '../dataset/formats/sharegpt.js';
import { MASK_STRATEGIES } from '../dataset/token-rows.js';
import { TOOL_ROLES, UNSENT_REASONING, UNTRAINED_TURNS, VIEW_MODES } from '../dataset/training-view.js';

type Values = Record<string, unknown>;

/** The flags of token export's limits (core/tokens/limits.ts), by the option each sets. */
const TOKEN_LIMIT_FLAGS = ['threads', 'row-timeout-ms', 'render-max-chars', 'worker-heap-mb'] as const;
const LIMIT_OF = { threads: 'threads', 'row-timeout-ms': 'rowTimeoutMs', 'render-max-chars': 'renderMaxChars', 'worker-heap-mb': 'workerHeapMb' } as const;

function tokenLimits(values: Values): Partial<TokenLimits> {
  const limits: Partial<Record<keyof TokenLimits, number>> = {};
  for (const flag of TOKEN_LIMIT_FLAGS) {
    const v = values[flag] as string | undefined;
    if (v === undefined) continue;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new TrajforgeError('BAD_USAGE', `--${flag}: expected a whole number of at least 1, got "${v}"`, { field: flag });
    limits[LIMIT_OF[flag]] = n;
  }
  return limits;
}

function parseMaxTokens(v: unknown): number | undefined {
  if (v === undefined) return undefined;
  const m = /^(\d+(?:\.\d+)?)([km]?)$/i.exec(String(v).trim());
  const n = m ? Math.round(Number(m[1]) * (m[2]?.toLowerCase() === 'k' ? 1e3 : m[2]?.toLowerCase() === 'm' ? 1e6 : 1)) : NaN;
  if (!(n > 0)) throw new TrajforgeError('BAD_USAGE', `--max-tokens: expected a positive number of tokens (e.g. 32000 or 32k), got "${v}"`, { field: 'max-tokens' });
  return n;
}

/** The options of a row export (`--format` other than dpo); `counter` is the input's token counter (`--tokenizer`). */
export function exportOptions(format: ExportFormat, values: Values, counter: TokenCounter): ExportOptions {
  for (const flag of ['dpo-turn', 'max-pairs'] as const) {
    if (values[flag] !== undefined) throw new TrajforgeError('BAD_USAGE', `--${flag} is for --format dpo`, { field: flag });
  }
  // A Hugging Face tokenizer (not a named encoding) is what `tokens` renders and tokenises with.
  const tokenizerPath = (TOKEN_ENCODINGS as readonly string[]).includes(counter.name) ? undefined : counter.name;
  if (values.untrained !== undefined && format !== 'messages') throw new TrajforgeError('BAD_USAGE', '--untrained is for --format messages (the other formats leave untrained turns out, or mask them)', { field: 'untrained' });
  if (values['sharegpt-calls'] !== undefined && format !== 'sharegpt') throw new TrajforgeError('BAD_USAGE', '--sharegpt-calls is for --format sharegpt', { field: 'sharegpt-calls' });
  if (values['max-tokens'] !== undefined && (format === 'adp' || format === 'atif')) throw new TrajforgeError('BAD_USAGE', `--max-tokens is not for --format ${format} (its rows hold no token counts)`, { field: 'max-tokens' });
  if (format !== 'tokens') {
    for (const flag of ['mask', 'empty-think'] as const) {
      if (values[flag] !== undefined) throw new TrajforgeError('BAD_USAGE', `--${flag} is for --format tokens`, { field: flag });
    }
    // `messages` with the trainee's template renders each row in the same bounded workers.
    for (const flag of TOKEN_LIMIT_FLAGS) {
      if (values[flag] !== undefined && (format !== 'messages' || tokenizerPath === undefined)) {
        throw new TrajforgeError('BAD_USAGE', `--${flag} is for --format tokens, and messages with --tokenizer DIR (the trainee's Hugging Face tokenizer)`, { field: flag });
      }
    }
    if (values['chat-template'] !== undefined && (format !== 'messages' || tokenizerPath === undefined)) {
      throw new TrajforgeError('BAD_USAGE', '--chat-template is for --format tokens, and messages with --tokenizer DIR (the trainee\'s Hugging Face tokenizer)', { field: 'chat-template' });
    }
  } else if (tokenizerPath === undefined) {
    throw new TrajforgeError('BAD_USAGE', "export --format tokens needs --tokenizer PATH: the trainee's Hugging Face tokenizer (a folder with tokenizer.json and tokenizer_config.json, or the tokenizer.json)", { field: 'tokenizer' });
  }
  return {
    format,
    counter,
    tokenizerPath,
    chatTemplate: values['chat-template'] as string | undefined,
    view: choiceFlag('view', values.view, VIEW_MODES),
    toolRole: choiceFlag('tool-role', values['tool-role'], TOOL_ROLES),
    unsentReasoning: choiceFlag('unsent-reasoning', values['unsent-reasoning'], UNSENT_REASONING),
    untrained: choiceFlag('untrained', values.untrained, UNTRAINED_TURNS),
    sharegptCalls: choiceFlag('sharegpt-calls', values['sharegpt-calls'], SHAREGPT_CALLS),
    strategy: choiceFlag('mask', values.mask, MASK_STRATEGIES),
    emptyThink: values['empty-think'] === true,
    maxTokens: parseMaxTokens(values['max-tokens']),
    all: values.all === true,
    onBadRow: values['on-bad-row'] === 'skip' ? 'skip' : 'error',
    tokenLimits: tokenLimits(values),
  };
}

/** The options of `--format dpo`: pairs from a run's accepted and failed rows. */
export function dpoOptions(values: Values): DpoOptions {
  for (const flag of ['mask', 'empty-think', 'chat-template', 'max-tokens', 'all', 'tokenizer', 'sharegpt-calls', 'untrained', ...TOKEN_LIMIT_FLAGS] as const) {
    if (values[flag] !== undefined) throw new TrajforgeError('BAD_USAGE', `--${flag} is not for --format dpo${flag === 'all' ? ' (it always reads failed rows: the rejected ones are there)' : ''}`, { field: flag });
  }
  const raw = values['max-pairs'] as string | undefined;
  const maxPairs = raw === undefined ? 1 : raw === 'all' ? Infinity : Number(raw);
  if (!(maxPairs >= 1) || (maxPairs !== Infinity && !Number.isInteger(maxPairs))) throw new TrajforgeError('BAD_USAGE', `--max-pairs: expected a whole number of at least 1, or all; got "${raw}"`, { field: 'max-pairs' });
  return {
    view: choiceFlag('view', values.view, VIEW_MODES),
    toolRole: choiceFlag('tool-role', values['tool-role'], TOOL_ROLES),
    maxPairs,
    turn: choiceFlag('dpo-turn', values['dpo-turn'], DPO_TURNS),
    onBadRow: values['on-bad-row'] === 'skip' ? 'skip' : 'error',
  };
}
