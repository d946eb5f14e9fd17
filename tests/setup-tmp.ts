/**
 * Every test file writes its temporary files under a directory of its own, removed when the file
 * is done: `os.tmpdir()` (and so `tempDir`, `mkdtempSync(tmpdir())` and the CLI processes a test
 * starts, which inherit TMPDIR) points there. Without it one `npm test` left some 2 GB of run
 * directories, caches and servers' files in /tmp, and every run after it as much again.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

const root = mkdtempSync(join(tmpdir(), 'tf-test-'));
process.env.TMPDIR = root;
// Registered before the test file's own hooks, so it runs after them (vitest runs afterAll hooks
// in reverse): the file has stopped its servers and processes by then. A process that outlived
// its test may still hold a file there; cleaning up never fails a test.
afterAll(() => {
  try {
    rmSync(root, { recursive: true, force: true, maxRetries: 3 });
  } catch {
    // Left for the system's own /tmp cleaning.
  }
});
