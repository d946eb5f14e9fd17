/**
 * `npm run bench`: runs every benchmark module, prints the markdown and writes it to
 * bench/BENCHMARKS.md with what produced it, so the figures there can be reproduced.
 */
import { writeFileSync } from 'node:fs';
import { cpus, platform, release } from 'node:os';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { benchLifecycle } from './lifecycle.js';
import { benchRepairer, benchSink } from './repairer.js';
import { benchThroughput } from './throughput.js';

// Each returns one markdown section. Add new benchmark modules here.
const benches: ReadonlyArray<readonly [string, () => Promise<string>]> = [
  ['repairer', benchRepairer],
  ['lifecycle', benchLifecycle],
  ['throughput', benchThroughput],
];

async function main(): Promise<void> {
  const cores = cpus();
  const header = [
    '# trajforge benchmarks',
    '',
    `Produced by \`npm run bench\` on ${new Date().toISOString().slice(0, 10)}, Node ${process.version}, ` +
      `${cores.length} core${cores.length === 1 ? '' : 's'} (${cores[0]?.model.trim() ?? 'unknown CPU'}), ${platform()} ${release()}.`,
    'Figures are wall-clock medians from one run on that machine; compare ratios, not absolute numbers, across machines.',
    '',
  ].join('\n');
  const sections: string[] = [];
  // `npm run bench -- NAME…` runs a subset and only prints it: BENCHMARKS.md holds full runs.
  const only = process.argv.slice(2);
  const unknown = only.filter((n) => !benches.some(([name]) => name === n));
  if (unknown.length) throw new Error(`unknown bench ${unknown.join(', ')}; have ${benches.map(([n]) => n).join(', ')}`);
  for (const [name, run] of benches) {
    if (only.length && !only.includes(name)) continue;
    process.stderr.write(`bench: ${name}…\n`);
    sections.push(await run());
  }
  const markdown = `${header}\n${sections.join('\n')}`;
  process.stdout.write(markdown);
  if (!only.length) writeFileSync(join(PACKAGE_ROOT, 'bench', 'BENCHMARKS.md'), markdown);
  if (benchSink() < 0) process.stderr.write('unreachable\n');
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
