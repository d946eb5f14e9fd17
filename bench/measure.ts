/**
 * One measured generate run against a sim process: wall time, trajforge's own CPU (this
 * process: the sim and the corpus server are other processes), CPU per turn over one-second
 * windows, and RSS as the run goes.
 */
import { createReadStream, mkdirSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { loadConfig } from '../pipeline/core/config.js';
import { generate } from '../pipeline/generate/run.js';
import { procCpuSeconds, TURNS, writeQuestions, writeRunConfig, type SimProcess } from './harness.js';

export interface RunMeasure {
  readonly concurrency: number;
  readonly latencyMs: number;
  readonly samples: number;
  readonly accepted: number;
  readonly seconds: number;
  readonly rate: number;
  readonly ideal: number;
  /** Model turns answered by the sim during the run. */
  readonly turns: number;
  /** CPU seconds of this process (trajforge) over the run. */
  readonly cpuSeconds: number;
  /** CPU seconds of the sim over the run. */
  readonly simCpuSeconds: number;
  /** CPU seconds of the corpus server (trajforge's child process) over the run. */
  readonly toolCpuSeconds: number;
  /** trajforge CPU ms per turn in each window (`cpuWindowS`) that saw turns. */
  readonly cpuPerTurnWindows: readonly number[];
  /** [samples done, RSS bytes] as the run goes. */
  readonly rss: readonly (readonly [number, number])[];
  readonly peakRss: number;
  /** Where a sample's time went, from the trajectories' own timing (means). */
  readonly timing: SampleTiming;
}

export interface SampleTiming {
  /** Wall time of a sample, first request to trajectory. */
  readonly perSampleMs: number;
  /** A model call's time beyond L: the endpoint's queueing and the HTTP round trip. */
  readonly llmBeyondLatencyMs: number;
  /** A tool call's time: MCP round trip and the corpus server's queue. */
  readonly toolCallMs: number;
  /** What is neither: trajforge's own work between calls, per sample. */
  readonly ownMsPerSample: number;
}

/** Means over the run's trajectories, read as a stream. */
async function sampleTiming(file: string, latencyMs: number): Promise<SampleTiming> {
  const rl = createInterface({ input: createReadStream(file, { encoding: 'utf8' }), crlfDelay: Infinity });
  let n = 0;
  let duration = 0;
  let llm = 0;
  let tool = 0;
  let llmCalls = 0;
  let toolCalls = 0;
  for await (const line of rl) {
    if (!line) continue;
    const t = JSON.parse(line) as { timing: { duration_ms: number; llm_ms: number; tool_ms: number }; usage: { llm_calls: number }; total_tool_calls: number };
    n++;
    duration += t.timing.duration_ms;
    llm += t.timing.llm_ms;
    tool += t.timing.tool_ms;
    llmCalls += t.usage.llm_calls;
    toolCalls += t.total_tool_calls;
  }
  return {
    perSampleMs: duration / Math.max(1, n),
    llmBeyondLatencyMs: llm / Math.max(1, llmCalls) - latencyMs,
    toolCallMs: tool / Math.max(1, toolCalls),
    ownMsPerSample: (duration - llm - tool) / Math.max(1, n),
  };
}

async function simTurns(url: string): Promise<number> {
  const res = await fetch(url.replace(/\/v1$/, '/sim/stats'));
  const stats = (await res.json()) as { responsesByStatus: Record<string, number> };
  return stats.responsesByStatus['200'] ?? 0;
}

export interface MeasureOptions {
  readonly sim: SimProcess;
  readonly dir: string;
  readonly concurrency: number;
  readonly latencyMs: number;
  readonly samples: number;
  /** Reuse a question file (the memory bench writes one per size). */
  readonly questions?: string | undefined;
  readonly endpoint?: Record<string, unknown> | undefined;
  readonly executor?: Record<string, unknown> | undefined;
  /** Seconds per CPU-per-turn window. Default 5. */
  readonly cpuWindowS?: number | undefined;
  /** Wraps the generate call alone (the profiler: not the bench's own reading of the results). */
  readonly around?: (<T>(run: () => Promise<T>) => Promise<T>) | undefined;
}

export async function measureRun(opts: MeasureOptions): Promise<RunMeasure> {
  const { sim, dir, concurrency, latencyMs, samples } = opts;
  mkdirSync(dir, { recursive: true });
  const questions = opts.questions ?? (await writeQuestions(join(dir, 'questions.jsonl'), samples));
  const config = loadConfig(
    writeRunConfig(join(dir, 'config.yaml'), { url: sim.url, questions, concurrency, out: join(dir, 'run'), cacheDir: join(dir, 'cache'), latencyMs, endpoint: opts.endpoint, executor: opts.executor }),
  );
  const turns0 = await simTurns(sim.url);
  const simCpu0 = sim.cpuSeconds();
  const windows: number[] = [];
  const rss: [number, number][] = [];
  let peakRss = 0;
  let lastCpu = process.cpuUsage();
  let lastTurns = turns0;
  let polling = false;
  let tick = 0;
  const windowTicks = opts.cpuWindowS ?? 5;
  // Samples done, from the progress line's "N accepted · M failed".
  let done = 0;
  let corpusCpu = 0;
  const timer = setInterval(() => {
    if (polling) return;
    polling = true;
    const r = process.memoryUsage().rss;
    peakRss = Math.max(peakRss, r);
    rss.push([done, r]);
    if (++tick % windowTicks !== 0) {
      polling = false;
      return;
    }
    void simTurns(sim.url)
      .then((t) => {
        const cpu = process.cpuUsage();
        const ms = (cpu.user - lastCpu.user + cpu.system - lastCpu.system) / 1000;
        if (t > lastTurns) windows.push(ms / (t - lastTurns));
        lastCpu = cpu;
        lastTurns = t;
        corpusCpu = Math.max(corpusCpu, corpusServerCpu());
      })
      .catch(() => {})
      .finally(() => {
        polling = false;
      });
  }, 1000);
  const cpu0 = process.cpuUsage();
  const started = performance.now();
  let summary;
  try {
    const run = () =>
      generate({
        config,
        progress: {
          isTTY: false,
          intervalMs: 500,
          write: (line) => {
            const m = /(\d+) accepted · (\d+) failed/.exec(line);
            if (m) done = Number(m[1]) + Number(m[2]);
          },
        },
      });
    summary = await (opts.around ? opts.around(run) : run());
  } finally {
    clearInterval(timer);
  }
  const seconds = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const turns = (await simTurns(sim.url)) - turns0;
  const n = summary.invocation.accepted + summary.invocation.failed;
  peakRss = Math.max(peakRss, process.memoryUsage().rss);
  return {
    concurrency,
    latencyMs,
    samples: n,
    accepted: summary.invocation.accepted,
    seconds,
    rate: n / seconds,
    ideal: concurrency / ((TURNS * latencyMs) / 1000),
    turns,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    simCpuSeconds: sim.cpuSeconds() - simCpu0,
    toolCpuSeconds: corpusCpu,
    cpuPerTurnWindows: windows,
    rss,
    peakRss,
    timing: await sampleTiming(join(dir, 'run', 'trajectories.jsonl'), latencyMs),
  };
}

/** The corpus server is trajforge's child: found by its command line among this process's children. */
function corpusServerCpu(): number {
  let total = 0;
  try {
    const children = readChildren(process.pid);
    for (const pid of children) total += procCpuSeconds(pid);
  } catch {
    return 0;
  }
  return total;
}


function readChildren(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const tid of readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/)) {
      if (!tid) continue;
      const cmd = readFileSync(`/proc/${tid}/cmdline`, 'utf8');
      if (cmd.includes('tools/corpus/server.js')) out.push(Number(tid));
    }
  } catch {
    // not Linux, or the process is gone
  }
  return out;
}

/**
 * CPU ms per turn in the windows of a run's steady part: its first and last two windows left
 * out (start-up and the tail), or fewer when the run is too short to leave any (`bench:quick`
 * runs a few seconds); a run shorter than one window gives its mean over the whole run, so that
 * every run gives a number.
 */
export function steadyCpuWindows(r: RunMeasure, trim = 2): number[] {
  const w = r.cpuPerTurnWindows;
  for (let t = trim; t >= 0; t--) if (w.length > 2 * t) return w.slice(t, w.length - t);
  return r.turns > 0 ? [(r.cpuSeconds * 1000) / r.turns] : [];
}
