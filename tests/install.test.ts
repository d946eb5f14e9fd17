/**
 * trajforge as a user installs it: `npm pack`, then `npm install -g` of the tarball into a
 * fresh prefix, then the installed `trajforge` run from a directory that is not the repository:
 * `--version`, `init`, `check` and `generate` against the sim, its bundled tools and prompts
 * found relative to the installed package. The dependencies come from a registry on loopback
 * (npm-registry.ts) that serves what package-lock.json pins from the local npm cache: nothing
 * leaves the machine.
 *
 * The tarball is packed with --ignore-scripts: `npm test` has just built dist/, and the
 * `prepack` build (what `npm pack` runs for a user) would rewrite dist/ under the suites
 * running beside this one.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUNDLE_ENTRIES } from '../build/entries.js';
import { PACKAGE_ROOT, PACKAGE_VERSION } from '../pipeline/paths.js';
import { startSim, type Sim } from '../sim/server.js';
import { FIXTURES, reachedChunks, readJsonl, tempDir } from './helpers.js';
import { startLocalRegistry, type LocalRegistry } from './npm-registry.js';

const run = promisify(execFile);

let registry: LocalRegistry;
let sim: Sim;
let bin: string;
let installed: string;
let tarball: string;
const work = tempDir('tf-install-');
/** npm with a fresh cache and every network default pointed at the loopback registry. */
const npmEnv = (): NodeJS.ProcessEnv => ({
  ...process.env,
  npm_config_registry: registry.url,
  npm_config_cache: join(work, 'npm-cache'),
  npm_config_audit: 'false',
  npm_config_fund: 'false',
  npm_config_update_notifier: 'false',
  npm_config_offline: 'false',
  npm_config_prefer_online: 'false',
  npm_config_proxy: '',
  npm_config_https_proxy: '',
});

/** The installed trajforge, run from `cwd` with a PATH that holds no checkout of it. */
function trajforge(args: string[], cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return trajforgeWith(args, cwd, {});
}

async function trajforgeWith(args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(bin, args, { cwd, env: { ...process.env, PATH: `${join(installed, '..', '..', '..', 'bin')}:/usr/bin:/bin`, OPENAI_API_KEY: '', ...env }, timeout: 120_000 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

/** The bundled configs the README's commands name (`data/configs/X.yaml`). */
function readmeConfigs(): string[] {
  const readme = readFileSync(join(PACKAGE_ROOT, 'README.md'), 'utf8');
  return [...new Set([...readme.matchAll(/--config (data\/configs\/[a-z0-9-]+\.yaml)/g)].map((m) => m[1]!))];
}

beforeAll(async () => {
  registry = await startLocalRegistry(join(PACKAGE_ROOT, 'package-lock.json'));
  sim = await startSim({ port: 0, seed: 2 });
  const packed = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], { cwd: PACKAGE_ROOT, env: npmEnv(), maxBuffer: 64 * 1024 * 1024 });
  const [info] = JSON.parse(packed.stdout) as [{ filename: string; files: { path: string }[] }];
  tarball = join(work, info.filename);
  const prefix = join(work, 'prefix');
  await run('npm', ['install', '--global', '--prefix', prefix, tarball], { cwd: work, env: npmEnv(), timeout: 380_000, maxBuffer: 16 * 1024 * 1024 }).catch((err: Error & { stderr?: string }) => {
    throw new Error(`npm install -g failed (tarballs missing from the npm cache: ${registry.missing.join(', ') || 'none'}):\n${err.stderr ?? err.message}`);
  });
  bin = join(prefix, 'bin', 'trajforge');
  installed = join(prefix, 'lib', 'node_modules', 'trajforge');
}, 400_000);

afterAll(async () => {
  await sim?.close();
  await registry?.close();
});

describe('npm pack; npm install -g; trajforge from any directory', () => {
  it('packs what a run needs, and nothing of the checkout besides', async () => {
    const listed = await run('tar', ['tzf', tarball]);
    const files = listed.stdout.split('\n').filter(Boolean).map((f) => f.replace(/^package\//, ''));
    for (const f of [
      'package.json',
      'README.md',
      'dist/pipeline/cli/bin.js',
      'dist/tools/corpus/server.js',
      'dist/tools/pubmed/server.js',
      'dist/tools/web/server.js',
      'dist/sim/server.js',
      'data/corpus.jsonl',
      'data/corpus.index.json',
      'data/questions.jsonl',
      'data/configs/demo.yaml',
      'data/configs/presets/vllm-tulu.yaml',
      'data/configs/presets/openai-native.yaml',
      'data/configs/presets/mirothinker.yaml',
      'schemas/RunConfig.schema.json',
    ]) {
      expect(files, f).toContain(f);
    }
    for (const p of readdirSync(join(PACKAGE_ROOT, 'prompts'))) expect(files).toContain(`prompts/${p}`);
    expect(files.filter((f) => f.startsWith('tests/') || f.startsWith('node_modules/') || f.startsWith('pipeline/'))).toEqual([]);
    // Nothing a run does not need: no benchmarks, no source maps pointing at .ts files it does not hold,
    // no build scripts (data/build makes the bundled corpus; its TypeScript would not even run).
    expect(files.filter((f) => f.startsWith('dist/bench/') || f.startsWith('dist/data/build/') || f.startsWith('data/build/') || f.endsWith('.map'))).toEqual([]);
    // Every bundled chunk shipped is one the programs load (an earlier build's would be dead weight).
    const chunks = files.filter((f) => f.startsWith('dist/chunks/'));
    expect(chunks.length).toBeGreaterThan(0);
    const reached = reachedChunks(BUNDLE_ENTRIES.map((e) => `dist/${e}.js`));
    expect(chunks.filter((c) => !reached.has(c))).toEqual([]);
    // Every config the README names ships.
    for (const c of readmeConfigs()) expect(files, c).toContain(c);
    // `npm pack` builds dist/ first, so a tarball never holds a stale build.
    expect(JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')).scripts.prepack).toBe('npm run build');
  });

  it('installs a trajforge command that runs from another directory, with its package found where it was installed', async () => {
    expect(existsSync(bin)).toBe(true);
    const cwd = tempDir('tf-install-cwd-');
    const version = await trajforge(['--version'], cwd);
    expect(version).toMatchObject({ code: 0, stdout: `${PACKAGE_VERSION}\n` });
    expect(registry.missing).toEqual([]);
    // The dependencies came from the loopback registry (a fresh npm cache, so from nowhere else).
    for (const dep of Object.keys(JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')).dependencies)) {
      expect(registry.served.some((s) => s.startsWith(`${dep}@`)), dep).toBe(true);
      expect(existsSync(join(installed, 'node_modules', dep, 'package.json')), dep).toBe(true);
    }
  });

  it('init, check and generate work from the installed package against the sim', async () => {
    const cwd = tempDir('tf-install-cwd-');
    const init = await trajforge(['init', '--preset', 'vllm-tulu'], cwd);
    expect(init.code, init.stderr).toBe(0);
    // An installed trajforge suggests itself by its command name, not `npx`.
    expect(init.stdout).toContain('\n  trajforge check --config vllm-tulu.yaml\n');

    const check = await trajforge(['check', '--config', 'vllm-tulu.yaml', '--base-url', sim.url, '--model', 'trajforge-sim'], cwd);
    expect(check.code, check.stdout).toBe(0);
    expect(check.stdout).toMatch(/^ok +server corpus +started/m);

    // The demo config that ships in the package, its corpus server and prompts found beside it.
    const demoConfig = join(installed, 'data', 'configs', 'demo.yaml');
    const gen = await trajforge(['generate', '--config', demoConfig, '--base-url', sim.url, '--limit', '4', '--out', 'run'], cwd);
    expect(gen.code, gen.stderr).toBe(0);
    const manifest = JSON.parse(readFileSync(join(cwd, 'run', 'manifest.json'), 'utf8'));
    expect(manifest.config.mcpServers.corpus.args[0]).toBe(join(installed, 'dist/tools/corpus/server.js'));
    const ok = readJsonl(join(cwd, 'run', 'trajectories.jsonl'));
    expect(ok.length).toBeGreaterThan(0);
    expect(ok[0]!.messages[0].content).toContain('<call_tool');
    expect(ok.some((t) => t.total_tool_calls > 0)).toBe(true);
  });

  it("runs every README command that names a bundled config, as written, from a directory that holds none", async () => {
    const configs = readmeConfigs();
    expect(configs).toEqual(expect.arrayContaining(['data/configs/miroverse.yaml', 'data/configs/curate.yaml', 'data/configs/synthesize.yaml']));
    const cwd = tempDir('tf-install-cwd-');
    for (const config of configs) {
      // One question each (the README's runs are the same commands at full size); SIM_URL points the curate and synthesize configs' every role at the sim.
      const synth = config.endsWith('synthesize.yaml');
      const args = synth ? ['synthesize', '--config', config, '--limit', '1', '--out', 'synth'] : ['generate', '--config', config, '--base-url', sim.url, '--limit', '1', '--out', config.replace(/\W/g, '-')];
      const r = await trajforgeWith(args, cwd, { SIM_URL: sim.url });
      if (readFileSync(join(installed, config), 'utf8').includes('"--engine", "sqlite"')) {
        // The on-disk corpus index needs better-sqlite3, an optional peer a global install leaves out
        // (the README runs this config in a checkout): the run stops before it starts, saying how to get it.
        expect(r.code, `${config}: ${r.stderr}`).toBe(2);
        expect(r.stderr).toContain('npm install better-sqlite3@12');
        continue;
      }
      expect(r.code, `${config}: ${r.stderr}`).toBe(0);
    }
    // A bundled config by its name alone.
    const byName = await trajforgeWith(['generate', '--config', 'demo', '--dry-run', '--json'], cwd, {});
    expect(byName.code, byName.stderr).toBe(0);
  });

  it('is a lean install: its size is what the README says', async () => {
    const readme = readFileSync(join(PACKAGE_ROOT, 'README.md'), 'utf8');
    const stated = Number(/a global install takes about (\d+) MB/.exec(readme)?.[1]);
    const { stdout } = await run('du', ['-sm', installed]);
    const mb = Number(stdout.split('\t')[0]);
    expect(stated, 'the README states the installed size').toBeGreaterThan(0);
    expect(Math.abs(mb - stated) / stated, `${mb} MB installed, the README says ${stated}`).toBeLessThan(0.2);
  });

  it('counts tokens with the encodings bundled in dist/vendor, gpt-tokenizer itself not installed', async () => {
    expect(existsSync(join(installed, 'node_modules', 'gpt-tokenizer'))).toBe(false);
    const fixture = join(FIXTURES, 'drtulu-generator-rows.jsonl');
    const cwd = tempDir('tf-install-cwd-');
    const counted: Record<string, unknown> = {};
    for (const encoding of ['o200k_base', 'cl100k_base']) {
      const r = await trajforge(['stats', fixture, '--tokenizer', encoding, '--json'], cwd);
      expect(r.code, r.stderr).toBe(0);
      counted[encoding] = JSON.parse(r.stdout).per_trajectory.tokens;
      // The same figures as the checkout's counter, which the unit tests hold to the package itself.
      const here = await run(process.execPath, [join(PACKAGE_ROOT, 'dist/pipeline/cli/bin.js'), 'stats', fixture, '--tokenizer', encoding, '--json']);
      expect(counted[encoding]).toEqual(JSON.parse(here.stdout).per_trajectory.tokens);
    }
    expect(counted.o200k_base).not.toEqual(counted.cl100k_base);
  });
});
