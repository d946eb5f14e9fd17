/**
 * The one line reader (core/lines.ts): how it splits, and the rule it gives every command that
 * a line longer than a string can hold is `FILE:LINE: line too long`, exit 2, with its bytes
 * never held. Commands are run through the built CLI with a small limit
 * (TRAJFORGE_MAX_LINE_BYTES) on a real run, and once with a real 600 MB line in a sparse file.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, ftruncateSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { LineSplitter, MAX_LINE_BYTES, maxLineBytes, readLines, type Line } from '../../pipeline/core/lines.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { CLI, copyRun, freePort, runCli, smallRun, tempDir } from '../helpers.js';

async function linesOf(chunks: (string | Buffer)[], max: number): Promise<Line[]> {
  const out: Line[] = [];
  for await (const l of readLines(Readable.from(chunks.map((c) => (typeof c === 'string' ? Buffer.from(c) : c))), { maxLineBytes: max })) out.push(l);
  return out;
}

describe('the line reader', () => {
  it('drops a line longer than the limit as it streams, across chunks, and reads on after it', async () => {
    const got = await linesOf(['abc\n', 'x'.repeat(8), 'y'.repeat(8), 'z\nok\n', 'w'.repeat(11)], 10);
    expect(got).toEqual([
      { line: 1, offset: 0, text: 'abc' },
      { line: 2, offset: 4, text: '', tooLong: 17 },
      { line: 3, offset: 22, text: 'ok' },
      { line: 4, offset: 25, text: '', tooLong: 11 },
    ]);
  });

  it('takes a line of exactly the limit, and one over it within a single chunk is too long', async () => {
    expect(await linesOf(['0123456789\n01234567890\n'], 10)).toEqual([
      { line: 1, offset: 0, text: '0123456789' },
      { line: 2, offset: 11, text: '', tooLong: 11 },
    ]);
  });

  it('never holds more of a long line than the limit (the splitter keeps nothing of it)', () => {
    const s = new LineSplitter({ maxLineBytes: 1024 });
    const out: Line[] = [];
    const chunk = Buffer.alloc(1 << 16, 0x61);
    // 64 MB of one line, pushed in 64 KB chunks: memory must not grow with it.
    const before = process.memoryUsage().arrayBuffers;
    for (let i = 0; i < 1024; i++) s.push(chunk, out);
    s.push(Buffer.from('\n'), out);
    expect(out).toEqual([{ line: 1, offset: 0, text: '', tooLong: 1 << 26 }]);
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(16 << 20);
  });

  it('marks a line that is not UTF-8 with the byte where it goes wrong', async () => {
    const got = await linesOf([Buffer.concat([Buffer.from('ok\n"caf'), Buffer.from([0xc3, 0x28]), Buffer.from('"\n')])], 100);
    expect(got[1]).toMatchObject({ line: 2, offset: 3, invalidUtf8: { column: 5, offset: 7 } });
  });

  it('takes its default from TRAJFORGE_MAX_LINE_BYTES, at most what a string holds', () => {
    expect(maxLineBytes({})).toBe(MAX_LINE_BYTES);
    expect(maxLineBytes({ TRAJFORGE_MAX_LINE_BYTES: '4096' })).toBe(4096);
    for (const bad of ['0', '-1', 'lots', '1e3', String(MAX_LINE_BYTES + 1)]) {
      expect(() => maxLineBytes({ TRAJFORGE_MAX_LINE_BYTES: bad })).toThrow(/TRAJFORGE_MAX_LINE_BYTES: expected a whole number of bytes/);
    }
  });
});

// ---------------------------------------------------------------------------------------

let run: string;
/** A limit above every line of the run, and a line one byte over it. */
let limit: number;

beforeAll(async () => {
  run = await smallRun({ seed: 3, limit: 4 });
  const longest = Math.max(...readFileSync(join(run, 'trajectories.jsonl'), 'utf8').split('\n').map((l) => Buffer.byteLength(l)));
  limit = longest + 100;
}, 120_000);

/** A copy of the run whose trajectories.jsonl has, as its line 2, a valid record longer than `limit`. */
function runWithLongLine(): { dir: string; file: string } {
  const d = copyRun(run);
  const lines = readFileSync(join(run, 'trajectories.jsonl'), 'utf8').split('\n').filter(Boolean);
  const long = JSON.parse(lines[0]!);
  long.id = 'long';
  long.question = 'q'.repeat(limit);
  const file = join(d, 'trajectories.jsonl');
  writeFileSync(file, [lines[0], JSON.stringify(long), ...lines.slice(1)].map((l) => `${l}\n`).join(''));
  return { dir: d, file };
}

describe('every command that reads JSONL stops at a line too long: FILE:LINE: line too long, exit 2', () => {
  const commands: Record<string, (input: string, out: string) => string[]> = {
    validate: (input) => ['validate', input],
    stats: (input) => ['stats', input],
    filter: (input, out) => ['filter', input, '--out', out],
    export: (input, out) => ['export', input, '--format', 'messages', '--out', out],
    report: (input, out) => ['report', input, '--out', out],
    merge: (input, out) => ['merge', input, '--out', out, '--allow-missing'],
  };
  for (const [name, args] of Object.entries(commands)) {
    it(name, async () => {
      const { dir: d, file } = runWithLongLine();
      const out = join(d, '..', 'out');
      const r = await runCli(args(d, out), { env: { TRAJFORGE_MAX_LINE_BYTES: String(limit) } });
      expect(r.code, r.stderr).toBe(2);
      const bytes = Buffer.byteLength(readFileSync(file, 'utf8').split('\n')[1]!);
      expect(r.stderr).toContain(`${file}:2: line too long: ${bytes} bytes, more than the ${limit} a line may have`);
      expect(r.stderr).not.toMatch(/\n\s+at /);
      expect(existsSync(out)).toBe(false);
    });
  }

  it('with --on-bad-row skip the line is a bad row like any other: skipped and counted', async () => {
    const { dir: d } = runWithLongLine();
    const r = await runCli(['stats', d, '--json', '--on-bad-row', 'skip'], { env: { TRAJFORGE_MAX_LINE_BYTES: String(limit) } });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).rows.bad).toBe(1);
  });

  it('report --serve stays up and says which line it cannot read; the page is served without it', async () => {
    const { dir: d, file } = runWithLongLine();
    const port = await freePort();
    const server = spawn(process.execPath, [CLI, 'report', '--serve', d, '--port', String(port), '--poll-ms', '100'], {
      env: { ...process.env, TRAJFORGE_MAX_LINE_BYTES: String(limit) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    server.stderr.on('data', (b) => (stderr += b));
    try {
      await new Promise<void>((resolve, reject) => {
        server.stdout.on('data', (b: Buffer) => b.toString().includes('serving') && resolve());
        server.on('exit', (code) => reject(new Error(`exited ${code}: ${stderr}`)));
      });
      const figures = (await (await fetch(`http://127.0.0.1:${port}/figures.json`)).json()) as { unreadable: string[]; rows: { bad: number; read: number } };
      expect(figures.unreadable).toEqual([expect.stringMatching(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:2: line too long: \\d+ bytes`))]);
      expect(figures.rows.bad).toBe(1);
      // A longer line appended while it serves: said too, and the server stays up.
      const laterLine = readFileSync(file, 'utf8').split('\n').filter(Boolean).length + 1;
      appendFileSync(file, `${JSON.stringify({ id: 'later', pad: 'p'.repeat(limit) })}\n`);
      let later: { unreadable: string[] } = figures;
      for (let i = 0; i < 100 && later.unreadable.length < 2; i++) {
        await new Promise((r) => setTimeout(r, 100));
        later = (await (await fetch(`http://127.0.0.1:${port}/figures.json`)).json()) as typeof later;
      }
      expect(later.unreadable[1]).toContain(`${file}:${laterLine}: line too long`);
      const page = await fetch(`http://127.0.0.1:${port}/`);
      expect(page.status).toBe(200);
      const html = await page.text();
      expect(html).toContain('</html>');
      expect(html).toContain('unreadable rows skipped');
      expect(server.exitCode).toBeNull();
    } finally {
      server.kill('SIGINT');
      await new Promise((r) => server.on('close', r));
    }
    expect(stderr).not.toMatch(/\n\s+at /);
  });
});

describe('a real line longer than a JavaScript string', () => {
  it('stats on a sparse file with a 1 GiB line: FILE:2: line too long, exit 2, and no more of it held than the longest line allowed', async () => {
    const d = tempDir('tf-sparse-');
    const file = join(d, 'big.jsonl');
    const first = readFileSync(join(run, 'trajectories.jsonl'), 'utf8').split('\n')[0]!;
    const fd = openSync(file, 'w');
    writeSync(fd, `${first}\n`);
    const size = Buffer.byteLength(first) + 1 + (1 << 30);
    ftruncateSync(fd, size); // a hole: 1 GiB of NUL bytes without a newline
    writeSync(fd, `\n${first}\n`, size);
    closeSync(fd);
    // main() in a process of its own, which says how much memory it took at its peak.
    const script = `import { main } from ${JSON.stringify(join(PACKAGE_ROOT, 'dist/pipeline/cli/main.js'))};
const code = await main(['stats', ${JSON.stringify(file)}]);
process.stderr.write('maxrss_kb=' + process.resourceUsage().maxRSS + '\\n');
process.exit(code);`;
    const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (b) => (stderr += b));
      child.on('close', (code) => resolve({ code, stderr }));
    });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`${file}:2: line too long: ${1 << 30} bytes, more than the ${MAX_LINE_BYTES} a line may have`);
    const rss = Number(/maxrss_kb=(\d+)/.exec(r.stderr)?.[1]);
    expect(rss).toBeGreaterThan(0);
    // A line up to the limit is held until its end shows whether it is one; past the limit nothing more is.
    expect(rss * 1024).toBeLessThan(MAX_LINE_BYTES + (300 << 20));
  }, 120_000);
});
