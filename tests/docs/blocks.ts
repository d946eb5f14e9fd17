/**
 * Running the ```sh blocks of a Markdown page as written, as a newcomer runs them: in a fresh
 * directory holding the checkout's data/ and evals/ and a node_modules where `npx trajforge`
 * (and `trajforge`) is the built CLI. A block that cannot run here (a GPU, a real endpoint, a
 * key, the network, other machines) carries a visible reason just above it,
 *   <!-- not run: needs a GPU machine serving the model -->
 * and shows up as a skipped test titled with its place and that reason. One liberty is taken:
 * each port a block names (8001, …) becomes a free one, so that a busy machine's other servers
 * (and the other pages' blocks, run beside them) never meet the sims these blocks start. A
 * block's stray background processes end with it. The README's test and the docs pages' test
 * both run through here, over the one build `npm test` made.
 */
import { spawn } from 'node:child_process';
import { cpSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { CLI, freePort, tempDir } from '../helpers.js';

export interface Block {
  readonly file: string;
  readonly line: number;
  readonly text: string;
  /** Why it does not run here, from the `<!-- not run: … -->` above it. */
  readonly notRun?: string;
}

/** The ```sh blocks of a Markdown file, each with the line it starts on and its not-run mark. */
export function shellBlocks(file: string, markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== '```sh') continue;
    const start = i;
    const body: string[] = [];
    while (++i < lines.length && lines[i]!.trim() !== '```') body.push(lines[i]!);
    let above = start - 1;
    while (above >= 0 && lines[above]!.trim() === '') above--;
    const mark = above >= 0 ? /^<!-- not run: (.+?) -->$/.exec(lines[above]!.trim()) : null;
    blocks.push({ file, line: start + 1, text: body.join('\n'), ...(mark ? { notRun: mark[1]! } : {}) });
  }
  return blocks;
}

/** A block's test title: its place and its first command. */
export function blockTitle(b: Block): string {
  return `${b.file}:${b.line} ${b.text.split('\n').find((l) => l.trim() !== '' && !l.startsWith('#'))?.trim().slice(0, 60) ?? ''}`;
}

/** A directory as a fresh clone's, with `npx trajforge` resolving to this checkout's build. */
export function workspace(): string {
  const dir = tempDir('tf-blocks-');
  for (const d of ['data', 'evals']) cpSync(join(PACKAGE_ROOT, d), join(dir, d), { recursive: true });
  const modules = join(dir, 'node_modules');
  mkdirSync(join(modules, '.bin'), { recursive: true });
  for (const entry of readdirSync(join(PACKAGE_ROOT, 'node_modules'))) {
    if (entry !== '.bin') symlinkSync(join(PACKAGE_ROOT, 'node_modules', entry), join(modules, entry));
  }
  // A launcher, not a link to the built CLI: tsc writes bin.js without the executable bit (npm sets it only on install).
  writeFileSync(join(modules, '.bin', 'trajforge'), `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} "$@"\n`, { mode: 0o755 });
  return dir;
}

/** The ports a block names (`--port 8001`, `127.0.0.1:8001`, `sim-8001.pid`), each swapped for a free one. */
export async function withFreePorts(text: string): Promise<string> {
  const ports = new Set([...text.matchAll(/(?:--port |127\.0\.0\.1:|sim-)(\d{4,5})\b/g)].map((m) => m[1]!));
  let out = text;
  for (const port of ports) out = out.replace(new RegExp(`\\b${port}\\b`, 'g'), String(await freePort()));
  return out;
}

/**
 * `npx trajforge …` in a block runs the workspace's node_modules/.bin/trajforge, the launcher npx
 * itself would find there, without npm's own start-up: 0.6 s of CPU a call, about 90 calls in
 * the README and docs/, on the 2 cores the whole suite shares. Anything else goes to the real
 * npx, and `npx resolves trajforge` (readme-blocks.test.ts) runs the real one once.
 */
const NPX_TRAJFORGE = 'npx() { if [ "$1" = trajforge ]; then shift; trajforge "$@"; else command npx "$@"; fi; }';

/**
 * Runs a block in bash (-e: the first failing command fails it), with the workspace's
 * node_modules/.bin first on PATH (where an installed `trajforge` would be); whatever it left
 * running is stopped.
 */
export function runBlock(text: string, cwd: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, OPENAI_API_KEY: '', PATH: `${join(cwd, 'node_modules', '.bin')}:${process.env.PATH ?? ''}` };
    const child = spawn('bash', ['-e', '-o', 'pipefail', '-c', `${NPX_TRAJFORGE}\n${text}`], { cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env });
    let output = '';
    const keep = (d: Buffer): void => {
      output = (output + d.toString()).slice(-20_000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('error', reject);
    // On exit, not on close: a server the block left running holds the output pipes open, so
    // 'close' would wait for it forever.
    child.on('exit', () => {
      try {
        process.kill(-child.pid!, 'SIGTERM');
      } catch {
        // The group is gone: nothing was left running.
      }
    });
    child.on('close', (code) => resolve({ code, output }));
  });
}
