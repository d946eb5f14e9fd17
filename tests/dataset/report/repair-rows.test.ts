/**
 * What the report embeds of a repair (rows.ts): its turn, kind and detail, and when the record
 * kept it the completion before it, cut to the viewer's limit like any other text and marked
 * when cut (by the record or here). A record from elsewhere can hold anything in `before`.
 */
import { describe, expect, it } from 'vitest';
import type { Trajectory } from '../../../schemas/index.js';
import { DEFAULT_ROW_OPTIONS, detailOf } from '../../../pipeline/dataset/report/rows.js';

const rep = (repairs: unknown[]): unknown[] => detailOf({ repairs } as unknown as Partial<Trajectory>, DEFAULT_ROW_OPTIONS).rep as unknown[];

describe('the report rows: a repair and the text before it', () => {
  it('carries before and whether it was cut; a repair without one stays as it was', () => {
    expect(rep([{ turn: 1, kind: 'unclosed_answer', detail: 'd', before: '<answer>42' }])).toEqual([[1, 'unclosed_answer', 'd', '<answer>42', false]]);
    expect(rep([{ turn: 0, kind: 'no_action', detail: 'd', before: 'x', before_truncated: true }])).toEqual([[0, 'no_action', 'd', 'x', true]]);
    expect(rep([{ turn: 2, kind: 'stop_ignored', detail: 'd' }])).toEqual([[2, 'stop_ignored', 'd']]);
  });

  it('a huge or odd before from a file made elsewhere: cut to the text limit and marked, or left out', () => {
    const huge = 'y'.repeat(DEFAULT_ROW_OPTIONS.textChars + 5000);
    const [row] = rep([{ turn: 0, kind: 'hallucinated_output', detail: 'd', before: huge }]) as [unknown[]];
    expect((row[3] as string).length).toBe(DEFAULT_ROW_OPTIONS.textChars);
    expect(row[4]).toBe(true);
    // Not text: treated as absent, not shown as "[object Object]".
    expect(rep([{ turn: 0, kind: 'no_action', detail: 'd', before: { html: '<b>' } }])).toEqual([[0, 'no_action', 'd']]);
  });
});
