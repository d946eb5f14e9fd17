/**
 * The token export's worker process (pipeline/dataset/token-worker.ts) as it is built: what it
 * loads to start. Each export starts one per core, and a row waits for its worker's start.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { reachedChunks } from '../helpers.js';

describe('the token export worker, built', () => {
  it('loads the tokenizer and the chat template, and neither zod nor the record schemas (building them was a fifth of its start)', () => {
    const chunks = [...reachedChunks(['dist/pipeline/dataset/token-worker.js'])];
    const holding = (text: string): string[] => chunks.filter((c) => readFileSync(join(PACKAGE_ROOT, c), 'utf8').includes(text));
    // What it needs is reached: Hugging Face's BPE model and the Jinja interpreter.
    expect(holding('tokens_to_ids').length).toBeGreaterThan(0);
    expect(holding('Interpreter').length).toBeGreaterThan(0);
    expect(holding('$ZodType')).toEqual([]);
  });
});
