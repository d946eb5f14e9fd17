/**
 * pipeline/printable.ts: what an error message that quotes input may send to a terminal. On its
 * own (any string: no control character survives, and the escapes say which it was), then
 * through the built CLI: a line of a file holding NUL and ESC bytes, and a path with an escape
 * sequence in its name, are named in errors with those bytes escaped.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { printable } from '../pipeline/printable.js';
import { runCli, tempDir, writeConfig } from './helpers.js';

/** What a terminal acts on rather than prints: C0 (tab and newline allowed unless one line), DEL, C1, separators, bidi controls. */
function unsafe(s: string, oneLine: boolean): boolean {
  return [...s].some((ch) => {
    const c = ch.codePointAt(0)!;
    if (!oneLine && (c === 0x09 || c === 0x0a)) return false;
    return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c === 0x2028 || c === 0x2029 || (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);
  });
}

/** Every byte sent to the terminal by a process: none may be a control character but newline and tab. */
const RAW_CONTROL = /[\x00-\x08\x0b-\x1f\x7f]/;

describe('printable', () => {
  it('leaves no character a terminal acts on, and writes each as an escape that names it', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 200 }), fc.boolean(), (s, oneLine) => {
        const out = printable(s, { oneLine });
        expect(unsafe(out, oneLine)).toBe(false);
        if (!unsafe(s, oneLine)) expect(out).toBe(s);
      }),
    );
    expect(printable('a\u0000b\u001b[31mc\u202ed\te\nf')).toBe('a\\x00b\\x1b[31mc\\u202ed\te\nf');
    expect(printable('a\tb\nc', { oneLine: true })).toBe('a\\x09b\\x0ac');
    expect(printable('\u0085')).toBe('\\x85');
  });
});

describe('the CLI never echoes a control character of its input', () => {
  it('a row holding NUL and ESC bytes that is not JSON: FILE:LINE named, the bytes escaped', async () => {
    const d = tempDir('tf-nul-');
    const file = join(d, 'rows.jsonl');
    // JSON.parse's message quotes the line: "Unexpected token '\x1b', "\x1b[2J…" is not valid JSON".
    writeFileSync(file, '\u001b[2J\u0007\u0000{"id": "a"}\n');
    for (const args of [['validate', file], ['stats', file], ['filter', file, '--out', join(d, 'o.jsonl')], ['export', file, '--format', 'text', '--out', join(d, 'o.jsonl')]]) {
      const r = await runCli(args);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(`${file}:1: not valid JSON`);
      expect(r.stderr).toContain('\\x1b[2J\\x07\\x00{');
      expect(r.stderr).not.toMatch(RAW_CONTROL);
    }
  });

  it('--on-bad-row skip: the skipped rows validate names are escaped too', async () => {
    const d = tempDir('tf-nul-skip-');
    const file = join(d, 'rows.jsonl');
    writeFileSync(file, '\u001b]0;pwned\u0007{"id": 1}\n'); // an escape sequence that retitles the terminal
    const r = await runCli(['validate', file, '--on-bad-row', 'skip']);
    expect(r.stderr).toContain('validate: skipped');
    expect(r.stderr).toContain('\\x1b]0;pwned\\x07');
    expect(r.stderr).not.toMatch(RAW_CONTROL);
  });

  it('generate: a questions file whose line is not JSON is named with its bytes escaped', async () => {
    const d = tempDir('tf-esc-q-');
    const questions = join(d, 'q.jsonl');
    writeFileSync(questions, '\u001b[2J{"question": "x"}\n');
    const r = await runCli(['generate', '--config', writeConfig(d, 'http://127.0.0.1:9/v1'), '--questions', questions, '--out', join(d, 'run')]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`${questions}:1: invalid JSON: Unexpected token '\\x1b', "\\x1b[2J{`);
    expect(r.stderr).not.toMatch(RAW_CONTROL);
  });

  it('a path with an escape sequence in its name', async () => {
    const d = join(tempDir('tf-esc-'), 'dir\u001b[31m\u0007');
    mkdirSync(d);
    const r = await runCli(['stats', join(d, 'missing.jsonl')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('dir\\x1b[31m\\x07');
    expect(r.stderr).not.toMatch(RAW_CONTROL);
  });
});
