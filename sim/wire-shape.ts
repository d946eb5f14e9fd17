/**
 * How a completion goes on the wire: the choice's `message`, or the stream's deltas in the
 * order the turn was generated, in OpenAI's shape with the reasoning in the field this server
 * uses, and in the odd shapes some servers send (content as parts, arguments as an object, a
 * numeric tool name) when those misbehaviours are drawn.
 */
import type { SimTurn } from './dialects.js';
import type { Rng } from './types.js';

/** How a completion is put on the wire: the server's reasoning field, and the shapes drawn for this answer. */
export interface WireShape {
  readonly reasoningField: 'reasoning_content' | 'reasoning' | 'both';
  /** `content` as parts, the reasoning as a Mistral thinking part. */
  readonly contentParts: boolean;
  /** Native: arguments as a JSON object where they parse. */
  readonly objectArguments: boolean;
  /** Native: the first call's name as a number. */
  readonly numericName: boolean;
}

/** The reasoning in the server's field (or both). */
function reasoningFields(reasoning: string, shape: WireShape): Record<string, string> {
  if (shape.reasoningField === 'both') return { reasoning, reasoning_content: reasoning };
  return { [shape.reasoningField]: reasoning };
}

/** The number a `numeric_name` call is named with (one per name, so a turn's calls stay apart). */
function numericName(name: string): number {
  return 1000 + name.length;
}

function wireArguments(args: string, shape: WireShape): unknown {
  if (!shape.objectArguments) return args;
  try {
    return JSON.parse(args) as unknown;
  } catch {
    return args;
  }
}

/** The choice's `message`: OpenAI's shape, with the reasoning in the field this server uses. */
export function messageOf(turn: SimTurn, shape: WireShape): Record<string, unknown> {
  const calls = turn.toolCalls.map((c, i) => ({
    id: c.id,
    type: 'function',
    function: { name: shape.numericName && i === 0 ? numericName(c.name) : c.name, arguments: wireArguments(c.arguments, shape) },
  }));
  if (shape.contentParts) {
    const parts = [
      ...(turn.reasoning === '' ? [] : [{ type: 'thinking', thinking: [{ type: 'text', text: turn.reasoning }] }]),
      ...(turn.content === '' ? [] : [{ type: 'text', text: turn.content }]),
    ];
    return { role: 'assistant', content: parts, ...(calls.length === 0 ? {} : { tool_calls: calls }) };
  }
  return {
    role: 'assistant',
    content: calls.length > 0 && turn.content === '' ? null : turn.content,
    refusal: null,
    ...(turn.reasoning === '' ? {} : reasoningFields(turn.reasoning, shape)),
    ...(calls.length === 0 ? {} : { tool_calls: calls }),
  };
}

/**
 * The stream's deltas in the order the turn was generated: reasoning, content, then each tool
 * call — its id, type and name first with empty arguments, then the arguments in pieces (or
 * whole, as an object, with `objectArguments`).
 */
export function streamDeltas(turn: SimTurn, rng: Rng, shape: WireShape): Record<string, unknown>[] {
  const deltas: Record<string, unknown>[] = [];
  for (const piece of chunkText(turn.reasoning, rng)) {
    deltas.push(shape.contentParts ? { content: [{ type: 'thinking', thinking: [{ type: 'text', text: piece }] }] } : reasoningFields(piece, shape));
  }
  for (const piece of chunkText(turn.content, rng)) deltas.push({ content: shape.contentParts ? [{ type: 'text', text: piece }] : piece });
  turn.toolCalls.forEach((call, index) => {
    const name = shape.numericName && index === 0 ? numericName(call.name) : call.name;
    const args = wireArguments(call.arguments, shape);
    if (typeof args !== 'string') {
      deltas.push({ tool_calls: [{ index, id: call.id, type: 'function', function: { name, arguments: args } }] });
      return;
    }
    deltas.push({ tool_calls: [{ index, id: call.id, type: 'function', function: { name, arguments: '' } }] });
    for (const piece of chunkText(call.arguments, rng)) deltas.push({ tool_calls: [{ index, function: { arguments: piece } }] });
  });
  return deltas;
}

/** Pieces of 3 to 30 characters, so a client can abort mid-stream. */
function chunkText(text: string, rng: Rng): string[] {
  const pieces: string[] = [];
  for (let at = 0; at < text.length; ) {
    let end = Math.min(text.length, at + 3 + Math.floor(rng() * 28));
    const code = text.charCodeAt(end - 1);
    if (code >= 0xd800 && code <= 0xdbff && end < text.length) end++;
    pieces.push(text.slice(at, end));
    at = end;
  }
  return pieces;
}

