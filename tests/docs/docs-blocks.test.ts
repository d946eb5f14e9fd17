/**
 * Every ```sh block of the pages in docs/ runs as written, in order, each page in a fresh
 * directory of its own (see blocks.ts for how, and for the `<!-- not run: … -->` mark). The
 * pages run side by side: each block's ports become free ones and each page has its own
 * directory, so they cannot meet; a page's blocks run one after another, in one test, which
 * names the block that failed.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { blockTitle, runBlock, shellBlocks, withFreePorts, workspace } from './blocks.js';

const PAGES = readdirSync(join(PACKAGE_ROOT, 'docs'))
  .filter((f) => f.endsWith('.md'))
  .sort()
  .map((f) => `docs/${f}`);

describe('docs/*.md', () => {
  const pages = PAGES.map((file) => ({ file, blocks: shellBlocks(file, readFileSync(join(PACKAGE_ROOT, file), 'utf8')) }));

  it('finds the pages, and every block it does not run says why', () => {
    expect(pages.filter((p) => p.blocks.length > 0).length).toBeGreaterThan(5);
    for (const { blocks } of pages) for (const b of blocks) if (b.notRun !== undefined) expect(b.notRun.trim().length, `${b.file}:${b.line}`).toBeGreaterThan(5);
  });

  for (const { file, blocks } of pages) {
    for (const b of blocks) if (b.notRun !== undefined) it.skip(`${blockTitle(b)} (not run: ${b.notRun})`, () => {});
    const run = blocks.filter((b) => b.notRun === undefined);
    if (run.length === 0) continue;
    it.concurrent(`${file}: ${run.length} block(s) in order`, async () => {
      const cwd = workspace();
      for (const b of run) {
        const r = await runBlock(await withFreePorts(b.text), cwd);
        expect(r.code, `${blockTitle(b)}\n${r.output}`).toBe(0);
      }
    }, 10 * 60_000);
  }
});
