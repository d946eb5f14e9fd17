/**
 * Text and encodings: a model and tools that write NUL bytes, other control characters, lone
 * surrogates and CR line ends, in every dialect; the records and every export format must
 * still be text that any strict UTF-8 consumer takes. And the dataset commands refuse a file
 * that is not UTF-8, naming file, line and byte, as `generate` refuses a questions file.
 *
 * Real components: the sim over HTTP (`dirty_text`), the corpus MCP server over stdio with a
 * corpus full of junk, a small MCP server of this file's own (plain text results and errors
 * with junk), the CLI as a child process, real files.
 */
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FIXTURES, runCli, tempDir } from '../helpers.js';

/**
 * Where a strict consumer would choke, or -1: a control character other than tab and line
 * feed (CR too: trajforge writes line ends as `\n`), DEL, a C1 control, or a surrogate that is
 * not half of a pair. Written here from the definitions, not taken from pipeline/text.ts.
 */
function firstUnclean(s: string): number {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        i++;
        continue;
      }
      return i;
    }
    if (c >= 0xdc00 && c <= 0xdfff) return i;
    if ((c < 0x20 && c !== 0x09 && c !== 0x0a) || (c >= 0x7f && c <= 0x9f)) return i;
  }
  return -1;
}

/** Every string and key in a JSON value is clean; `where` names the first one that is not. */
function expectClean(value: unknown, where: string): void {
  if (typeof value === 'string') {
    const at = firstUnclean(value);
    if (at !== -1) {
      const code = value.charCodeAt(at).toString(16).padStart(4, '0');
      expect.fail(`${where}: U+${code} at ${at} in ${JSON.stringify(value.slice(Math.max(0, at - 30), at + 30))}`);
    }
  } else if (Array.isArray(value)) {
    value.forEach((v, i) => expectClean(v, `${where}[${i}]`));
  } else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      expectClean(k, `${where} (a key)`);
      expectClean(v, `${where}.${k}`);
    }
  }
}

/**
 * A JSONL file a strict reader takes: its bytes decode as UTF-8 with `fatal` (no byte sequence
 * a lenient decoder would have to replace), and each line's value, once JSON escapes are read
 * (`\u0000`, `\ud800`), holds no control character and no lone surrogate. Returns the rows.
 */
function expectCleanJsonl(file: string): Record<string, any>[] {
  const text = new TextDecoder('utf-8', { fatal: true }).decode(readFileSync(file));
  const lines = text.split('\n').filter((l) => l !== '');
  return lines.map((l, i) => {
    const row = JSON.parse(l);
    expectClean(row, `${file}:${i + 1}`);
    return row;
  });
}

describe('export of data trajforge did not write', () => {
  it('removes control characters and lone surrogates, counts the rows, and keeps the mask spans on the outputs', async () => {
    const dir = tempDir('tf-text-ext-');
    const input = join(dir, 'chat.jsonl');
    // A chat row as another system wrote it: escapes a JSON reader turns into NUL, ESC and lone surrogates.
    const row = {
      id: 'ext-1',
      messages: [
        { role: 'system', content: 'Use <use_mcp_tool> to call tools.\u0000' },
        { role: 'user', content: 'Which version of Firefox first supported CSS grid?\ud800' },
        {
          role: 'assistant',
          content: 'Let me look\u001b[0m it up.\n<use_mcp_tool>\n<server_name>s</server_name>\n<tool_name>search</tool_name>\n<arguments>\n{"q": "css grid"}\n</arguments>\n</use_mcp_tool>',
        },
        { role: 'user', content: 'Firefox 52\u0000 (2017)\r\nfirst \udfff supported grid.' },
        { role: 'assistant', content: 'It was Firefox 52.\u0007 \\boxed{52}' },
      ],
    };
    writeFileSync(input, JSON.stringify(row) + '\n' + JSON.stringify({ ...row, id: 'ext-clean', messages: row.messages.map((m) => ({ ...m, content: m.content.replace(/[\u0000\u0007\u001b\ud800\udfff\r]/g, '') })) }) + '\n');
    for (const format of ['messages', 'sharegpt', 'text']) {
      const out = join(dir, `${format}.jsonl`);
      const res = await runCli(['export', input, '--format', format, '--out', out]);
      expect(res.code, res.stderr).toBe(0);
      expect(res.stderr).toMatch(/2 written, .*1 with control characters or lone surrogates removed/);
      const rows = expectCleanJsonl(out);
      expect(rows).toHaveLength(2);
      if (format === 'text') {
        const [start, end] = rows[0]!.mask_spans[0]!;
        expect([...rows[0]!.text].slice(start, end).join('')).toMatch(/^<tool_output>[\s\S]*Firefox 52 \(2017\)\nfirst  supported grid\.[\s\S]*<\/tool_output>$/);
      }
    }
  });
});

describe('dataset commands and a file that is not UTF-8', () => {
  const dir = tempDir('tf-text-utf8-');
  const file = join(dir, 'rows.jsonl');
  const lines = readFileSync(join(FIXTURES, 'drtulu-generator-rows.jsonl'), 'utf8').split('\n').filter(Boolean);
  // Line 2 gets an ill-formed sequence in the middle of its question: E2 28 A1 (a lead byte whose next byte is no continuation).
  const at = Buffer.byteLength(lines[1]!.slice(0, lines[1]!.indexOf('"question": "') + 20));
  const second = Buffer.concat([Buffer.from(lines[1]!).subarray(0, at), Buffer.from([0xe2, 0x28, 0xa1]), Buffer.from(lines[1]!).subarray(at)]);
  const bytes = Buffer.concat([Buffer.from(`${lines[0]}\n`), second, Buffer.from(`\n${lines[2]}\n${lines[3]}\n`)]);
  writeFileSync(file, bytes);
  const column = at + 1;
  const offset = Buffer.byteLength(`${lines[0]}\n`) + at;
  const message = `${file}:2: invalid UTF-8 at byte ${column} of the line (offset ${offset} in the file)`;

  const commands: [string, string[]][] = [
    ['validate', []],
    ['stats', ['--json']],
    ['filter', ['--keep', 'turns >= 0', '--out', join(dir, 'kept.jsonl')]],
    ['export', ['--format', 'text', '--out', join(dir, 'out.jsonl')]],
    ['report', ['--out', join(dir, 'report.html')]],
  ];

  it.each(commands)('%s: exit 2, the file, the line and the byte, and nothing written', async (command, args) => {
    const res = await runCli([command, file, ...args]);
    expect(res.code, res.stderr).toBe(2);
    expect(res.stderr.trim()).toBe(`error: ${message}`);
    const out = args[args.indexOf('--out') + 1];
    if (args.includes('--out')) expect(() => readFileSync(out!)).toThrow(/ENOENT/);
  });

  it.each(commands)('%s --on-bad-row skip: the line is skipped and counted, the rest read', async (command, args) => {
    const res = await runCli([command, file, ...args, '--on-bad-row', 'skip']);
    // validate exits 1 when a row breaks a rule: these rows are real, and some do.
    expect(res.code === 0 || (command === 'validate' && res.code === 1), res.stderr).toBe(true);
    const said = res.stdout + res.stderr;
    if (command === 'stats') expect(JSON.parse(res.stdout).rows).toMatchObject({ counted: 3, bad: 1 });
    else if (command === 'validate') expect(said).toMatch(/3 rows, .*; 1 unreadable rows skipped/);
    else expect(said).toMatch(/1 bad rows skipped/);
    if (command === 'export') expect(readFileSync(join(dir, 'out.jsonl'), 'utf8').split('\n').filter(Boolean).length).toBeGreaterThan(0);
  });

  it('a file that only holds U+FFFD (valid UTF-8) is read as it is', async () => {
    const ok = join(dir, 'replacement.jsonl');
    const row = JSON.parse(lines[0]!);
    row.question = `${row.question} \ufffd`;
    writeFileSync(ok, JSON.stringify(row) + '\n');
    appendFileSync(ok, lines[2] + '\n');
    const res = await runCli(['stats', ok, '--json']);
    expect(res.code, res.stderr).toBe(0);
    expect(JSON.parse(res.stdout).rows).toMatchObject({ read: 2, bad: 0 });
  });
});
