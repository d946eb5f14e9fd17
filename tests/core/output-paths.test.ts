/**
 * Where the dataset commands write (cli/output.ts, core/output-paths.ts), tested against the
 * built CLI on a real run: a FIFO's reader gets every byte and the FIFO stays a FIFO; a
 * character device and a process's own descriptor are written through, never renamed over; an
 * output that is a file the command reads (given directly, through a symbolic or a hard link,
 * or as a file of an input run directory) is refused before anything is read, and the data is
 * intact afterwards.
 */
import { spawn, spawnSync } from 'node:child_process';
import { linkSync, lstatSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { CLI, copyRun, QUESTIONS, runCli, smallRun, tempDir } from '../helpers.js';

let dir: string;
let run: string;

beforeAll(async () => {
  run = await smallRun({ seed: 7, limit: 8, misbehave: { refusal: 0.3 } });
  dir = join(run, '..');
}, 120_000);

/** Each dataset command that writes `--out`, its arguments around the output path. */
const COMMANDS: Record<string, (input: string, out: string) => string[]> = {
  filter: (input, out) => ['filter', input, '--keep', 'tool_calls >= 0', '--out', out],
  export: (input, out) => ['export', input, '--format', 'messages', '--all', '--out', out],
  dedup: (input, out) => ['dedup', input, '--out', out],
  decontaminate: (input, out) => ['decontaminate', input, '--against', QUESTIONS, '--out', out],
  report: (input, out) => ['report', input, '--out', out],
};

/** What the command writes to a regular file: the bytes a FIFO's reader must get. */
async function expected(name: string): Promise<Buffer> {
  const file = join(dir, `expected-${name}.out`);
  const r = await runCli(COMMANDS[name]!(run, file));
  expect(r.code, r.stderr).toBe(0);
  // The report stamps the time it was built; everything else is the same bytes.
  return readFileSync(file);
}

const unstamped = (b: Buffer): string => b.toString('utf8').replace(/built [0-9T:-]+Z/g, 'built X');

/** Runs the CLI with `args` while `cat` reads `fifo`; what cat got, once both are done (cat is killed if no writer ever came). */
async function throughFifo(args: string[], fifo: string): Promise<{ code: number | null; stderr: string; got: Buffer }> {
  const cat = spawn('cat', [fifo], { stdio: ['ignore', 'pipe', 'ignore'] });
  const chunks: Buffer[] = [];
  cat.stdout.on('data', (d: Buffer) => chunks.push(d));
  const catDone = new Promise<void>((resolve) => cat.on('close', () => resolve()));
  const r = await runCli(args);
  // A writer that renamed a file over the FIFO never opened it: cat would wait for ever.
  const timer = setTimeout(() => cat.kill('SIGKILL'), 2_000);
  await catDone;
  clearTimeout(timer);
  return { code: r.code, stderr: r.stderr, got: Buffer.concat(chunks) };
}

describe('an output that is not a regular file is written through', () => {
  for (const name of Object.keys(COMMANDS)) {
    it(`${name} --out FIFO: the reader gets every byte, and the FIFO is still a FIFO`, async () => {
      const want = await expected(name);
      const fifo = join(tempDir('tf-fifo-'), 'out.fifo');
      expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
      const r = await throughFifo(COMMANDS[name]!(run, fifo), fifo);
      expect(r.code, r.stderr).toBe(0);
      expect(lstatSync(fifo).isFIFO()).toBe(true);
      expect(unstamped(r.got)).toBe(unstamped(want));
      expect(r.got.length).toBeGreaterThan(100);
    });
  }

  it('a character device (a null device made for the test) stays a device, and the command succeeds', async (ctx) => {
    const dev = join(tempDir('tf-chr-'), 'null');
    // mknod needs root (CAP_MKNOD); the machine's own /dev/null is never a test's target.
    if (spawnSync('mknod', [dev, 'c', '1', '3']).status !== 0) return ctx.skip();
    for (const name of Object.keys(COMMANDS)) {
      const r = await runCli(COMMANDS[name]!(run, dev));
      expect(r.code, `${name}: ${r.stderr}`).toBe(0);
      expect(lstatSync(dev).isCharacterDevice(), name).toBe(true);
      expect(statSync(dev).rdev).toBe(statSync('/dev/null').rdev);
    }
  });

  it('/proc/self/fd/1 (what /dev/stdout points to) is the process\'s stdout, whatever it is (here a socket): written as - is', async () => {
    const want = await expected('export');
    const r = spawnSync(process.execPath, [CLI, ...COMMANDS.export!(run, '/proc/self/fd/1')], { encoding: 'buffer' });
    expect(r.status, r.stderr.toString()).toBe(0);
    expect(r.stdout.equals(want)).toBe(true);
  });

  it('/proc/self/fd/1 redirected to a file: the file gets the rows, and stays the file the shell opened', async () => {
    const want = await expected('filter');
    const file = join(tempDir('tf-fd-'), 'stdout.jsonl');
    const r = spawnSync('sh', ['-c', `"${process.execPath}" "${CLI}" filter "${run}" --keep 'tool_calls >= 0' --out /proc/self/fd/1 > "${file}"`], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(readFileSync(file).equals(want)).toBe(true);
  });

  it('a socket is refused before anything is read, exit 2', async () => {
    const d = tempDir('tf-sock-');
    const sock = join(d, 's.sock');
    const server = (await import('node:net')).createServer();
    await new Promise<void>((resolve) => server.listen(sock, resolve));
    try {
      const r = await runCli(COMMANDS.filter!(run, sock));
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/--out .*s\.sock is a socket; name a file, a FIFO or a character device/);
    } finally {
      server.close();
    }
  });
});

describe('no command overwrites what it reads', () => {
  const snapshot = (d: string): Record<string, string> =>
    Object.fromEntries(['trajectories.jsonl', 'failures.jsonl', 'manifest.json'].map((f) => [f, readFileSync(join(d, f), 'utf8')]));

  for (const name of Object.keys(COMMANDS)) {
    it(`${name}: --out a file of the input run directory, the input file itself, a symbolic link to it, a hard link to it: exit 2, both named, data intact`, async () => {
      const d = copyRun(run);
      const before = snapshot(d);
      const file = join(d, 'trajectories.jsonl');
      const sym = join(d, '..', 'link.jsonl');
      symlinkSync(file, sym);
      const hard = join(d, '..', 'hard.jsonl');
      linkSync(file, hard);
      const cases: [input: string, out: string, names: RegExp][] = [
        [d, join(d, 'trajectories.jsonl'), /trajectories\.jsonl, a file of the run directory/],
        [d, join(d, 'failures.jsonl'), /failures\.jsonl, a file of the run directory/],
        [d, join(d, 'manifest.json'), /manifest\.json, a file of the run directory/],
        [d, sym, /link\.jsonl is also an input .*trajectories\.jsonl/],
        [file, file, /is also an input/],
        [file, sym, /link\.jsonl is also an input \(.*trajectories\.jsonl\)/],
        [file, hard, /hard\.jsonl is also an input \(.*trajectories\.jsonl\)/],
        [sym, file, /trajectories\.jsonl is also an input \(.*link\.jsonl\)/],
      ];
      for (const [input, out, names] of cases) {
        const r = await runCli(COMMANDS[name]!(input, out));
        expect(r.code, `${name} ${input} --out ${out}: ${r.stderr}`).toBe(2);
        expect(r.stderr).toMatch(names);
        expect(r.stderr).toMatch(/writing it would destroy what \w+ reads/);
        expect(snapshot(d)).toEqual(before);
        expect(lstatSync(sym).isSymbolicLink()).toBe(true);
      }
    });
  }

  it('filter --rejects, dedup --rejects and --clusters, decontaminate --report: every output is checked', async () => {
    const d = copyRun(run);
    const before = snapshot(d);
    const out = join(d, '..', 'out.jsonl');
    for (const args of [
      ['filter', d, '--keep', 'status == ok', '--out', out, '--rejects', join(d, 'failures.jsonl')],
      ['dedup', d, '--out', out, '--clusters', join(d, 'trajectories.jsonl')],
      ['decontaminate', d, '--against', QUESTIONS, '--out', out, '--report', join(d, 'manifest.json')],
    ]) {
      const r = await runCli(args);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/is also an input/);
    }
    expect(snapshot(d)).toEqual(before);
  });

  it('decontaminate: an eval set is an input too', async () => {
    const d = tempDir('tf-self-eval-');
    const evalFile = join(d, 'eval.jsonl');
    writeFileSync(evalFile, readFileSync(QUESTIONS));
    const r = await runCli(['decontaminate', run, '--against', evalFile, '--out', evalFile]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/is also an input/);
    expect(readFileSync(evalFile).equals(readFileSync(QUESTIONS))).toBe(true);
  });
});
