/**
 * Every ```sh block of the README runs as written, in order, in one fresh directory (see
 * blocks.ts for how, and for the `<!-- not run: … -->` mark). docs-blocks.test.ts does the
 * same for the pages of docs/.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { blockTitle, runBlock, shellBlocks, withFreePorts, workspace } from './blocks.js';

const FILE = 'README.md';

describe(FILE, () => {
  const blocks = shellBlocks(FILE, readFileSync(join(PACKAGE_ROOT, FILE), 'utf8'));
  let cwd: string | undefined;

  it('npx resolves trajforge in a fresh directory (the real npx: the blocks run the launcher it finds, blocks.ts)', async () => {
    cwd ??= workspace();
    const r = await runBlock('command npx trajforge --version', cwd);
    expect(r.code, r.output).toBe(0);
    expect(r.output.trim()).toMatch(/^\d+\.\d+\.\d+/);
  }, 120_000);

  it('has shell blocks, and every one it does not run says why', () => {
    expect(blocks.length).toBeGreaterThan(0);
    for (const b of blocks) if (b.notRun !== undefined) expect(b.notRun.trim().length, `${FILE}:${b.line}`).toBeGreaterThan(5);
  });

  for (const b of blocks) {
    if (b.notRun !== undefined) {
      it.skip(`${blockTitle(b)} (not run: ${b.notRun})`, () => {});
      continue;
    }
    it(blockTitle(b), async () => {
      cwd ??= workspace();
      const r = await runBlock(await withFreePorts(b.text), cwd);
      expect(r.code, r.output).toBe(0);
    }, 10 * 60_000);
  }
});
