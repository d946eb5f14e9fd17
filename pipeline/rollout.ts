/**
 * The turn loop for one sample: call the model, repair the turn, run at most one call,
 * append the real tool output, nudge a turn with no action, force a final answer when the
 * turns or budgets run out, roll back turns on configured conditions, record everything.
 */
import { createHash } from 'node:crypto';
import {
  SCHEMA_VERSION,
  type ChatMessage,
  type FailureReason,
  type Repair,
  type Rollback,
  type RollbackCondition,
  type RunConfig,
  type Sample,
  type ToolCallRecord,
  type Trajectory,
} from '../schemas/index.js';
import type { Dialect, TurnRepairResult } from './dialects/types.js';
import { makeCallId, type Executor } from './executor.js';
import { LlmError, type Completion, type CompletionRequest } from './llm.js';
import { loadPrompt } from './prompts.js';
import { validateTrajectory } from './validator.js';

export interface RolloutDeps {
  readonly llm: { complete(req: CompletionRequest): Promise<Completion> };
  readonly executor: Pick<Executor, 'call' | 'hasTool'>;
  readonly dialect: Dialect;
  readonly config: RunConfig;
  readonly systemPrompt: string;
  readonly runId: string;
}

/**
 * With `endpoint.seed` set, each sample and attempt gets a seed of its own: reproducible,
 * yet a rerun (attempt + 1) or a second sample of one question does not replay the first.
 */
export function sampleSeed(base: number | undefined, sampleId: string, attempt: number): number | undefined {
  if (base === undefined) return undefined;
  return createHash('sha256').update(`${base}\u0000${sampleId}\u0000${attempt}`).digest().readUInt32BE(0) & 0x7fffffff;
}

const REFUSAL = /^\s*(?:I'?m sorry|I am sorry|I apologi[sz]e|I can(?:not|'t|’t) (?:help|assist|answer|comply)|I'?m (?:unable|not able) to)/i;
const DISCARDED_CHARS = 300;

/** Same tool, same query, whatever the spacing and case: a repeated call. */
function queryKey(tool: string, query: string, attributes: Record<string, string>): string {
  const attrs = Object.keys(attributes)
    .sort()
    .map((k) => `${k}=${attributes[k]}`)
    .join('&');
  return `${tool}\u0000${query.normalize('NFKC').toLowerCase().replace(/\s+/g, ' ').trim()}\u0000${attrs}`;
}

export async function rollout(sample: Sample, attempt: number, deps: RolloutDeps, signal?: AbortSignal): Promise<Trajectory> {
  const { llm, executor, dialect, config } = deps;
  const { budgets, rollback: rb } = config;
  const seed = sampleSeed(config.endpoint.seed, sample.sample_id, attempt);
  const startedAt = new Date();
  const t0 = performance.now();

  const messages: ChatMessage[] = [
    { role: 'system', content: deps.systemPrompt },
    { role: 'user', content: sample.question.question },
  ];
  const pieces: string[] = [];
  const toolCalls: ToolCallRecord[] = [];
  const repairs: Repair[] = [];
  const rollbacks: Rollback[] = [];
  const used = new Map<string, number>();
  const asked = new Set<string>();
  const usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: 0, estimated: false };
  let llmMs = 0;
  let toolMs = 0;
  let turn = 0;
  let nudges = 0;
  let rollbacksHere = 0;
  let answerText: string | undefined;
  let reason: FailureReason | undefined;
  let error: string | undefined;

  const complete = async (msgs: readonly ChatMessage[]): Promise<{ c: Completion; r: TurnRepairResult }> => {
    const c = await llm.complete({ messages: msgs, stop: dialect.stopStrings, signal, seed });
    usage.prompt_tokens += c.promptTokens;
    usage.completion_tokens += c.completionTokens;
    usage.total_tokens += c.promptTokens + c.completionTokens;
    usage.llm_calls++;
    usage.estimated ||= c.estimated;
    llmMs += c.ms;
    const r = dialect.repairTurn(c.text, c.finishReason);
    return { c, r };
  };
  const noteRepairs = (c: Completion, r: TurnRepairResult): void => {
    for (const x of r.repairs) repairs.push({ turn, ...x });
    if (c.clientStop && !r.repairs.some((x) => x.kind === 'stop_ignored')) {
      repairs.push({ turn, kind: 'stop_ignored', detail: 'the endpoint went past a stop string; the client cut the turn there' });
    }
  };
  const acceptAnswer = (r: TurnRepairResult & { action: { kind: 'answer' } }): void => {
    messages.push({ role: 'assistant', content: r.text });
    pieces.push(r.text);
    answerText = r.action.answer;
    if (r.repairs.some((x) => x.kind === 'truncated')) reason = 'truncated';
  };
  /** The condition that discards this turn, if rollback is enabled for it and budget remains. */
  const rollbackFor = (raw: string, r: TurnRepairResult): { condition: RollbackCondition; detail: string } | undefined => {
    const on = (c: RollbackCondition): boolean => rb.conditions.includes(c);
    if (on('malformed_call') && r.repairs.some((x) => x.kind === 'malformed_call')) return { condition: 'malformed_call', detail: 'a call with no tool name' };
    if (r.action.kind === 'call') {
      const { toolName, query, attributes } = r.action.call;
      if (on('unknown_tool') && !executor.hasTool(toolName)) return { condition: 'unknown_tool', detail: `no tool named ${toolName}` };
      if (on('repeated_query') && asked.has(queryKey(toolName, query, attributes))) return { condition: 'repeated_query', detail: `${toolName}: ${query}` };
    } else if (on('refusal') && REFUSAL.test(raw.slice(0, 200))) {
      return { condition: 'refusal', detail: raw.trim().slice(0, 120) };
    }
    return undefined;
  };
  const rollbackAllowed = (): boolean => rollbacksHere < rb.max_per_turn && rollbacks.length < rb.max_total;
  const overBudget = (): boolean =>
    toolCalls.length >= budgets.max_tool_calls || (budgets.max_total_tokens !== undefined && usage.total_tokens >= budgets.max_total_tokens);

  try {
    while (answerText === undefined && turn < budgets.max_turns && !overBudget()) {
      const { c, r } = await complete(messages);
      const discard = rollbackFor(c.text, r);
      if (discard && rollbackAllowed()) {
        rollbacksHere++;
        rollbacks.push({ turn, ...discard, discarded: c.text.slice(0, DISCARDED_CHARS) });
        continue;
      }
      noteRepairs(c, r);
      const action = r.action;
      if (action.kind === 'answer') {
        acceptAnswer({ ...r, action });
      } else if (action.kind === 'none') {
        // The model saw its own words and the nudge; the training view keeps neither.
        repairs.push({ turn, kind: 'no_action', detail: 'a turn with neither a call nor an answer' });
        messages.push({ role: 'assistant', content: r.text || c.text });
        if (++nudges > budgets.max_nudges) {
          turn++;
          break;
        }
        messages.push({ role: 'user', content: loadPrompt('nudge') });
      } else {
        const callId = makeCallId(sample.sample_id, attempt, toolCalls.length);
        const exec = await executor.call(action.call, callId, used);
        // A call that reached the server counts toward its limit, even when the turn is rolled back.
        if (!exec.skipped) used.set(action.call.toolName, (used.get(action.call.toolName) ?? 0) + 1);
        if (exec.error && !exec.skipped && rb.conditions.includes('tool_error') && rollbackAllowed()) {
          rollbacksHere++;
          rollbacks.push({ turn, condition: 'tool_error', detail: exec.error, discarded: c.text.slice(0, DISCARDED_CHARS) });
          continue;
        }
        toolMs += exec.durationMs;
        asked.add(queryKey(action.call.toolName, action.call.query, action.call.attributes));
        const out = dialect.renderToolOutput(exec.view);
        toolCalls.push({
          schema_version: SCHEMA_VERSION,
          call_id: callId,
          turn,
          tool_name: action.call.toolName,
          server: exec.server,
          mcp_tool: exec.mcpTool,
          parameters: exec.parameters,
          query: action.call.query,
          arguments: exec.arguments,
          result: exec.result,
          truncated: exec.truncated,
          output_text: out.text,
          snippet_ids: [...out.snippetIds],
          ...(exec.error === undefined ? {} : { error: exec.error }),
          skipped: exec.skipped,
          cached: exec.cached,
          duration_ms: Math.round(exec.durationMs),
          timestamp: new Date().toISOString(),
        });
        messages.push({ role: 'assistant', content: r.text }, { role: 'user', content: out.text });
        pieces.push(r.text, out.text);
      }
      turn++;
      rollbacksHere = 0;
    }

    // Out of turns, nudges or budget: ask for the answer, a bounded number of times.
    for (let i = 0; answerText === undefined && i < budgets.forced_answer_attempts; i++) {
      const ask: ChatMessage = { role: 'user', content: loadPrompt('force-answer') };
      const { c, r } = await complete([...messages, ask]);
      if (r.action.kind !== 'answer') continue;
      messages.push(ask);
      noteRepairs(c, r);
      repairs.push({ turn, kind: 'forced_answer', detail: 'the answer came after the loop asked for it' });
      acceptAnswer({ ...r, action: r.action });
      turn++;
    }
    if (answerText === undefined) reason = turn >= budgets.max_turns || overBudget() ? 'max_turns' : 'no_answer';
  } catch (err) {
    if (!(err instanceof LlmError) || err.kind === 'fatal' || err.kind === 'aborted') throw err;
    reason = err.kind === 'context_overflow' ? 'context_overflow' : 'llm_error';
    error = err.message;
  }

  const shown = new Set(toolCalls.flatMap((t) => t.snippet_ids));
  const cited = answerText === undefined ? [] : dialect.citedIds(answerText);
  const finishedAt = new Date();
  const traj: Trajectory = {
    schema_version: SCHEMA_VERSION,
    id: sample.sample_id,
    question_id: sample.question.id,
    question: sample.question.question,
    ...(sample.question.answer === undefined ? {} : { gold_answer: sample.question.answer }),
    ...(sample.question.meta === undefined ? {} : { meta: sample.question.meta }),
    dialect: dialect.name,
    model: config.endpoint.model,
    status: 'ok',
    final_answer: answerText ?? '',
    interleaved_text: pieces.join('\n'),
    messages,
    tool_calls: toolCalls,
    total_tool_calls: toolCalls.length,
    tools_used: [...new Set(toolCalls.filter((t) => !t.skipped).map((t) => t.tool_name))],
    cited_ids: cited,
    unresolved_cited_ids: cited.filter((id) => !shown.has(id)),
    turns: turn,
    repairs,
    rollbacks,
    validation: { passed: true, issues: [] },
    usage,
    timing: {
      started_at: startedAt.toISOString(),
      finished_at: finishedAt.toISOString(),
      duration_ms: Math.round(performance.now() - t0),
      llm_ms: Math.round(llmMs),
      tool_ms: Math.round(toolMs),
    },
    attempt,
    run_id: deps.runId,
  };
  traj.validation = validateTrajectory(traj, {
    dialect,
    limits: config.tools.limits,
    goldMatch: config.validation.gold_match,
    f1Threshold: config.validation.f1_threshold,
    severities: config.validation.severities,
  });
  if (reason === undefined && !traj.validation.passed) {
    const errors = traj.validation.issues.filter((i) => i.severity === 'error');
    reason = errors.every((i) => i.rule === 'gold.mismatch') ? 'wrong_answer' : 'invalid';
    error = errors.map((i) => `${i.rule}: ${i.message}`).join('; ');
  }
  // A sample whose tools never once worked failed because of them, whatever it answered.
  const ran = toolCalls.filter((t) => !t.skipped);
  if (reason !== undefined && reason !== 'llm_error' && ran.length > 0 && ran.every((t) => t.error !== undefined)) {
    error = `every tool call failed; first: ${ran[0]!.error}${error ? `; ${error}` : ''}`;
    reason = 'tool_error';
  }
  if (reason !== undefined) {
    traj.status = 'failed';
    traj.reason = reason;
    if (error !== undefined) traj.error = error;
  }
  return traj;
}
