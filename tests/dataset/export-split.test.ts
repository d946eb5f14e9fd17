import { afterEach, describe, expect, it } from 'vitest';
import { ThinkKeeper } from '../../pipeline/dataset/export-split.js';
import type { ViewMessage } from '../../pipeline/dataset/training-view.js';
import { processesNaming, qwen3Copy } from '../helpers.js';

const MB = 1024 * 1024;

const keepers: ThinkKeeper[] = [];
afterEach(async () => {
  await Promise.all(keepers.splice(0).map((k) => k.close()));
});

// A nudge between two thinking turns: Qwen3's template drops the first turn's think.
const NUDGED: ViewMessage[] = [
  { role: 'user', content: 'Which year?', train: false },
  { role: 'assistant', content: 'Searching.', reasoning_content: 'First I look it up.', train: true },
  { role: 'user', content: 'Answer now.', train: false },
  { role: 'assistant', content: '1998', reasoning_content: 'It was 1998.', train: true },
];

describe('ThinkKeeper (messages rows checked against the trainee template)', () => {
  it('finds the think the template drops, with one worker for a small input and two at once for a large one', async () => {
    const small = qwen3Copy('tf-keeper-');
    const large = qwen3Copy('tf-keeper-');
    const limits = { threads: 2 };
    const one = new ThinkKeeper({ tokenizerPath: small, chatTemplate: undefined, limits });
    const two = new ThinkKeeper({ tokenizerPath: large, chatTemplate: undefined, limits, inputBytes: 40 * MB });
    keepers.push(one, two);
    expect(await one.lostThink(NUDGED, undefined)).toBe(1);
    expect(await two.lostThink(NUDGED, undefined)).toBe(1);
    expect(processesNaming(small)).toBe(1);
    expect(processesNaming(large)).toBe(2);
    await Promise.all(keepers.splice(0).map((k) => k.close()));
    expect(processesNaming(small) + processesNaming(large)).toBe(0);
  });
});
