/**
 * The ways the sim misbehaves, and how each one changes a completion. Every kind is drawn
 * independently for every completion, in the fixed order of MISBEHAVIOUR_KINDS and whether
 * or not its rate is zero, so changing one rate never shifts the draws of the others.
 */
import { TrajforgeError } from '../pipeline/errors.js';
import {
  inventToolOutput,
  renderAnswer,
  renderCall,
  type CallSpec,
  type Rng,
  type TurnPlan,
} from './policy.js';

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
] as const;

export type MisbehaviourKind = (typeof MISBEHAVIOUR_KINDS)[number];

export type MisbehaviourRates = Partial<Record<MisbehaviourKind, number>>;

/** One line each, for `--help`. */
export const MISBEHAVIOUR_HELP: Readonly<Record<MisbehaviourKind, string>> = {
  unclosed_call: 'a call without </call_tool>, followed by a newline and more text (another call or an answer)',
  hallucinated_output: 'after its call the model writes its own <tool_output> and an answer; sent past any stop string',
  multiple_calls: 'two or three closed calls in one turn; sent past any stop string',
  no_action: 'a turn of plain prose with no call and no answer',
  unclosed_answer: 'an answer without </answer>',
  ignore_stop: 'the server does not cut at stop strings: the text past the stop string is sent, finish_reason stop',
  refusal: `a turn that only says "I'm sorry, but I can't help with that."`,
  length: 'the completion is cut in the middle, finish_reason length',
  rate_limit: 'HTTP 429 with Retry-After (seconds) and retry-after-ms headers, OpenAI rate-limit error body',
  server_error: 'HTTP 500 with an OpenAI error body',
  stall: 'wait --stall-ms (default 30000) before doing anything else, so clients time out',
  drop: 'destroy the connection: mid-stream when streaming, before any response otherwise',
  malformed: 'HTTP 200 with a body that is not what the protocol promises: JSON cut in half, or an SSE line that is not JSON',
  repetition: 'degenerate repetition: after a normal start the model repeats one phrase until max_tokens, finish_reason length',
};

/** Fault-injection kinds that `all=RATE` leaves alone: they make every client time out or fail. */
export const EXCLUDED_FROM_ALL: readonly MisbehaviourKind[] = ['stall', 'drop', 'malformed'];

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
  readonly text: string;
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
}

/** The turn the model writes, with the content misbehaviours drawn for it. */
export function composeTurn(plan: TurnPlan, drawn: ReadonlySet<MisbehaviourKind>, rng: Rng, opts: ComposeOptions = {}): ComposedTurn {
  if (drawn.has('refusal')) return { text: REFUSAL_TEXT, honourStop: true, applied: ['refusal'] };
  if (drawn.has('no_action')) {
    const topic = plan.keywords.slice(0, 5).join(' ') || 'this';
    const prose = NO_ACTION_PROSE[Math.floor(rng() * NO_ACTION_PROSE.length)] ?? NO_ACTION_PROSE[0]!;
    return { text: prose(topic), honourStop: true, applied: ['no_action'] };
  }
  if (drawn.has('repetition')) {
    const topic = plan.keywords.slice(0, 4).join(' ') || 'this';
    const unit = (REPEATED_UNITS[Math.floor(rng() * REPEATED_UNITS.length)] ?? REPEATED_UNITS[0]!)(topic);
    const start = `<think>I need to find out about ${topic}. `;
    const chars = opts.repeatChars ?? 16_000;
    return { text: start + unit.repeat(Math.ceil(Math.max(0, chars - start.length) / unit.length) + 1), honourStop: true, applied: ['repetition'] };
  }
  if (plan.kind === 'answer' || plan.call === null) {
    if (drawn.has('unclosed_answer')) {
      return { text: plan.think + renderAnswer(plan.answer, false), honourStop: true, applied: ['unclosed_answer'] };
    }
    return { text: plan.think + renderAnswer(plan.answer, true), honourStop: true, applied: [] };
  }
  return composeCallTurn(plan, plan.call, drawn, rng);
}

function composeCallTurn(plan: TurnPlan, call: CallSpec, drawn: ReadonlySet<MisbehaviourKind>, rng: Rng): ComposedTurn {
  const applied: MisbehaviourKind[] = [];
  const unclosed = drawn.has('unclosed_call');
  const multiple = drawn.has('multiple_calls');
  const hallucinated = drawn.has('hallucinated_output');
  const extra = (i: number): CallSpec => ({ ...call, query: plan.extraQueries[i] ?? call.query });
  let text = plan.think;

  if (unclosed) {
    applied.push('unclosed_call');
    // Real unclosed calls are followed by blank lines and whatever the model does next.
    text += `${renderCall(call, false)}\n\n`;
  } else {
    text += renderCall(call, true);
  }

  if (multiple) {
    applied.push('multiple_calls');
    const count = 1 + Math.floor(rng() * 2);
    for (let i = 0; i < count; i++) text += `${unclosed && i === 0 ? '' : '\n'}${renderCall(extra(i), true)}`;
  } else if (unclosed && !hallucinated) {
    // The text after an unclosed call: another call (its own stop string still cuts it) or an answer.
    return rng() < 0.5
      ? { text: `${text}${renderCall(extra(0), true)}\n${inventToolOutput(plan, rng)}`, honourStop: true, applied }
      : { text: `${text}${renderAnswer(plan.answer, true)}`, honourStop: true, applied };
  }

  if (hallucinated) {
    applied.push('hallucinated_output');
    const invented = inventToolOutput(plan, rng);
    const claim = /According to this source, ([^<]*)<\/snippet>/.exec(invented)?.[1] ?? 'it was found.';
    text += `\n${invented}\n${renderAnswer(`${capitalise(claim)} <cite id="fake-1">${plan.keywords.slice(0, 4).join(' ')}</cite>`, true)}`;
    return { text, honourStop: false, applied };
  }
  if (multiple) return { text, honourStop: false, applied };
  return { text: `${text}\n${inventToolOutput(plan, rng)}`, honourStop: true, applied };
}

function capitalise(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/** Where a `length` misbehaviour cuts: somewhere in the middle third-ish of the text. */
export function lengthCutAt(textLength: number, rng: Rng): number {
  return Math.max(1, Math.floor(textLength * (0.3 + 0.4 * rng())));
}
