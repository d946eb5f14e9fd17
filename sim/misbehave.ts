/**
 * The ways the sim misbehaves, and how each one changes a completion in each dialect. Every
 * kind is drawn independently for every completion, in the fixed order of MISBEHAVIOUR_KINDS
 * and whether or not its rate is zero, so changing one rate never shifts the draws of the
 * others. A kind that does not fit a turn (an unclosed answer in a call turn, a wrong server
 * outside mcp-xml) changes nothing and is not counted.
 */
import { TrajforgeError } from '../pipeline/errors.js';
import {
  answerText,
  BAD_ARGUMENT_STYLES,
  PLAIN_CALL,
  renderArguments,
  renderTextAnswer,
  renderTextCall,
  renderThink,
  wrongServerName,
  type CallVariant,
  type SimToolCall,
  type SimTurn,
} from './dialects.js';
import { inventToolOutput } from './policy.js';
import type { CallSpec, Evidence, Rng, SimDialect, TextDialect, TurnPlan } from './types.js';

export const MISBEHAVIOUR_KINDS = [
  'unclosed_call',
  'hallucinated_output',
  'multiple_calls',
  'no_action',
  'unclosed_answer',
  'ignore_stop',
  'refusal',
  'length',
  'rate_limit',
  'server_error',
  'stall',
  'drop',
  'malformed',
  'repetition',
  'bad_arguments',
  'wrong_server',
  'dirty_text',
  // Answers in shapes OpenAI-compatible servers have really sent (after the ones above, so
  // adding them shifted no earlier draw).
  'object_arguments',
  'numeric_name',
  'content_parts',
  'string_usage',
  'endless',
  // Wrong answers and the judge's faults (sim/judge.ts), asked for by name.
  'wrong_answer',
  'judge_unreadable',
  'judge_quotes',
  'judge_echo_key',
  // Hostile shapes, asked for by name (after the ones above, so adding them shifted no earlier draw).
  'deep_arguments',
  // A sub-agent's unusable report (rule agent.report_unusable), asked for by name.
  'refused_report',
  'empty_report',
] as const;

export type MisbehaviourKind = (typeof MISBEHAVIOUR_KINDS)[number];

/** How deep `deep_arguments` nests a call's arguments. */
export const DEEP_ARGUMENTS_LEVELS = 20_000;

/** Call arguments whose `filter` nests `levels` objects: `{"query": …, "filter": {"and": {"and": … {} …}}}`. */
export function deepArguments(argKey: string, query: string, levels: number = DEEP_ARGUMENTS_LEVELS): string {
  return `{${JSON.stringify(argKey)}:${JSON.stringify(query)},"filter":${'{"and":'.repeat(levels)}{}${'}'.repeat(levels)}}`;
}

/** The `empty_report` misbehaviour's report: not blank (the rollout would ask again), but without a word. */
export const EMPTY_REPORT = '---';

export type MisbehaviourRates = Partial<Record<MisbehaviourKind, number>>;

/** One line each, for `--help`. */
export const MISBEHAVIOUR_HELP: Readonly<Record<MisbehaviourKind, string>> = {
  unclosed_call:
    'a call without </call_tool> or </use_mcp_tool>, followed by a newline and more text (another call or an answer); native: arguments JSON cut before its closing brace',
  hallucinated_output:
    'after its call the model writes its own <tool_output> and an answer, sent past any stop string; native: both in content beside the tool call',
  multiple_calls: 'two or three closed calls in one turn, sent past any stop string; native: two or three parallel tool calls',
  no_action: 'a turn of plain prose with no call and no answer; native: reasoning only, empty content, no tool calls',
  unclosed_answer: 'an answer without </answer>, or a \\boxed{ never closed (mcp-xml); not in native',
  ignore_stop: 'the server does not cut at stop strings: the text past the stop string is sent, finish_reason stop',
  refusal: `a turn that only says "I'm sorry, but I can't help with that."`,
  length: 'the completion is cut in the middle, finish_reason length',
  rate_limit: 'HTTP 429 with Retry-After (seconds) and retry-after-ms headers, OpenAI rate-limit error body',
  server_error: 'HTTP 500 with an OpenAI error body',
  stall: 'wait --stall-ms (default 30000) before doing anything else, so clients time out',
  drop: 'destroy the connection: mid-stream when streaming, before any response otherwise',
  malformed: 'HTTP 200 with a body that is not what the protocol promises: JSON cut in half, or an SSE line that is not JSON',
  repetition: 'degenerate repetition: after a normal start the model repeats one phrase until max_tokens, finish_reason length',
  bad_arguments: 'mcp-xml and native: call arguments that need lenient JSON repair (single quotes, a trailing comma or an unquoted key)',
  wrong_server: 'mcp-xml: a misspelled or "default" server_name for a tool whose name says which server is meant',
  dirty_text:
    'control characters (NUL, ESC, DEL, C1) and lone surrogates between words, CR or CRLF line ends, and \\u0000 and \\ud800 escapes in JSON call arguments; text only, never inside a tag',
  object_arguments: 'native: tool-call arguments as a JSON object, not a JSON string (as llama.cpp sent them)',
  numeric_name: 'native: the first tool call names its function with a number',
  content_parts: "content as an array of parts: {type: text} for the text, Mistral's {type: thinking} for the reasoning",
  string_usage: 'usage counts as strings ("123")',
  endless: 'HTTP 200 and a body that never ends: JSON that never closes, or a stream of content that never finishes',
  wrong_answer: 'the answer states a made-up version (1000 or more) instead of the best evidence, still citing a snippet it was shown',
  judge_unreadable: 'as a judge: a grading that names no verdict and no scores',
  judge_quotes: 'as a judge: the answer quoted, unescaped, in its reasoning (before the verdict) and in its rationale (after it)',
  judge_echo_key: 'as a judge: the key it was sent, written into its rationale',
  deep_arguments: `native: the first tool call's arguments nest objects ${DEEP_ARGUMENTS_LEVELS} levels deep (valid JSON, past any parser's stack if walked recursively)`,
  refused_report: `as a sub-agent asked for its report: only "I'm sorry, but I can't help with that."`,
  empty_report: `as a sub-agent asked for its report: a report with nothing in it ("${EMPTY_REPORT}")`,
};

/**
 * Kinds that `all=RATE` leaves alone, by why: the transport faults make every client time out
 * or fail, the wire shapes are a server's habits asked for by name, and the rest change what a
 * run's answers or families are, which a test asks for on purpose.
 */
export const EXCLUDED_FROM_ALL_BY_WHY: Readonly<Record<string, readonly MisbehaviourKind[]>> = {
  'the transport faults': ['stall', 'drop', 'malformed'],
  'the wire shapes': ['object_arguments', 'numeric_name', 'content_parts', 'string_usage', 'endless'],
  "wrong answers and the judge's faults": ['wrong_answer', 'judge_unreadable', 'judge_quotes', 'judge_echo_key'],
  'hostile shapes': ['deep_arguments'],
  "a sub-agent's unusable report": ['refused_report', 'empty_report'],
};

export const EXCLUDED_FROM_ALL: readonly MisbehaviourKind[] = Object.values(EXCLUDED_FROM_ALL_BY_WHY).flat();

export const REFUSAL_TEXT = "I'm sorry, but I can't help with that.";

export function isMisbehaviourKind(name: string): name is MisbehaviourKind {
  return (MISBEHAVIOUR_KINDS as readonly string[]).includes(name);
}

/** Checks names and rates; returns a rate for every kind (0 where unset). */
export function normaliseRates(rates: MisbehaviourRates | undefined): Record<MisbehaviourKind, number> {
  const out = Object.fromEntries(MISBEHAVIOUR_KINDS.map((k) => [k, 0])) as Record<MisbehaviourKind, number>;
  for (const [name, rate] of Object.entries(rates ?? {})) {
    if (!isMisbehaviourKind(name)) {
      throw new TrajforgeError('BAD_CONFIG', `unknown misbehaviour '${name}'; known: ${MISBEHAVIOUR_KINDS.join(', ')}`);
    }
    if (rate === undefined) continue;
    if (typeof rate !== 'number' || !Number.isFinite(rate) || rate < 0 || rate > 1) {
      throw new TrajforgeError('BAD_CONFIG', `misbehaviour rate for '${name}' must be a number from 0 to 1, got ${String(rate)}`);
    }
    out[name] = rate;
  }
  return out;
}

export function drawMisbehaviours(rates: Readonly<Record<MisbehaviourKind, number>>, rng: Rng): Set<MisbehaviourKind> {
  const drawn = new Set<MisbehaviourKind>();
  for (const kind of MISBEHAVIOUR_KINDS) {
    if (rng() < rates[kind]) drawn.add(kind);
  }
  return drawn;
}

export interface ComposedTurn {
  /** What the model wrote, before the server applies stop strings and limits. */
  readonly turn: SimTurn;
  /** False when the turn's text must reach the client whole, past any stop string. */
  readonly honourStop: boolean;
  /** Content kinds that changed this turn (a kind that does not fit the turn changes nothing). */
  readonly applied: readonly MisbehaviourKind[];
}

const NO_ACTION_PROSE = [
  (topic: string) => `Let me think about what is known about ${topic} before going further.`,
  (topic: string) => `This question about ${topic} needs some care. I should look at it from a few angles.`,
  (topic: string) => `Okay, so the question concerns ${topic}. There are several things to consider here.`,
];

/** Phrases a degenerate model loops on: a sentence, a single word, a list item. */
const REPEATED_UNITS = [
  (topic: string) => `I will search for ${topic} again. `,
  (topic: string) => `Let me check the results about ${topic} once more.\n`,
  () => 'the ',
  (topic: string) => `\n- ${topic}`,
];

export interface ComposeOptions {
  /** Characters a `repetition` turn runs to: past the request's max_tokens, so the server cuts it. Default 16000. */
  readonly repeatChars?: number;
  /** The id of the `index`-th native tool call of the turn. Default `call_<index>`. */
  readonly callId?: (index: number) => string;
}

function textTurn(content: string, honourStop: boolean, applied: readonly MisbehaviourKind[]): ComposedTurn {
  return { turn: { reasoning: '', content, toolCalls: [] }, honourStop, applied };
}

/** The turn the model writes in the request's dialect, with the content misbehaviours drawn for it. */
export function composeTurn(
  plan: TurnPlan,
  dialect: SimDialect,
  drawn: ReadonlySet<MisbehaviourKind>,
  rng: Rng,
  opts: ComposeOptions = {},
): ComposedTurn {
  const native = dialect === 'native';
  if (drawn.has('refusal')) return textTurn(REFUSAL_TEXT, true, ['refusal']);
  if (drawn.has('no_action') && plan.kind !== 'summary') {
    const topic = plan.keywords.slice(0, 5).join(' ') || 'this';
    const prose = (NO_ACTION_PROSE[Math.floor(rng() * NO_ACTION_PROSE.length)] ?? NO_ACTION_PROSE[0]!)(topic);
    // A native model that takes no action thinks, then says nothing.
    const turn = native ? { reasoning: prose, content: '', toolCalls: [] } : { reasoning: '', content: prose, toolCalls: [] };
    return { turn, honourStop: true, applied: ['no_action'] };
  }
  if (drawn.has('repetition')) {
    const topic = plan.keywords.slice(0, 4).join(' ') || 'this';
    const unit = (REPEATED_UNITS[Math.floor(rng() * REPEATED_UNITS.length)] ?? REPEATED_UNITS[0]!)(topic);
    const start = `${native ? '' : '<think>'}I need to find out about ${topic}. `;
    const chars = opts.repeatChars ?? 16_000;
    const loop = start + unit.repeat(Math.ceil(Math.max(0, chars - start.length) / unit.length) + 1);
    const turn = native ? { reasoning: loop, content: '', toolCalls: [] } : { reasoning: '', content: loop, toolCalls: [] };
    return { turn, honourStop: true, applied: ['repetition'] };
  }
  // The reply to a failure-summary request is data; it carries no thinking in any dialect.
  if (plan.kind === 'summary') return textTurn(plan.summary, true, []);
  // A sub-agent's report is prose in every dialect, thinking allowed before it (the caller strips it).
  if (plan.kind === 'report') {
    if (drawn.has('refused_report')) return textTurn(REFUSAL_TEXT, true, ['refused_report']);
    if (drawn.has('empty_report')) return textTurn(EMPTY_REPORT, true, ['empty_report']);
    const report = plan.report ?? '';
    return native ? { turn: { reasoning: plan.reasoning ?? '', content: report, toolCalls: [] }, honourStop: true, applied: [] } : textTurn(renderThink(plan.reasoning) + report, true, []);
  }
  if (plan.kind === 'answer' || plan.call === null) {
    const wrong = drawn.has('wrong_answer') && plan.evidence !== null;
    // A version no browser has had: never a gold answer, still a claim about a snippet it was shown.
    const evidence = wrong ? { snippet: { ...plan.evidence!.snippet, title: null }, sentence: `According to this source, it was first supported in version ${1000 + Math.floor(rng() * 9000)}.` } : plan.evidence;
    const answerKinds: MisbehaviourKind[] = wrong ? ['wrong_answer'] : [];
    if (native) return { turn: { reasoning: plan.reasoning ?? '', content: answerText(evidence), toolCalls: [] }, honourStop: true, applied: answerKinds };
    const unclosed = drawn.has('unclosed_answer');
    return textTurn(renderThink(plan.reasoning) + renderTextAnswer(dialect, evidence, !unclosed, plan.lead), true, unclosed ? [...answerKinds, 'unclosed_answer'] : answerKinds);
  }
  const applied: MisbehaviourKind[] = [];
  const variant = callVariant(dialect, plan.call, drawn, rng, applied);
  return native
    ? composeNativeCall(plan, plan.call, variant, drawn, rng, opts.callId ?? ((i) => `call_${i}`), applied)
    : composeTextCall(dialect, plan, plan.call, variant, drawn, rng, applied);
}

/** How the turn's first call is written: `bad_arguments` (mcp-xml, native) and `wrong_server` (mcp-xml). */
function callVariant(dialect: SimDialect, call: CallSpec, drawn: ReadonlySet<MisbehaviourKind>, rng: Rng, applied: MisbehaviourKind[]): CallVariant {
  let variant = PLAIN_CALL;
  if (drawn.has('bad_arguments') && dialect !== 'tulu') {
    variant = { style: BAD_ARGUMENT_STYLES[Math.floor(rng() * BAD_ARGUMENT_STYLES.length)] ?? 'single_quotes' };
    applied.push('bad_arguments');
  }
  const server = drawn.has('wrong_server') && dialect === 'mcp-xml' ? wrongServerName(call.tool, rng) : null;
  if (server !== null) {
    variant = { ...variant, server };
    applied.push('wrong_server');
  }
  return variant;
}

/** An answer that cites the made-up tool output, as a model that invented one goes on to write. */
function inventedEvidence(plan: TurnPlan, invented: string): Evidence {
  const claim = capitalise(/According to this source, ([^<]*)<\/snippet>/.exec(invented)?.[1] ?? 'it was found.');
  return { snippet: { id: 'fake-1', title: plan.keywords.slice(0, 4).join(' '), sentences: [claim] }, sentence: claim };
}

function composeTextCall(
  dialect: TextDialect,
  plan: TurnPlan,
  call: CallSpec,
  variant: CallVariant,
  drawn: ReadonlySet<MisbehaviourKind>,
  rng: Rng,
  applied: MisbehaviourKind[],
): ComposedTurn {
  const unclosed = drawn.has('unclosed_call');
  const multiple = drawn.has('multiple_calls');
  const hallucinated = drawn.has('hallucinated_output');
  // Further calls name the same server as the first; only its arguments are malformed.
  const extra = (i: number): string =>
    renderTextCall(dialect, { ...call, query: plan.extraQueries[i] ?? call.query }, true, { ...variant, style: 'json' });
  let text = renderThink(plan.reasoning) + (plan.lead === undefined || plan.lead === '' ? '' : `${plan.lead}\n\n`);

  if (unclosed) {
    applied.push('unclosed_call');
    // Real unclosed calls are followed by blank lines and whatever the model does next.
    text += `${renderTextCall(dialect, call, false, variant)}\n\n`;
  } else {
    text += renderTextCall(dialect, call, true, variant);
  }

  if (multiple) {
    applied.push('multiple_calls');
    const count = 1 + Math.floor(rng() * 2);
    for (let i = 0; i < count; i++) text += `${unclosed && i === 0 ? '' : '\n'}${extra(i)}`;
  } else if (unclosed && !hallucinated) {
    // The text after an unclosed call: another call (its own stop string still cuts it) or an answer.
    return rng() < 0.5
      ? textTurn(`${text}${extra(0)}\n${inventToolOutput(plan, rng)}`, true, applied)
      : textTurn(`${text}${renderTextAnswer(dialect, plan.evidence, true)}`, true, applied);
  }

  if (hallucinated) {
    applied.push('hallucinated_output');
    const invented = inventToolOutput(plan, rng);
    text += `\n${invented}\n${renderTextAnswer(dialect, inventedEvidence(plan, invented), true)}`;
    return textTurn(text, false, applied);
  }
  if (multiple) return textTurn(text, false, applied);
  return textTurn(`${text}\n${inventToolOutput(plan, rng)}`, true, applied);
}

function composeNativeCall(
  plan: TurnPlan,
  call: CallSpec,
  variant: CallVariant,
  drawn: ReadonlySet<MisbehaviourKind>,
  rng: Rng,
  callId: (index: number) => string,
  applied: MisbehaviourKind[],
): ComposedTurn {
  const queries = [call.query];
  if (drawn.has('multiple_calls')) {
    // Parallel calls are legal in native function calling; the extra ones search differently.
    applied.push('multiple_calls');
    const count = 1 + Math.floor(rng() * 2);
    for (let i = 0; i < count; i++) queries.push(plan.extraQueries[i] ?? call.query);
  }
  const unclosed = drawn.has('unclosed_call');
  if (unclosed) applied.push('unclosed_call');
  const deep = drawn.has('deep_arguments');
  if (deep) applied.push('deep_arguments');
  const toolCalls: SimToolCall[] = queries.map((query, i) => {
    const args = i === 0 && deep ? deepArguments(call.tool.argKey, query) : renderArguments(call.tool.argKey, query, i === 0 ? variant.style : 'json', true, i === 0 ? call.args : undefined);
    return { id: callId(i), name: call.tool.name, arguments: i === 0 && unclosed ? args.slice(0, -1) : args };
  });
  // What a model says beside its calls (roles.ts), then anything it invents.
  let content = plan.lead ?? '';
  if (drawn.has('hallucinated_output')) {
    applied.push('hallucinated_output');
    const invented = inventToolOutput(plan, rng);
    content = `${content === '' ? '' : `${content}\n`}${invented}\n${answerText(inventedEvidence(plan, invented))}`;
  }
  return { turn: { reasoning: plan.reasoning ?? '', content, toolCalls }, honourStop: true, applied };
}

/**
 * Characters a `dirty_text` turn scatters between its words: control characters, DEL, C1
 * controls, and each half of a surrogate pair on its own (an emoji cut between two tokens).
 */
export const DIRTY_CHARS: readonly string[] = ['\u0000', '\u0001', '\u0007', '\u000b', '\u001b', '\u007f', '\u0085', '\u009f', '\ud83d', '\ude00'];
/** Line ends of other platforms, for a turn's `\n`. */
const FOREIGN_LINE_ENDS = ['\r\n', '\r'];
/** The same two, as JSON spells them: put at the start of a JSON string value in call arguments. */
const DIRTY_ESCAPES = '\\u0000\\ud800';

function pick<T>(items: readonly T[], rng: Rng): T {
  return items[Math.floor(rng() * items.length)] ?? items[0]!;
}

/**
 * The turn with `dirty_text` applied, after stop strings and cuts: junk before about a quarter
 * of the spaces and CR or CRLF for half the line ends (never inside a `<…>` tag, so every tag
 * and stop string stays whole), and NUL and lone-surrogate escapes in the first string value of
 * JSON call arguments. Removing the junk and making the line ends `\n` again gives back the turn.
 */
export function dirtyTurn(turn: SimTurn, rng: Rng): SimTurn {
  return {
    reasoning: dirtyText(turn.reasoning, rng),
    content: dirtyText(turn.content, rng),
    toolCalls: turn.toolCalls.map((c) => ({ ...c, arguments: dirtyJson(c.arguments) })),
  };
}

function dirtyText(text: string, rng: Rng): string {
  if (text === '') return text;
  const open = text.indexOf('<arguments>');
  const close = open === -1 ? -1 : text.indexOf('</arguments>', open);
  const withEscapes = close === -1 ? text : text.slice(0, open) + dirtyJson(text.slice(open, close)) + text.slice(close);
  let out = '';
  let inTag = false;
  let placed = 0;
  for (const ch of withEscapes) {
    if (ch === '<') inTag = true;
    else if (ch === '>') inTag = false;
    else if (!inTag && ch === ' ' && rng() < 0.25) {
      out += pick(DIRTY_CHARS, rng);
      placed++;
    } else if (!inTag && ch === '\n' && rng() < 0.5) {
      out += pick(FOREIGN_LINE_ENDS, rng);
      continue;
    }
    out += ch;
  }
  // A turn with no space to put junk before still gets some.
  return placed === 0 ? pick(DIRTY_CHARS, rng) + out : out;
}

/** JSON text with NUL and lone-surrogate escapes at the start of its first string value; other text as it was. */
function dirtyJson(json: string): string {
  const value = /":\s*"/.exec(json);
  return value === null ? json : json.slice(0, value.index + value[0].length) + DIRTY_ESCAPES + json.slice(value.index + value[0].length);
}

function capitalise(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/** Where a `length` misbehaviour cuts: somewhere in the middle third-ish of the text. */
export function lengthCutAt(textLength: number, rng: Rng): number {
  return Math.max(1, Math.floor(textLength * (0.3 + 0.4 * rng())));
}
