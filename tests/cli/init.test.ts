/**
 * The first hour: `trajforge init` writes a starter config that passes `check` and runs
 * against the sim from any directory, never over a user's file; the demo ends with the next
 * commands, and each of them works on the run it made.
 */
import { spawn } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { PRESETS } from '../../pipeline/core/presets.js';
import { startSim, type Sim } from '../../sim/server.js';
import { CLI, readJsonl, tempDir, type CliResult } from '../helpers.js';

/** The CLI run from `cwd`, as a user in another folder runs it. */
function cli(args: string[], cwd: string): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd, env: { ...process.env, OPENAI_API_KEY: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

const statuses = (stdout: string): string[] => stdout.split('\n').flatMap((l) => /^(ok|warn|FAIL|skip) +(server \S+|\S+)/.exec(l)?.slice(1, 3).join(' ') ?? []);

let sim: Sim;
beforeAll(async () => {
  // Lenient: each preset names its own model (DR-Tulu-8B, gpt-4.1-mini, MiroThinker), which the sim answers as any.
  sim = await startSim({ port: 0, seed: 5, lenient: true });
});
afterAll(() => sim.close());

describe.each(PRESETS.map((p) => p.name))('trajforge init --preset %s', (name) => {
  it('writes a commented config and the questions, which pass check against the sim and run from another directory', async () => {
    const home = tempDir('tf-init-');
    const elsewhere = tempDir('tf-init-cwd-');
    const init = await cli(['init', '--preset', name, '--out', join(home, 'project')], elsewhere);
    expect(init.stderr).toBe('');
    expect(init.code).toBe(0);
    const config = join(home, 'project', `${name}.yaml`);
    expect(init.stdout).toContain(`check --config ${config}`);
    expect(init.stdout).toContain(`generate --config ${config} --dry-run`);
    const text = readFileSync(config, 'utf8');
    // Commented, and the bundled files are named relative to trajforge, not to a checkout.
    expect(text.split('\n').filter((l) => l.trimStart().startsWith('#')).length).toBeGreaterThan(15);
    expect(text).not.toContain(PACKAGE_ROOT);
    expect(parse(text).mcpServers.corpus.args[0]).toBe('${TRAJFORGE_ROOT}/dist/tools/corpus/server.js');
    expect(readFileSync(join(home, 'project', 'questions.jsonl'))).toEqual(readFileSync(join(PACKAGE_ROOT, 'data/questions.jsonl')));

    // As written (only the endpoint moved to the sim): a run can start. The sim lists its own
    // model name only, which is the one warning.
    const asWritten = await cli(['check', '--config', config, '--base-url', sim.url], elsewhere);
    expect(asWritten.code, asWritten.stdout).toBe(0);
    expect(statuses(asWritten.stdout).filter((s) => !s.startsWith('ok '))).toEqual(['warn model']);
    const named = await cli(['check', '--config', config, '--base-url', sim.url, '--model', 'trajforge-sim'], elsewhere);
    expect(named.code).toBe(0);
    expect(statuses(named.stdout).every((s) => s.startsWith('ok ')), named.stdout).toBe(true);
    expect(named.stdout).toMatch(/^ok +turn +the model's first turn calls \S+ in the \S+ dialect/m);

    // A dry run, as written: the prompts and the first request, and nothing sent or written.
    const runDir = join(home, 'project', 'runs', name);
    const requests = sim.stats().requests;
    const dry = await cli(['generate', '--config', config, '--dry-run', '--json'], elsewhere);
    expect(dry.code, dry.stderr).toBe(0);
    const shown = JSON.parse(dry.stdout) as { agents: { name: string; tools: unknown[] }[]; request: { url: string; body: { model: string; messages: { role: string }[] } } };
    expect(shown.request.body.model).toBe(parse(text).endpoint.model);
    expect(shown.request.body.messages.map((m) => m.role)).toEqual(['system', 'user']);
    expect(shown.agents.every((a) => a.tools.length > 0)).toBe(true);
    expect(sim.stats().requests).toBe(requests);
    expect(existsSync(runDir)).toBe(false);

    // And a real run, from another directory: the run lands beside the config. With agents the
    // files hold the sub-agents' sessions too: the samples are the root sessions.
    const gen = await cli(['generate', '--config', config, '--base-url', sim.url, '--limit', '3'], elsewhere);
    expect(gen.code, gen.stderr).toBe(0);
    const roots = (file: string) => readJsonl(join(runDir, file)).filter((t) => t.parent_id === undefined);
    expect(roots('trajectories.jsonl').length + roots('failures.jsonl').length).toBe(3);
    expect(roots('trajectories.jsonl').some((t) => t.total_tool_calls > 0)).toBe(true);
    if (name === 'mirothinker') {
      // MiroVerse's shape: the main agent's only tool is its browsing sub-agent, whose sessions are written too.
      expect(shown.agents.map((a) => a.name)).toEqual(['main', 'browsing']);
      expect(readJsonl(join(runDir, 'trajectories.jsonl')).some((t) => t.agent === 'browsing' && t.total_tool_calls > 0)).toBe(true);
    }
  });
});

describe('trajforge init, around what is there', () => {
  it('never writes over a file without --force; keeps a questions file that is the bundled one', async () => {
    const dir = tempDir('tf-init-');
    const first = await cli(['init', '--preset', 'vllm-tulu'], dir);
    expect(first.code).toBe(0);
    expect(existsSync(join(dir, 'vllm-tulu.yaml'))).toBe(true);

    // A second preset beside it: the same questions file is kept, not rewritten.
    const second = await cli(['init', '--preset', 'openai-native'], dir);
    expect(second.code).toBe(0);
    expect(second.stdout).toContain('kept  questions.jsonl');

    // The user's own edits and questions.
    writeFileSync(join(dir, 'vllm-tulu.yaml'), '# mine\n');
    writeFileSync(join(dir, 'questions.jsonl'), '{"question": "mine"}\n');
    const again = await cli(['init', '--preset', 'vllm-tulu'], dir);
    expect(again.code).toBe(2);
    expect(again.stderr).toBe(`error: init: vllm-tulu.yaml and questions.jsonl already there; nothing was written (--force replaces them, or choose another --out)\n`);
    expect(readFileSync(join(dir, 'vllm-tulu.yaml'), 'utf8')).toBe('# mine\n');
    expect(readFileSync(join(dir, 'questions.jsonl'), 'utf8')).toBe('{"question": "mine"}\n');

    const forced = await cli(['init', '--preset', 'vllm-tulu', '--force'], dir);
    expect(forced.code).toBe(0);
    expect(readFileSync(join(dir, 'vllm-tulu.yaml'), 'utf8')).toContain('rl-research/DR-Tulu-8B');
  });

  it('--force never writes through a symbolic link planted at a file\'s name: the link is replaced, the file outside --out untouched', async () => {
    const root = tempDir('tf-init-link-');
    const dir = join(root, 'here');
    mkdirSync(dir);
    const outside = join(root, 'outside.txt');
    writeFileSync(outside, 'precious\n');
    const gone = join(root, 'not-yet.txt');
    symlinkSync(outside, join(dir, 'vllm-tulu.yaml'));
    symlinkSync(gone, join(dir, 'questions.jsonl')); // dangling: writing through it would create the file outside

    const refused = await cli(['init', '--preset', 'vllm-tulu'], dir);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toBe(
      `error: init: vllm-tulu.yaml (a symbolic link to ${outside}) and questions.jsonl (a symbolic link to ${gone}) already there; nothing was written (--force replaces them, or choose another --out)\n`,
    );

    const forced = await cli(['init', '--preset', 'vllm-tulu', '--force'], dir);
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stdout).toContain(`note: vllm-tulu.yaml was a symbolic link to ${outside}: replaced by the file; ${outside} is untouched`);
    expect(forced.stdout).toContain(`note: questions.jsonl was a symbolic link to ${gone}: replaced by the file`);
    expect(readFileSync(outside, 'utf8')).toBe('precious\n');
    expect(existsSync(gone)).toBe(false);
    for (const f of ['vllm-tulu.yaml', 'questions.jsonl']) expect(lstatSync(join(dir, f)).isFile()).toBe(true);
    expect(readFileSync(join(dir, 'vllm-tulu.yaml'), 'utf8')).toContain('rl-research/DR-Tulu-8B');
  });

  it('without a preset, or with an unknown one, lists the presets; exit 2', async () => {
    const dir = tempDir('tf-init-');
    const none = await cli(['init'], dir);
    expect(none.code).toBe(2);
    for (const p of PRESETS) expect(none.stderr).toContain(p.name);
    const unknown = await cli(['init', '--preset', 'vllm'], dir);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toBe(`error: init: no preset "vllm" (presets: ${PRESETS.map((p) => p.name).join(', ')})\n`);
  });
});

describe('trajforge demo', () => {
  it('ends with the next commands on the run it made, and each of them works', async () => {
    const dir = tempDir('tf-demo-next-');
    const out = join(dir, 'run');
    const demo = await cli(['demo', '--limit', '4', '--out', out], dir);
    expect(demo.code).toBe(0);
    const next = demo.stdout.slice(demo.stdout.indexOf('\nnext '));
    const commands = next
      .split('\n')
      .filter((l) => l.includes('trajforge '))
      .map((l) => l.replace(/^next\s+|^\s+/, '').replace(/\s+#.*$/, ''));
    expect(commands.map((c) => c.split(' ').slice(0, 3).join(' '))).toEqual(['npx trajforge stats', 'npx trajforge report', 'npx trajforge export', 'npx trajforge init']);
    // The summary ends with them.
    expect(demo.stdout.trimEnd().split('\n').at(-1)).toContain('trajforge init --preset vllm-tulu');
    for (const command of commands.slice(0, 3)) {
      expect(command).toContain(out);
      const r = await cli(command.split(' ').slice(2), dir);
      expect(r.code, `${command}: ${r.stderr}`).toBe(0);
    }
    expect(existsSync(join(out, 'report.html'))).toBe(true);
    expect(readJsonl(join(out, 'train.jsonl')).length).toBeGreaterThan(0);
  });
});
