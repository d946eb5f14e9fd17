import { afterEach, describe, expect, it } from 'vitest';
import { TokenPool, workersAtStart } from '../../pipeline/dataset/token-pool.js';
import { processesNaming, qwen3Copy } from '../helpers.js';

const MB = 1024 * 1024;

const pools: TokenPool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.close()));
});

describe('token pool: workers at start', () => {
  it('one, and one more per 16 MB of input, up to --threads', () => {
    expect(workersAtStart(4, undefined)).toBe(1);
    expect(workersAtStart(4, 0)).toBe(1);
    expect(workersAtStart(4, 16 * MB - 1)).toBe(1);
    expect(workersAtStart(4, 16 * MB)).toBe(2);
    expect(workersAtStart(4, 40 * MB)).toBe(3);
    expect(workersAtStart(4, 10_000 * MB)).toBe(4);
    expect(workersAtStart(1, 10_000 * MB)).toBe(1);
  });

  it('a large input starts both workers before any row; a small one starts one; close ends them', async () => {
    const big = qwen3Copy('tf-pool-');
    const small = qwen3Copy('tf-pool-');
    const limits = { threads: 2 };
    pools.push(new TokenPool({ tokenizerPath: big, chatTemplate: undefined, options: {}, limits, inputBytes: 40 * MB }));
    pools.push(new TokenPool({ tokenizerPath: small, chatTemplate: undefined, options: {}, limits, inputBytes: 1 * MB }));
    expect(processesNaming(big)).toBe(2);
    expect(processesNaming(small)).toBe(1);
    await Promise.all(pools.map((p) => p.ready()));
    expect(processesNaming(big)).toBe(2);
    expect(processesNaming(small)).toBe(1);
    await Promise.all(pools.splice(0).map((p) => p.close()));
    expect(processesNaming(big) + processesNaming(small)).toBe(0);
  });
});
