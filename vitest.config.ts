import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Suites start real processes (MCP servers, sim, the CLI); two cores are what CI has.
    maxWorkers: 2,
    // Temporary files under a directory per test file, removed after it; a fresh tool-result
    // cache per test file (see the files).
    setupFiles: ['tests/setup-tmp.ts', 'tests/setup-cache.ts'],
  },
});
