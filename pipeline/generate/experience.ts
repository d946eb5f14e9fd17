/**
 * Failure-experience retry: when an attempt fails, the model is shown its own transcript and
 * asked for a structured summary (failure type, what happened, useful findings); the next
 * attempt starts from the question plus that summary. When the model cannot give one (an
 * error, or no JSON object), the summary is derived from the record instead, so a retry
 * never depends on the summary call working.
 */
import type { ChatMessage, Experience, RunConfig, Trajectory } from '../../schemas/index.js';
import { closingBrace, parseJsonArguments } from '../dialects/arguments.js';
import type { Dialect, ToolSpec } from '../dialects/types.js';
import { ConversationContext } from './context.js';
import { LlmError, type Completion, type CompletionRequest } from '../core/llm/llm.js';
import { loadPrompt, renderPrompt } from '../prompts.js';
import { cleanText, clip } from '../text.js';

export interface SummaryDeps {
  readonly llm: { complete(req: CompletionRequest): Promise<Completion> };
  readonly dialect: Dialect;
  readonly config: RunConfig;
  readonly tools?: readonly ToolSpec[] | undefined;
}

const MAX_FINDINGS = 8;
const MAX_FIELD_CHARS = 2_000;

/** The failed attempt's summary, from the model when it can, else from the record. */
export async function summariseFailure(failed: Trajectory, deps: SummaryDeps, signal?: AbortSignal): Promise<Experience> {
  const ask: ChatMessage = {
    role: 'user',
    content: renderPrompt(loadPrompt('failure-summary'), { reason: failed.reason ?? 'unknown', detail: failed.error ?? '(none)' }).trimEnd(),
  };
  const tools = deps.dialect.requestTools?.(deps.tools ?? []);
  const ctx = new ConversationContext(deps.config.context, deps.config.endpoint.max_tokens, tools);
  failed.messages.forEach((m, i) => {
    if (i > 1 && (m.role === 'tool' || (m.role === 'user' && (m.content.trimStart().startsWith('<tool_output') || answersMcpCall(failed.messages[i - 1]))))) ctx.addResult(i);
  });
  const keep = ctx.fitKeep(failed.messages, ask);
  if (keep !== undefined) {
    try {
      const c = await deps.llm.complete({
        messages: [...ctx.view(failed.messages, keep), ask],
        stop: [],
        signal,
        ...(tools === undefined ? {} : { tools, toolChoice: 'none' as const }),
      });
      // The summary is model text that the next attempt's first message and its record carry.
      const parsed = parseSummary(cleanText(c.text), failed.attempt);
      if (parsed !== undefined) return parsed;
    } catch (err) {
      if (err instanceof LlmError && err.kind === 'aborted') throw err;
      // Any other failure: the derived summary below.
    }
  }
  return deriveSummary(failed);
}

/** mcp-xml sends a result as a bare user turn in MiroThinker's form (`tool_results: plain`): the turn right after the call. */
function answersMcpCall(previous: ChatMessage | undefined): boolean {
  return previous?.role === 'assistant' && previous.content.includes('<use_mcp_tool');
}

/** The first JSON object in a reply (after any think block) with the three fields; undefined otherwise. */
export function parseSummary(reply: string, fromAttempt: number): Experience | undefined {
  const thinkEnd = reply.lastIndexOf('</think>');
  const text = thinkEnd === -1 ? reply : reply.slice(thinkEnd + 8);
  for (const candidate of jsonObjects(text)) {
    const parsed = parseJsonArguments(candidate);
    if ('error' in parsed) continue;
    const { failure_type, what_happened, useful_findings } = parsed.value;
    if (typeof failure_type !== 'string' || typeof what_happened !== 'string') continue;
    const findings = Array.isArray(useful_findings) ? useful_findings.filter((f): f is string => typeof f === 'string' && f.trim() !== '') : [];
    return {
      from_attempt: fromAttempt,
      failure_type: clip(failure_type.trim() || 'unknown', MAX_FIELD_CHARS),
      what_happened: clip(what_happened.trim(), MAX_FIELD_CHARS),
      useful_findings: findings.slice(0, MAX_FINDINGS).map((f) => clip(f.trim(), MAX_FIELD_CHARS)),
      source: 'model',
    };
  }
  return undefined;
}

/**
 * Balanced `{…}` spans of a text, outermost first, in order (braces inside JSON strings
 * ignored); an unbalanced last one runs to the end, for the repairer to close. At most a
 * few are tried, so prose full of braces costs little.
 */
function* jsonObjects(text: string, most = 5): Generator<string> {
  let from = text.indexOf('{');
  for (let n = 0; from !== -1 && n < most; n++) {
    const end = closingBrace(text, from);
    yield text.slice(from, end === -1 ? text.length : end + 1);
    if (end === -1) return;
    from = text.indexOf('{', end + 1);
  }
}

/** A summary built from the record alone: the reason, the calls made, how it ended. */
export function deriveSummary(failed: Trajectory): Experience {
  const ran = failed.tool_calls.filter((t) => !t.skipped);
  const queries = ran.slice(0, 5).map((t) => `${t.tool_name}(${clip(t.query, 80)})`);
  const errors = ran.filter((t) => t.error !== undefined).length;
  const what = [
    ran.length === 0 ? 'No tool was called.' : `${ran.length} tool call${ran.length > 1 ? 's' : ''}: ${queries.join(', ')}${ran.length > 5 ? ', …' : ''}${errors ? ` (${errors} failed)` : ''}.`,
    `The attempt ended with ${failed.reason ?? 'a failure'}${failed.error ? `: ${clip(failed.error, 300)}` : ''}.`,
  ].join(' ');
  return { from_attempt: failed.attempt, failure_type: failed.reason ?? 'unknown', what_happened: what, useful_findings: [], source: 'derived' };
}

