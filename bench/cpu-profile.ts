/**
 * Where trajforge's CPU goes: a V8 CPU profile of a run taken in this process (node:inspector),
 * each sample charged to the first frame, walking from the leaf towards the root, that belongs
 * to a known part. Node's stream, socket and fs internals belong to no part, so their time goes
 * to whoever called them (a socket read under `socketOnData` is the model client's; one under
 * the MCP SDK's stdio reader is the tool call's). What no part claims is the runtime's.
 *
 * The profiler samples the main thread: a synchronous call is counted while it waits, and what
 * libuv's thread pool does for an asynchronous one is not seen.
 */
import { Session } from 'node:inspector/promises';

export const PARTS = [
  ['endpoint', 'model endpoint client: HTTP, SSE, request bodies (chat-http, llm, node:http)'],
  ['mcp', 'tool calls through MCP: client, stdio, result decoding (executor, MCP SDK)'],
  ['cache', 'tool-result cache: keys, file reads and writes'],
  ['repair', 'repair and rendering (the dialect)'],
  ['validate', 'validation'],
  ['store', 'run store: serialising and appending records'],
  ['loop', 'rollout loop, context, sampler, scheduling, progress'],
  ['gc', 'garbage collection'],
  ['runtime', 'the runtime, unattributed (microtask queue, timers, start-up)'],
] as const;
export type Part = (typeof PARTS)[number][0];

/**
 * Ordered: the first rule that matches a frame's script URL names its part. The files are
 * matched by their room and name (pipeline/core/llm/llm.js, pipeline/generate/executor.js…):
 * rules that named files by their old flat place matched nothing after the move to core/ and
 * generate/, and charged validation, the cache and the store 0%.
 */
const RULES: readonly [RegExp, Part | 'bench'][] = [
  [/\/dist\/bench\//, 'bench'],
  [/\/pipeline\/core\/llm\/|^node:_http_/, 'endpoint'],
  [/@modelcontextprotocol\/|\/zod\/|\/pipeline\/generate\/(executor|tool-result|stdio-lines)\.js$/, 'mcp'],
  [/\/pipeline\/core\/cache\.js$/, 'cache'],
  [/\/pipeline\/dialects\//, 'repair'],
  [/\/pipeline\/core\/validator\.js$/, 'validate'],
  [/\/pipeline\/generate\/store\.js$|\/pipeline\/core\/(jsonl\.js|run-dir\/)/, 'store'],
  [/\/pipeline\/|\/p-queue\/|\/eventemitter3\//, 'loop'],
];

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/**
 * Runs `fn`, under the profiler from `skipMs` after it starts (start-up left out, as the CPU
 * windows leave it out) to its end; returns its result and µs of CPU samples per part (idle and
 * the bench left out).
 */
export async function profiled<T>(fn: () => Promise<T>, skipMs = 0): Promise<{ result: T; parts: Map<Part, number> }> {
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  const started = new Promise<void>((resolve, reject) => setTimeout(() => session.post('Profiler.start').then(resolve, reject), skipMs));
  let result: T;
  let profile: Profile;
  try {
    result = await fn();
  } finally {
    await started;
    profile = (await session.post('Profiler.stop')).profile as unknown as Profile;
    session.disconnect();
  }
  return { result, parts: classify(profile) };
}

export function classify(profile: Profile): Map<Part, number> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  // Each node's part, found once.
  const partOf = new Map<number, Part | 'bench' | 'idle'>();
  const resolve = (id: number): Part | 'bench' | 'idle' => {
    const known = partOf.get(id);
    if (known) return known;
    const { functionName, url } = byId.get(id)!.callFrame;
    let part: Part | 'bench' | 'idle' | undefined;
    if (functionName === '(idle)') part = 'idle';
    else if (functionName === '(garbage collector)') part = 'gc';
    else part = RULES.find(([re]) => re.test(url))?.[1];
    if (part === undefined) {
      const up = parent.get(id);
      part = up === undefined ? 'runtime' : resolve(up);
    }
    partOf.set(id, part);
    return part;
  };
  const parts = new Map<Part, number>(PARTS.map(([p]) => [p, 0]));
  profile.samples.forEach((id, i) => {
    const part = resolve(id);
    if (part !== 'idle' && part !== 'bench') parts.set(part, parts.get(part)! + (profile.timeDeltas[i] ?? 0));
  });
  return parts;
}
