import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The package root, found by walking up to trajforge's package.json. Modules run both from
 * source (vitest) and from `dist/`, at different depths, so no fixed `../..` works for both.
 */
export const PACKAGE_ROOT: string = (() => {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && JSON.parse(readFileSync(manifest, 'utf8')).name === 'trajforge') return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error('trajforge package root not found');
    dir = parent;
  }
})();

/**
 * The built file of a module that runs as a process of its own (`pipeline/dataset/token-worker.js`):
 * always the one in dist/, so that code run from source (vitest) starts the same worker the
 * installed CLI does.
 */
export function builtFile(rel: string): string {
  return join(PACKAGE_ROOT, 'dist', rel);
}

export const PACKAGE_VERSION: string = JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')).version;

/**
 * How a user runs trajforge from here, for the commands the CLI suggests: `trajforge` where the
 * package was installed (it sits in a node_modules folder, its bin on the PATH), `npx trajforge`
 * in a checkout of the repository.
 */
export const CLI_COMMAND: string = PACKAGE_ROOT.split(/[\\/]/).includes('node_modules') ? 'trajforge' : 'npx trajforge';
