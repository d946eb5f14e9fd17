/**
 * `trajforge demo` (`npm run demo` in the repository): the whole pipeline offline. Starts sim
 * on a free loopback port, generates trajectories for 50 bundled questions with the corpus
 * server, prints where they are, a summary and the commands to try next.
 * `--misbehave all=0.2` makes the sim misbehave more; `--dialect mcp-xml` (or `native`) runs
 * the same questions in another format.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { startSim } from '../../sim/server.js';
import { parseMisbehave } from '../../sim/cli.js';
import { main } from './main.js';
import { CLI_COMMAND, PACKAGE_ROOT } from '../paths.js';
import { shellWord } from '../generate/preflight.js';
import { parseFlags } from './flags.js';

const HELP = `Usage: trajforge demo [--dialect D] [--limit N] [--out DIR] [options]

The whole pipeline offline: starts the sim on a free loopback port, generates trajectories
for the bundled questions with the bundled corpus server, stops the sim, and prints where
the run is, its summary and the commands to try next. No network, no keys.

  --dialect D       tulu (default), mcp-xml or native: the tool-call format of the run
  --limit N         questions to run (default 50)
  --out DIR         the run directory (default runs/demo-<time>)
  --misbehave K=R   the sim misbehaves at rate R (0..1) in kind K, as trajforge sim --misbehave
                    takes it (repeatable; default all=0.05)
  --seed S          the sim's seed (default 1)
`;

export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('demo', argv, {
    misbehave: { type: 'string', multiple: true, default: ['all=0.05'] },
    seed: { type: 'string', default: '1' },
    limit: { type: 'string', default: '50' },
    out: { type: 'string' },
    dialect: { type: 'string', default: 'tulu' },
  }, { help: HELP, positionals: false });
  if (!parsed) return 0;
  const { values } = parsed;
  const sim = await startSim({ port: 0, seed: Number(values.seed), misbehave: parseMisbehave(values.misbehave ?? []) });
  process.stderr.write(`sim listening on ${sim.url} (misbehave ${(values.misbehave ?? []).join(' ')})\n`);
  const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');
  const out = values.out ?? join('runs', `demo-${stamp}`);
  let code: number;
  try {
    code = await main([
      'generate',
      '--config', join(PACKAGE_ROOT, 'data/configs/demo.yaml'),
      '--base-url', sim.url,
      '--out', out,
      '--limit', values.limit ?? '50',
      '--dialect', values.dialect ?? 'tulu',
    ]);
  } finally {
    await sim.close();
  }
  if (existsSync(join(out, 'trajectories.jsonl'))) printNext(out);
  return code;
}

/** The summary's last lines: what to do with the run just made, with its real path. */
function printNext(dir: string): void {
  const d = shellWord(dir);
  const tf = CLI_COMMAND;
  const steps: [string, string][] = [
    [`${tf} stats ${d}`, 'what the data looks like'],
    [`${tf} report ${d} --out ${shellWord(join(dir, 'report.html'))}`, 'every trajectory, in a browser'],
    [`${tf} export ${d} --format messages --out ${shellWord(join(dir, 'train.jsonl'))}`, 'training rows with loss masks'],
    [`${tf} init --preset vllm-tulu`, 'a starter config for a real endpoint (then: check)'],
  ];
  const width = Math.max(...steps.map(([c]) => c.length));
  process.stdout.write(`next       ${steps.map(([c, why]) => `${c.padEnd(width)}  # ${why}`).join('\n           ')}\n`);
}

// Run as a script (`node dist/pipeline/cli/demo.js`, what `npm run demo` does).
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exit(await run(process.argv.slice(2)));
}
