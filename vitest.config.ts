import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Suites start real processes (MCP servers, sim, the CLI); two cores are what CI has.
    maxWorkers: 2,
    // A fresh tool-result cache per test file (see the file).
    setupFiles: ['tests/setup-cache.ts'],
  },
});
