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
import type { BoundCall, Dialect, ParsedCall, RawToolResult, ToolSpec, TurnRepair, TurnRepairResult } from '../dialects/types.js';
import { requestTools as functionSpecs } from '../dialects/native.js';
import { canonicalJson } from '../canonical.js';
import { anyRemoved, cleanJson, cleanText, describeRemoved, noneRemoved } from '../text.js';
import { ConversationContext } from './context.js';
import { beforeOf, sentCompletion, type Before } from './repair-before.js';
import { resultText } from './tool-result.js';
import { REFUSAL } from '../refusal.js';
import { makeCallId, skippedCall, type CallSite, type ExecResult, type Toolbox } from './executor.js';
import { LlmError, type Completion, type CompletionRequest } from '../core/llm/llm.js';
import { loadPrompt, renderPrompt } from '../prompts.js';
import { validateTrajectory } from '../core/validator.js';
import { tokenCounter } from '../core/tokens/count.js';

export interface RolloutDeps {
  readonly llm: { complete(req: CompletionRequest): Promise<Completion> };
  /** The session's tools: an executor view, and with agents the sub-agents it may call. */
  readonly toolbox: Pick<Toolbox, 'call' | 'hasTool'>;
  readonly dialect: Dialect;
  readonly config: RunConfig;
  readonly systemPrompt: string;
  readonly runId: string;
  /** The tools on offer, for the JSON dialects' name matching and native's `tools` field. */
  readonly tools?: readonly ToolSpec[] | undefined;
  /** Runs with `agents`: which agent this session is, and where it sits in its family. */
  readonly agent?: AgentRole | undefined;
}

/** A session of a run with agents: the record's agent fields, and how the session ends. */
export interface AgentRole {
  /** `main` or the sub-agent's name. */
  readonly name: string;
  /** 0 for main. */
  readonly depth: number;
  /** The root session's id. */
  readonly familyId: string;
  /** Sub-agents: the session that called it, and the index of that call in its tool_calls. */
  readonly parentId?: string | undefined;
  readonly parentCall?: number | undefined;
  /**
   * `always`: the final-answer prompt ends every session, even one whose loop ended in an
   * answer (mcp-xml: a \boxed{} in the loop is its conclusion; tulu and native end at their
   * answer); `when_needed`: only when the loop ends without one.
   */
  readonly finalAnswer: 'always' | 'when_needed';
  /** Sub-agents: the reply to the final-answer prompt, think removed, is the session's answer: its report. */
  readonly reports: boolean;
  /** The final-answer prompt; undefined: the dialect's. */
  readonly finalAnswerPrompt?: string | undefined;
  /** `{task}` in the final-answer prompt: a sub-agent's subtask, else the question. */
  readonly task?: string | undefined;
}

/** What one session left: its record, and its sub-agents' records (post-order: each before the session that called it). */
export interface SessionRecords {
  readonly trajectory: Trajectory;
  readonly descendants: readonly Trajectory[];
}

/**
 * With `endpoint.seed` set, each sample and attempt gets a seed of its own: reproducible,
 * yet a rerun (attempt + 1) or a second sample of one question does not replay the first.
 */
export function sampleSeed(base: number | undefined, sampleId: string, attempt: number): number | undefined {
  if (base === undefined) return undefined;
  return createHash('sha256').update(`${base}\u0000${sampleId}\u0000${attempt}`).digest().readUInt32BE(0) & 0x7fffffff;
}

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

/** A call's result as the tool gave it, for a dialect that sends that rather than the rendered view. */
function rawToolResult(exec: ExecResult, call: ParsedCall): RawToolResult {
  const text = typeof exec.result === 'string' ? exec.result : resultText(exec.result);
  return { text, error: exec.error, server: exec.server ?? call.attributes.server_name ?? '', tool: exec.mcpTool ?? call.toolName };
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

/**
 * The completion with its text and native calls cleaned (pipeline/text.ts), before any of it is
 * parsed, shown back to the model or stored; `removed` says what went, for the turn's repair.
 */
function cleanCompletion(c: Completion): { c: Completion; removed: string | undefined } {
  const removed = noneRemoved();
  const text = cleanText(c.text, removed);
  const toolCalls = cleanJson(c.toolCalls, removed);
  return anyRemoved(removed) ? { c: { ...c, text, toolCalls }, removed: describeRemoved(removed) } : { c, removed: undefined };
}

/**
 * A call with its parsed arguments cleaned: JSON arguments can spell a NUL or a lone surrogate
 * as an escape (`\u0000`), which text cleaning leaves alone and JSON.parse turns back into one.
 * A changed call is written again from what is sent to the tool.
 */
function cleanCall(b: BoundCall, canRewrite: boolean): { b: BoundCall; removed: string | undefined } {
  const removed = noneRemoved();
  const { call } = b;
  const args = call.arguments === undefined ? undefined : cleanJson(call.arguments, removed);
  const attributes = cleanJson(call.attributes, removed);
  const query = args !== undefined && args !== call.arguments ? JSON.stringify(args) : cleanText(call.query, removed);
  if (!anyRemoved(removed)) return { b, removed: undefined };
  // A dialect without renderCall (tulu) parses its calls from the cleaned text and has no escapes to decode: its call text is already clean.
  return { b: { ...b, call: { ...call, attributes, query, ...(args === undefined ? {} : { arguments: args }) }, changed: b.changed || canRewrite }, removed: describeRemoved(removed) };
}

/** A tool's result, what the model is shown of it and its error, cleaned before anything renders or stores them. */
function cleanExec(exec: ExecResult): { exec: ExecResult; removed: string | undefined } {
  const removed = noneRemoved();
  const view = cleanJson(exec.view, removed);
  const result = cleanJson(exec.result, removed);
  const error = exec.error === undefined ? undefined : cleanText(exec.error, removed);
  const parameters = cleanJson(exec.parameters, removed);
  const args = cleanJson(exec.arguments, removed);
  if (!anyRemoved(removed)) return { exec, removed: undefined };
  return { exec: { ...exec, view, result, parameters, arguments: args, ...(error === undefined ? {} : { error }) }, removed: describeRemoved(removed) };
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

/** The failure an endpoint error makes of a sample. */
const FAILURE_OF: Record<Exclude<LlmError['kind'], 'aborted'>, FailureReason> = {
  fatal: 'endpoint_rejected',
  context_overflow: 'context_overflow',
  exhausted: 'llm_error',
  too_large: 'response_too_large',
};

/** Failures the endpoint caused, whatever the tools did: run.ts reads them to tell a refusing or dead endpoint. */
const ENDPOINT_FAILURES: ReadonlySet<FailureReason> = new Set(Object.values(FAILURE_OF).filter((r) => r !== 'context_overflow'));

/**
 * The validation issue (warn unless `validation.severities` says otherwise) on a trajectory
 * one of whose completions ran far past its `max_tokens`. Added here, as the judge's is, since
 * only the rollout saw the completions.
 */
export const PAST_MAX_TOKENS_RULE = 'endpoint.past_max_tokens';

/** One session and its sub-agents' sessions: the records of a family, below and including this one. */
export async function runAgentSession(sample: Sample, attempt: number, deps: RolloutDeps, signal?: AbortSignal, experience?: Experience): Promise<SessionRecords> {
  const session = new Session(sample, attempt, deps, signal, experience);
  const trajectory = await session.run();
  return { trajectory, descendants: session.descendants };
}

/** The `<think>…</think>` blocks of a turn, and the text without them: a sub-agent's report is the reply without its think. */
function splitThink(text: string): { think: string; rest: string } {
  const think: string[] = [];
  let rest = '';
  let at = 0;
  for (;;) {
    const open = text.indexOf('<think>', at);
    if (open === -1) {
      rest += text.slice(at);
      break;
    }
    const close = text.indexOf('</think>', open);
    rest += text.slice(at, open);
    // An unclosed think runs to the end: all of it is thought, none of it report.
    if (close === -1) {
      think.push(text.slice(open));
      break;
    }
    think.push(text.slice(open, close + '</think>'.length));
    at = close + '</think>'.length;
  }
  return { think: think.join('\n'), rest: rest.trim() };
}

/** `<answer` inside a report, made inert, so the wrapper around it stays its only answer. */
function escapeAnswerTags(s: string): string {
  return s.replace(/<(\/?answer)/gi, '&lt;$1');
}

/** A rollout in progress: what the loop has seen and done so far. */
interface Outcome {
  answerText?: string | undefined;
  reason?: FailureReason | undefined;
  error?: string | undefined;
}

/**
 * One agent session: the conversation, the budgets it spends and what it records. `run()`
 * is the loop; each method below it is one named step of a turn.
 */
class Session {
  readonly #sample: Sample;
  readonly #attempt: number;
  readonly #deps: RolloutDeps;
  readonly #signal: AbortSignal | undefined;
  readonly #experience: Experience | undefined;
  readonly #seed: number | undefined;
  readonly #specs: readonly ToolSpec[];
  readonly #requestTools: unknown[] | undefined;
  readonly #ctx: ConversationContext;
  readonly #startedAt = new Date();
  readonly #t0 = performance.now();

  readonly #messages: ChatMessage[];
  /** The training view, segment by segment. */
  readonly #pieces: string[] = [];
  readonly #toolCalls: ToolCallRecord[] = [];
  readonly #repairs: Repair[] = [];
  readonly #rollbacks: Rollback[] = [];
  /** Calls per tool that reached a server: what `tools.limits` counts. */
  readonly #used = new Map<string, number>();
  /** Every call already made, as `callKey`: what `repeated_query` compares with. */
  readonly #asked = new Set<string>();
  readonly #usage: Trajectory['usage'] = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: 0, estimated: false };
  #llmMs = 0;
  #toolMs = 0;
  #turn = 0;
  #nudges = 0;
  /** Rollbacks of the current turn, and per condition in a row. */
  #rollbacksHere = 0;
  readonly #inARow = new Map<RollbackCondition, number>();
  #guardTurn: number | undefined;
  /** An answer the loop ended on that the final-answer prompt restates (`finalAnswer: always`). */
  #concluded: { answer: string; truncated: boolean } | undefined;
  /** Sub-agent sessions started by kept calls, per toolbox key: what numbers the next child (CallSite.nextChild). */
  #children = new Map<string, number>();
  /** The records of the sub-agent sessions this session's kept calls started, post-order. */
  readonly descendants: Trajectory[] = [];
  /** Completions far past their max_tokens: the endpoint ignored the limit, or miscounts. */
  readonly #pastMaxTokens: string[] = [];
  readonly #outcome: Outcome = {};
  /** The last completion as the endpoint sent it and its turn as repaired: what its repairs keep as `before` (made once, when first asked). */
  #lastSent: { readonly raw: Completion; readonly kept: string; before?: Before } | undefined;
  /** How the last request sent earlier turns' reasoning back (the record's `reasoning_sent`). */
  #reasoningSent: Trajectory['reasoning_sent'];

  constructor(sample: Sample, attempt: number, deps: RolloutDeps, signal: AbortSignal | undefined, experience: Experience | undefined) {
    this.#sample = sample;
    this.#attempt = attempt;
    this.#deps = deps;
    this.#signal = signal;
    this.#experience = experience;
    this.#seed = sampleSeed(deps.config.endpoint.seed, sample.sample_id, attempt);
    this.#specs = deps.tools ?? [];
    this.#requestTools = deps.dialect.requestTools?.(this.#specs);
    this.#ctx = new ConversationContext(deps.config.context, deps.config.endpoint.max_tokens, this.#requestTools, tokenCounter(deps.config.tokenizer), deps.dialect.omittedResultPrompt);
    const first = questionMessage(sample.question.question, experience);
    // A layout's wrapper (MiroThinker's \boxed{} instruction) goes on the question, never on a sub-agent's task.
    const prompt = deps.agent?.reports ? undefined : deps.dialect.questionPrompt;
    this.#messages = [
      { role: 'system', content: deps.systemPrompt },
      { role: 'user', content: prompt === undefined ? first : renderPrompt(loadPrompt(prompt), { question: first }).trimEnd() },
    ];
  }

  async run(): Promise<Trajectory> {
    const { budgets } = this.#deps.config;
    try {
      let going = true;
      while (going && this.#outcome.answerText === undefined && this.#turn < budgets.max_turns && !this.#overBudget()) going = await this.#step();
      if (this.#deps.agent?.reports) await this.#askForReport();
      else await this.#askForAnswer();
      if (this.#outcome.answerText === undefined && this.#concluded !== undefined) {
        // The final-answer prompt got no answer: the one the loop concluded with stands.
        this.#outcome.answerText = this.#concluded.answer;
        if (this.#concluded.truncated) this.#outcome.reason = 'truncated';
      }
      if (this.#outcome.answerText === undefined) {
        this.#outcome.reason ??= this.#turn >= budgets.max_turns || this.#overBudget() ? 'max_turns' : this.#guardTurn !== undefined ? 'context_overflow' : 'no_answer';
      }
    } catch (err) {
      if (!(err instanceof LlmError) || err.kind === 'aborted') throw err;
      // A refusal (`endpoint_rejected`) is a failure of this sample; the run decides whether it
      // is one of a streak that means the endpoint refuses everything (run.ts, fail fast).
      this.#outcome.reason = FAILURE_OF[err.kind];
      this.#outcome.error = err.message;
    }
    return this.#finish();
  }

  /** One turn: ask the model, repair its turn, then answer, nudge or run its calls. False ends the loop. */
  async #step(): Promise<boolean> {
    const { config, dialect } = this.#deps;
    const request = this.#ctx.view(this.#messages);
    if (!this.#ctx.fits(request)) {
      this.#stopForContext(`the next request (${this.#ctx.tokens(request)} tokens) would not fit the ${this.#ctx.window}-token window with ${config.endpoint.max_tokens} for the reply`);
      return false;
    }
    let c: Completion;
    let r: TurnRepairResult;
    try {
      ({ c, r } = await this.#complete(request));
    } catch (err) {
      // The endpoint counts differently from our tokenizer: ask for the answer with less in the request.
      if (err instanceof LlmError && err.kind === 'context_overflow' && this.#toolCalls.length > 0) {
        this.#stopForContext(`the endpoint rejected the request as too long: ${err.message}`);
        return false;
      }
      throw err;
    }
    const action = r.action;
    const calls = action.kind === 'call' ? [action.call] : action.kind === 'calls' ? action.calls : [];
    const bound = calls.map((call): BoundCall => {
      const { b, removed } = cleanCall(dialect.bindCall?.(call, this.#specs) ?? { call, repairs: [], changed: false }, dialect.renderCall !== undefined);
      return removed === undefined ? b : { ...b, repairs: [...b.repairs, { kind: 'control_chars', detail: `arguments of ${b.call.toolName}: ${removed}` }] };
    });
    // Several calls in one turn never take the trajectory past its call budget.
    const room = Math.max(1, config.budgets.max_tool_calls - this.#toolCalls.length);
    const overflow = bound.length > room ? bound.splice(room) : [];
    const early = this.#discardBeforeRunning(c.text, r, bound);
    if (early) {
      this.#rollBack(early.condition, early.detail, c.text);
      return true;
    }
    if (action.kind === 'answer' && this.#restates()) {
      // MiroThinker's loop: an answer ends the loop, and the final-answer prompt follows anyway.
      this.#noteRepairs(c, r);
      this.#messages.push(this.#assistantMessage(r, []));
      this.#pieces.push(r.text);
      this.#concluded = { answer: action.answer, truncated: r.repairs.some((x) => x.kind === 'truncated') };
      this.#turn++;
      return false;
    } else if (action.kind === 'answer') {
      this.#noteRepairs(c, r);
      this.#acceptAnswer({ ...r, action });
    } else if (action.kind === 'none') {
      if (!this.#onNoAction(c, r)) {
        this.#turn++;
        return false;
      }
    } else if (!(await this.#onCalls(c, r, bound, overflow))) {
      return true;
    }
    this.#turn++;
    this.#rollbacksHere = 0;
    this.#inARow.clear();
    return true;
  }

  async #complete(request: readonly ChatMessage[], final = false): Promise<{ c: Completion; r: TurnRepairResult }> {
    const { llm, dialect } = this.#deps;
    const raw = await llm.complete({
      messages: request,
      stop: dialect.stopStrings,
      signal: this.#signal,
      seed: this.#seed,
      ...(this.#requestTools === undefined ? {} : { tools: this.#requestTools, toolChoice: final ? 'none' : 'auto' }),
    });
    const usage = this.#usage;
    usage.prompt_tokens += raw.promptTokens;
    usage.completion_tokens += raw.completionTokens;
    usage.total_tokens += raw.promptTokens + raw.completionTokens;
    usage.llm_calls++;
    if (raw.reasoningSent !== undefined) this.#reasoningSent = raw.reasoningSent;
    usage.estimated ||= raw.estimated;
    if (raw.cachedTokens !== undefined) usage.cached_tokens = (usage.cached_tokens ?? 0) + raw.cachedTokens;
    if (raw.pastMaxTokens !== undefined) this.#pastMaxTokens.push(`turn ${this.#turn}: ${raw.pastMaxTokens.completionTokens} completion tokens for max_tokens ${raw.pastMaxTokens.maxTokens}`);
    this.#llmMs += raw.ms;
    const { c, removed } = cleanCompletion(raw);
    const r = dialect.repairTurn(c.text, c.finishReason, c.toolCalls ?? []);
    this.#lastSent = { raw, kept: r.text };
    // Carried in the turn's repairs, so that a turn rolled back records none of them.
    return { c, r: removed === undefined ? r : { ...r, repairs: [{ kind: 'control_chars', detail: `model text: ${removed}` }, ...r.repairs] } };
  }

  /**
   * A turn with neither a call nor an answer. Returns false when the loop should stop and ask
   * for the answer: MiroThinker's conclusion rule, or out of nudges.
   */
  #onNoAction(c: Completion, r: TurnRepairResult): boolean {
    const { dialect, config } = this.#deps;
    this.#noteRepairs(c, r);
    if (dialect.noActionAsksForAnswer && this.#toolCalls.length > 0) {
      // MiroThinker's rule: a turn without a call is the model's conclusion; the summary prompt takes the answer.
      // Before any tool has run it is nudged instead: a conclusion from no evidence makes no agentic trace.
      this.#messages.push(this.#assistantMessage(r, []));
      if (r.text.trim() !== '') this.#pieces.push(r.text);
      return false;
    }
    // The model saw its own words and the nudge; the training view keeps neither.
    this.#repairModelText({ kind: 'no_action', detail: 'a turn with neither a call nor an answer' });
    this.#messages.push({ role: 'assistant', content: r.text || c.text });
    if (++this.#nudges > config.budgets.max_nudges) return false;
    this.#messages.push({ role: 'user', content: loadPrompt(dialect.nudgePrompt ?? 'nudge') });
    return true;
  }

  /**
   * Whether an answer in the loop is a conclusion the final-answer prompt restates
   * (`finalAnswer: always`): in MiroThinker's loop (mcp-xml), where a `\boxed{}` is part of a
   * turn's prose. Tulu's and native's answers are final messages: the session ends at them.
   */
  #restates(): boolean {
    const agent = this.#deps.agent;
    return agent !== undefined && (agent.finalAnswer === 'always' || agent.reports) && this.#deps.dialect.noActionAsksForAnswer === true;
  }

  /** Runs a turn's calls and appends each output. False when the turn was rolled back after running. */
  async #onCalls(c: Completion, r: TurnRepairResult, bound: readonly BoundCall[], overflow: readonly BoundCall[]): Promise<boolean> {
    const { dialect, config } = this.#deps;
    const callIds = bound.map((_, i) => makeCallId(this.#sample.sample_id, this.#attempt, this.#toolCalls.length + i));
    const { execs: ran, children } = await this.#runCalls(bound, callIds);
    const cleaned = ran.map(cleanExec);
    const execs = cleaned.map((x) => x.exec);
    // A call that reached the server counts toward its limit, even when the turn is rolled back.
    for (let i = 0; i < execs.length; i++) if (!execs[i]!.skipped) this.#used.set(bound[i]!.call.toolName, (this.#used.get(bound[i]!.call.toolName) ?? 0) + 1);
    const late = this.#discardAfterRunning(execs);
    if (late) {
      this.#rollBack(late.condition, late.detail, c.text);
      return false;
    }
    this.#noteRepairs(c, r);
    // The turn is kept: so are the sub-agent sessions its calls started, and their numbers.
    this.#children = children;
    for (const exec of execs) if (exec.child !== undefined) this.descendants.push(...exec.child.records);
    if (overflow.length > 0) this.#repairModelText({ kind: 'extra_calls', detail: `${overflow.length} of the turn's calls past max_tool_calls (${config.budgets.max_tool_calls}) dropped` });
    const finalCalls = bound.map((b, i) => ({ ...b.call, id: b.call.id ?? callIds[i] }));
    for (const b of bound) for (const x of b.repairs) this.#repairModelText(x);
    cleaned.forEach(({ removed }, i) => {
      if (removed !== undefined) this.#repairs.push({ turn: this.#turn, kind: 'control_chars', detail: `tool text of ${callIds[i]} (${bound[i]!.call.toolName}): ${removed}` });
    });
    // The turn as written, unless a call was rewritten or there are several (each then meets its own output).
    const rewrite = bound.length > 1 || overflow.length > 0 || bound.some((b) => b.changed);
    const prefix = r.text.slice(0, r.callOffset ?? r.text.length);
    const callTexts = rewrite ? finalCalls.map((call) => dialect.renderCall!(call)) : [r.text.slice(prefix.length)];
    const turnText = prefix + callTexts.join('\n');
    this.#messages.push(this.#assistantMessage({ ...r, text: turnText }, finalCalls));
    for (let i = 0; i < execs.length; i++) {
      const exec = execs[i]!;
      const call = finalCalls[i]!;
      this.#toolMs += exec.durationMs;
      this.#asked.add(callKey(call));
      const out = dialect.renderToolOutput(exec.view);
      this.#toolCalls.push({ ...toolCallRecord(callIds[i]!, this.#turn, call, exec, out), message_index: this.#messages.length });
      this.#ctx.addResult(this.#messages.length);
      this.#messages.push(dialect.toolMessage?.(out.text, call, rawToolResult(exec, call)) ?? { role: 'user', content: out.text });
      this.#pieces.push((i === 0 ? prefix : '') + callTexts[i]!, out.text);
    }
    return true;
  }

  /**
   * Runs a turn's calls concurrently; each sees the limits as if the earlier ones had run.
   * `children`: the child numbers after this turn, which count only if the turn is kept.
   */
  async #runCalls(bound: readonly BoundCall[], callIds: readonly string[]): Promise<{ execs: ExecResult[]; children: Map<string, number> }> {
    const pending = new Map(this.#used);
    const children = new Map(this.#children);
    const base = this.#toolCalls.length;
    const execs = await Promise.all(
      bound.map(({ call, error: bad }, i) => {
        if (bad !== undefined) return Promise.resolve(skippedCall(call, bad));
        const view = new Map(pending);
        pending.set(call.toolName, (pending.get(call.toolName) ?? 0) + 1);
        const site: CallSite = {
          index: base + i,
          nextChild: (key) => {
            const n = children.get(key) ?? 0;
            children.set(key, n + 1);
            return n;
          },
        };
        return this.#deps.toolbox.call(call, callIds[i]!, view, site);
      }),
    );
    return { execs, children };
  }

  /** The final-answer prompt: the agent's, else the dialect's, with the question (and the task, for the prompts that name it). */
  #finalAnswerAsk(): ChatMessage {
    const { dialect, agent } = this.#deps;
    const question = this.#sample.question.question;
    const name = agent?.finalAnswerPrompt ?? dialect.finalAnswerPrompt ?? 'force-answer';
    // `{task_failed}` (MiroThinker's summaries): the prompt's `-failed` note when the loop ran out of turns, budget or room.
    const { budgets } = this.#deps.config;
    const failed = this.#concluded === undefined && (this.#turn >= budgets.max_turns || this.#overBudget() || this.#guardTurn !== undefined);
    const template = loadPrompt(name);
    const taskFailed = template.includes('{task_failed}') && failed ? loadPrompt(`${name}-failed`) : '';
    const text = renderPrompt(template, { question, task: agent?.task ?? question, task_failed: taskFailed });
    // An agent's own prompt goes as MiroThinker sends it, without the file's last newline (the dialects' prompts go as they always have).
    return { role: 'user', content: agent?.finalAnswerPrompt === undefined ? text : text.trimEnd() };
  }

  /**
   * Asks with the final-answer prompt, up to `attempts` times, until a reply is taken: `take`
   * says whether a reply is one (undefined: ask again) and records it when it is (the prompt and
   * the reply's repairs are recorded first). False when even the prompt alone would not fit the
   * context window (`context_overflow`, asking for `what`).
   */
  async #askUntilTaken(what: 'answer' | 'report', attempts: number, take: (r: TurnRepairResult) => (() => void) | undefined): Promise<boolean> {
    const ask = this.#finalAnswerAsk();
    // The last reply not taken: what the endpoint was last sent and answered, should no reply be taken.
    let unanswered: { c: Completion; r: TurnRepairResult } | undefined;
    for (let i = 0; this.#outcome.answerText === undefined && i < attempts; i++) {
      const keep = this.#ctx.fitKeep(this.#messages, ask);
      if (keep === undefined) {
        this.#outcome.reason = 'context_overflow';
        this.#outcome.error = `even with every tool result left out, asking for the ${what} would not fit the ${this.#ctx.window}-token window`;
        return false;
      }
      const { c, r } = await this.#complete([...this.#ctx.view(this.#messages, keep), ask], true);
      const record = take(r);
      if (record === undefined) {
        unanswered = { c, r };
        continue;
      }
      unanswered = undefined;
      this.#messages.push(ask);
      this.#noteRepairs(c, r);
      record();
      this.#turn++;
    }
    // The summary asked after the loop concluded (final_answer: always) is part of the accepted trace: kept as sent.
    if (unanswered !== undefined && this.#outcome.answerText === undefined && this.#concluded !== undefined && what === 'answer') this.#keepUnanswered(ask, unanswered.c, unanswered.r, what);
    return true;
  }

  /**
   * The ask was sent and answered, but no reply was an answer: the record keeps the last exchange
   * as sent (the summary exchange of MiroThinker's loop is part of what the model saw and wrote),
   * and the answer the loop concluded with, if any, stands.
   */
  #keepUnanswered(ask: ChatMessage, c: Completion, r: TurnRepairResult, what: 'answer' | 'report'): void {
    this.#messages.push(ask);
    this.#noteRepairs(c, r);
    this.#repairModelText({ kind: 'unanswered_ask', detail: `the reply to the ${what} prompt held no ${what}; kept as sent` });
    this.#messages.push(this.#assistantMessage(r, []));
    if (r.text.trim() !== '') this.#pieces.push(r.text);
    this.#turn++;
  }

  /** Out of turns, nudges, budget or room: ask for the answer, a bounded number of times. */
  async #askForAnswer(): Promise<void> {
    await this.#askUntilTaken('answer', this.#deps.config.budgets.forced_answer_attempts, (r) => {
      const action = r.action;
      if (action.kind !== 'answer') return undefined;
      return () => {
        // Asked because the loop concluded (finalAnswer: always), the answer was not forced.
        if (this.#concluded === undefined) {
          this.#repairs.push({
            turn: this.#turn,
            kind: 'forced_answer',
            detail: this.#guardTurn === undefined ? 'the answer came after the loop asked for it' : 'the context guard stopped the loop; the answer came after it asked',
          });
        }
        this.#acceptAnswer({ ...r, action });
      };
    });
  }

  /**
   * A sub-agent's last step, whether or not its loop ended by itself (as MiroThinker does):
   * the final-answer prompt, and the reply with its think removed is the report, the
   * session's answer and its caller's tool output. mcp-xml's answer is a box inside prose, so
   * there the whole reply is the report; tulu's and native's is their answer. In the training
   * view a report that is not already an answer is wrapped in `<answer>…</answer>`, as the
   * readers write MiroVerse's browsing reports. A reply that is a call, or empty, is asked
   * again, up to `budgets.forced_answer_attempts` times (at least once).
   */
  async #askForReport(): Promise<void> {
    const { config, dialect } = this.#deps;
    const asked = await this.#askUntilTaken('report', Math.max(1, config.budgets.forced_answer_attempts), (r) => {
      if (r.action.kind === 'call' || r.action.kind === 'calls') return undefined;
      const tagged = r.action.kind === 'answer' && dialect.name !== 'mcp-xml';
      const { think, rest } = splitThink(r.text);
      const report = tagged && r.action.kind === 'answer' ? r.action.answer.trim() : rest;
      if (report === '') return undefined;
      return () => {
        this.#messages.push(this.#assistantMessage(r, []));
        this.#pieces.push(tagged ? r.text : `${think === '' ? '' : `${think}\n`}<answer>\n${escapeAnswerTags(report)}\n</answer>`);
        this.#outcome.answerText = report;
        if (r.repairs.some((x) => x.kind === 'truncated')) this.#outcome.reason = 'truncated';
      };
    });
    // The loop's own conclusion is not the report: a sub-agent that gave none failed.
    if (asked) this.#concluded = undefined;
  }

  #noteRepairs(c: Completion, r: TurnRepairResult): void {
    for (const x of r.repairs) this.#repairModelText(x);
    if (c.clientStop && !r.repairs.some((x) => x.kind === 'stop_ignored')) {
      this.#repairModelText({ kind: 'stop_ignored', detail: 'the endpoint went past a stop string; the client cut the turn there' });
    }
  }

  /**
   * A repair of what the model wrote this turn: it keeps the turn's completion as the endpoint
   * sent it (`before`), which the turn's kept text in the trajectory is the after of. Repairs
   * that change no model text (`forced_answer`, `context_guard`, a tool's `control_chars`) are
   * pushed without it.
   */
  #repairModelText(x: TurnRepair): void {
    const last = this.#lastSent;
    if (last !== undefined) last.before ??= beforeOf(sentCompletion(last.raw), last.kept);
    this.#repairs.push({ turn: this.#turn, ...x, ...last?.before });
  }

  #assistantMessage(r: TurnRepairResult, calls: readonly ParsedCall[]): ChatMessage {
    return this.#deps.dialect.turnMessage?.(r, calls) ?? { role: 'assistant', content: r.text };
  }

  #acceptAnswer(r: TurnRepairResult & { action: { kind: 'answer' } }): void {
    this.#messages.push(this.#assistantMessage(r, []));
    this.#pieces.push(r.text);
    this.#outcome.answerText = r.action.answer;
    if (r.repairs.some((x) => x.kind === 'truncated')) this.#outcome.reason = 'truncated';
  }

  /** Rollback is on for the condition and its budgets (in a row, for this condition, in total) allow one more. */
  #mayRollBack(condition: RollbackCondition): boolean {
    const rb = this.#deps.config.rollback;
    return (
      rb.conditions.includes(condition) &&
      this.#rollbacksHere < rb.max_per_turn &&
      (this.#inARow.get(condition) ?? 0) < (rb.max_consecutive[condition] ?? rb.max_per_turn) &&
      this.#rollbacks.length < rb.max_total
    );
  }

  #rollBack(condition: RollbackCondition, detail: string, discarded: string): void {
    this.#rollbacksHere++;
    this.#inARow.set(condition, (this.#inARow.get(condition) ?? 0) + 1);
    this.#rollbacks.push({ turn: this.#turn, condition, detail, discarded: discarded.slice(0, DISCARDED_CHARS) });
  }

  /** The condition that discards this turn before anything runs, if any. */
  #discardBeforeRunning(raw: string, r: TurnRepairResult, bound: readonly BoundCall[]): { condition: RollbackCondition; detail: string } | undefined {
    const malformed = r.repairs.some((x) => x.kind === 'malformed_call') || bound.some((b) => b.error !== undefined);
    if (malformed && this.#mayRollBack('malformed_call')) return { condition: 'malformed_call', detail: bound.find((b) => b.error)?.error ?? 'a call with no tool name' };
    for (const { call } of bound) {
      if (!this.#deps.toolbox.hasTool(call.toolName) && this.#mayRollBack('unknown_tool')) return { condition: 'unknown_tool', detail: `no tool named ${call.toolName}` };
      if (this.#asked.has(callKey(call)) && this.#mayRollBack('repeated_query')) return { condition: 'repeated_query', detail: `${call.toolName}: ${call.query}` };
    }
    if (bound.length === 0 && REFUSAL.test(visibleText(raw).slice(0, 200)) && this.#mayRollBack('refusal')) return { condition: 'refusal', detail: raw.trim().slice(0, 120) };
    return undefined;
  }

  /** The condition that discards this turn once its calls have run, if any. */
  #discardAfterRunning(execs: readonly ExecResult[]): { condition: RollbackCondition; detail: string } | undefined {
    const failed = execs.find((e) => e.error !== undefined && !e.skipped);
    if (failed && this.#mayRollBack('tool_error')) return { condition: 'tool_error', detail: failed.error! };
    if (execs.some(isEmptyResult) && this.#mayRollBack('empty_result')) return { condition: 'empty_result', detail: 'a call returned nothing' };
    return undefined;
  }

  #overBudget(): boolean {
    const { budgets } = this.#deps.config;
    return this.#toolCalls.length >= budgets.max_tool_calls || (budgets.max_total_tokens !== undefined && this.#usage.total_tokens >= budgets.max_total_tokens);
  }

  #stopForContext(detail: string): void {
    this.#guardTurn = this.#turn;
    this.#repairs.push({ turn: this.#turn, kind: 'context_guard', detail });
  }

  /** The record's agent fields, in a run with agents. */
  #agentFields(): Partial<Trajectory> {
    const agent = this.#deps.agent;
    if (agent === undefined) return {};
    return {
      agent: agent.name,
      ...(agent.parentId === undefined ? {} : { parent_id: agent.parentId, parent_call: agent.parentCall ?? 0 }),
      depth: agent.depth,
      family_id: agent.familyId,
    };
  }

  /** The record: what happened, validated, with the reason it failed if it did. */
  #finish(): Trajectory {
    const { dialect, config } = this.#deps;
    const { answerText } = this.#outcome;
    const sample = this.#sample;
    const toolCalls = this.#toolCalls;
    const ctx = this.#ctx;
    const shown = new Set(toolCalls.flatMap((t) => t.snippet_ids));
    const cited = answerText === undefined ? [] : dialect.citedIds(answerText);
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
      interleaved_text: this.#pieces.join('\n'),
      messages: this.#messages,
      tool_calls: toolCalls,
      total_tool_calls: toolCalls.length,
      tools_used: [...new Set(toolCalls.filter((t) => !t.skipped).map((t) => t.tool_name))],
      cited_ids: cited,
      unresolved_cited_ids: cited.filter((id) => !shown.has(id)),
      turns: this.#turn,
      repairs: this.#repairs,
      rollbacks: this.#rollbacks,
      validation: { passed: true, issues: [] },
      usage: this.#usage,
      timing: {
        started_at: this.#startedAt.toISOString(),
        finished_at: new Date().toISOString(),
        duration_ms: Math.round(performance.now() - this.#t0),
        llm_ms: Math.round(this.#llmMs),
        tool_ms: Math.round(this.#toolMs),
      },
      attempt: this.#attempt,
      run_id: this.#deps.runId,
      ...(ctx.keep === undefined && ctx.window === undefined
        ? {}
        : {
            context: {
              ...(ctx.keep === undefined ? {} : { keep_tool_results: ctx.keep }),
              omitted_results: ctx.omittedResults,
              ...(ctx.window === undefined ? {} : { max_context_tokens: ctx.window, peak_request_tokens: ctx.peak }),
              ...(this.#guardTurn === undefined ? {} : { guard_turn: this.#guardTurn }),
              ...(ctx.lastKeep === undefined ? {} : { last_request_keep: ctx.lastKeep }),
            },
          }),
      // Native sent these in `tools`; the XML dialects listed them in the system prompt. Either way the record keeps what was offered.
      ...(this.#specs.length === 0 ? {} : { tools: this.#requestTools ?? functionSpecs(this.#specs) }),
      ...(this.#experience === undefined ? {} : { experience: this.#experience }),
      ...(this.#reasoningSent === undefined ? {} : { reasoning_sent: this.#reasoningSent }),
      ...this.#agentFields(),
    };
    traj.validation = validateTrajectory(traj, {
      dialect,
      limits: config.tools.limits,
      // With a judge in the loop, the judge decides (core/judge/trajectory.ts), after the rollout.
      goldMatch: config.validation.judge ? 'off' : config.validation.gold_match,
      f1Threshold: config.validation.f1_threshold,
      severities: config.validation.severities,
    });
    if (this.#pastMaxTokens.length > 0 && config.validation.severities[PAST_MAX_TOKENS_RULE] !== 'off') {
      const severity = config.validation.severities[PAST_MAX_TOKENS_RULE] === 'error' ? 'error' : 'warn';
      traj.validation.issues.push({ rule: PAST_MAX_TOKENS_RULE, severity, message: `the endpoint answered far past max_tokens (${this.#pastMaxTokens.join('; ')})` });
      if (severity === 'error') traj.validation.passed = false;
    }
    let { reason, error } = this.#outcome;
    if (reason === undefined && !traj.validation.passed) {
      const errors = traj.validation.issues.filter((i) => i.severity === 'error');
      reason = errors.every((i) => i.rule === 'gold.mismatch') ? 'wrong_answer' : 'invalid';
      error = errors.map((i) => `${i.rule}: ${i.message}`).join('; ');
    }
    // A sample whose tools never once worked failed because of them, whatever it answered.
    const ran = toolCalls.filter((t) => !t.skipped);
    if (reason !== undefined && !ENDPOINT_FAILURES.has(reason) && ran.length > 0 && ran.every((t) => t.error !== undefined)) {
      error = `every tool call failed; first: ${ran[0]!.error}${error ? `; ${error}` : ''}`;
      reason = 'tool_error';
    }
    if (reason !== undefined) {
      traj.status = 'failed';
      traj.reason = reason;
      // An endpoint's or a tool's own words: cleaned like the rest.
      if (error !== undefined) traj.error = cleanText(error);
    }
    return traj;
  }
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
    ...(exec.child === undefined ? {} : { child_id: exec.child.id }),
  };
}
