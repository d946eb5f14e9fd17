/**
 * Two V8 CPU profiles side by side, by script file: `node dist/bench/profile-diff.js A.cpuprofile
 * B.cpuprofile [SKIP_S]`, each made by `node --cpu-prof --cpu-prof-dir=DIR dist/bench/probe.js C L N`
 * in a checkout. Sums each profile's samples by the file of the frame they were taken in (self
 * time; idle left out) after the first SKIP_S seconds (start-up, default 5), and prints the files
 * whose sums differ most: ms in A, ms in B, A − B. For "what grew since the previous release",
 * where bench/cpu-profile.ts's parts are too coarse and files moved between the two.
 */
import { readFileSync } from 'node:fs';

interface Profile {
  nodes: { id: number; callFrame: { functionName: string; url: string } }[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** ms of self time per script file (its last path segment; a builtin's or V8's name when there is no file). */
function byFile(path: string, skipUs: number): Map<string, number> {
  const p = JSON.parse(readFileSync(path, 'utf8')) as Profile;
  const frame = new Map(p.nodes.map((n) => [n.id, n.callFrame]));
  const out = new Map<string, number>();
  let t = 0;
  p.samples.forEach((id, i) => {
    const d = p.timeDeltas[i] ?? 0;
    t += d;
    const f = frame.get(id)!;
    if (t < skipUs || f.functionName === '(idle)') return;
    const key = f.url === '' ? f.functionName : f.url.split('/').at(-1)!;
    out.set(key, (out.get(key) ?? 0) + d / 1000);
  });
  return out;
}

const [a, b, skip = '5'] = process.argv.slice(2);
if (!a || !b) {
  process.stderr.write('usage: node dist/bench/profile-diff.js A.cpuprofile B.cpuprofile [SKIP_S]\n');
  process.exit(2);
}
const [pa, pb] = [a, b].map((f) => byFile(f, Number(skip) * 1e6)) as [Map<string, number>, Map<string, number>];
const total = (m: Map<string, number>): number => [...m.values()].reduce((x, y) => x + y, 0);
const lines = [`busy ms: A ${total(pa).toFixed(0)}, B ${total(pb).toFixed(0)}`];
const rows = [...new Set([...pa.keys(), ...pb.keys()])].map((k) => [k, pa.get(k) ?? 0, pb.get(k) ?? 0] as const);
rows.sort((x, y) => Math.abs(y[1] - y[2]) - Math.abs(x[1] - x[2]));
for (const [k, x, y] of rows.slice(0, 40)) lines.push(`${x.toFixed(0).padStart(7)} ${y.toFixed(0).padStart(7)} ${(x - y).toFixed(0).padStart(7)}  ${k}`);
process.stdout.write(`${lines.join('\n')}\n`);
