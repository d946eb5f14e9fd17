/**
 * Bundles each program trajforge starts as a process of its own (the CLI, the token worker, the
 * tool servers) into one entry file and shared chunks, written over tsc's output of the same name
 * in dist/. Run by `npm run build`, after tsc (which still type-checks and emits every module:
 * the tests, the bench and the schema emitter run from that).
 *
 * Why: a process spent most of its start-up in Node resolving and loading some 400 ES modules one
 * by one (zod's alone are 95), more than in its own work. Bundled, `validate` on a small file takes
 * about 40% less CPU from start to exit, and so does each of the thousands of CLI and tool-server
 * processes a test suite or a long run starts (bench/BENCHMARKS.md, "Start-up").
 *
 * The dependencies' code is inlined, so their licences ship with it: dist/THIRD-PARTY-LICENSES.txt,
 * one entry per package the bundle holds. Left outside the bundle: better-sqlite3 (a native module,
 * an optional install) and Pyodide (loaded from its own directory with its WebAssembly files).
 *
 * gpt-tokenizer's two encodings that trajforge counts with are bundled apart, each into one
 * CommonJS file of its own (dist/vendor/gpt-tokenizer/NAME.cjs) that core/tokens/count.ts requires
 * at first use: a merge table is megabytes of source that no process should parse before it counts,
 * and the package itself (30 MB, every encoding in three forms) then need not be installed.
 */
import { existsSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, sep } from 'node:path';
import { build, type OutputChunk } from 'rolldown';
import { BUNDLE_ENTRIES } from './entries.js';
import { TOKEN_ENCODINGS, vendoredEncoding } from '../pipeline/core/tokens/count.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';

const EXTERNAL = ['better-sqlite3', /^pyodide(\/|$)/];

// Only the bundle writes these folders, and its chunks' names carry a hash: an earlier build's
// would stay beside the new ones, and `npm pack` would ship them.
for (const dir of ['chunks', 'vendor']) rmSync(join(PACKAGE_ROOT, 'dist', dir), { recursive: true, force: true });

const out = await build({
  cwd: PACKAGE_ROOT,
  input: Object.fromEntries(BUNDLE_ENTRIES.map((e) => [e, join(PACKAGE_ROOT, `${e}.ts`)])),
  platform: 'node',
  external: EXTERNAL,
  logLevel: 'warn',
  output: {
    dir: join(PACKAGE_ROOT, 'dist'),
    format: 'esm',
    entryFileNames: '[name].js',
    chunkFileNames: 'chunks/[name]-[hash].js',
  },
});

const vendored = await Promise.all(
  TOKEN_ENCODINGS.map((name) =>
    build({
      cwd: PACKAGE_ROOT,
      input: { [vendoredEncoding(name)]: `gpt-tokenizer/encoding/${name}` },
      platform: 'node',
      logLevel: 'warn',
      output: { dir: join(PACKAGE_ROOT, 'dist'), format: 'cjs', exports: 'named', entryFileNames: '[name].cjs' },
    }),
  ),
);

const chunks = [out, ...vendored].flatMap((o) => o.output).filter((o): o is OutputChunk => o.type === 'chunk');
writeFileSync(join(PACKAGE_ROOT, 'dist', 'THIRD-PARTY-LICENSES.txt'), licences(chunks));

/** Each bundled package's name, version and licence text, from its own directory in node_modules. */
function licences(chunks: readonly OutputChunk[]): string {
  const dirs = new Set<string>();
  for (const id of chunks.flatMap((c) => c.moduleIds)) {
    const dir = packageDir(id);
    if (dir !== undefined) dirs.add(dir);
  }
  const parts = [...dirs].sort().map((dir) => {
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name: string; version: string; license?: string };
    const file = readdirSync(dir).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f));
    const text = file === undefined ? `(no licence file in the package; its package.json says: ${pkg.license ?? 'nothing'})` : readFileSync(join(dir, file), 'utf8').trim();
    return `${pkg.name}@${pkg.version} (${pkg.license ?? 'see below'})\n\n${text}\n`;
  });
  return `trajforge's dist/ bundles the code of these packages (build/bundle.ts).\n\n${parts.join('\n' + '-'.repeat(72) + '\n\n')}`;
}

/** The package directory under the last node_modules of a module's path (a scope kept), if any. */
function packageDir(id: string): string | undefined {
  const at = id.lastIndexOf(`${sep}node_modules${sep}`);
  if (at < 0) return undefined;
  const rest = id.slice(at + '/node_modules/'.length).split(sep);
  const name = rest[0]?.startsWith('@') ? rest.slice(0, 2) : rest.slice(0, 1);
  const dir = join(id.slice(0, at), 'node_modules', ...name);
  return existsSync(join(dir, 'package.json')) ? dir : undefined;
}
