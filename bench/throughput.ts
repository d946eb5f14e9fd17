/**
 * How close a run gets to the endpoint's limit. The sim answers every request after a fixed
 * latency L; a sample takes T model turns (searches, then the answer), so with C samples in
 * flight the ideal is C / (T·L) samples per second. Reports measured / ideal at several C,
 * the same workload run the way the Python PubMed generator runs it (5 samples at a time),
 * and trajforge's own CPU per turn.
 *
 * - The sim runs in a process of its own (a real endpoint is another machine): its CPU is not
 *   trajforge's, and its work does not sit on trajforge's event loop.
 * - L is chosen per C so that the ideal rate, and so the CPU the sim, the corpus server and
 *   trajforge need, is the same at every C, and low enough that the machine is not what
 *   limits the run.
 * - The sample count is a multiple of every C, so every wave of C samples is full and the
 *   ideal wall time is exactly samples·T·L / C; the measured time includes start-up (tool
 *   servers, counting the questions) and the last wave's tail.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus } from 'node:os';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { percentile, startSimProcess, SEARCHES, TURNS } from './harness.js';
import { PARTS, profiled, type Part } from './cpu-profile.js';
import { measureRun, steadyCpuWindows, type RunMeasure } from './measure.js';

/** Samples per second the ideal allows at every C. */
const IDEAL_RATE = Number(process.env.TRAJFORGE_BENCH_RATE ?? '20');
const SAMPLES = Number(process.env.TRAJFORGE_BENCH_SAMPLES ?? '5120');
const PY_SAMPLES = Number(process.env.TRAJFORGE_BENCH_PY_SAMPLES ?? '50');
const CONCURRENCIES = [64, 256, 1024] as const;
/** CPU per turn is read over windows of this many seconds: long enough to hold several waves of turns. */
export const CPU_WINDOW_S = 5;

export async function runThroughput(): Promise<{ rows: RunMeasure[]; py: RunMeasure }> {
  const rows: RunMeasure[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-tp-'));
  try {
    const at = async (c: number, latency: number, samples: number): Promise<RunMeasure> => {
      process.stderr.write(`  C=${c}, L=${latency} ms, ${samples} samples…\n`);
      const sim = await startSimProcess(latency);
      try {
        return await measureRun({ sim, dir: join(dir, `c${c}`), concurrency: c, latencyMs: latency, samples, cpuWindowS: CPU_WINDOW_S });
      } finally {
        await sim.close();
      }
    };
    for (const c of CONCURRENCIES) rows.push(await at(c, Math.round((c / (TURNS * IDEAL_RATE)) * 1000), SAMPLES));
    // The Python generator's way: 5 samples at a time, the same per-request latency as C=256.
    const py = await at(5, rows[1]!.latencyMs, PY_SAMPLES);
    return { rows, py };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const f3 = (n: number): string => n.toFixed(3);

export function throughputMarkdown({ rows, py }: { rows: readonly RunMeasure[]; py: RunMeasure }): string {
  const ratio = (r: RunMeasure): number => r.rate / r.ideal;
  const fmt = (r: RunMeasure): string =>
    `| ${r.concurrency} | ${r.latencyMs} ms | ${r.samples} | ${r.seconds.toFixed(1)} s | ${r.rate.toFixed(2)}/s | ${r.ideal.toFixed(2)}/s | **${f3(ratio(r))}** | ${((r.cpuSeconds / r.seconds) * 100).toFixed(0)}% · ${((r.simCpuSeconds / r.seconds) * 100).toFixed(0)}% · ${((r.toolCpuSeconds / r.seconds) * 100).toFixed(0)}% |`;
  const r256 = ratio(rows[1]!);
  const r1024 = ratio(rows[2]!);
  return [
    '## Throughput: measured against ideal',
    '',
    `Sim with a fixed latency L per request, in a process of its own; the corpus server; ${TURNS} model turns per sample (${SEARCHES} searches, then the answer). Ideal at concurrency C: C / (${TURNS}·L). L is set per C so that the ideal is ${IDEAL_RATE} samples/s everywhere: the sim, the corpus server and trajforge share ${cpus().length} cores with each other (and with whatever else runs), so the ideal is kept well under what the machine can compute. ${SAMPLES} samples per run (a multiple of every C, so every wave is full); wall time from \`generate()\` called to returned, start-up included. \`TRAJFORGE_BENCH_SAMPLES\`, \`TRAJFORGE_BENCH_RATE\` and \`TRAJFORGE_BENCH_PY_SAMPLES\` change the workload.`,
    '',
    '| C | L | samples | wall time | measured | ideal | measured / ideal | CPU: trajforge · sim · corpus server (% of one core) |',
    '|---|---|---|---|---|---|---|---|',
    ...rows.map(fmt),
    fmt(py),
    '',
    `The last row runs the workload as the Python PubMed generator does (5 samples at a time, L as at C=256): at the same latency trajforge at C=256 is **${(rows[1]!.rate / py.rate).toFixed(0)}×** its throughput (${rows[1]!.rate.toFixed(2)} vs ${py.rate.toFixed(2)} samples/s).`,
    '',
    `Targets: measured/ideal ≥ 0.95 at C=256 — ${r256 >= 0.95 ? 'met' : 'not met'} (${f3(r256)}); ≥ 0.9 at C=1024 — ${r1024 >= 0.9 ? 'met' : 'not met'} (${f3(r1024)}).`,
    '',
    '### Where a sample\'s time goes',
    '',
    `Means over each run's trajectories (their own \`timing\`): a sample's wall time against its ideal ${TURNS}·L; a model call's time beyond L (the sim's queue and the HTTP round trip); a tool call's time (the MCP round trip and the corpus server's queue); and what is left, trajforge's own work between calls. With a fixed L every sample of a wave sends its request at the same moment, so the sim and the single corpus server each receive C requests at once and the last of them waits for the other C−1 to be served: on a shared 2-core machine that queue, not trajforge, is most of the gap to the ideal.`,
    '',
    '| C | per sample | ideal | model call beyond L | tool call | trajforge between calls, per sample |',
    '|---|---|---|---|---|---|',
    ...[...rows, py].map(
      (r) =>
        `| ${r.concurrency} | ${r.timing.perSampleMs.toFixed(0)} ms | ${TURNS * r.latencyMs} ms | ${r.timing.llmBeyondLatencyMs.toFixed(1)} ms | ${r.timing.toolCallMs.toFixed(1)} ms | ${r.timing.ownMsPerSample.toFixed(1)} ms |`,
    ),
    '',
    '### trajforge CPU per turn, in these runs',
    '',
    `trajforge's own CPU (process.cpuUsage of the generating process: the rollout loop, the model endpoint client, the MCP client, repair, validation, the tool-result cache, the run store; not the sim, not the corpus server) divided by the model turns the sim answered. A turn is one model request and, for a search turn, its tool call. The distribution is in the \`cpu\` section.`,
    '',
    '| C | turns | trajforge CPU | per turn |',
    '|---|---|---|---|',
    ...rows.map((r) => `| ${r.concurrency} | ${r.turns} | ${r.cpuSeconds.toFixed(1)} s | ${((r.cpuSeconds * 1000) / Math.max(1, r.turns)).toFixed(2)} ms |`),
    '',
  ].join('\n');
}

export async function benchThroughput(): Promise<string> {
  return throughputMarkdown(await runThroughput());
}

/**
 * CPU per turn as a distribution: runs where turns flow without pause (L small against the
 * time a turn takes to process, so the waves of the fixed-latency runs above dissolve), read
 * over one-second windows. A run to warm up first (a fresh process is slower while V8 sizes
 * its heap and optimises), then each set-up twice, in turn, so that the machine's drifts fall
 * on all of them alike; then the default once more under the profiler, to say where the CPU goes.
 */
const CPU_SAMPLES = Number(process.env.TRAJFORGE_BENCH_CPU_SAMPLES ?? '3000');
const CPU_C = 64;
const CPU_L = 20;
const CPU_SETUPS: readonly [string, { endpoint?: Record<string, unknown>; executor?: Record<string, unknown> }][] = [
  ['default: `stream: auto` (whole answers: the sim applies stop), tool-result cache on', {}],
  ['`endpoint.stream: true`', { endpoint: { stream: true } }],
  ['`executor.cache: false`', { executor: { cache: false } }],
];

interface CpuRun {
  readonly label: string;
  readonly r: RunMeasure;
  /** Windows without start-up and the tail. */
  readonly windows: readonly number[];
}

async function cpuRun(label: string, patch: { endpoint?: Record<string, unknown>; executor?: Record<string, unknown> }, around?: <T>(f: () => Promise<T>) => Promise<T>): Promise<CpuRun> {
  const dir = mkdtempSync(join(tmpdir(), 'tf-bench-cpu-'));
  const sim = await startSimProcess(CPU_L);
  try {
    process.stderr.write(`  ${label}: C=${CPU_C}, L=${CPU_L} ms, ${CPU_SAMPLES} samples…\n`);
    const r = await measureRun({ sim, dir, concurrency: CPU_C, latencyMs: CPU_L, samples: CPU_SAMPLES, cpuWindowS: 1, around, ...patch });
    // The first and last seconds hold start-up and the tail.
    return { label, r, windows: steadyCpuWindows(r) };
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchCpu(): Promise<string> {
  await cpuRun('warm-up (not reported)', {});
  const passes: CpuRun[][] = [];
  for (let pass = 1; pass <= 2; pass++) {
    const runs: CpuRun[] = [];
    for (const [label, patch] of CPU_SETUPS) runs.push(await cpuRun(`${label}, pass ${pass}`, patch));
    passes.push(runs);
  }
  const rows = CPU_SETUPS.map(([label], i) => {
    const [a, b] = [passes[0]![i]!, passes[1]![i]!];
    const sum = (f: (r: RunMeasure) => number): number => f(a.r) + f(b.r);
    return {
      label,
      turns: sum((r) => r.turns),
      seconds: sum((r) => r.seconds),
      cpu: [sum((r) => r.cpuSeconds), sum((r) => r.simCpuSeconds), sum((r) => r.toolCpuSeconds)],
      medians: [percentile(a.windows, 50), percentile(b.windows, 50)],
      windows: [...a.windows, ...b.windows],
    };
  });
  let parts: Map<Part, number> | undefined;
  // From the third second, as the windows are read: start-up left out. A short run (bench:quick's
  // 1,000 samples end within two seconds) is profiled from a fifth of its length instead, or the
  // profiler would start after the run and every share be 0 / 0.
  const runMs = (passes[0]![0]!.r.seconds * 1000);
  const skipMs = Math.min(2000, Math.floor(runMs / 5));
  await cpuRun('profiled', {}, async (f) => {
    const p = await profiled(f, skipMs);
    parts = p.parts;
    return p.result;
  });
  const base = rows[0]!;
  const p50 = percentile(base.windows, 50);
  const total = [...parts!.values()].reduce((a, b) => a + b, 0);
  const ms = (part: Part): number => (parts!.get(part)! / total) * p50;
  // The work the issue names: repair, the tool call through MCP, validation, writing (and the loop that does them).
  const own: Part[] = ['mcp', 'repair', 'validate', 'store', 'loop'];
  const ownMs = own.reduce((a, p) => a + ms(p), 0);
  // GC and the runtime serve every part: charged in proportion, the named work's share of them.
  const shared = ms('gc') + ms('runtime');
  const ownWithShared = ownMs + (shared * ownMs) / Math.max(1e-9, p50 - shared);
  return [
    '## trajforge CPU per turn',
    '',
    `trajforge's CPU per model turn: process.cpuUsage of the generating process (the rollout loop, the model endpoint client, the MCP client, repair, validation, the tool-result cache and the run store; the sim and the corpus server are other processes), with turns flowing without pause: C=${CPU_C}, L=${CPU_L} ms, ${CPU_SAMPLES} samples per run, after a run to warm up; each set-up ran twice, the three in turn, and a row pools its two runs. Samples interleave on one event loop, so CPU is read per one-second window (CPU ÷ turns answered in it), first and last two seconds left out; \`TRAJFORGE_BENCH_CPU_SAMPLES\` changes the count. Streamed (\`stream: true\`, or \`auto\` once an endpoint misbehaves), the sim sends a turn in pieces of 3 to 30 characters, each its own write, as a server streaming tokens does.`,
    '',
    '| set-up | turns | turns/s | CPU: trajforge · sim · corpus server (% of one core) | mean per turn | median window (pass 1 · pass 2) | median window, both | p99 window, both |',
    '|---|---|---|---|---|---|---|---|',
    ...rows.map(({ label, turns, seconds, cpu, medians, windows }) =>
      `| ${label} | ${turns} | ${(turns / seconds).toFixed(0)} | ${cpu.map((c) => `${((c / seconds) * 100).toFixed(0)}%`).join(' · ')} | ${((cpu[0]! * 1000) / Math.max(1, turns)).toFixed(2)} ms | ${medians.map((m) => m.toFixed(2)).join(' · ')} ms | ${percentile(windows, 50).toFixed(2)} ms | ${percentile(windows, 99).toFixed(2)} ms |`,
    ),
    '',
    `### Where it goes`,
    '',
    `One more run of the default set-up under V8's CPU profiler (node:inspector, in the bench process; bench/cpu-profile.ts): each sample is charged to the first frame from the leaf up that belongs to a part (Node's socket, stream and fs internals go to whoever called them), as a share of trajforge's busy CPU from the third second to the end of the run (start-up left out, as in the windows; the bench's own reading of the results after it too); the ms column applies the share to the unprofiled default runs' median window. The profiler samples the main thread's time, so a synchronous file call counts while it waits on the disk and the thread pool's work is not seen: the shares are of the main thread.`,
    '',
    '| part | share | per turn |',
    '|---|---|---|',
    ...PARTS.map(([p, what]) => `| ${what} | ${((parts!.get(p)! / total) * 100).toFixed(1)}% | ${ms(p).toFixed(2)} ms |`),
    '',
    `The work the target names (repair, the tool call through MCP, validation, writing, and the rollout loop around them): **${ownMs.toFixed(2)} ms per turn**, ${ownWithShared.toFixed(2)} ms with its proportional share of garbage collection and the runtime; the model endpoint client adds ${ms('endpoint').toFixed(2)} ms, the tool-result cache ${ms('cache').toFixed(2)} ms, garbage collection and the runtime ${shared.toFixed(2)} ms in all.`,
    '',
    `Target: ≤ 1 ms median. The whole process, default set-up: ${p50 <= 1 ? 'met' : 'not met'} (${p50.toFixed(2)} ms median window). The work the target names: ${ownWithShared <= 1 ? 'met' : 'not met'} (${ownMs.toFixed(2)} ms, ${ownWithShared.toFixed(2)} ms with its share of GC and the runtime).`,
    '',
  ].join('\n');
}
