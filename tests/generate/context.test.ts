/**
 * ConversationContext: keep-K placeholders in the requests, and the token guard that keeps a
 * request (with room for the reply) inside the window. Token counts are checked against
 * estimateRequestTokens, the one count the guard and the sim share.
 */
import { describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../schemas/index.js';
import { ConversationContext } from '../../pipeline/generate/context.js';
import { loadPrompt, renderPrompt } from '../../pipeline/prompts.js';
import { estimateRequestTokens } from '../../pipeline/core/tokens/count.js';

const MAX_TOKENS = 500;
const MARGIN = 64;

interface Cfg {
  keep_tool_results?: number | undefined;
  max_context_tokens?: number | undefined;
  safety_margin_tokens: number;
}

function ctxFor(cfg: Partial<Cfg>, tools?: readonly unknown[]): ConversationContext {
  return new ConversationContext({ safety_margin_tokens: MARGIN, ...cfg }, MAX_TOKENS, tools);
}

/** A long, distinct tool result: its placeholder is always far shorter. */
function resultText(n: number): string {
  const words = Array.from({ length: 120 }, (_, i) => `finding${n}x${i}`).join(' ');
  return `<tool_output>\n<snippet id="r${n}">${words}</snippet>\n</tool_output>`;
}

/**
 * A native transcript: system, question, then per call an assistant turn with its tool call
 * and the tool message that answers it, and a last assistant word. Returns the indices of
 * the tool results.
 */
function nativeTranscript(results: number): { messages: ChatMessage[]; resultAt: number[] } {
  const messages: ChatMessage[] = [
    { role: 'system', content: 'You are a research assistant.' },
    { role: 'user', content: 'Does aspirin lower stroke risk?' },
  ];
  const resultAt: number[] = [];
  for (let n = 0; n < results; n++) {
    messages.push({
      role: 'assistant',
      content: `Search ${n}.`,
      tool_calls: [{ id: `call_${n}`, type: 'function', function: { name: 'pubmed_search', arguments: JSON.stringify({ query: `aspirin ${n}` }) } }],
    });
    resultAt.push(messages.length);
    messages.push({ role: 'tool', content: resultText(n), tool_call_id: `call_${n}` });
  }
  messages.push({ role: 'assistant', content: 'Thinking about it.' });
  return { messages, resultAt };
}

function register(ctx: ConversationContext, resultAt: readonly number[]): void {
  for (const i of resultAt) ctx.addResult(i);
}

/** The placeholder text for the `ordinal`-th result (from 0) with `keep` kept, from the prompt file. */
function placeholderText(ordinal: number, keep: number): string {
  return renderPrompt(loadPrompt('tool-result-omitted'), { index: String(ordinal + 1), keep: String(keep) }).trim();
}

/** The request keep-K should produce, built independently of the class. */
function expectedView(messages: readonly ChatMessage[], resultAt: readonly number[], keep: number): ChatMessage[] {
  const out = messages.map((m) => ({ ...m }));
  const cut = Math.max(0, resultAt.length - keep);
  for (let n = 0; n < cut; n++) {
    const i = resultAt[n]!;
    const original = messages[i]!;
    out[i] = { role: original.role, content: placeholderText(n, keep), ...(original.tool_call_id === undefined ? {} : { tool_call_id: original.tool_call_id }) };
  }
  return out;
}

describe('ConversationContext.view (keep-K)', () => {
  it('with keep 2 and 5 results, replaces exactly the first 3 result slots and nothing else', () => {
    const { messages, resultAt } = nativeTranscript(5);
    const before = structuredClone(messages);
    const ctx = ctxFor({ keep_tool_results: 2 });
    register(ctx, resultAt);
    const view = ctx.view(messages);

    expect(view).toHaveLength(messages.length);
    const replaced = resultAt.slice(0, 3);
    for (let i = 0; i < messages.length; i++) {
      if (replaced.includes(i)) {
        const p = view[i]!;
        expect(p.role).toBe('tool');
        expect(p.tool_call_id).toBe(messages[i]!.tool_call_id);
        expect(p.content).not.toContain('<tool_output');
        expect(p.content).not.toBe(messages[i]!.content);
        expect(p.content.length).toBeLessThan(messages[i]!.content.length);
        expect(p.tool_calls).toBeUndefined();
      } else {
        // Untouched messages are the very same objects.
        expect(view[i]).toBe(messages[i]);
      }
    }
    // The placeholder is the prompt file's, numbered by result.
    expect(replaced.map((i) => view[i]!.content)).toEqual([0, 1, 2].map((n) => placeholderText(n, 2)));
    expect(view).toEqual(expectedView(messages, resultAt, 2));
    // The transcript itself keeps every result.
    expect(view).not.toBe(messages);
    expect(messages).toEqual(before);
  });

  it('keeps the role of a result sent as a user message (the XML dialects), and adds no call id', () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 's' },
      { role: 'user', content: 'q' },
      { role: 'assistant', content: '<call_tool name="pubmed_search">a</call_tool>' },
      { role: 'user', content: resultText(0) },
      { role: 'assistant', content: '<call_tool name="pubmed_search">b</call_tool>' },
      { role: 'user', content: resultText(1) },
    ];
    const ctx = ctxFor({ keep_tool_results: 1 });
    register(ctx, [3, 5]);
    const view = ctx.view(messages);
    expect(view[3]!.role).toBe('user');
    expect('tool_call_id' in view[3]!).toBe(false);
    expect(view[3]!.content).toBe(placeholderText(0, 1));
    expect(view[5]).toBe(messages[5]);
  });

  it('counts the results some request showed only as a placeholder, once each', () => {
    const { messages, resultAt } = nativeTranscript(5);
    const ctx = ctxFor({ keep_tool_results: 2 });
    register(ctx, resultAt);
    expect(ctx.omittedResults).toBe(0);
    ctx.view(messages);
    expect(ctx.omittedResults).toBe(3);
    ctx.view(messages);
    expect(ctx.omittedResults).toBe(3);
    // A view that is not sent does not count.
    const other = ctxFor({ keep_tool_results: 2 });
    register(other, resultAt);
    other.view(messages, 0, false);
    expect(other.omittedResults).toBe(0);
  });

  it('with no keep, or no more results than keep, is an identical copy', () => {
    const { messages, resultAt } = nativeTranscript(3);
    const all = ctxFor({});
    register(all, resultAt);
    const view = all.view(messages);
    expect(view).not.toBe(messages);
    expect(view).toEqual(messages);
    view.forEach((m, i) => expect(m).toBe(messages[i]));
    expect(all.omittedResults).toBe(0);

    const roomy = ctxFor({ keep_tool_results: 3 });
    register(roomy, resultAt);
    expect(roomy.view(messages)).toEqual(messages);
    expect(roomy.omittedResults).toBe(0);
  });
});

describe('ConversationContext.tokens', () => {
  it('equals estimateRequestTokens of the request, with the extra messages counted in', () => {
    const { messages, resultAt } = nativeTranscript(4);
    const ctx = ctxFor({ keep_tool_results: 1, max_context_tokens: 100_000 });
    register(ctx, resultAt);
    const view = ctx.view(messages);
    expect(ctx.tokens(view)).toBe(estimateRequestTokens(view));
    expect(ctx.tokens(messages)).toBe(estimateRequestTokens(messages));
    const ask: ChatMessage = { role: 'user', content: 'Give your final answer now.' };
    expect(ctx.tokens(view, [ask])).toBe(estimateRequestTokens([...view, ask]));
    // The placeholders make the request smaller.
    expect(ctx.tokens(view)).toBeLessThan(ctx.tokens(messages));
  });

  it('adds the tools field when the request carries one', () => {
    const tools = [{ type: 'function', function: { name: 'pubmed_search', description: 'Search PubMed abstracts.', parameters: { type: 'object', properties: { query: { type: 'string' } } } } }];
    const { messages } = nativeTranscript(2);
    const ctx = ctxFor({ max_context_tokens: 100_000 }, tools);
    expect(ctx.tokens(messages)).toBe(estimateRequestTokens(messages, tools));
    expect(ctx.tokens(messages)).toBeGreaterThan(estimateRequestTokens(messages));
    // An empty tools list is no tools field.
    expect(ctxFor({ max_context_tokens: 100_000 }, []).tokens(messages)).toBe(estimateRequestTokens(messages));
  });
});

describe('ConversationContext.fits', () => {
  const tools = [{ type: 'function', function: { name: 'pubmed_search', description: 'Search.', parameters: { type: 'object' } } }];
  const { messages } = nativeTranscript(3);
  const n = estimateRequestTokens(messages, tools);

  it('is true exactly while prompt + max_tokens + margin stays within the window', () => {
    const exact = ctxFor({ max_context_tokens: n + MAX_TOKENS + MARGIN }, tools);
    expect(exact.fits(messages)).toBe(true);
    const oneShort = ctxFor({ max_context_tokens: n + MAX_TOKENS + MARGIN - 1 }, tools);
    expect(oneShort.fits(messages)).toBe(false);
    const roomy = ctxFor({ max_context_tokens: 10 * (n + MAX_TOKENS + MARGIN) }, tools);
    expect(roomy.fits(messages)).toBe(true);
  });

  it('records the largest request that went out, and not one that did not fit', () => {
    const ctx = ctxFor({ max_context_tokens: n + MAX_TOKENS + MARGIN }, tools);
    expect(ctx.peak).toBe(0);
    const small = messages.slice(0, 2);
    expect(ctx.fits(small)).toBe(true);
    expect(ctx.peak).toBe(estimateRequestTokens(small, tools));
    expect(ctx.fits(messages)).toBe(true);
    expect(ctx.peak).toBe(n);
    expect(ctx.fits(small)).toBe(true);
    expect(ctx.peak).toBe(n);
    const bigger = [...messages, { role: 'user' as const, content: resultText(99) }];
    expect(ctx.fits(bigger)).toBe(false);
    expect(ctx.peak).toBe(n);
  });

  it('without a window, always fits', () => {
    const huge: ChatMessage[] = [{ role: 'user', content: resultText(1).repeat(200) }];
    const ctx = ctxFor({ keep_tool_results: 0 }, tools);
    expect(ctx.window).toBeUndefined();
    expect(ctx.fits(huge)).toBe(true);
  });
});

describe('ConversationContext.fitKeep', () => {
  const { messages, resultAt } = nativeTranscript(5);
  const ask: ChatMessage = { role: 'user', content: 'The budget is used up. Give your final answer now.' };
  /** Tokens of the request with `k` results kept, built independently. */
  const at = (k: number): number => estimateRequestTokens([...expectedView(messages, resultAt, k), ask]);

  function ctxWithWindow(window: number, keep: { k: number | undefined } = { k: 3 }): ConversationContext {
    const ctx = ctxFor({ keep_tool_results: keep.k, max_context_tokens: window });
    register(ctx, resultAt);
    return ctx;
  }

  it('the requests shrink as fewer results are kept (the premise of the tests below)', () => {
    for (let k = 5; k > 0; k--) expect(at(k - 1)).toBeLessThan(at(k));
  });

  it('returns K when the request with K results fits', () => {
    expect(ctxWithWindow(at(3) + MAX_TOKENS + MARGIN).fitKeep(messages, ask)).toBe(3);
  });

  it('lowers K until the request fits', () => {
    expect(ctxWithWindow(at(1) + MAX_TOKENS + MARGIN).fitKeep(messages, ask)).toBe(1);
    // One token short of keeping 1: only 0 fits.
    expect(ctxWithWindow(at(1) + MAX_TOKENS + MARGIN - 1).fitKeep(messages, ask)).toBe(0);
    expect(ctxWithWindow(at(0) + MAX_TOKENS + MARGIN).fitKeep(messages, ask)).toBe(0);
  });

  it('returns undefined when not even 0 results fit', () => {
    expect(ctxWithWindow(at(0) + MAX_TOKENS + MARGIN - 1).fitKeep(messages, ask)).toBeUndefined();
  });

  it('starts from every result when keep is unset', () => {
    expect(ctxWithWindow(at(5) + MAX_TOKENS + MARGIN, { k: undefined }).fitKeep(messages, ask)).toBe(5);
    expect(ctxWithWindow(at(4) + MAX_TOKENS + MARGIN, { k: undefined }).fitKeep(messages, ask)).toBe(4);
  });

  it('does not count the views it tries as omitted results', () => {
    const ctx = ctxWithWindow(at(0) + MAX_TOKENS + MARGIN);
    expect(ctx.fitKeep(messages, ask)).toBe(0);
    expect(ctx.omittedResults).toBe(0);
  });

  it('without a window, keeps K', () => {
    const ctx = ctxFor({ keep_tool_results: 2 });
    register(ctx, resultAt);
    expect(ctx.fitKeep(messages, ask)).toBe(2);
  });
});
