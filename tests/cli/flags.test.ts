/**
 * Flags the same way in every command, run in-process through `main` as bin.ts runs it: `--help`
 * prints the command's help (every flag it takes named there) and exits 0; a misspelt flag is
 * a usage error (exit 2) with the flag it was most likely meant to be, never Node's parseArgs
 * text; old spellings still work for a release, with a warning naming the new one. A command
 * added to COMMANDS is covered without a line here.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { COMMANDS, HELP, main } from '../../pipeline/cli/main.js';
import { lastFlagTable } from '../../pipeline/cli/flags.js';
import { EXPORT_FORMATS } from '../../pipeline/dataset/export.js';
import { tempDir } from '../helpers.js';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';

/** A chat row in the tulu dialect: one search, one answer. */
const CHAT_ROW = JSON.stringify({
  messages: [
    { role: 'user', content: 'what is the capital of France' },
    { role: 'assistant', content: '<call_tool name="google_search">capital of France</call_tool>' },
    { role: 'user', content: '<tool_output>Paris is the capital of France.</tool_output>' },
    { role: 'assistant', content: '<answer>Paris</answer>' },
  ],
});

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** `trajforge ...argv` in this process, its output caught. */
async function run(argv: string[]): Promise<Ran> {
  let stdout = '';
  let stderr = '';
  // A writer that waits for the write's callback (the output tail does) gets it at once.
  const catcher = (add: (s: string) => void) => (chunk: unknown, ...rest: unknown[]): boolean => {
    add(String(chunk));
    const done = rest.find((r) => typeof r === 'function') as (() => void) | undefined;
    if (done) queueMicrotask(done);
    return true;
  };
  const out = vi.spyOn(process.stdout, 'write').mockImplementation(catcher((s) => (stdout += s)) as typeof process.stdout.write);
  const err = vi.spyOn(process.stderr, 'write').mockImplementation(catcher((s) => (stderr += s)) as typeof process.stderr.write);
  try {
    const code = await main(argv);
    return { code, stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}

afterEach(() => {
  lastFlagTable.command = undefined;
  lastFlagTable.flags = undefined;
});

/** How a command is called: `corpus` has its one subcommand in front of the flags. */
const call = (cmd: string): string[] => (cmd === 'corpus' ? ['corpus', 'index'] : [cmd]);

/** A slip of the kind people make: two letters swapped in the middle. */
function misspell(flag: string): string {
  const i = Math.floor(flag.length / 2);
  return flag.slice(0, i - 1) + flag[i] + flag[i - 1] + flag.slice(i + 1);
}

describe('every command', () => {
  for (const cmd of COMMANDS) {
    it(`${cmd} --help prints its help, naming every flag it takes, and exits 0`, async () => {
      for (const help of ['--help', '-h']) {
        const r = await run([...call(cmd), help]);
        expect(r.code, r.stderr).toBe(0);
        expect(r.stderr).toBe('');
        expect(r.stdout).toMatch(/^(Usage: )?trajforge /);
        expect(lastFlagTable.command).toBe(call(cmd).join(' '));
        for (const flag of (lastFlagTable.flags ?? []).filter((f) => f !== 'help')) expect(r.stdout, `--${flag} in ${cmd} --help`).toContain(`--${flag}`);
      }
    });

    it(`${cmd} with a misspelt flag: exit 2, did you mean, and nothing of Node's own text`, async () => {
      await run([...call(cmd), '--help']);
      const flag = (lastFlagTable.flags ?? []).filter((f) => f.length >= 5 && f !== 'help')[0]!;
      expect(flag, `${cmd} has a flag of 5 letters or more`).toBeDefined();
      const typo = misspell(flag);
      const r = await run([...call(cmd), `--${typo}`, 'x']);
      expect(r.code).toBe(2);
      expect(r.stderr).toBe(`error: ${call(cmd).join(' ')}: unknown option --${typo} (did you mean --${flag}?); trajforge ${call(cmd).join(' ')} --help lists them\n`);
    });
  }

  it('--help wins over anything else given, a bad flag included', async () => {
    const r = await run(['export', '--nonsense', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: trajforge export/);
  });

  it('a flag without its value, a value for a switch, a stray argument: our words, exit 2', async () => {
    expect((await run(['generate', '--config'])).stderr).toBe('error: generate: --config needs a value\n');
    expect((await run(['generate', '--config', '--limit', '3'])).stderr).toBe('error: generate: --config needs a value (one that starts with - goes as --config=VALUE)\n');
    expect((await run(['generate', '--dry-run=yes'])).stderr).toBe('error: generate: --dry-run takes no value\n');
    const stray = await run(['demo', 'now']);
    expect(stray.code).toBe(2);
    expect(stray.stderr).toBe('error: demo: unexpected argument "now" (it takes none but flags; trajforge demo --help)\n');
  });

  it('an unknown command gets the command it was most likely meant to be', async () => {
    const r = await run(['exprot', 'x']);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe('error: unknown command "exprot" (did you mean export?) (try trajforge --help)\n');
  });

  it('sim, with a parser of its own, says the same', async () => {
    const help = await run(['sim', '--help']);
    expect(help.code).toBe(0);
    for (const flag of ['--served-model-name', '--lenient', '--port']) expect(help.stdout).toContain(flag);
    const r = await run(['sim', '--lenitn']);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe("error: trajforge sim: unknown option '--lenitn' (did you mean --lenient?) (see trajforge sim --help)\n");
  });
});

describe('one meaning per flag name', () => {
  it('the global usage names every export format', async () => {
    for (const f of [...EXPORT_FORMATS, 'dpo']) expect(HELP, f).toMatch(new RegExp(`\\b${f}\\b`));
    expect((await run(['--help'])).stdout).toBe(HELP);
  });

  it('--input-format is the input row format everywhere; --format (and export\'s --format-in) still work, with a warning', async () => {
    const dir = tempDir('tf-flags-');
    const rows = join(dir, 'rows.jsonl');
    writeFileSync(rows, `${CHAT_ROW}\n`);
    const now = await run(['stats', rows, '--input-format', 'chat', '--json']);
    expect(now.code, now.stderr).toBe(0);
    expect(now.stderr).toBe('');
    const old = await run(['stats', rows, '--format', 'chat', '--json']);
    expect(old.code, old.stderr).toBe(0);
    expect(old.stdout).toBe(now.stdout);
    expect(old.stderr).toBe('warning: stats: --format is now --input-format (the old name goes in a coming release)\n');
    const both = await run(['stats', rows, '--format', 'chat', '--input-format', 'chat']);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain('--format and --input-format are the same flag');
    const bad = await run(['stats', rows, '--input-format', 'csv']);
    expect(bad.stderr).toBe('error: --input-format: expected auto, trajforge, drtulu or chat, got "csv"\n');
    // In export --format is the output's; the input's old name there was --format-in.
    const exp = await run(['export', rows, '--format', 'messages', '--format-in', 'chat', '--out', join(dir, 'out.jsonl')]);
    expect(exp.code, exp.stderr).toBe(0);
    expect(exp.stderr).toContain('warning: export: --format-in is now --input-format');
  });

  it("dedup's which-row rule is --prefer (--keep is filter's and export's expression); --keep still works there, with a warning", async () => {
    const dir = tempDir('tf-flags-');
    const rows = join(dir, 'rows.jsonl');
    writeFileSync(rows, `${CHAT_ROW}\n`);
    const now = await run(['dedup', rows, '--prefer', 'shortest', '--out', join(dir, 'a.jsonl')]);
    expect(now.code, now.stderr).toBe(0);
    expect(now.stderr).not.toContain('warning');
    const old = await run(['dedup', rows, '--keep', 'shortest', '--out', join(dir, 'b.jsonl')]);
    expect(old.code, old.stderr).toBe(0);
    expect(old.stderr).toContain('warning: dedup: --keep is now --prefer');
    const bad = await run(['dedup', rows, '--prefer', 'newest', '--out', join(dir, 'c.jsonl')]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^error: dedup: --prefer: /);
  });

  it('--concurrency is model requests in flight wherever it is taken', async () => {
    for (const cmd of ['generate', 'rerun', 'worker', 'synthesize']) {
      const r = await run([cmd, '--help']);
      const line = r.stdout.split('\n').find((l) => l.trimStart().startsWith('--concurrency'));
      expect(line, cmd).toMatch(/model requests in flight/);
    }
  });
});
