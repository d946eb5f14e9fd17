/**
 * Every record that crosses a stage or a file boundary. The JSON Schema files next to
 * this module are generated from these (`npm run schemas`); a test fails when they drift.
 */
import { z } from 'zod';

export const SCHEMA_VERSION = 1;
const schemaVersion = z.literal(SCHEMA_VERSION);

export const Question = z.object({
  schema_version: schemaVersion,
  id: z.string().min(1),
  question: z.string().min(1),
  answer: z.string().optional(),
  meta: z.record(z.string(), z.unknown()).optional(),
});
export type Question = z.infer<typeof Question>;

/** A question as one rollout sees it: `id#k` when several samples are drawn per question. */
export const Sample = z.object({
  sample_id: z.string().min(1),
  sample_index: z.number().int().nonnegative(),
  question: Question,
});
export type Sample = z.infer<typeof Sample>;

export const ToolCallRecord = z.object({
  schema_version: schemaVersion,
  call_id: z.string(),
  turn: z.number().int().nonnegative(),
  tool_name: z.string(),
  server: z.string().nullable(),
  mcp_tool: z.string().nullable(),
  parameters: z.record(z.string(), z.unknown()),
  query: z.string(),
  arguments: z.record(z.string(), z.unknown()),
  result: z.unknown(),
  truncated: z.boolean().default(false),
  output_text: z.string(),
  snippet_ids: z.array(z.string()),
  error: z.string().optional(),
  /** true when the call never reached a server: unknown tool, call limit, bad arguments. */
  skipped: z.boolean().default(false),
  cached: z.boolean(),
  duration_ms: z.number().nonnegative(),
  timestamp: z.string(),
  /** A call to a sub-agent: the id of the session it started, whose report is this call's output. */
  child_id: z.string().optional(),
  /**
   * The index in the trajectory's `messages` of the turn that carried this result to the model
   * (a `tool` turn, a user turn holding `output_text`, or MiroThinker's plain user turn): how an
   * export finds tool results without reading tags.
   */
  message_index: z.number().int().nonnegative().optional(),
});
export type ToolCallRecord = z.infer<typeof ToolCallRecord>;

export const RepairKind = z.enum([
  'stop_ignored', // text past a stop string was cut (by the client or the repairer)
  'unclosed_call',
  'hallucinated_output',
  'extra_calls',
  'premature_answer',
  'unclosed_answer',
  'truncated',
  'no_action', // a turn with neither a call nor an answer; the model was nudged
  'noncanonical_syntax', // quotes, `</call>`, `<cite ids=…>` rewritten to the canonical form
  'malformed_call', // a call tag with no tool name
  'forced_answer', // the answer came only after the loop asked for it
  'repaired_arguments', // call arguments that were not valid JSON, repaired leniently
  'corrected_name', // a server or tool name the model misspelled, matched to the one tool it can mean
  'context_guard', // the next request would overflow the context window: the loop stopped for the answer
  'control_chars', // NUL bytes, lone surrogates or other control characters removed from model or tool text
  'unanswered_ask', // the final-answer (summary) prompt was answered without an answer: the exchange is kept as sent, the loop's answer stands
]);
export type RepairKind = z.infer<typeof RepairKind>;

export const Repair = z.object({
  turn: z.number().int().nonnegative(),
  kind: RepairKind,
  detail: z.string(),
  /**
   * The model's completion for this turn as the endpoint sent it, before the client or the
   * repairer cut, closed or dropped anything (native calls follow the text as JSON). Kept to
   * `REPAIR_BEFORE_CHARS` (generate/repair-before.ts): a longer one keeps its head, its tail
   * and the stretch around where the repair changed it, with a marker where text was cut, and
   * `before_truncated`. Absent on repairs that change no model text (`forced_answer`,
   * `context_guard`, a tool's `control_chars`) and on records written before it was kept.
   */
  before: z.string().optional(),
  before_truncated: z.literal(true).optional(),
});
export type Repair = z.infer<typeof Repair>;

export const RollbackCondition = z.enum(['unknown_tool', 'repeated_query', 'refusal', 'malformed_call', 'tool_error', 'empty_result']);
export type RollbackCondition = z.infer<typeof RollbackCondition>;

export const Rollback = z.object({
  turn: z.number().int().nonnegative(),
  condition: RollbackCondition,
  detail: z.string(),
  /** The discarded completion, cut to a few hundred characters. */
  discarded: z.string(),
});
export type Rollback = z.infer<typeof Rollback>;

export const Severity = z.enum(['error', 'warn']);
export const ValidationIssue = z.object({
  rule: z.string(),
  severity: Severity,
  message: z.string(),
  turn: z.number().int().optional(),
  call_index: z.number().int().optional(),
  offset: z.number().int().optional(),
});
export type ValidationIssue = z.infer<typeof ValidationIssue>;

export const Validation = z.object({
  passed: z.boolean(),
  issues: z.array(ValidationIssue),
});
export type Validation = z.infer<typeof Validation>;

export const Usage = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  total_tokens: z.number().int().nonnegative(),
  llm_calls: z.number().int().nonnegative(),
  /** true when some counts came from a local tokenizer because the endpoint sent none. */
  estimated: z.boolean().default(false),
  /** Prompt tokens the endpoint served from its prefix cache (`usage.prompt_tokens_details.cached_tokens`), when it said. */
  cached_tokens: z.number().int().nonnegative().optional(),
});
export type Usage = z.infer<typeof Usage>;

export const Timing = z.object({
  started_at: z.string(),
  finished_at: z.string(),
  duration_ms: z.number().nonnegative(),
  llm_ms: z.number().nonnegative(),
  tool_ms: z.number().nonnegative(),
});
export type Timing = z.infer<typeof Timing>;

export const Status = z.enum(['ok', 'failed']);
export const FailureReason = z.enum([
  'max_turns',
  'no_answer',
  'truncated',
  'context_overflow',
  'llm_error',
  'tool_error',
  'invalid',
  'wrong_answer',
  'aborted',
  'endpoint_rejected', // a 4xx for this prompt alone (content filter, bad request): the server's message is kept
  'response_too_large', // the endpoint's answer passed endpoint.max_response_bytes
  'unjudged', // the judge could not be reached; `rerun --reason unjudged` finishes the job
  'parent_failed', // a sub-agent session that was fine, failed with its family because a session above it failed
  'lease_lost', // queue mode: the sample's lease ran out more than queue.lease_retries times (its workers died or stalled on it)
]);
export type FailureReason = z.infer<typeof FailureReason>;

export const DialectName = z.enum(['tulu', 'mcp-xml', 'native']);
export type DialectName = z.infer<typeof DialectName>;

const DATE_OR_RUN = "expected a date YYYY-MM-DD or 'run'";

/**
 * Options of the mcp-xml dialect that reproduce MiroThinker's own transcripts (MiroVerse rows).
 * A standalone object so that a config can give it at the top level and per agent. Absent, the
 * dialect writes exactly what it writes without options.
 */
export const DialectOptions = z.strictObject({
  /**
   * A `Today is: YYYY-MM-DD` sentence in the system prompt, where MiroThinker puts it: a fixed
   * date, or `run` for the run's creation date (UTC, from the manifest, so a resumed run renders
   * the same prompt). Default: no date.
   */
  today: z.union([z.literal('run'), z.iso.date({ error: DATE_OR_RUN })], { error: DATE_OR_RUN }).optional(),
  /**
   * How tool results go back to the model in `messages`: `tagged` (default) inside
   * `<tool_output>`, `plain` as a bare user turn, as MiroThinker sends them. The training view
   * (`interleaved_text`) and `output_text` keep the tags either way.
   */
  tool_results: z.enum(['tagged', 'plain']).default('tagged'),
  /**
   * The prompt layout: `trajforge` (default: what runs made before this option sent) or
   * `miroverse-v0.1`, MiroThinker's prompts as MiroVerse v0.1 has them (docs/agents.md). Absent
   * means `trajforge`, so a run made before the option resumes with its fingerprint unchanged.
   */
  layout: z.enum(['trajforge', 'miroverse-v0.1']).optional(),
});
export type DialectOptions = z.infer<typeof DialectOptions>;

export const NativeToolCall = z.object({
  id: z.string(),
  type: z.literal('function'),
  function: z.object({ name: z.string(), arguments: z.string() }),
});
export type NativeToolCall = z.infer<typeof NativeToolCall>;

export const ChatMessage = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string(),
  /** native dialect: the calls an assistant turn made. */
  tool_calls: z.array(NativeToolCall).optional(),
  /** native dialect: the call a `tool` message answers. */
  tool_call_id: z.string().optional(),
  /** The endpoint's separate reasoning channel (`reasoning` or `reasoning_content` on the wire); sent back only with `endpoint.send_reasoning`. */
  reasoning_content: z.string().optional(),
});
export type ChatMessage = z.infer<typeof ChatMessage>;

/** What a failed attempt left for the next one. */
export const Experience = z.object({
  /** The attempt it summarises; its record is in failures.jsonl. */
  from_attempt: z.number().int().nonnegative(),
  failure_type: z.string(),
  what_happened: z.string(),
  useful_findings: z.array(z.string()),
  /** `model`: the model wrote the summary; `derived`: built from the record when it could not. */
  source: z.enum(['model', 'derived']),
});
export type Experience = z.infer<typeof Experience>;

/** One eval item a row overlaps: which file and item, where in the row, and by how many n-grams. */
export const ContaminationMatch = z.object({
  /** The eval file as named on the command line. */
  eval_file: z.string(),
  /** The item's id in its file, or `line N` when it has none. */
  eval_id: z.string(),
  field: z.enum(['question', 'tool_output', 'answer']),
  /** For a tool output: the index of the call in `tool_calls`. */
  call_index: z.number().int().nonnegative().optional(),
  /** Distinct n-grams of the item found in that field. */
  ngrams: z.number().int().positive(),
  /** The item's n-grams: 1 for an item shorter than n words, matched whole. */
  of: z.number().int().positive(),
});
export type ContaminationMatch = z.infer<typeof ContaminationMatch>;

/** Set on every row `trajforge decontaminate` writes: what it was checked against and what matched. */
export const Decontamination = z.object({
  /** n-gram length in words. */
  n: z.number().int().positive(),
  /** The eval files, as named on the command line. */
  against: z.array(z.string()),
  /** Empty: clean. Otherwise one entry per (eval item, field, call) that overlaps. */
  matches: z.array(ContaminationMatch),
  /**
   * Runs with agents: whether any session of this row's family (its root and every sub-agent
   * session) overlaps an eval item. A family is decontaminated as one: with `--drop` it goes whole.
   */
  family_flagged: z.boolean().optional(),
});
export type Decontamination = z.infer<typeof Decontamination>;

/** How the judge's cascade decided (see pipeline/core/judge/judge.ts): the step that decided. */
export const JudgeStep = z.enum(['exact', 'normalised', 'f1', 'llm', 'rubric']);
export type JudgeStep = z.infer<typeof JudgeStep>;
export const JudgeVerdict = z.enum(['correct', 'incorrect', 'not_attempted', 'unjudged']);
export type JudgeVerdict = z.infer<typeof JudgeVerdict>;

/** One rubric criterion as the judge scored it. */
export const CriterionScore = z.object({
  criterion: z.string(),
  title: z.string().optional(),
  /** As the question gave it; negative for a pitfall (a criterion an answer should not meet). */
  weight: z.number(),
  /** 0..1: how far the answer meets the criterion. */
  score: z.number().min(0).max(1),
  reasoning: z.string().optional(),
});
export type CriterionScore = z.infer<typeof CriterionScore>;

/** Set by the judge in the loop (`validation.judge`): whether the answer is right, and why. */
export const Judgement = z.object({
  /** `unjudged`: the judge could not be reached or gave no readable verdict; `rerun --reason unjudged` judges again. */
  verdict: JudgeVerdict,
  /** The step that decided (unjudged: the step that could not). */
  step: JudgeStep,
  /** The best SQuAD token F1 of the answer against the gold answers (numbers canonical). */
  f1: z.number().min(0).max(1).optional(),
  /** The grader's rationale (llm, rubric). */
  reasoning: z.string().optional(),
  /** The judge model, when an LLM was asked. */
  judge_model: z.string().optional(),
  /** The prompt templates asked with, `name@hash` (their text changes, so may verdicts). */
  prompt: z.string().optional(),
  /** The LLM verdict came from the judge cache. */
  cached: z.boolean().optional(),
  /** Unjudged: why. */
  error: z.string().optional(),
  /** A reply no verdict could be read from, cut. */
  raw: z.string().optional(),
  /** Rubrics: each criterion's score. */
  criteria: z.array(CriterionScore).optional(),
  /** Rubrics: sum(score · weight) / sum of the positive weights, clamped to 0..1. */
  rubric_score: z.number().min(0).max(1).optional(),
  /** What grading this answer cost: the judge's requests and their tokens (none when every answer came from the cache). */
  usage: z
    .object({
      requests: z.number().int().nonnegative(),
      prompt_tokens: z.number().int().nonnegative(),
      completion_tokens: z.number().int().nonnegative(),
      cached_tokens: z.number().int().nonnegative().optional(),
      estimated: z.boolean().optional(),
    })
    .optional(),
  judged_at: z.string(),
});
export type Judgement = z.infer<typeof Judgement>;

/** Which of a question's `--samples k` this is; set by the judge step (pass@k reads it). */
export const Sampling = z.object({
  index: z.number().int().nonnegative(),
  k: z.number().int().positive(),
  /** The samples of the question ran in order and stopped at the first judged correct. */
  until_correct: z.boolean(),
});
export type Sampling = z.infer<typeof Sampling>;

export const Trajectory = z.object({
  schema_version: schemaVersion,
  id: z.string(),
  question_id: z.string(),
  question: z.string(),
  gold_answer: z.string().optional(),
  meta: z.record(z.string(), z.unknown()).optional(),
  dialect: DialectName,
  model: z.string(),
  status: Status,
  reason: FailureReason.optional(),
  /** Human-readable detail of a failure: the server's message, the validator's first error. */
  error: z.string().optional(),
  final_answer: z.string(),
  interleaved_text: z.string(),
  messages: z.array(ChatMessage),
  tool_calls: z.array(ToolCallRecord),
  total_tool_calls: z.number().int().nonnegative(),
  tools_used: z.array(z.string()),
  cited_ids: z.array(z.string()),
  unresolved_cited_ids: z.array(z.string()),
  turns: z.number().int().nonnegative(),
  repairs: z.array(Repair),
  rollbacks: z.array(Rollback),
  validation: Validation,
  usage: Usage,
  timing: Timing,
  attempt: z.number().int().nonnegative(),
  run_id: z.string(),
  /** Context management in force: what the requests held, and whether the guard stopped the loop. */
  context: z
    .object({
      /** Tool results sent in full (the last K); older ones were replaced by a placeholder in requests. */
      keep_tool_results: z.number().int().nonnegative().optional(),
      /** Tool results that some request showed only as the placeholder. */
      omitted_results: z.number().int().nonnegative(),
      max_context_tokens: z.number().int().positive().optional(),
      /** With a window: the largest request, in estimated tokens (o200k_base). */
      peak_request_tokens: z.number().int().nonnegative().optional(),
      /** The turn at which the context guard stopped the loop and asked for the answer. */
      guard_turn: z.number().int().nonnegative().optional(),
      /**
       * The last request held only the last N tool results in full (the others as the
       * placeholder); absent when it held them all. `export --view sent` shows this view.
       */
      last_request_keep: z.number().int().nonnegative().optional(),
    })
    .optional(),
  /**
   * How the last request sent earlier assistant turns' reasoning back (`endpoint.send_reasoning`
   * as it resolved): in the field named, or `none` (native turns then went without it; tulu and
   * mcp-xml turns kept their `<think>` in the content). The export shows reasoning as sent.
   */
  reasoning_sent: z.enum(['none', 'reasoning', 'reasoning_content']).optional(),
  /** The tools offered (name, description, parameter schema) as OpenAI function specs: native sent these in every request's `tools`; tulu and mcp-xml listed them in the system prompt. */
  tools: z.array(z.unknown()).optional(),
  /** Set on an attempt seeded by the failure of the previous one (failure-experience retry). */
  experience: Experience.optional(),
  /**
   * Runs with an `agents` config: which agent this session is (`main` or a sub-agent's name),
   * the session that called it and the index of that call in its `tool_calls`, how deep it is
   * (0 = main), and the family it belongs to (the root session's id). Every session of a family
   * has the root's `attempt`.
   */
  agent: z.string().optional(),
  parent_id: z.string().optional(),
  parent_call: z.number().int().nonnegative().optional(),
  depth: z.number().int().nonnegative().optional(),
  family_id: z.string().optional(),
  /** Set by `trajforge decontaminate`. */
  decontamination: Decontamination.optional(),
  /** Set by the judge in the loop (`validation.judge`). */
  judgement: Judgement.optional(),
  /** Set by the judge in the loop: which sample of its question this is. */
  sampling: Sampling.optional(),
});
export type Trajectory = z.infer<typeof Trajectory>;


/** A line of failures.jsonl: a failed attempt with its partial trajectory. */
export const FailureRecord = Trajectory.extend({
  status: z.literal('failed'),
  reason: FailureReason,
});
export type FailureRecord = z.infer<typeof FailureRecord>;

// ---------------------------------------------------------------------------------------
// Configuration

/**
 * Keys other MCP clients write into the same server object, accepted so their config files
 * load as they are. `disabled` is honoured (the server is not started); `timeout` (seconds,
 * as Cline and Roo Code write it) is the server's call timeout; `autoApprove` (Cline) and
 * `alwaysAllow` (Roo Code) say which tools run without asking a person, and trajforge never
 * asks, so they change nothing.
 */
const McpClientKeys = {
  disabled: z.boolean().optional(),
  timeout: z.number().positive().optional(),
  autoApprove: z.array(z.string()).optional(),
  alwaysAllow: z.array(z.string()).optional(),
};
const McpStdioServer = z.strictObject({
  type: z.literal('stdio').optional(),
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  env: z.record(z.string(), z.string()).default({}),
  cwd: z.string().optional(),
  ...McpClientKeys,
});
const McpHttpServer = z.strictObject({
  type: z.enum(['http', 'streamable-http', 'streamableHttp']).optional(),
  url: z.url(),
  headers: z.record(z.string(), z.string()).default({}),
  ...McpClientKeys,
});
/** The legacy HTTP+SSE transport (MCP 2024-11-05): a GET event stream and POSTs to the endpoint it names. */
const McpSseServer = z.strictObject({
  type: z.literal('sse'),
  url: z.url(),
  headers: z.record(z.string(), z.string()).default({}),
  ...McpClientKeys,
});
export const McpServerConfig = z.union([McpStdioServer, McpSseServer, McpHttpServer]);
export type McpServerConfig = z.infer<typeof McpServerConfig>;

export const ToolAlias = z.strictObject({
  server: z.string().min(1),
  tool: z.string().min(1),
  /** The parameter that receives the call body; default: the first required string parameter. */
  body_param: z.string().optional(),
  description: z.string().optional(),
});

export const EndpointConfig = z.strictObject({
  base_url: z.string().min(1).default('http://127.0.0.1:8000/v1'),
  model: z.string().min(1),
  /** Name of the environment variable that holds the key; the key itself never enters the config. */
  api_key_env: z.string().default('OPENAI_API_KEY'),
  temperature: z.number().min(0).max(2).default(0.7),
  top_p: z.number().gt(0).max(1).default(1),
  max_tokens: z.number().int().positive().default(4096),
  seed: z.number().int().optional(),
  /** Extra fields sent in every request body (vLLM: `top_k`, `repetition_penalty`, `chat_template_kwargs`…). */
  extra_body: z.record(z.string(), z.unknown()).default({}),
  /**
   * `auto`: whole bodies while the endpoint behaves, and streaming for a model from the first
   * time it rejects `stop`, answers past a stop string, or loops, so that the client can cut
   * such turns as they come. `true` always streams, `false` never does.
   */
  stream: z.union([z.boolean(), z.literal('auto')]).default('auto'),
  timeout_ms: z.number().int().positive().default(600_000),
  /** How long `check` and `rerun` wait for `GET /models` (is the endpoint there?), and `check` for its 8-token completion. */
  probe_timeout_ms: z.number().int().positive().default(10_000),
  max_retries: z.number().int().nonnegative().default(6),
  retry_base_ms: z.number().int().positive().default(500),
  retry_max_ms: z.number().int().positive().default(60_000),
  /** `finish_reason: length` retries, each doubling max_tokens. */
  length_retries: z.number().int().nonnegative().default(1),
  /**
   * Resamples of a completion whose tail repeats one phrase many times (degenerate
   * repetition); after them the repeating tail is cut and the turn kept.
   */
  repetition_retries: z.number().int().nonnegative().default(2),
  /** Consecutive non-retryable failures after which the run stops. */
  fail_fast_after: z.number().int().positive().default(5),
  /**
   * Bytes of one answer (a whole body or a stream) read at most; past it the request is
   * dropped and the sample fails as `response_too_large`. Default 32 MiB.
   */
  max_response_bytes: z.number().int().positive().default(32 * 1024 * 1024),
  /**
   * The request field that carries the completion limit (`max_tokens`). `auto`: `max_tokens`,
   * and `max_completion_tokens` for a model from the first time it rejects `max_tokens`
   * (OpenAI's GPT-5 and o-series do). (Not named `*_tokens_*`: the manifest redacts strings
   * under names that say "token".)
   */
  completion_limit_param: z.enum(['auto', 'max_tokens', 'max_completion_tokens']).default('auto'),
  /**
   * Whether an assistant turn's reasoning goes back to the endpoint in later requests, and in
   * which field. `none`: never (DeepSeek's API rejects it); `reasoning`: vLLM >= 0.16,
   * OpenRouter, gpt-oss; `reasoning_content`: older vLLM, SGLang; `auto`: the field the
   * endpoint itself answered in (`reasoning` until it has answered with one).
   */
  send_reasoning: z.enum(['none', 'auto', 'reasoning', 'reasoning_content']).default('none'),
});
export type EndpointConfig = z.infer<typeof EndpointConfig>;

export const QuestionsConfig = z.strictObject({
  path: z.string().min(1).optional(),
  format: z.enum(['auto', 'jsonl', 'json', 'csv']).default('auto'),
  /** Field names tried, in order, for each record field. */
  fields: z
    .strictObject({
      id: z.array(z.string()).default(['id', 'qid', 'question_id', 'sample_id', '_id']),
      question: z.array(z.string()).default(['question', 'query', 'prompt', 'problem', 'input']),
      answer: z.array(z.string()).default(['answer', 'gold', 'gold_answer', 'expected_answer', 'target', 'label']),
    })
    .prefault({}),
  shuffle: z.boolean().default(false),
  seed: z.number().int().default(0),
  limit: z.number().int().positive().optional(),
  samples: z.number().int().positive().default(1),
  /** With samples > 1: a question's samples run in order and stop at the first judged correct (needs validation.judge). */
  until_correct: z.boolean().default(false),
  shard: z
    .string()
    .regex(/^\d+\/\d+$/, 'expected i/n, e.g. 0/4')
    .optional(),
  on_bad_row: z.enum(['error', 'skip']).default('error'),
});
export type QuestionsConfig = z.infer<typeof QuestionsConfig>;

export const ExecutorConfig = z.strictObject({
  call_timeout_ms: z.number().int().positive().default(60_000),
  connect_timeout_ms: z.number().int().positive().default(30_000),
  /** Characters of a raw result kept in the record before it is cut and marked `truncated`. */
  max_result_chars: z.number().int().positive().default(200_000),
  /** Characters of one snippet's text shown to the model. */
  max_snippet_chars: z.number().int().positive().default(2_000),
  /** Bytes of one message a stdio server may send; a larger tool result is the tool error `result_too_large`. */
  max_message_bytes: z.number().int().positive().default(50 * 1024 * 1024),
  /** Restarts of a dead server in a row; past them the server is down and retried after a backoff. */
  max_restarts: z.number().int().nonnegative().default(3),
  /** The first wait before a server that is down is started again; doubled after each failed try. */
  restart_backoff_ms: z.number().int().positive().default(1_000),
  /** The longest wait between tries to start a server that is down. */
  restart_backoff_max_ms: z.number().int().positive().default(60_000),
  /** For a server to shut down at the end of a run (a Streamable HTTP session to be deleted). */
  close_timeout_ms: z.number().int().positive().default(5_000),
  /** Successful results served from the tool-result cache, shared by runs and processes. */
  cache: z.boolean().default(true),
  /** Default: $TRAJFORGE_CACHE_DIR, else $XDG_CACHE_HOME/trajforge, else ~/.cache/trajforge (resolved when the run starts). */
  cache_dir: z.string().min(1).optional(),
  /** How old a cached result may be, in seconds. Default 7 days. */
  cache_ttl_s: z.number().int().positive().default(7 * 24 * 3600),
});

export const BudgetsConfig = z.strictObject({
  max_turns: z.number().int().positive().default(12),
  max_tool_calls: z.number().int().positive().default(10),
  max_nudges: z.number().int().nonnegative().default(2),
  forced_answer_attempts: z.number().int().nonnegative().default(2),
  max_total_tokens: z.number().int().positive().optional(),
  /**
   * US dollars the whole run may spend (model, sub-agents and judge, at `prices`), over all its
   * invocations: once reached, no sample starts, those in flight finish, and the run stops
   * `interrupted`, resumable with a higher budget. Needs a price for every model the run uses.
   */
  max_cost_usd: z.number().positive().optional(),
});

/** US dollars per million tokens of one model (pipeline/core/cost.ts). */
export const ModelPrice = z.strictObject({
  input: z.number().nonnegative(),
  output: z.number().nonnegative(),
  /** Prompt tokens served from the endpoint's prefix cache. Default: `input`. */
  cached_input: z.number().nonnegative().optional(),
});
export type ModelPrice = z.infer<typeof ModelPrice>;

export const RollbackConfig = z.strictObject({
  conditions: z.array(RollbackCondition).default(['unknown_tool', 'repeated_query', 'refusal']),
  /** Consecutive rollbacks allowed before a turn is kept whatever it holds. */
  max_per_turn: z.number().int().nonnegative().default(2),
  /** Per condition, consecutive rollbacks for that condition (default: max_per_turn). */
  max_consecutive: z.partialRecord(RollbackCondition, z.number().int().nonnegative()).default({}),
  max_total: z.number().int().nonnegative().default(6),
});

export const ContextConfig = z.strictObject({
  /** Send only the last K tool results in full; older ones become a placeholder. Unset: all. */
  keep_tool_results: z.number().int().nonnegative().optional(),
  /** The endpoint's context window in tokens; unset: no guard. */
  max_context_tokens: z.number().int().positive().optional(),
  /** Tokens kept free below the window for the tokenizer's disagreement with the model's own. */
  safety_margin_tokens: z.number().int().nonnegative().default(256),
});

export const RetryConfig = z.strictObject({
  /** Fresh attempts after a failed one, in the same run. */
  attempts: z.number().int().nonnegative().default(0),
  /** Seed each fresh attempt with a structured summary of the failure before it. */
  experience: z.boolean().default(true),
  /** Failure reasons worth another attempt. */
  on: z.array(FailureReason).default(['max_turns', 'no_answer', 'truncated', 'context_overflow', 'tool_error', 'invalid', 'wrong_answer']),
});

/**
 * The judge in the loop: its own OpenAI-compatible endpoint, model, retries, limit of requests
 * in flight and verdict cache, apart from the policy model's.
 */
export const JudgeConfig = z.strictObject({
  base_url: z.string().min(1).default('http://127.0.0.1:8000/v1'),
  model: z.string().min(1),
  /** Name of the variable that holds the judge's key; `none` for no key. */
  api_key_env: z.string().default('OPENAI_API_KEY'),
  temperature: z.number().min(0).max(2).default(0),
  /** Per grading reply (a rubric reply scores every criterion). */
  max_tokens: z.number().int().positive().default(1024),
  extra_body: z.record(z.string(), z.unknown()).default({}),
  timeout_ms: z.number().int().positive().default(120_000),
  /**
   * Bytes of one grading reply read at most; past it the request is dropped and the sample is
   * recorded unjudged. A verdict is a few hundred bytes, reasoning included a few hundred KB. Default 1 MiB.
   */
  max_response_bytes: z.number().int().positive().default(1024 * 1024),
  /** Retries of connection errors, 408, 409, 429, 5xx and malformed bodies, before the sample is recorded unjudged. */
  max_retries: z.number().int().nonnegative().default(4),
  retry_base_ms: z.number().int().positive().default(500),
  retry_max_ms: z.number().int().positive().default(30_000),
  /** Grading requests in flight at most (lowered on 429). */
  concurrency: z.number().int().positive().default(8),
  /** Replies with no readable verdict (or rubric scores) asked again before the sample is recorded unjudged. */
  unreadable_retries: z.number().int().nonnegative().default(1),
  /** Consecutive refusals (401, 403, 404, 400: a wrong key or model) that stop the run; each sample is kept, unjudged. */
  fail_fast_after: z.number().int().positive().default(5),
  /** A question with rubrics and no gold answer counts as answered correctly at this rubric_score. */
  rubric_pass: z.number().min(0).max(1).default(0.7),
  /** Verdicts are cached (key: model, prompt template, question, gold, answer, rubric), under the tool cache's directory. */
  cache: z.boolean().default(true),
  cache_ttl_s: z.number().int().positive().default(30 * 24 * 3600),
});
export type JudgeConfig = z.infer<typeof JudgeConfig>;

/** A severity given to a rule (a run config's `validation.severities`, a rules file's `severities`); `off` disables it. */
export const RuleSeverity = z.enum(['error', 'warn', 'off']);

/** How a gold answer is compared; `off` never rejects for a wrong answer. */
export const GoldMatch = z.enum(['exact', 'contains', 'boxed', 'f1', 'off']);

export const ValidationConfig = z.strictObject({
  /** Rule id → severity; `off` disables the rule. */
  severities: z.record(z.string(), RuleSeverity).default({}),
  /** How a gold answer is compared; `off` never rejects for a wrong answer. */
  gold_match: GoldMatch.default('contains'),
  /** With `gold_match: f1`, the SQuAD token F1 an answer needs; also the judge cascade's F1 step. */
  f1_threshold: z.number().min(0).max(1).default(0.8),
  /** The judge in the loop: when set, it decides whether an answer is right (the gold rule steps aside). */
  judge: JudgeConfig.optional(),
});

export const ToolsConfig = z.strictObject({
  aliases: z.record(z.string(), ToolAlias).default({}),
  /** Calls allowed per tool name per trajectory; past it the model is told so and nothing runs. */
  limits: z.record(z.string(), z.number().int().nonnegative()).default({}),
  /** Tool names shown to the model; default: every alias, or every server tool when there are none. */
  expose: z.array(z.string()).optional(),
});

/**
 * The same object with every field optional and no defaults: an agent's section overrides
 * only the fields it names, over the top-level settings.
 */
function overrides<S extends z.ZodRawShape>(schema: z.ZodObject<S>) {
  const shape = Object.fromEntries(Object.entries(schema.shape).map(([k, s]) => [k, ((s instanceof z.ZodDefault ? s.unwrap() : s) as z.ZodType).optional()]));
  return z.strictObject(shape) as unknown as z.ZodObject<{ [K in keyof S]: z.ZodOptional<S[K] extends z.ZodDefault<infer T> ? T : S[K]> }, z.core.$strict>;
}

/** A prompt template's name: a file stem in prompts/. */
const PromptName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, 'expected the name of a file in prompts/ without .txt');

/** How a sub-agent is offered to the agents that call it: a tool in their dialect. Defaults: MiroThinker's browsing agent. */
export const AgentAsTool = z.strictObject({
  /** The MCP server it is listed under (mcp-xml shows tools by server). Default `<name>-agent`. */
  server: z.string().min(1).optional(),
  /** The tool name the model writes. Default: `search_and_browse` for `browsing`, else the agent's name. */
  name: z.string().min(1).optional(),
  description: z.string().optional(),
  /** JSON Schema of the call's input. Default `{subtask: string}`, required. */
  input_schema: z.record(z.string(), z.unknown()).optional(),
  /** The input parameter that holds the subtask. Default `subtask`. */
  param: z.string().min(1).optional(),
});

/**
 * One agent: `agents.main` overrides the top-level settings for the main agent; any other key
 * is a sub-agent, offered as a tool to the agents that list it in `sub_agents`.
 */
export const AgentConfig = z.strictObject({
  dialect: DialectName.optional(),
  /** mcp-xml only: MiroThinker's form (see DialectOptions). Default: the top-level ones, for an mcp-xml agent. */
  dialect_options: DialectOptions.optional(),
  /** Text appended to the system prompt (after `objective_prompt`). */
  instructions: z.string().optional(),
  /** A prompt appended to the system prompt: the agent's objective. */
  objective_prompt: PromptName.optional(),
  /** The mcpServers whose tools it sees. Default: all. */
  servers: z.array(z.string()).optional(),
  /** Its own aliases, limits and expose, instead of the top-level `tools` (which it inherits, for its servers, when unset). */
  tools: ToolsConfig.optional(),
  // The cost budget is the run's, not an agent's.
  budgets: overrides(BudgetsConfig.omit({ max_cost_usd: true })).optional(),
  context: overrides(ContextConfig).optional(),
  rollback: overrides(RollbackConfig).optional(),
  /** The prompt that asks for the final answer (`{question}`, `{task}`). Default: the dialect's; a sub-agent's: `browsing-agent-summary`. */
  final_answer_prompt: PromptName.optional(),
  /**
   * `always`: the final-answer prompt ends every session, as MiroThinker does, even after an
   * answer in the loop; `when_needed`: only when the loop ends without one. A sub-agent is
   * always `always` (its report is its reply to that prompt). Default `when_needed` for main.
   */
  final_answer: z.enum(['always', 'when_needed']).optional(),
  /** A sub-agent's first user message, `{subtask}` filled. Default `subtask`. */
  task_prompt: PromptName.optional(),
  /**
   * A sub-agent's report that is empty or a refusal (rule `agent.report_unusable`):
   * `tool_error` (default) fails the sub-agent's session and its caller sees a tool error;
   * `pass` hands the report to the caller as it is and keeps the session, flagged (a warning).
   */
  unusable_report: z.enum(['tool_error', 'pass']).optional(),
  as_tool: AgentAsTool.optional(),
  /** The sub-agents it may call. Default: every sub-agent for main, none for a sub-agent. */
  sub_agents: z.array(z.string()).optional(),
});
export type AgentConfig = z.infer<typeof AgentConfig>;

/**
 * Limits every worker of a queue run shares through Redis (issue #19; docs/scale-out.md,
 * "Shared limits"). Used only when a worker opens them (`openSharedLimits`); a run without
 * Redis never reads this section.
 */
export const SharedLimitsConfig = z.strictObject({
  /**
   * Model requests in flight across every worker of the run, lowered on 429 and raised again
   * after a run of successes, like one process's `concurrency`. Default: `concurrency` (the
   * endpoint sees what one process would send it, however many workers there are).
   */
  endpoint_concurrency: z.number().int().positive().optional(),
  /** A slot held by a worker that died comes back after this long; a live worker renews its slots every third of it. */
  lease_ms: z.number().int().min(300).default(30_000),
  /** Longest pause between two tries at a full limit. */
  poll_ms: z.number().int().positive().default(200),
  /**
   * Longest a finished request's slot is kept from Redis: this worker's next request takes it
   * again without a call if Redis granted the worker a slot within this long (not when this is a
   * quarter of lease_ms or more), else it goes back with the next request for a slot, or on its
   * own after this long. So a back-off or a lowered limit reaches every worker within this long,
   * and other workers at a full limit may wait this much longer for a slot. 0 hands each slot
   * back at once, and every request asks Redis.
   */
  release_delay_ms: z.number().int().min(0).default(200),
  /** Longest wait for Redis to answer one call. */
  redis_timeout_ms: z.number().int().positive().default(2_000),
  /**
   * How long a request waits for a Redis that does not answer before it fails (the model
   * request as `llm_error`, the tool call as a tool error): a request never goes out unlimited.
   */
  redis_wait_ms: z.number().int().positive().default(60_000),
  /** Every key starts with this; the endpoint's keys add the run's name, the tools' rate windows are shared by all runs on the Redis. */
  prefix: z.string().min(1).default('trajforge:limits:'),
  /**
   * The stdio tool servers (names in `mcpServers`) that share their rate limits through Redis,
   * and so are handed its URL and password. Default: the servers that run the bundled PubMed
   * server; `[]` hands it to none.
   */
  tool_servers: z.array(z.string().min(1)).optional(),
});
export type SharedLimitsConfig = z.infer<typeof SharedLimitsConfig>;

/**
 * Queue mode (`trajforge enqueue` / `worker`, docs/scale-out.md): the run's samples on Redis,
 * pulled by workers on any number of machines. Read from the config that `enqueue` is given
 * and stored with the run in Redis, so every worker of a run uses the same values.
 */
export const QueueConfig = z.strictObject({
  /**
   * A claimed sample whose worker has not renewed its lease for this long goes back to the
   * queue (Redis's own idle time, so a worker's clock does not matter). Workers renew every
   * third of it while they work on a sample.
   */
  visibility_timeout_ms: z.number().int().positive().default(60_000),
  /** Times a sample's lease may run out and the sample be rolled out again; past it, the sample is recorded failed (`lease_lost`). */
  lease_retries: z.number().int().nonnegative().default(3),
  /** How long a worker waits for one Redis command before it counts as failed (and is retried). */
  command_timeout_ms: z.number().int().positive().default(5_000),
  /** How long a command (an accept above all) is retried while Redis is unreachable before the worker stops. */
  unreachable_for_ms: z.number().int().positive().default(600_000),
  /** A worker's first connection: how long to try before `unreachable` is reported (exit 1). */
  connect_timeout_ms: z.number().int().positive().default(10_000),
  /** How often an idle worker asks for work when the queue is empty. */
  poll_ms: z.number().int().positive().default(250),
});
export type QueueConfig = z.infer<typeof QueueConfig>;

// ---------------------------------------------------------------------------------------
// Question synthesis (`trajforge synthesize`, pipeline/synthesize/): its config section

/** Where seeds come from: documents (single or chained) or the triples of a knowledge graph. */
export const SynthesisSource = z.strictObject({
  kind: z.enum(['documents', 'graph']),
  /** documents: JSONL of `{id, title?, text, url?}` (the bundled corpus's `paperId`/`abstract` too); graph: JSONL of `{subject, relation, object}`. */
  path: z.string().min(1),
  /** documents: field names tried, in order, for each field of a document. */
  fields: z
    .strictObject({
      id: z.array(z.string()).default(['id', 'doc_id', 'paperId', '_id']),
      title: z.array(z.string()).default(['title', 'name']),
      text: z.array(z.string()).default(['text', 'abstract', 'content', 'body']),
      url: z.array(z.string()).default(['url', 'link']),
      /** Ids of the documents this one links to (chains follow them as well as shared entities). */
      links: z.array(z.string()).default(['links']),
    })
    .prefault({}),
  /** graph: JSONL of `{entity, description}`: what obfuscation may say of an entity instead of its name. */
  descriptions: z.string().min(1).optional(),
});
export type SynthesisSource = z.infer<typeof SynthesisSource>;

/** The solvability check: k rollouts through the normal generate path; a question is kept by its pass rate p. */
export const SolvableCheck = z.strictObject({
  /** Rollouts per question. */
  k: z.number().int().min(1).max(64).default(4),
  /** The band of pass rates kept: min_pass ≤ p ≤ max_pass. */
  min_pass: z.number().min(0).max(1).default(0.25),
  max_pass: z.number().min(0).max(1).default(0.75),
  /** When set, kept by learnability instead of the band: 4p(1−p) ≥ this (1 at p = 0.5, 0 at p = 0 or 1). */
  min_learnability: z.number().min(0).max(1).optional(),
});

export const SynthesisChecks = z.strictObject({
  /** The judge is asked whether the quotes (or the walk's triples) entail the answer. */
  entailment: z.boolean().default(true),
  /** The judge is asked whether the answer is the only one the question admits. */
  unique: z.boolean().default(true),
  /** A closed-book solver (the endpoint, no tools) that answers correctly makes a question too easy: `drop` it, `mark` it and keep it, or `off`. */
  closed_book: z.enum(['drop', 'mark', 'off']).default('drop'),
  /** `false`: no rollouts; pass rates are not measured. */
  solvable: z.union([SolvableCheck, z.literal(false)]).prefault({}),
  /** Near-duplicates of a question already kept are rejected (dedup's shingles and similarity); `false`: off. */
  near_duplicate: z
    .union([
      z.strictObject({
        threshold: z.number().gt(0).max(1).default(0.8),
        shingle_size: z.number().int().min(1).max(16).default(3),
        /** Near-duplicates must have the same content words (dedup's slot guard). */
        slot_guard: z.boolean().default(true),
      }),
      z.literal(false),
    ])
    .prefault({}),
  /** Eval sets (JSONL, JSON, CSV or one question a line): a question that overlaps one (decontaminate's 13-gram rule) is rejected. */
  eval_sets: z.array(z.string().min(1)).default([]),
});

export const SynthesisConfig = z.strictObject({
  source: SynthesisSource,
  /** documents: documents per seed (1: single-document questions; k > 1: chains of k linked documents); graph: hops of a walk. */
  hops: z.number().int().min(1).max(8).default(1),
  /** Seeds drawn. Default: every document (single documents), else 1000. */
  seeds: z.number().int().positive().optional(),
  /** Seed of the draws (the order of documents, chains, walks); `--seed`. */
  seed: z.number().int().default(0),
  /** Chains: an entity links documents when between min_docs and max_docs documents mention it (more is too common to lead anywhere). */
  link: z
    .strictObject({
      min_docs: z.number().int().min(2).default(2),
      max_docs: z.number().int().min(2).default(50),
    })
    .prefault({}),
  /** Characters of a document shown to the writer at most; quotes must come from what it was shown. */
  max_document_chars: z.number().int().positive().default(20_000),
  /** The model that drafts and obfuscates; default the run's endpoint (which also plays the closed-book solver and rolls out). */
  writer: EndpointConfig.optional(),
  checks: SynthesisChecks.prefault({}),
  /** Seeds in progress at once. Default: `concurrency`. */
  seeds_in_flight: z.number().int().positive().optional(),
  /** Replies of a stage with nothing readable asked again before the seed is rejected. */
  unreadable_retries: z.number().int().nonnegative().default(1),
  /** Seeds in a row whose requests failed (endpoint or judge down) after which the run stops; they are redone by the next run. */
  fail_fast_after: z.number().int().positive().default(5),
  /** The run stops once any is reached: questions kept (exactly), or tokens or requests spent (seeds in flight finish). */
  budgets: z
    .strictObject({
      kept: z.number().int().positive().optional(),
      tokens: z.number().int().positive().optional(),
      requests: z.number().int().positive().optional(),
    })
    .prefault({}),
});
export type SynthesisConfig = z.infer<typeof SynthesisConfig>;

export const RunConfig = z.strictObject({
  endpoint: EndpointConfig,
  dialect: DialectName.default('tulu'),
  /** mcp-xml only: MiroThinker's form (see DialectOptions). */
  dialect_options: DialectOptions.optional(),
  mcpServers: z.record(z.string(), McpServerConfig).default({}),
  tools: ToolsConfig.prefault({}),
  questions: QuestionsConfig.prefault({}),
  budgets: BudgetsConfig.prefault({}),
  rollback: RollbackConfig.prefault({}),
  context: ContextConfig.prefault({}),
  retry: RetryConfig.prefault({}),
  executor: ExecutorConfig.prefault({}),
  validation: ValidationConfig.prefault({}),
  queue: QueueConfig.prefault({}),
  concurrency: z.number().int().positive().default(32),
  /** Queue mode only: the limits shared by every worker through Redis. */
  shared_limits: SharedLimitsConfig.prefault({}),
  output: z
    .strictObject({
      dir: z.string().default('runs/default'),
      /**
       * Seconds between the manifest's checkpoints while a run goes on (its counts, cost and
       * endpoint counts, for `report --serve` and anyone watching the run): at most this often,
       * and at least this often even while no record is written (a run held back by 429s).
       */
      checkpoint_s: z.number().positive().default(30),
    })
    .prefault({}),
  /** Extra text appended to the dialect's system prompt. */
  instructions: z.string().optional(),
  /** A main agent that delegates to sub-agents; unset: one agent, as configured above. */
  /** Agent names are letters, digits, `_` and `-` (they go into session ids); checked with the references (pipeline/core/agent-config.ts). */
  agents: z.record(z.string(), AgentConfig).optional(),
  /** How deep sub-agents may nest: 1 lets main call sub-agents that call none. */
  max_agent_depth: z.number().int().positive().default(1),
  /**
   * Samples (with agents: families) rolled out at once. `concurrency` counts model requests in
   * flight; a sample waiting on a tool or a sub-agent holds none, so more samples than
   * requests keep the endpoint busy. Default: `concurrency`; with agents, 4 × `concurrency`
   * (a family is a chain of requests, one after another: the more of them side by side, the
   * closer together the last ones of a run finish; bench/BENCHMARKS.md, "Agents").
   */
  samples_in_flight: z.number().int().positive().optional(),
  /**
   * What counts tokens for the context guard (and for `stats`, `export --max-tokens` and
   * `limits.tokens` on this run): `o200k_base` (default), `cl100k_base`, or the path of the
   * trainee's Hugging Face tokenizer (a folder with tokenizer.json and tokenizer_config.json,
   * or the tokenizer.json).
   */
  tokenizer: z.string().min(1).optional(),
  /** `trajforge synthesize`: questions of its own from a corpus or a knowledge graph (pipeline/synthesize/). */
  synthesis: SynthesisConfig.optional(),
  /** Prices by model name (the endpoint's, the judge's): what the run's tokens cost, and what `budgets.max_cost_usd` counts. No defaults. */
  prices: z.record(z.string(), ModelPrice).default({}),
});
export type RunConfig = z.infer<typeof RunConfig>;
export type RunConfigInput = z.input<typeof RunConfig>;

const Counts = z.object({
  accepted: z.number().int().nonnegative(),
  failed: z.number().int().nonnegative(),
  by_reason: z.record(z.string(), z.number().int().nonnegative()),
});
/** Samples (roots) by their latest state; with agents, the sub-agent sessions apart. */
export const RunCounts = Counts.extend({
  sub_agents: Counts.optional(),
});

/** What opening a run did to a file that did not end at a newline (a crash in the middle of a write, or a hand). */
export const TailRepair = z.object({
  file: z.string(),
  /**
   * `newline_added`: the last line was a whole record; `moved_aside`: a cut one, saved to
   * `saved_to`; `orphans_moved_aside`: the last `records` lines were sub-agent sessions of a
   * family whose root a crash kept from being written, saved to `saved_to`.
   */
  action: z.enum(['newline_added', 'moved_aside', 'orphans_moved_aside']),
  bytes: z.number().int().nonnegative(),
  saved_to: z.string().optional(),
  records: z.number().int().nonnegative().optional(),
});
export type TailRepair = z.infer<typeof TailRepair>;

/** One part of a run's spend: its requests' tokens, and their price (null when unpriced). */
const RunSpendPart = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  cached_tokens: z.number().int().nonnegative(),
  usd: z.number().nonnegative().nullable(),
});

/**
 * What a model client met at its endpoint (pipeline/core/llm/counts.ts): HTTP requests sent, and
 * their responses by class (the classes add up to `requests`).
 */
export const EndpointCounts = z.object({
  requests: z.number().int().nonnegative(),
  responses: z.object({
    ok: z.number().int().nonnegative(),
    /** 429. */
    rate_limited: z.number().int().nonnegative(),
    /** 5xx, and an error inside a stream. */
    server_error: z.number().int().nonnegative(),
    /** Other 4xx (a refused `stop` or `max_tokens` included: the request goes again without it). */
    client_error: z.number().int().nonnegative(),
    /** No connection, or one that broke. */
    connection_error: z.number().int().nonnegative(),
    /** No response within `endpoint.timeout_ms`. */
    timeout: z.number().int().nonnegative(),
    /** A 2xx body that is not a completion (not JSON, a stream cut short, past `max_response_bytes`). */
    malformed: z.number().int().nonnegative(),
    /** Stopped by the run (an interrupt) before the response came. */
    aborted: z.number().int().nonnegative(),
  }),
  /** Waits after a failed request before it went again (the failures past `max_retries` are not retried). */
  retries: z.number().int().nonnegative(),
  /** Of those, the waits the endpoint asked for (`Retry-After`, `retry-after-ms`), and the seconds waited for them (at most `retry_max_ms` each). */
  retry_after: z.object({ waits: z.number().int().nonnegative(), seconds: z.number().nonnegative() }),
  /** Completions cut at `max_tokens` asked again with more (`endpoint.length_retries`). */
  length_retries: z.number().int().nonnegative(),
  /** Completions resampled because their tail repeated (`endpoint.repetition_retries`). */
  repetition_resamples: z.number().int().nonnegative(),
  /** Requests in flight the client allowed when this was written (lowered on 429); absent when unlimited. */
  concurrency_limit: z.number().int().positive().optional(),
});
export type EndpointCounts = z.infer<typeof EndpointCounts>;

/** A run's endpoint counts: the agents' client (the main agent's and sub-agents' requests, one client and one gate) and the judge's, apart. */
export const RunEndpointCounts = z.object({
  agents: EndpointCounts,
  judge: EndpointCounts.optional(),
});
export type RunEndpointCounts = z.infer<typeof RunEndpointCounts>;

export const RunManifest = z.object({
  schema_version: schemaVersion,
  run_id: z.string(),
  created_at: z.string(),
  updated_at: z.string(),
  status: z.enum(['running', 'completed', 'interrupted', 'failed']),
  trajforge_version: z.string(),
  node_version: z.string(),
  model: z.string(),
  dialect: DialectName,
  /** The config as run, with secrets redacted. */
  config: z.record(z.string(), z.unknown()),
  /** Hash of the fields that change what a trajectory is; resuming with another is refused. */
  config_fingerprint: z.string(),
  fingerprint_fields: z.record(z.string(), z.unknown()),
  questions: z.object({ path: z.string().nullable(), total: z.number().int().nonnegative().nullable() }),
  counts: RunCounts,
  /**
   * One entry per invocation of the command on this run directory (the first, then each resume).
   * The contract names it `sessions`; everywhere else a session is one agent conversation.
   */
  sessions: z.array(
    z.object({
      started_at: z.string(),
      finished_at: z.string().optional(),
      exit: z.string().optional(),
      /** The trajforge that ran this invocation. */
      trajforge_version: z.string().optional(),
      /** Files this invocation found not ending at a newline when it opened the run, and what it did. */
      tail_repairs: z.array(TailRepair).optional(),
      /** Fingerprint fields this invocation changed on purpose (`--allow-config-change`), with the values before and after. */
      config_changes: z.array(z.object({ field: z.string(), before: z.unknown(), after: z.unknown() })).optional(),
      /** Fingerprint fields the manifest did not record before this invocation (written by an earlier trajforge). */
      fingerprint_fields_added: z.array(z.string()).optional(),
      /** What this invocation's model clients met at their endpoints, as of the manifest's last checkpoint. */
      endpoint: RunEndpointCounts.optional(),
    }),
  ),
  /** The sessions' `endpoint` counts added up: the run's, over every invocation that recorded them. */
  endpoint: RunEndpointCounts.optional(),
  /** Set on a worker's run directory (queue mode): the queue's run name and this worker's name, which Redis records with each sample it accepted. */
  worker: z.object({ run: z.string(), name: z.string() }).optional(),
  /** What the run spent, over all its invocations (pipeline/core/cost.ts); written when the config has prices, and tokens always. */
  cost: z
    .object({
      /** null: some model of the run has no price in the config. */
      usd: z.number().nonnegative().nullable(),
      /** The main agent's sessions, the sub-agents' and the judge's, apart. */
      by: z.object({ main: RunSpendPart, sub_agents: RunSpendPart, judge: RunSpendPart }),
      /** Some counts came from a local tokenizer: the endpoint sent none. */
      estimated: z.boolean(),
      /** Set when `budgets.max_cost_usd` stopped the last session. */
      budget_reached: z.object({ max_cost_usd: z.number(), spent_usd: z.number() }).optional(),
    })
    .optional(),
  /** Set on a run made by `merge`: the runs it came from. */
  merged_from: z.array(z.object({ dir: z.string(), run_id: z.string(), counts: RunCounts })).optional(),
});
export type RunManifest = z.infer<typeof RunManifest>;

// ---------------------------------------------------------------------------------------
// `trajforge report --serve`: the live view of a run (pipeline/dataset/report/serve.ts)

export const ReportServeOptions = z.strictObject({
  /** Address to listen on: loopback unless `allow_remote`, since the page shows the run's trajectories, which may be private. */
  host: z.string().min(1).default('127.0.0.1'),
  /** Port to listen on; 0 takes any free one. */
  port: z.number().int().min(0).max(65_535).default(8321),
  /** Listen on an address other than loopback (`--allow-remote`): anyone who can reach it reads the run. */
  allow_remote: z.boolean().default(false),
  /** Milliseconds between looks at the run's files (and the manifest). */
  poll_ms: z.number().int().min(20).max(60_000).default(1000),
  /** Seconds of the recent window that samples per minute is measured over. */
  rate_window_s: z.number().int().min(1).max(86_400).default(60),
  /** Newest trajectories named in the live panel. */
  newest: z.number().int().min(1).max(500).default(10),
  /** Bytes of the run's files read in one step: a look at the files, or one answer to a page that catches up. */
  read_chunk_bytes: z.number().int().min(4096).max(1 << 30).default(8 << 20),
  /** Seconds between keep-alive comments on the page's event stream (proxies close a silent one). */
  heartbeat_s: z.number().int().min(1).max(3600).default(15),
  /** US dollars per million prompt tokens: with it, the spend is shown in dollars as well as tokens. */
  price_prompt: z.number().nonnegative().optional(),
  /** US dollars per million completion tokens. */
  price_completion: z.number().nonnegative().optional(),
});
export type ReportServeOptions = z.infer<typeof ReportServeOptions>;

// ---------------------------------------------------------------------------------------
// Curation: dedup and decontaminate (options with their defaults, and the records they write)

export const DEDUP_KEEP_RULES = ['first', 'accepted', 'shortest', 'longest', 'most-calls', 'fewest-calls'] as const;

export const DedupOptions = z.strictObject({
  /** What two rows must share to be near-duplicates: their questions, their final answers, or both. */
  by: z.enum(['question', 'answer', 'both']).default('question'),
  /** Words per shingle. */
  shingle_size: z.number().int().min(1).max(16).default(3),
  /** Jaccard similarity of the shingle sets at or above which two texts are near-duplicates. */
  threshold: z.number().gt(0).max(1).default(0.8),
  /** Most MinHash functions the LSH index may use; bands × rows is derived from the threshold within it. */
  max_hashes: z.number().int().min(1).max(1024).default(64),
  /** Shingles kept per text (the smallest hashes): texts up to this size are compared exactly. */
  sketch_size: z.number().int().min(8).max(65_535).default(128),
  /** Earlier members of an LSH bucket each row is compared with; pairs further apart are counted, not compared. */
  bucket_window: z.number().int().positive().default(50),
  /** Which member of a cluster is kept; ties go to the earliest row. */
  keep: z.enum(DEDUP_KEEP_RULES).default('first'),
  /**
   * Near-duplicates must have the same content words (all but a short list of function words,
   * numbers included): a template's slot filled twice (France/Peru, Chrome/Chrome Android,
   * 52/26 weeks) is never a near-duplicate, however long the rest.
   */
  slot_guard: z.boolean().default(true),
  /**
   * Common words that mean the same WordNet synset most often count as one word (`biggest` /
   * `largest`, `buy` / `purchase`), inflections as their lemma; with the slot guard, only where
   * the slot-like words (numbers, names) are the same. false: words as written.
   */
  synonyms: z.boolean().default(true),
});
export type DedupOptions = z.infer<typeof DedupOptions>;

/** A row as the dedup report names it. */
export const DedupMember = z.object({
  /** The file the row was read from (a run directory's trajectories.jsonl or failures.jsonl). */
  input: z.string(),
  line: z.number().int().positive(),
  id: z.string(),
  kept: z.boolean(),
  /** Jaccard similarity to the kept row's text (the higher of the word and clause views); a member joined through another can be below the threshold. */
  similarity: z.number().min(0).max(1),
  /** The compared text (the question, or the final answer with `by: answer`), cut at 300 characters. */
  text: z.string(),
});

/** A line of `dedup --clusters`: a cluster of two or more near-duplicate rows. */
export const DedupCluster = z.object({
  schema_version: schemaVersion,
  /** 1-based, in the order of each cluster's first row. */
  cluster: z.number().int().positive(),
  size: z.number().int().min(2),
  keep: z.enum(DEDUP_KEEP_RULES),
  members: z.array(DedupMember),
});
export type DedupCluster = z.infer<typeof DedupCluster>;

export const DECONTAMINATION_FIELDS = ['question', 'tool_output', 'answer'] as const;

export const DecontaminateOptions = z.strictObject({
  /** n-gram length in words (13, as the GPT-3 and later model reports use). */
  n: z.number().int().min(1).max(64).default(13),
  /** Eval items shorter than n words are matched whole; items shorter than this are not checked (counted). */
  min_words: z.number().int().min(1).max(64).default(8),
  /** Distinct n-grams of one eval item a field must hold to be flagged. */
  min_ngrams: z.number().int().positive().default(1),
  /**
   * The item's n-grams found in a field must also cover every content word of the item (words
   * outside dedup's list of function words): a leaked item brings its slot values, a question
   * of the same template whose fixed text is n words or longer does not. Off: n-grams alone
   * decide (GPT-3's rule).
   */
  content_check: z.boolean().default(true),
  /** The parts of each row that are scanned. */
  fields: z.array(z.enum(DECONTAMINATION_FIELDS)).min(1).default(['question', 'tool_output', 'answer']),
  /** Field names tried, in order, for an eval item's text and id (JSONL, JSON and CSV eval files). */
  eval_fields: z
    .strictObject({
      question: z.array(z.string()).default(['question', 'query', 'prompt', 'problem', 'input']),
      id: z.array(z.string()).default(['id', 'qid', 'question_id', 'sample_id', '_id']),
    })
    .prefault({}),
});
export type DecontaminateOptions = z.infer<typeof DecontaminateOptions>;

/** A line of `decontaminate --report`: a flagged row and what it overlaps. */
export const ContaminationFlag = z.object({
  schema_version: schemaVersion,
  input: z.string(),
  line: z.number().int().positive(),
  id: z.string(),
  matches: z.array(
    ContaminationMatch.extend({
      /** The eval item's text, cut at 300 characters. */
      eval_text: z.string(),
    }),
  ),
});
export type ContaminationFlag = z.infer<typeof ContaminationFlag>;

/**
 * The `--rules` file of `trajforge validate` (YAML or JSON). Every field optional; unknown
 * fields are errors that name them (and so are unknown rule ids: the reader checks those
 * against the validator's rules, pipeline/dataset/validate-rules.ts).
 */
export const ValidationRules = z.strictObject({
  /** Rule id → error, warn or off. */
  severities: z.record(z.string(), RuleSeverity).default({}),
  limits: z
    .strictObject({
      /** limits.turns: more model turns than this. */
      turns: z.number().int().nonnegative().optional(),
      /** limits.tokens: more o200k_base tokens in interleaved_text than this. */
      tokens: z.number().int().positive().optional(),
      /** tools.over_limit: calls that ran, per tool name. */
      tools: z.record(z.string(), z.number().int().nonnegative()).optional(),
    })
    .prefault({}),
  gold: z
    .strictObject({
      mode: GoldMatch.default('contains'),
      /** With mode f1, the SQuAD token F1 an answer needs. */
      f1_threshold: z.number().gt(0).max(1).default(0.8),
    })
    .prefault({}),
  judge: z
    .strictObject({
      /** Default: the config's endpoint.model. */
      model: z.string().min(1).optional(),
      temperature: z.number().min(0).max(2).default(0),
      max_tokens: z.number().int().positive().optional(),
      /** Gradings in flight. */
      concurrency: z.number().int().positive().default(8),
    })
    .prefault({}),
});
export type ValidationRules = z.infer<typeof ValidationRules>;

// ---------------------------------------------------------------------------------------
// Question synthesis: the rows `trajforge synthesize` writes (questions.jsonl, rejected.jsonl)

/** The checks of a synthesized question, in the order they run (pipeline/synthesize/checks.ts). */
export const SYNTHESIS_CHECKS = ['draft', 'obfuscate', 'verbatim', 'no_leak', 'contamination', 'entailment', 'unique', 'closed_book', 'near_duplicate', 'solvable'] as const;
export const SynthesisCheck = z.enum(SYNTHESIS_CHECKS);
export type SynthesisCheck = z.infer<typeof SynthesisCheck>;

/** `marked`: failed, and kept by config (closed_book: mark); `error`: could not be decided (an unreadable reply). */
export const CheckResult = z.object({
  verdict: z.enum(['pass', 'fail', 'marked', 'error']),
  reason: z.string(),
});
export type CheckResult = z.infer<typeof CheckResult>;

export const EvidenceQuote = z.object({ doc_id: z.string().min(1), quote: z.string().min(1) });
export const Triple = z.object({ subject: z.string().min(1), relation: z.string().min(1), object: z.string().min(1) });
export type Triple = z.infer<typeof Triple>;

/** What a seed cost: every request of its stages, checks and rollouts. */
export const SynthesisCost = z.object({
  requests: z.number().int().nonnegative(),
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
});
export type SynthesisCost = z.infer<typeof SynthesisCost>;

export const SynthesisSourceRef = z.object({
  kind: z.enum(['documents', 'graph']),
  /** The source file, as the config named it. */
  path: z.string(),
  /** The seed's stable id. */
  seed: z.string().min(1),
  /** documents: the seed's document ids, in chain order. */
  docs: z.array(z.string()).optional(),
});

export const SynthesisProvenance = z.object({
  /** The endpoint's model (closed-book solver, rollouts) and the writer's. */
  model: z.string(),
  writer_model: z.string(),
  judge_model: z.string(),
  /** `name@hash` of each prompt the seed was made with. */
  prompts: z.array(z.string()),
  trajforge_version: z.string(),
});

/** A kept question: a Question (`generate` reads it as is) with its evidence, checks and difficulty. */
export const SynthesizedQuestion = z.object({
  schema_version: schemaVersion,
  id: z.string().min(1),
  question: z.string().min(1),
  answer: z.string().min(1),
  /** Other spellings of the answer that count as right (the judge reads them as gold alternatives). */
  aliases: z.array(z.string()).optional(),
  /** Verbatim quotes from the seed's documents, or the walk's triples. */
  evidence: z.union([z.array(EvidenceQuote), z.array(Triple)]),
  hops: z.number().int().positive(),
  source: SynthesisSourceRef,
  /** The question before obfuscation. */
  draft_question: z.string(),
  difficulty: z.object({
    /** null: the closed-book check is off. */
    closed_book_correct: z.boolean().nullable(),
    /** Correct rollouts / k; null: the solvability check is off. */
    pass_rate: z.number().min(0).max(1).nullable(),
    k: z.number().int().nonnegative(),
  }),
  checks: z.partialRecord(SynthesisCheck, CheckResult),
  provenance: SynthesisProvenance,
  cost: SynthesisCost,
});
export type SynthesizedQuestion = z.infer<typeof SynthesizedQuestion>;

/** A seed that gave no kept question: what it got to, and the check that rejected it. */
export const RejectedDraft = z.object({
  schema_version: schemaVersion,
  /** The question's id, once there was a question. */
  id: z.string().optional(),
  source: SynthesisSourceRef,
  rejected_by: SynthesisCheck,
  reason: z.string(),
  question: z.string().optional(),
  draft_question: z.string().optional(),
  answer: z.string().optional(),
  aliases: z.array(z.string()).optional(),
  evidence: z.union([z.array(EvidenceQuote), z.array(Triple)]).optional(),
  difficulty: SynthesizedQuestion.shape.difficulty.optional(),
  checks: z.partialRecord(SynthesisCheck, CheckResult),
  provenance: SynthesisProvenance,
  cost: SynthesisCost,
});
export type RejectedDraft = z.infer<typeof RejectedDraft>;

export const schemas = {
  Question,
  ToolCallRecord,
  Trajectory,
  FailureRecord,
  RunManifest,
  RunConfig,
  DedupCluster,
  ContaminationFlag,
  ValidationRules,
  SynthesizedQuestion,
  RejectedDraft,
} as const;
