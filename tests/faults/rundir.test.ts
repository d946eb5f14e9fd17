/**
 * Run directory integrity, through the CLI as a child process against the sim and real files:
 * the lock under a race for a dead holder's lock, the tail of a file a crash or a hand left
 * behind, every command's answer to a bad path or a bad line, and a resume that would mix
 * samples made under different settings.
 */
import { appendFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { PACKAGE_ROOT, PACKAGE_VERSION } from '../../pipeline/paths.js';
import { CLI, CORPUS_SERVER, runCli, tempDir, writeConfig } from '../helpers.js';
import { accountedIds, checkRunDir, completeLines, spawnCli, waitFor } from './util.js';

let sim: Sim;
beforeAll(async () => {
  // Latency makes a run last long enough to be killed in the middle of it.
  sim = await startSim({ port: 0, seed: 5, latencyMs: 30 });
});
afterAll(() => sim.close());

const TRAJ = 'trajectories.jsonl';
const FAIL = 'failures.jsonl';

describe('the lock', () => {
  it('two processes that find the same dead holder race for its lock: one takes it, the other is refused, no id is accepted twice', async () => {
    const dir = tempDir('tf-lockrace-');
    const out = join(dir, 'run');
    const args = ['generate', '--config', writeConfig(dir, sim.url, { concurrency: 4 }), '--limit', '40'];
    // A real stale lock: a run killed in the middle.
    const killed = spawnCli(args);
    expect(await waitFor(() => completeLines(join(out, TRAJ)).length >= 2, 30_000), killed.stderr()).toBe(true);
    killed.child.kill('SIGKILL');
    await killed.exited;

    // Both processes stop inside the race window (the holder read and found dead, the lock not
    // yet taken) until both are there; then both go at once.
    const go = join(dir, 'go');
    const a = spawnCli(args, { TRAJFORGE_TEST_LOCK_PAUSE: go });
    const b = spawnCli(args, { TRAJFORGE_TEST_LOCK_PAUSE: go });
    const inWindow = await waitFor(() => existsSync(`${go}.${a.child.pid}`) && existsSync(`${go}.${b.child.pid}`), 30_000);
    expect(inWindow, `${a.stderr()}\n${b.stderr()}`).toBe(true);
    writeFileSync(go, '');
    const results = await Promise.all([a.exited, b.exited]);
    const stderrs = [a.stderr(), b.stderr()];
    const codes = results.map((r) => r.code);
    expect([...codes].sort(), stderrs.join('\n---\n')).toEqual([0, 2]);
    const loser = stderrs[codes.indexOf(2)]!;
    const winner = [a, b][codes.indexOf(0)]!;
    expect(loser).toMatch(new RegExp(`^error: .*run: another trajforge process \\(pid ${winner.child.pid}\\) is writing this run$`, 'm'));
    expect(loser).not.toMatch(/internal error|\n\s+at /);

    const files = checkRunDir(out); // no id accepted twice
    expect(accountedIds(files).size).toBe(40);
    expect(files.ok.length + files.failed.length).toBe(40);
    expect(files.manifest?.status).toBe('completed');
  });
});

describe('the tail of a file', () => {
  it('a whole last record without its newline is kept; a cut one is moved aside and reported, and a file that is only a cut line is never truncated to zero', async () => {
    const dir = tempDir('tf-tail-');
    const out = join(dir, 'run');
    const config = writeConfig(dir, sim.url, { concurrency: 4 });
    const first = await runCli(['generate', '--config', config, '--limit', '8']);
    expect(first.code, first.stderr).toBe(0);
    const traj = readFileSync(join(out, TRAJ), 'utf8');
    const lines = completeLines(join(out, TRAJ));
    expect(lines.length).toBeGreaterThan(1);
    // A hand (or a copy tool) dropped the last newline: the record itself is whole.
    writeFileSync(join(out, TRAJ), traj.slice(0, -1));
    // A crash cut the first record of failures.jsonl: the file is that part and nothing else.
    const cut = lines[0]!.slice(0, 300);
    writeFileSync(join(out, FAIL), cut);

    const again = await runCli(['generate', '--config', config, '--limit', '10']);
    expect(again.code, again.stderr).toBe(0);
    // Every record is still there, byte for byte, the last one included: nothing was redone.
    expect(completeLines(join(out, TRAJ)).slice(0, lines.length)).toEqual(lines);
    const files = checkRunDir(out);
    expect(accountedIds(files).size).toBe(10);
    // The cut part is saved beside the file, byte for byte, and said.
    const aside = readdirSync(out).filter((f) => f.startsWith(`${FAIL}.damaged-`));
    expect(aside).toHaveLength(1);
    expect(readFileSync(join(out, aside[0]!), 'utf8')).toBe(cut);
    expect(again.stderr).toContain(`note: ${TRAJ}: its last line was a whole record without a newline; the newline was added`);
    expect(again.stderr).toContain(`note: ${FAIL}: ${Buffer.byteLength(cut)} bytes of a last line cut short (a crash in the middle of a write) were moved to ${aside[0]}`);
    expect(again.stdout).toContain(`note       ${FAIL}: ${Buffer.byteLength(cut)} bytes`);
    expect(files.manifest?.sessions.at(-1)?.tail_repairs).toEqual([
      { file: join(out, TRAJ), action: 'newline_added', bytes: Buffer.byteLength(lines.at(-1)!) },
      { file: join(out, FAIL), action: 'moved_aside', bytes: Buffer.byteLength(cut), saved_to: join(out, aside[0]!) },
    ]);
  });
});

/** `error: …` naming the place, exit 2, and no stack trace. */
function expectUserError(res: { code: number | null; stderr: string }, message: RegExp, what: string): void {
  expect(res.stderr, what).not.toMatch(/internal error|\n\s+at /);
  expect(res.stderr, what).toMatch(message);
  expect(res.code, `${what}\n${res.stderr}`).toBe(2);
}

describe('every command fails cleanly', () => {
  it('a file, a symbolic link loop or a directory where a path belongs, and a null line where a record belongs: a message naming the path, exit 2', async () => {
    const dir = tempDir('tf-paths-');
    const config = writeConfig(dir, sim.url, { concurrency: 4 });
    const run = join(dir, 'run');
    expect((await runCli(['generate', '--config', config, '--limit', '3'])).code).toBe(0);
    const file = join(dir, 'a-file');
    writeFileSync(file, 'not a directory\n');
    symlinkSync(join(dir, 'loop-b'), join(dir, 'loop-a'));
    symlinkSync(join(dir, 'loop-a'), join(dir, 'loop-b'));
    const loop = join(dir, 'loop-a');
    const aDir = join(dir, 'a-dir');
    mkdirSync(aDir);
    // A run whose files hold a null line where a record belongs.
    const nullRun = join(dir, 'null-run');
    cpSync(run, nullRun, { recursive: true });
    appendFileSync(join(nullRun, TRAJ), 'null\n');
    const nullRows = join(dir, 'null.jsonl');
    writeFileSync(nullRows, `${completeLines(join(run, TRAJ))[0]}\nnull\n`);
    const lines = completeLines(join(run, TRAJ)).length;

    const gen = ['generate', '--config', config, '--limit', '3'];
    const cases: [string[], RegExp][] = [
      [[...gen, '--out', file], /^error: .*a-file: cannot make the run directory: a file is in the way \(EEXIST\)$/m],
      [[...gen, '--out', join(file, 'run')], /^error: .*a-file\/run: cannot make the run directory: a part of the path is a file, not a directory \(ENOTDIR\)$/m],
      [[...gen, '--out', loop], /^error: .*loop-a: cannot make the run directory: a loop of symbolic links \(ELOOP\)$/m],
      [[...gen, '--out', nullRun], new RegExp(`^error: .*null-run/${TRAJ}:${lines + 1}: expected a record \\(a JSON object\\), got null$`, 'm')],
      [['rerun', nullRun], new RegExp(`^error: .*null-run/${TRAJ}:${lines + 1}: expected a record \\(a JSON object\\), got null$`, 'm')],
      [['rerun', loop], /^error: .*loop-a: not a run directory \(a loop of symbolic links \(ELOOP\)\)$/m],
      [['merge', run, '--out', file], /^error: .*a-file: exists and is a file; merge writes a new run directory$/m],
      [['merge', run, '--out', join(file, 'merged')], /^error: merge: --out .*a-file\/merged: a part of the path is a file, not a directory \(ENOTDIR\)$/m],
      [['merge', run, '--out', loop], /^error: merge: --out .*loop-a: a loop of symbolic links \(ELOOP\)$/m],
      [['merge', loop, '--out', join(dir, 'm1')], /^error: .*loop-a: not a run directory: a loop of symbolic links \(ELOOP\)$/m],
      [['merge', nullRun, '--out', join(dir, 'm2')], new RegExp(`^error: .*null-run/${TRAJ}:${lines + 1}: expected a record \\(a JSON object\\), got null$`, 'm')],
    ];
    for (const [cmd, extra] of [['validate', []], ['stats', []], ['filter', ['--out', join(dir, 'f.jsonl')]], ['export', ['--format', 'text', '--all', '--out', join(dir, 'e.jsonl')]], ['report', ['--out', join(dir, 'r.html')]]] as const) {
      cases.push([[cmd, loop, ...extra], /^error: .*loop-a: cannot read: a loop of symbolic links \(ELOOP\)$/m]);
      cases.push([[cmd, join(file, 'x.jsonl'), ...extra], /^error: .*a-file\/x\.jsonl: cannot read: a part of the path is a file, not a directory \(ENOTDIR\)$/m]);
      cases.push([[cmd, nullRows, ...extra], /^error: .*null\.jsonl:2: .*got null$/m]);
      cases.push([[cmd, nullRun, ...extra], new RegExp(`^error: .*null-run/${TRAJ}:${lines + 1}: .*got null$`, 'm')]);
    }
    for (const [cmd, flag, extra] of [['filter', '--out', []], ['filter', '--rejects', ['--out', join(dir, 'kept.jsonl')]], ['export', '--out', ['--format', 'text']], ['report', '--out', []]] as const) {
      cases.push([[cmd, run, ...extra, flag, loop], new RegExp(`^error: ${cmd}: ${flag} .*loop-a: a loop of symbolic links \\(ELOOP\\)$`, 'm')]);
      cases.push([[cmd, run, ...extra, flag, join(file, 'x')], new RegExp(`^error: ${cmd}: ${flag} .*a-file/x: a part of the path is a file, not a directory \\(ENOTDIR\\)$`, 'm')]);
      cases.push([[cmd, run, ...extra, flag, aDir], new RegExp(`^error: ${cmd}: ${flag} .*a-dir is a directory; name a file$`, 'm')]);
    }
    // Four at a time: each is a process of its own.
    for (let i = 0; i < cases.length; i += 4) {
      const batch = cases.slice(i, i + 4);
      const results = await Promise.all(batch.map(([args]) => runCli(args)));
      results.forEach((res, j) => expectUserError(res, batch[j]![1], batch[j]![0].join(' ')));
    }
    // Nothing was written where a path was refused.
    expect(readdirSync(aDir)).toEqual([]);
    expect(readFileSync(file, 'utf8')).toBe('not a directory\n');
  });
});

/**
 * A run directory of `n` accepted records made from one real record, slimmed (no messages, no
 * calls) and given ids of their own: big enough in lines for a kill to land mid-write.
 */
function bigRun(from: string, to: string, n: number): void {
  const real = JSON.parse(completeLines(join(from, TRAJ))[0]!) as Record<string, unknown>;
  const slim = { ...real, messages: [], tool_calls: [], total_tool_calls: 0, tools_used: [], interleaved_text: '<answer>x</answer>' };
  const rows: string[] = [];
  for (let i = 0; i < n; i++) rows.push(JSON.stringify({ ...slim, id: `big-${i}`, question_id: `big-${i}` }));
  mkdirSync(to, { recursive: true });
  writeFileSync(join(to, TRAJ), `${rows.join('\n')}\n`);
  writeFileSync(join(to, FAIL), '');
  cpSync(join(from, 'manifest.json'), join(to, 'manifest.json'));
}

describe('merge', () => {
  it('over a run still being written: merges the records complete when it started, says so, and leaves out a line under way', async () => {
    const dir = tempDir('tf-merge-live-');
    const out = join(dir, 'run');
    const args = ['generate', '--config', writeConfig(dir, sim.url, { concurrency: 4 }), '--limit', '30'];
    const writer = spawnCli(args);
    try {
      expect(await waitFor(() => completeLines(join(out, TRAJ)).length >= 3, 30_000), writer.stderr()).toBe(true);
      // Stopped in the middle of an append: half a record at the end of the file, the lock held.
      writer.child.kill('SIGSTOP');
      const before = completeLines(join(out, TRAJ));
      const half = before[0]!.slice(0, 500);
      appendFileSync(join(out, TRAJ), half);
      const merged = await runCli(['merge', out, '--out', join(dir, 'merged')]);
      expect(merged.code, merged.stderr).toBe(0);
      expect(merged.stderr).toContain(`note: ${out} is still being written (pid ${writer.child.pid}): merged the records it held when merge started`);
      expect(merged.stderr).toContain(`note: ${join(out, TRAJ)}: left out its last ${Buffer.byteLength(half)} bytes, a line that is not whole`);
      checkRunDir(join(dir, 'merged'));
      expect(completeLines(join(dir, 'merged', TRAJ)).sort()).toEqual([...before].sort());
      // Let the writer go on (its half line is ours, not its: cut it off first) and merge while it writes.
      writeFileSync(join(out, TRAJ), `${before.join('\n')}\n`);
      writer.child.kill('SIGCONT');
      for (let i = 0; i < 5; i++) {
        const at = completeLines(join(out, TRAJ));
        const again = await runCli(['merge', out, '--out', join(dir, `merged-${i}`)]);
        expect(again.code, again.stderr).toBe(0);
        const m = checkRunDir(join(dir, `merged-${i}`));
        expect(m.ok.length).toBeGreaterThanOrEqual(at.length);
        expect(m.manifest?.counts.accepted).toBe(m.ok.length);
      }
    } finally {
      writer.child.kill('SIGCONT');
      await writer.exited;
    }
    // Every record merged was one the run holds, whole.
    const final = new Set(completeLines(join(out, TRAJ)));
    for (let i = 0; i < 5; i++) for (const l of completeLines(join(dir, `merged-${i}`, TRAJ))) expect(final.has(l)).toBe(true);
  });

  it('on a disk that fails mid-merge (EFBIG): exit 1 naming the file, and no run directory, half-written or temporary, is left', async () => {
    const dir = tempDir('tf-merge-efbig-');
    const config = writeConfig(dir, sim.url, { concurrency: 4 });
    expect((await runCli(['generate', '--config', config, '--limit', '2'])).code).toBe(0);
    bigRun(join(dir, 'run'), join(dir, 'big'), 2000);
    const merged = join(dir, 'merged');
    // ulimit -f counts 1 KiB blocks: the merged trajectories outgrow it part of the way through.
    const res = spawnCli([], {}, { file: 'bash', args: ['-c', 'ulimit -f 200 && exec "$0" "$@"', process.execPath, CLI, 'merge', join(dir, 'big'), '--out', merged] });
    const { code } = await res.exited;
    expect(res.stderr()).not.toMatch(/internal error|\n\s+at /);
    expect(res.stderr()).toMatch(/^error: .*trajectories\.jsonl: merge: cannot write: the file is too large \(a file-size limit\) \(EFBIG\)$/m);
    expect(code, res.stderr()).toBe(1);
    expect(existsSync(merged)).toBe(false);
    expect(readdirSync(dir).filter((f) => f.includes('.merge-'))).toEqual([]);
  });

  it('killed in the middle: its temporary directory does not block the next merge, which removes it', async () => {
    const dir = tempDir('tf-merge-kill-');
    const config = writeConfig(dir, sim.url, { concurrency: 4 });
    expect((await runCli(['generate', '--config', config, '--limit', '2'])).code).toBe(0);
    bigRun(join(dir, 'run'), join(dir, 'big'), 20_000);
    const merged = join(dir, 'merged');
    const partial = (): string[] => [...readdirSync(dir).filter((f) => f.includes('.merge-')), ...(existsSync(merged) ? readdirSync(merged) : [])];
    const first = spawnCli(['merge', join(dir, 'big'), '--out', merged]);
    // The moment the merge has something on disk, it is killed.
    expect(await waitFor(() => partial().length > 0, 30_000, 2), first.stderr()).toBe(true);
    first.child.kill('SIGKILL');
    expect((await first.exited).signal).toBe('SIGKILL');
    expect(existsSync(join(merged, 'manifest.json'))).toBe(false);

    const again = await runCli(['merge', join(dir, 'big'), '--out', merged]);
    expect(again.code, again.stderr).toBe(0);
    expect(readdirSync(dir).filter((f) => f.includes('.merge-'))).toEqual([]);
    const files = checkRunDir(merged);
    expect(files.ok.length).toBe(20_000);
  });
});

describe('leftover temporary files', () => {
  it('a filter killed while writing leaves a temporary file that the next filter to the same place removes', async () => {
    const dir = tempDir('tf-filter-kill-');
    const config = writeConfig(dir, sim.url, { concurrency: 4 });
    expect((await runCli(['generate', '--config', config, '--limit', '2'])).code).toBe(0);
    bigRun(join(dir, 'run'), join(dir, 'big'), 20_000);
    const kept = join(dir, 'kept.jsonl');
    const temps = (): string[] => readdirSync(dir).filter((f) => f.startsWith('.kept.jsonl.') && f.endsWith('.tmp'));
    const first = spawnCli(['filter', join(dir, 'big'), '--keep', 'status == ok', '--out', kept]);
    expect(await waitFor(() => temps().length > 0, 30_000, 2), first.stderr()).toBe(true);
    first.child.kill('SIGKILL');
    await first.exited;
    expect(temps()).toHaveLength(1);
    const again = await runCli(['filter', join(dir, 'big'), '--keep', 'status == ok', '--out', kept]);
    expect(again.code, again.stderr).toBe(0);
    expect(temps()).toEqual([]);
    expect(completeLines(kept)).toHaveLength(20_000);
  });
});

describe('a resume that would mix samples made under different settings', () => {
  /** Reads, changes and writes back the run's manifest, as an earlier trajforge or another template would have left it. */
  function editManifest(run: string, edit: (m: Record<string, any>) => void): void {
    const file = join(run, 'manifest.json');
    const m = JSON.parse(readFileSync(file, 'utf8')) as Record<string, any>;
    edit(m);
    writeFileSync(file, JSON.stringify(m, null, 2));
  }

  it('notices a change to the servers\' commands, args or env names, the executor\'s cuts or a prompt template, and goes on with --allow-config-change, recording what changed', async () => {
    const dir = tempDir('tf-fingerprint-');
    const run = join(dir, 'run');
    const corpus = { command: process.execPath, args: [CORPUS_SERVER] };
    const config = (patch: Record<string, unknown> = {}) => writeConfig(dir, sim.url, { concurrency: 4, ...patch });
    const first = await runCli(['generate', '--config', config(), '--limit', '3']);
    expect(first.code, first.stderr).toBe(0);

    const refused = async (patch: Record<string, unknown>, field: string): Promise<void> => {
      const res = await runCli(['generate', '--config', config(patch), '--limit', '5']);
      expectUserError(res, new RegExp(`^error: .*run: this run was made with another config; these fields differ: ${field}\\. .*--allow-config-change`, 'm'), field);
      expect(checkRunDir(run).ok.length + checkRunDir(run).failed.length).toBe(3);
    };
    await refused({ mcpServers: { corpus: { ...corpus, args: [CORPUS_SERVER, '--corpus', join(PACKAGE_ROOT, 'data', 'corpus.jsonl')] } } }, 'mcpServers\\.launch');
    await refused({ mcpServers: { corpus: { ...corpus, env: { CORPUS_TOKEN: 'never-written-9f8e7d' } } } }, 'mcpServers\\.launch');
    await refused({ executor: { max_snippet_chars: 300 } }, 'executor');
    // A template that changed since the run began (a trajforge upgrade): the run recorded another text.
    editManifest(run, (m) => (m.fingerprint_fields.prompts['tulu-system.txt'] = '0000000000000000'));
    await refused({}, 'prompts');
    // Timeouts and restarts may change: they decide whether a call succeeds, not what it yields.
    const ops = await runCli(['generate', '--config', config({ executor: { call_timeout_ms: 20_000, max_restarts: 1 } }), '--limit', '3']);
    expect(ops.stderr).toMatch(/this run was made with another config; these fields differ: prompts\./);

    // On purpose: it goes on, says so, and the manifest records the change and the new values.
    const changed = config({ mcpServers: { corpus: { ...corpus, env: { CORPUS_TOKEN: 'never-written-9f8e7d' } } } });
    const allowed = await runCli(['generate', '--config', changed, '--limit', '5', '--allow-config-change']);
    expect(allowed.code, allowed.stderr).toBe(0);
    expect(allowed.stderr).toContain('note: going on with a changed config (--allow-config-change): mcpServers.launch, prompts differ from the run\'s');
    const files = checkRunDir(run);
    expect(accountedIds(files).size).toBe(5);
    const session = files.manifest!.sessions.at(-1)!;
    expect(session.config_changes?.map((c) => c.field)).toEqual(['mcpServers.launch', 'prompts']);
    const launch = session.config_changes![0]!;
    expect((launch.before as any).corpus.env).toEqual([]);
    expect((launch.after as any).corpus.env).toEqual(['CORPUS_TOKEN']);
    expect((session.config_changes![1]!.before as any)['tulu-system.txt']).toBe('0000000000000000');
    // Env names only: the value never reaches the manifest.
    expect(readFileSync(join(run, 'manifest.json'), 'utf8')).not.toContain('never-written-9f8e7d');
    // The run now stands on the new config: the same command resumes without the flag.
    const again = await runCli(['generate', '--config', changed, '--limit', '6']);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).not.toContain('note:');
  });

  it('a manifest written before these fields were recorded resumes, saying once what it cannot compare; another trajforge version is a warning', async () => {
    const dir = tempDir('tf-fingerprint-old-');
    const run = join(dir, 'run');
    const config = writeConfig(dir, sim.url, { concurrency: 4 });
    expect((await runCli(['generate', '--config', config, '--limit', '3'])).code).toBe(0);
    editManifest(run, (m) => {
      for (const k of ['mcpServers.launch', 'executor', 'retry.experience', 'prompts']) delete m.fingerprint_fields[k];
      m.trajforge_version = '0.0.9';
      for (const s of m.sessions) delete s.trajforge_version;
    });
    const res = await runCli(['generate', '--config', config, '--limit', '4']);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toContain(`note: this run was last written by trajforge 0.0.9; this is ${PACKAGE_VERSION}`);
    expect(res.stderr).toContain("note: this run's manifest does not record executor, mcpServers.launch, prompts, retry.experience (an earlier trajforge wrote it): a change there since the run began cannot be told; recorded from now on");
    const m = checkRunDir(run).manifest!;
    expect(m.sessions.at(-1)?.fingerprint_fields_added).toEqual(['executor', 'mcpServers.launch', 'prompts', 'retry.experience']);
    expect(m.sessions.at(-1)?.trajforge_version).toBe(PACKAGE_VERSION);
    expect(Object.keys(m.fingerprint_fields)).toContain('prompts');
    // Said once: the next resume compares them, and says nothing.
    const again = await runCli(['generate', '--config', config, '--limit', '5']);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).not.toContain('note:');
  });
});
