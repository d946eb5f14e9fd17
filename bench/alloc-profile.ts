/**
 * Where a generate run allocates: `node dist/bench/alloc-profile.js C L N`. One measured run
 * (bench/measure.ts against a sim process, as probe.js does) under V8's sampling heap profiler
 * with the objects already collected counted too, so what is printed is what was allocated (the
 * garbage collector's work), not what was live at the end: KB allocated per model turn, in all
 * and for the 30 allocating functions that allocated most. The bench's own reading of the run's
 * file after it is counted too (sampleTiming and the readline under it).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSimProcess } from './harness.js';
import { measureRun } from './measure.js';

interface HeapNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: HeapNode[];
}

const [c, l, n] = process.argv.slice(2).map(Number);
if (!(c! > 0 && l! >= 0 && n! > 0)) {
  process.stderr.write('usage: node dist/bench/alloc-profile.js C L N\n');
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'tf-alloc-'));
const sim = await startSimProcess(l!);
const session = new Session();
session.connect();
try {
  await session.post('HeapProfiler.enable');
  await session.post('HeapProfiler.startSampling', { samplingInterval: 16384, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  const r = await measureRun({ sim, dir, concurrency: c!, latencyMs: l!, samples: n! });
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: HeapNode } };
  const bySite = new Map<string, number>();
  const stack = [profile.head];
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    const f = node.callFrame;
    const site = `${f.functionName || '(anonymous)'} ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}`;
    if (node.selfSize > 0) bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize);
    stack.push(...node.children);
  }
  const perTurn = (bytes: number): string => (bytes / 1000 / r.turns).toFixed(2).padStart(7);
  const total = [...bySite.values()].reduce((a, b) => a + b, 0);
  const lines = [`${r.turns} turns; allocated ${perTurn(total)} KB a turn`];
  for (const [site, bytes] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, 30)) lines.push(`${perTurn(bytes)} KB a turn  ${site}`);
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  session.disconnect();
  await sim.close();
  rmSync(dir, { recursive: true, force: true });
}
