/**
 * The turn loop for one sample, the same for every dialect: call the model, repair the
 * turn, run its call (native: its calls, concurrently), append the real tool output, nudge
 * a turn with no action, roll back turns on configured conditions, keep the request inside
 * the context window, force a final answer when the turns, budgets or window run out, and
 * record everything.
 */
import { createHash } from 'node:crypto';
import {
  SCHEMA_VERSION,
  type ChatMessage,
  type Experience,
  type FailureReason,
  type Repair,
  type Rollback,
  type RollbackCondition,
  type RunConfig,
  type Sample,
  type ToolCallRecord,
  type Trajectory,
} from '../../schemas/index.js';
import type { BoundCall, Dialect, ParsedCall, ToolSpec, TurnRepairResult } from '../dialects/types.js';
import { canonicalJson } from '../canonical.js';
import { ConversationContext } from './context.js';
import { makeCallId, skippedCall, type ExecResult, type Executor } from './executor.js';
import { LlmError, type Completion, type CompletionRequest } from './llm.js';
import { loadPrompt, renderPrompt } from '../prompts.js';
import { validateTrajectory } from '../dataset/validator.js';
import { tokenCounter } from '../tokens.js';

export interface RolloutDeps {
  readonly llm: { complete(req: CompletionRequest): Promise<Completion> };
  readonly executor: Pick<Executor, 'call' | 'hasTool'>;
  readonly dialect: Dialect;
  readonly config: RunConfig;
  readonly systemPrompt: string;
  readonly runId: string;
  /** The tools on offer, for the JSON dialects' name matching and native's `tools` field. */
  readonly tools?: readonly ToolSpec[] | undefined;
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

/** The text after a leading think block: what a refusal check reads. */
function visibleText(raw: string): string {
  const t = raw.trimStart();
  if (!t.startsWith('<think>')) return t;
  const close = t.indexOf('</think>');
  return close === -1 ? '' : t.slice(close + 8).trimStart();
}

/** A call that succeeded and returned nothing at all. */
function isEmptyResult(exec: ExecResult): boolean {
  if (exec.error !== undefined) return false;
  const { documents, text } = exec.view;
  return (documents === undefined || documents.length === 0) && (text === undefined || text.trim() === '');
}

/** The first user message: the question, or the question with what a failed attempt learned. */
function questionMessage(question: string, experience: Experience | undefined): string {
  if (experience === undefined) return question;
  const findings = experience.useful_findings.length > 0 ? experience.useful_findings.map((f) => `- ${f}`).join('\n') : '- (none)';
  return renderPrompt(loadPrompt('failure-experience'), {
    question,
    failure_type: experience.failure_type,
    what_happened: experience.what_happened,
    useful_findings: findings,
  }).trimEnd();
}

/** Same tool, same query, whatever the spacing and case (or key order, for JSON arguments): a repeated call. */
function callKey(call: ParsedCall): string {
  const query = call.arguments === undefined ? call.query : canonicalJson(call.arguments);
  const attrs = Object.keys(call.attributes)
    .sort()
    .map((k) => `${k}=${call.attributes[k]}`)
    .join('&');
  return `${call.toolName}\u0000${query.normalize('NFKC').toLowerCase().replace(/\s+/g, ' ').trim()}\u0000${attrs}`;
}

export async function rollout(sample: Sample, attempt: number, deps: RolloutDeps, signal?: AbortSignal, experience?: Experience): Promise<Trajectory> {
  const { llm, executor, dialect, config } = deps;
  const { budgets, rollback: rb } = config;
  const seed = sampleSeed(config.endpoint.seed, sample.sample_id, attempt);
  const startedAt = new Date();
  const t0 = performance.now();
  const specs = deps.tools ?? [];
  const requestTools = dialect.requestTools?.(specs);
  const ctx = new ConversationContext(config.context, config.endpoint.max_tokens, requestTools, tokenCounter(config.tokenizer));

  const messages: ChatMessage[] = [
    { role: 'system', content: deps.systemPrompt },
    { role: 'user', content: questionMessage(sample.question.question, experience) },
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
  const inARow = new Map<RollbackCondition, number>();
  let guardTurn: number | undefined;
  let answerText: string | undefined;
  let reason: FailureReason | undefined;
  let error: string | undefined;

  const complete = async (request: readonly ChatMessage[], final = false): Promise<{ c: Completion; r: TurnRepairResult }> => {
    const c = await llm.complete({
      messages: request,
      stop: dialect.stopStrings,
      signal,
      seed,
      ...(requestTools === undefined ? {} : { tools: requestTools, toolChoice: final ? 'none' : 'auto' }),
    });
    usage.prompt_tokens += c.promptTokens;
    usage.completion_tokens += c.completionTokens;
    usage.total_tokens += c.promptTokens + c.completionTokens;
    usage.llm_calls++;
    usage.estimated ||= c.estimated;
    llmMs += c.ms;
    const r = dialect.repairTurn(c.text, c.finishReason, c.toolCalls ?? []);
    return { c, r };
  };
  const noteRepairs = (c: Completion, r: TurnRepairResult): void => {
    for (const x of r.repairs) repairs.push({ turn, ...x });
    if (c.clientStop && !r.repairs.some((x) => x.kind === 'stop_ignored')) {
      repairs.push({ turn, kind: 'stop_ignored', detail: 'the endpoint went past a stop string; the client cut the turn there' });
    }
  };
  const assistantMessage = (r: TurnRepairResult, calls: readonly ParsedCall[]): ChatMessage =>
    dialect.turnMessage?.(r, calls) ?? { role: 'assistant', content: r.text };
  const acceptAnswer = (r: TurnRepairResult & { action: { kind: 'answer' } }): void => {
    messages.push(assistantMessage(r, []));
    pieces.push(r.text);
    answerText = r.action.answer;
    if (r.repairs.some((x) => x.kind === 'truncated')) reason = 'truncated';
  };
  /** Rollback is on for the condition and its budgets (in a row, for this condition, in total) allow one more. */
  const mayRollBack = (condition: RollbackCondition): boolean =>
    rb.conditions.includes(condition) &&
    rollbacksHere < rb.max_per_turn &&
    (inARow.get(condition) ?? 0) < (rb.max_consecutive[condition] ?? rb.max_per_turn) &&
    rollbacks.length < rb.max_total;
  const rollBack = (condition: RollbackCondition, detail: string, discarded: string): void => {
    rollbacksHere++;
    inARow.set(condition, (inARow.get(condition) ?? 0) + 1);
    rollbacks.push({ turn, condition, detail, discarded: discarded.slice(0, DISCARDED_CHARS) });
  };
  /** The condition that discards this turn before anything runs, if any. */
  const discardBeforeRunning = (raw: string, r: TurnRepairResult, bound: readonly BoundCall[]): { condition: RollbackCondition; detail: string } | undefined => {
    const malformed = r.repairs.some((x) => x.kind === 'malformed_call') || bound.some((b) => b.error !== undefined);
    if (malformed && mayRollBack('malformed_call')) return { condition: 'malformed_call', detail: bound.find((b) => b.error)?.error ?? 'a call with no tool name' };
    for (const { call } of bound) {
      if (!executor.hasTool(call.toolName) && mayRollBack('unknown_tool')) return { condition: 'unknown_tool', detail: `no tool named ${call.toolName}` };
      if (asked.has(callKey(call)) && mayRollBack('repeated_query')) return { condition: 'repeated_query', detail: `${call.toolName}: ${call.query}` };
    }
    if (bound.length === 0 && REFUSAL.test(visibleText(raw).slice(0, 200)) && mayRollBack('refusal')) return { condition: 'refusal', detail: raw.trim().slice(0, 120) };
    return undefined;
  };
  /** The condition that discards this turn once its calls have run, if any. */
  const discardAfterRunning = (execs: readonly ExecResult[]): { condition: RollbackCondition; detail: string } | undefined => {
    const failed = execs.find((e) => e.error !== undefined && !e.skipped);
    if (failed && mayRollBack('tool_error')) return { condition: 'tool_error', detail: failed.error! };
    if (execs.some(isEmptyResult) && mayRollBack('empty_result')) return { condition: 'empty_result', detail: 'a call returned nothing' };
    return undefined;
  };
  const overBudget = (): boolean =>
    toolCalls.length >= budgets.max_tool_calls || (budgets.max_total_tokens !== undefined && usage.total_tokens >= budgets.max_total_tokens);
  const stopForContext = (detail: string): void => {
    guardTurn = turn;
    repairs.push({ turn, kind: 'context_guard', detail });
  };

  /** Runs a turn's calls concurrently; each sees the limits as if the earlier ones had run. */
  const runCalls = (bound: readonly BoundCall[], callIds: readonly string[]): Promise<ExecResult[]> => {
    const pending = new Map(used);
    return Promise.all(
      bound.map(({ call, error: bad }, i) => {
        if (bad !== undefined) return Promise.resolve(skippedCall(call, bad));
        const view = new Map(pending);
        pending.set(call.toolName, (pending.get(call.toolName) ?? 0) + 1);
        return executor.call(call, callIds[i]!, view);
      }),
    );
  };

  try {
    while (answerText === undefined && turn < budgets.max_turns && !overBudget()) {
      const request = ctx.view(messages);
      if (!ctx.fits(request)) {
        stopForContext(`the next request (${ctx.tokens(request)} tokens) would not fit the ${ctx.window}-token window with ${config.endpoint.max_tokens} for the reply`);
        break;
      }
      let c: Completion;
      let r: TurnRepairResult;
      try {
        ({ c, r } = await complete(request));
      } catch (err) {
        // The endpoint counts differently from our tokenizer: ask for the answer with less in the request.
        if (err instanceof LlmError && err.kind === 'context_overflow' && toolCalls.length > 0) {
          stopForContext(`the endpoint rejected the request as too long: ${err.message}`);
          break;
        }
        throw err;
      }
      const action = r.action;
      const calls = action.kind === 'call' ? [action.call] : action.kind === 'calls' ? action.calls : [];
      const bound = calls.map((call): BoundCall => dialect.bindCall?.(call, specs) ?? { call, repairs: [], changed: false });
      // Several calls in one turn never take the trajectory past its call budget.
      const room = Math.max(1, budgets.max_tool_calls - toolCalls.length);
      const overflow = bound.length > room ? bound.splice(room) : [];
      const early = discardBeforeRunning(c.text, r, bound);
      if (early) {
        rollBack(early.condition, early.detail, c.text);
        continue;
      }
      if (action.kind === 'answer') {
        noteRepairs(c, r);
        acceptAnswer({ ...r, action });
      } else if (action.kind === 'none') {
        noteRepairs(c, r);
        if (dialect.noActionAsksForAnswer && toolCalls.length > 0) {
          // MiroThinker's rule: a turn without a call is the model's conclusion; the summary prompt takes the answer.
          // Before any tool has run it is nudged instead: a conclusion from no evidence makes no agentic trace.
          messages.push(assistantMessage(r, []));
          if (r.text.trim() !== '') pieces.push(r.text);
          turn++;
          break;
        }
        // The model saw its own words and the nudge; the training view keeps neither.
        repairs.push({ turn, kind: 'no_action', detail: 'a turn with neither a call nor an answer' });
        messages.push({ role: 'assistant', content: r.text || c.text });
        if (++nudges > budgets.max_nudges) {
          turn++;
          break;
        }
        messages.push({ role: 'user', content: loadPrompt(dialect.nudgePrompt ?? 'nudge') });
      } else {
        const callIds = bound.map((_, i) => makeCallId(sample.sample_id, attempt, toolCalls.length + i));
        const execs = await runCalls(bound, callIds);
        // A call that reached the server counts toward its limit, even when the turn is rolled back.
        for (let i = 0; i < execs.length; i++) if (!execs[i]!.skipped) used.set(bound[i]!.call.toolName, (used.get(bound[i]!.call.toolName) ?? 0) + 1);
        const late = discardAfterRunning(execs);
        if (late) {
          rollBack(late.condition, late.detail, c.text);
          continue;
        }
        noteRepairs(c, r);
        if (overflow.length > 0) repairs.push({ turn, kind: 'extra_calls', detail: `${overflow.length} of the turn's calls past max_tool_calls (${budgets.max_tool_calls}) dropped` });
        const finalCalls = bound.map((b, i) => ({ ...b.call, id: b.call.id ?? callIds[i] }));
        for (const b of bound) for (const x of b.repairs) repairs.push({ turn, ...x });
        // The turn as written, unless a call was rewritten or there are several (each then meets its own output).
        const rewrite = bound.length > 1 || overflow.length > 0 || bound.some((b) => b.changed);
        const prefix = r.text.slice(0, r.callOffset ?? r.text.length);
        const callTexts = rewrite ? finalCalls.map((call) => dialect.renderCall!(call)) : [r.text.slice(prefix.length)];
        const turnText = prefix + callTexts.join('\n');
        messages.push(assistantMessage({ ...r, text: turnText }, finalCalls));
        for (let i = 0; i < execs.length; i++) {
          const exec = execs[i]!;
          const call = finalCalls[i]!;
          toolMs += exec.durationMs;
          asked.add(callKey(call));
          const out = dialect.renderToolOutput(exec.view);
          toolCalls.push(toolCallRecord(callIds[i]!, turn, call, exec, out));
          ctx.addResult(messages.length);
          messages.push(dialect.toolMessage?.(out.text, call) ?? { role: 'user', content: out.text });
          pieces.push((i === 0 ? prefix : '') + callTexts[i]!, out.text);
        }
      }
      turn++;
      rollbacksHere = 0;
      inARow.clear();
    }

    // Out of turns, nudges, budget or room: ask for the answer, a bounded number of times.
    const ask: ChatMessage = { role: 'user', content: renderPrompt(loadPrompt(dialect.finalAnswerPrompt ?? 'force-answer'), { question: sample.question.question }) };
    for (let i = 0; answerText === undefined && i < budgets.forced_answer_attempts; i++) {
      const keep = ctx.fitKeep(messages, ask);
      if (keep === undefined) {
        reason = 'context_overflow';
        error = `even with every tool result left out, asking for the answer would not fit the ${ctx.window}-token window`;
        break;
      }
      const { c, r } = await complete([...ctx.view(messages, keep), ask], true);
      if (r.action.kind !== 'answer') continue;
      messages.push(ask);
      noteRepairs(c, r);
      repairs.push({ turn, kind: 'forced_answer', detail: guardTurn === undefined ? 'the answer came after the loop asked for it' : 'the context guard stopped the loop; the answer came after it asked' });
      acceptAnswer({ ...r, action: r.action });
      turn++;
    }
    if (answerText === undefined) reason ??= turn >= budgets.max_turns || overBudget() ? 'max_turns' : guardTurn !== undefined ? 'context_overflow' : 'no_answer';
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
    ...(ctx.keep === undefined && ctx.window === undefined
      ? {}
      : {
          context: {
            ...(ctx.keep === undefined ? {} : { keep_tool_results: ctx.keep }),
            omitted_results: ctx.omittedResults,
            ...(ctx.window === undefined ? {} : { max_context_tokens: ctx.window, peak_request_tokens: ctx.peak }),
            ...(guardTurn === undefined ? {} : { guard_turn: guardTurn }),
            ...(ctx.lastKeep === undefined ? {} : { last_request_keep: ctx.lastKeep }),
          },
        }),
    ...(requestTools === undefined ? {} : { tools: requestTools }),
    ...(experience === undefined ? {} : { experience }),
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

function toolCallRecord(callId: string, turn: number, call: ParsedCall, exec: ExecResult, out: { text: string; snippetIds: readonly string[] }): ToolCallRecord {
  return {
    schema_version: SCHEMA_VERSION,
    call_id: callId,
    turn,
    tool_name: call.toolName,
    server: exec.server,
    mcp_tool: exec.mcpTool,
    parameters: exec.parameters,
    query: call.query,
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
  };
}
