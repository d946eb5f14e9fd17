import { describe, expect, it } from 'vitest';
import type { Trajectory } from '../../schemas/index.js';
import { RunTally } from '../../pipeline/generate/run-tally.js';

/** A session's record with what the tally reads: its agent, status, usage and calls (cached or not). */
function session(agent: string, cached: boolean[], parent?: string): Trajectory {
  return {
    id: parent ? `${parent}/${agent}#0` : 'q1',
    agent,
    ...(parent ? { parent_id: parent } : {}),
    status: 'ok',
    repairs: [],
    rollbacks: [],
    usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, llm_calls: 1, estimated: false },
    total_tool_calls: cached.length,
    tool_calls: cached.map((c) => ({ cached: c })),
  } as unknown as Trajectory;
}

describe('run tally', () => {
  it('counts cache hits by the agent that made the calls, not against the main agent', () => {
    const tally = new RunTally();
    tally.written([session('browsing', [true, true, false], 'q1'), session('browsing', [true], 'q1'), session('main', [false, false])], true);
    expect(tally.invocation.cachedByAgent).toEqual({ browsing: 3 });
    // The main agent's calls are its own: 2, none of them from the cache.
    expect(tally.invocation.toolCalls).toBe(2);
  });
});
