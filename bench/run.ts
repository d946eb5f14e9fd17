/**
 * `npm run bench`: runs every benchmark module, prints the markdown and writes it to
 * bench/BENCHMARKS.md with what produced it, so the figures there can be reproduced.
 *
 *   npm run bench                       every bench; rewrites BENCHMARKS.md
 *   npm run bench -- NAME…              those benches; prints only
 *   npm run bench -- --write NAME…      those benches; replaces their sections in BENCHMARKS.md
 *
 * Each section sits between `<!-- bench:NAME -->` markers so that one can be redone alone.
 * Text between `<!-- keep -->` and `<!-- /keep -->` (the before/after record of fixes) is
 * written by hand and carried over by every rewrite.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, platform, release } from 'node:os';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { benchAgents } from './agents.js';
import { benchCorpus } from './corpus.js';
import { benchCurate } from './curate.js';
import { benchLifecycle } from './lifecycle.js';
import { benchMemory } from './memory.js';
import { benchRepairer, benchSink } from './repairer.js';
import { benchPython } from './python.js';
import { benchQueue } from './queue.js';
import { benchShards } from './shards.js';
import { benchSynthesize } from './synthesize.js';
import { benchCpu, benchThroughput } from './throughput.js';
import { benchTokenizerChoice } from './tokenizer-choice.js';

// Each returns one markdown section. Add new benchmark modules here.
const benches: ReadonlyArray<readonly [string, () => Promise<string>]> = [
  ['repairer', benchRepairer],
  ['lifecycle', benchLifecycle],
  ['tokenizer', benchTokenizerChoice],
  ['throughput', benchThroughput],
  ['cpu', benchCpu],
  ['shards', benchShards],
  ['queue', benchQueue],
  ['memory', benchMemory],
  ['curate', benchCurate],
  ['agents', benchAgents],
  ['python', benchPython],
  ['corpus', benchCorpus],
  ['synthesize', benchSynthesize],
];

const FILE = join(PACKAGE_ROOT, 'bench', 'BENCHMARKS.md');

function marked(name: string, markdown: string): string {
  return `<!-- bench:${name} -->\n${markdown.trimEnd()}\n<!-- /bench:${name} -->\n`;
}

/** The hand-written block of the current file, if any. */
function kept(existing: string): string {
  const m = /<!-- keep -->[\s\S]*?<!-- \/keep -->\n?/.exec(existing);
  return m ? m[0] : '';
}

/** Replaces (or appends) one bench's section in the file's text. */
function replaceSection(existing: string, name: string, markdown: string): string {
  const re = new RegExp(`<!-- bench:${name} -->[\\s\\S]*?<!-- /bench:${name} -->\\n?`);
  return re.test(existing) ? existing.replace(re, () => marked(name, markdown)) : `${existing.trimEnd()}\n\n${marked(name, markdown)}`;
}

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
  const done: [string, string][] = [];
  // `npm run bench -- NAME…` runs a subset and only prints it: BENCHMARKS.md holds full runs.
  const args = process.argv.slice(2);
  const write = args.includes('--write');
  const only = args.filter((a) => a !== '--write');
  if (write && !only.length) throw new Error('--write needs the names of the benches to redo');
  const unknown = only.filter((n) => !benches.some(([name]) => name === n));
  if (unknown.length) throw new Error(`unknown bench ${unknown.join(', ')}; have ${benches.map(([n]) => n).join(', ')}`);
  for (const [name, run] of benches) {
    if (only.length && !only.includes(name)) continue;
    process.stderr.write(`bench: ${name}…\n`);
    const section = await run();
    sections.push(section);
    done.push([name, section]);
  }
  const markdown = `${header}\n${sections.join('\n')}`;
  process.stdout.write(markdown);
  const existing = existsSync(FILE) ? readFileSync(FILE, 'utf8') : '';
  if (!only.length) {
    const keep = kept(existing);
    writeFileSync(FILE, `${header}\n${keep ? `${keep}\n` : ''}${done.map(([n, m]) => marked(n, m)).join('\n')}`);
  } else if (write) {
    let text = existing || `${header}\n`;
    for (const [n, m] of done) text = replaceSection(text, n, m);
    writeFileSync(FILE, text);
  }
  if (benchSink() < 0) process.stderr.write('unreachable\n');
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
