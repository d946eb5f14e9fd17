/**
 * Two builds of trajforge side by side, for figures quoted as a ratio against a baseline
 * measured in the same run: `node dist/bench/versus.js PAIRS C L N DIR_A DIR_B`, where each DIR
 * is a built checkout (`git worktree add ../base COMMIT && cd ../base && npm ci && npm run build`).
 * Runs `probe.js C L N` in A, then in B, PAIRS times (A B A B …, so the machine's drifts fall on
 * both alike), and prints each run and the medians of the pairs' ratios A/B: measured/ideal and
 * trajforge's CPU per turn. The load average at each run's start is printed with it: on a shared
 * machine the ratios hold when the absolute figures do not.
 */
import { spawnSync } from 'node:child_process';
import { loadavg } from 'node:os';
import { join } from 'node:path';

interface Probe {
  readonly ratio: number;
  readonly cpuMsPerTurn: number;
  readonly seconds: number;
  readonly turns: number;
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

function probe(dir: string, args: readonly string[]): Probe {
  const r = spawnSync(process.execPath, [join(dir, 'dist/bench/probe.js'), ...args], { cwd: dir, encoding: 'utf8', maxBuffer: 1 << 24 });
  const last = r.stdout.trim().split('\n').at(-1) ?? '';
  if (r.status !== 0 || !last.startsWith('{')) throw new Error(`${dir}: probe.js ${args.join(' ')} failed (exit ${r.status}): ${r.stderr.slice(-2000)}`);
  return JSON.parse(last) as Probe;
}

const [pairsArg, c, l, n, a, b] = process.argv.slice(2);
const pairs = Number(pairsArg);
if (!(pairs >= 1) || !c || !l || !n || !a || !b) {
  process.stderr.write('usage: node dist/bench/versus.js PAIRS C L N DIR_A DIR_B\n');
  process.exit(2);
}
const ratios: { rate: number; cpu: number }[] = [];
for (let i = 1; i <= pairs; i++) {
  const runs = [a, b].map((dir) => {
    const load = loadavg()[0]!.toFixed(1);
    const p = probe(dir, [c, l, n]);
    process.stdout.write(`pair ${i} ${dir}: load ${load}, measured/ideal ${p.ratio.toFixed(3)}, CPU ${p.cpuMsPerTurn.toFixed(3)} ms/turn, ${p.turns} turns in ${p.seconds.toFixed(1)} s\n`);
    return p;
  });
  ratios.push({ rate: runs[0]!.ratio / runs[1]!.ratio, cpu: runs[0]!.cpuMsPerTurn / runs[1]!.cpuMsPerTurn });
}
process.stdout.write(`A/B, median of ${pairs} pairs: measured/ideal ${median(ratios.map((r) => r.rate)).toFixed(3)}, CPU per turn ${median(ratios.map((r) => r.cpu)).toFixed(3)}\n`);
