/**
 * Every test file gets a tool-result cache of its own, in a fresh temporary directory: results
 * cached by one file (or by an earlier `npm test`) must not turn another file's calls into hits,
 * and tests must not write to the user's ~/.cache. Child processes (the CLI) inherit it.
 * A test that shares a cache on purpose sets `executor.cache_dir`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

const dir = mkdtempSync(join(tmpdir(), 'tf-cache-'));
process.env.TRAJFORGE_CACHE_DIR = dir;
afterAll(() => rmSync(dir, { recursive: true, force: true }));
