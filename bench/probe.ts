/**
 * Ad-hoc: `node dist/bench/probe.js C L N` — one measured run, printed as JSON.
 * TF_SIM_INPROC=1 runs the sim inside this process (as the first throughput bench did);
 * TF_STREAM=1 or 0 streams always or never (default: auto); TF_CACHE=0 turns the tool-result cache off.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSim } from '../sim/server.js';
import { percentile, SEARCHES, startSimProcess, type SimProcess } from './harness.js';
import { measureRun } from './measure.js';

const [c, l, n] = process.argv.slice(2).map(Number);
const dir = mkdtempSync(join(tmpdir(), 'tf-probe-'));
let sim: SimProcess;
if (process.env.TF_SIM_INPROC === '1') {
  const s = await startSim({ port: 0, seed: 1, latencyMs: l!, callsPerSample: SEARCHES });
  sim = { url: s.url, pid: process.pid, cpuSeconds: () => 0, close: () => s.close() };
} else {
  sim = await startSimProcess(l!);
}
try {
  const r = await measureRun({
    sim,
    dir,
    concurrency: c!,
    latencyMs: l!,
    samples: n!,
    endpoint: process.env.TF_STREAM === undefined ? undefined : { stream: process.env.TF_STREAM === '1' },
    executor: process.env.TF_CACHE === '0' ? { cache: false } : undefined,
  });
  const { rss, cpuPerTurnWindows, ...rest } = r;
  console.log(
    JSON.stringify({
      ...rest,
      ratio: r.rate / r.ideal,
      cpuMsPerTurn: (r.cpuSeconds * 1000) / r.turns,
      p50: percentile(cpuPerTurnWindows, 50),
      p99: percentile(cpuPerTurnWindows, 99),
      rss: rss.filter((_, i) => i % 10 === 0).map(([d, b]) => `${d}:${Math.round(b / 1e6)}`).join(' '),
    }),
  );
} finally {
  await sim.close();
  rmSync(dir, { recursive: true, force: true });
}
