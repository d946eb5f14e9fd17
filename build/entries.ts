/**
 * The programs trajforge starts as processes, by their path without extension: what
 * build/bundle.ts bundles (each over tsc's file of the same name in dist/), and what the install
 * test follows to the chunks they load.
 */
export const BUNDLE_ENTRIES: readonly string[] = [
  'pipeline/cli/bin',
  'pipeline/dataset/token-worker',
  'tools/corpus/server',
  'tools/pubmed/server',
  'tools/web/server',
  'tools/python/server',
  'sim/cli-main',
];
