/**
 * Every ```sh block of the README runs as written, in order, as a newcomer runs them: in a
 * fresh directory holding the checkout's data/ and evals/ and a node_modules where
 * `npx trajforge` is the built CLI. A block that cannot run here (a GPU, a real endpoint, a
 * key, other machines) carries a visible reason just above it,
 *   <!-- not run: needs a GPU machine serving the model -->
 * and shows up as a skipped test titled with its place and that reason. One liberty is taken:
 * each port a block names (8001, …) becomes a free one, so that a busy machine's other servers
 * never meet the sims these blocks start. A block's stray background processes end with it.
 */
import { spawn } from 'node:child_process';
import { cpSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { CLI, freePort, tempDir } from '../helpers.js';

/** The Markdown files whose blocks run, each in a directory of its own. */
const FILES = ['README.md'];

interface Block {
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

/** A directory as a fresh clone's, with `npx trajforge` resolving to this checkout's build. */
function workspace(): string {
  const dir = tempDir('tf-readme-');
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

/** The ports a block names (`--port 8001`, `127.0.0.1:8001`), each swapped for a free one. */
async function withFreePorts(text: string): Promise<string> {
  const ports = new Set([...text.matchAll(/(?:--port |127\.0\.0\.1:|sim-)(\d{4,5})\b/g)].map((m) => m[1]!));
  let out = text;
  for (const port of ports) out = out.replace(new RegExp(`\\b${port}\\b`, 'g'), String(await freePort()));
  return out;
}

/** Runs a block in bash (-e: the first failing command fails it); whatever it left running is stopped. */
function runBlock(text: string, cwd: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-e', '-o', 'pipefail', '-c', text], { cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, OPENAI_API_KEY: '' } });
    let output = '';
    const keep = (d: Buffer): void => {
      output = (output + d.toString()).slice(-20_000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('error', reject);
    child.on('close', (code) => {
      try {
        process.kill(-child.pid!, 'SIGTERM');
      } catch {
        // The group is gone: nothing was left running.
      }
      resolve({ code, output });
    });
  });
}

for (const file of FILES) {
  describe(file, () => {
    const blocks = shellBlocks(file, readFileSync(join(PACKAGE_ROOT, file), 'utf8'));
    let cwd: string | undefined;

    it('has shell blocks, and every one it does not run says why', () => {
      expect(blocks.length).toBeGreaterThan(0);
      for (const b of blocks) if (b.notRun !== undefined) expect(b.notRun.trim().length, `${file}:${b.line}`).toBeGreaterThan(5);
    });

    for (const b of blocks) {
      const title = `${file}:${b.line} ${b.text.split('\n').find((l) => l.trim() !== '' && !l.startsWith('#'))?.trim().slice(0, 60) ?? ''}`;
      if (b.notRun !== undefined) {
        it.skip(`${title} (not run: ${b.notRun})`, () => {});
        continue;
      }
      it(title, async () => {
        cwd ??= workspace();
        const r = await runBlock(await withFreePorts(b.text), cwd);
        expect(r.code, r.output).toBe(0);
      }, 10 * 60_000);
    }
  });
}
