/**
 * Input faults through `trajforge generate`: each bad questions file stops the run before
 * anything is written, with exit 2 and a message naming the file and line; with
 * `--on-bad-row skip` the bad rows are skipped, counted and shown in the summary.
 *
 * Covered elsewhere: tests/generate/run.test.ts — a broken JSON line, a row without a question,
 * an empty file (CLI, exit 2); tests/generate/sampler.test.ts — the reader itself (CRLF, BOM, gzip,
 * UTF-16, JSON arrays, line numbers in every format).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { runCli, tempDir, writeConfig } from '../helpers.js';
import { accountedIds, checkRunDir, FAULT_SEED, seededRng } from './util.js';

let sim: Sim;
beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 6 });
});
afterAll(() => sim.close());

const MB50 = 50 * 1024 * 1024;
const line = (o: unknown): string => `${JSON.stringify(o)}\n`;

function randomBytes(n: number, withNul: boolean): Buffer {
  const rng = seededRng(FAULT_SEED);
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = Math.floor(rng() * 256) || (withNul ? 0 : 1);
  if (withNul) b[100] = 0;
  return b;
}

/** [name, file name, content, the message stderr must show] */
const BAD: [string, string, string | Buffer, RegExp][] = [
  ['a file of blank lines', 'blank.jsonl', '\n   \n\n', /blank\.jsonl: no questions found/],
  ['a binary file named .jsonl', 'bin.jsonl', randomBytes(4096, true), /bin\.jsonl:\d+: (invalid UTF-8|invalid JSON)/],
  ['a binary file with no telling extension', 'bin.dat', randomBytes(4096, true), /bin\.dat:\d+: binary data \(a NUL byte at offset 100\)/],
  ['invalid UTF-8 inside a string', 'utf8.jsonl', Buffer.concat([Buffer.from(line({ id: 'a', question: 'fine?' })), Buffer.from('{"id": "b", "question": "caf'), Buffer.from([0xc3, 0x28]), Buffer.from('?"}\n')]), /utf8\.jsonl:2: invalid UTF-8/],
  ['a question that is a number', 'typed.jsonl', line({ id: 'a', question: 'fine?' }) + line({ id: 'b', question: 42 }), /typed\.jsonl:2: question: expected a string, got number/],
  ['an id that is an object', 'typed-id.jsonl', line({ id: { x: 1 }, question: 'q?' }), /typed-id\.jsonl:1: id: expected a string or number, got object/],
  ['a CSV row with no question after a quoted field spanning lines', 'multi.csv', 'id,question,answer\na,"line one\nline two?",x\nb,,y\n', /multi\.csv:4: question: empty/],
  ['a stray quote in a field of a file read as CSV', 'notes.txt', 'id,question\na,b"c?\n', /notes\.txt:2: CSV: Invalid Opening Quote: a quote is found on field 1, value is "b"/],
  ['a CSV quote that never closes', 'open.csv', 'id,question,answer\na,"never closed?,x\nb,fine?,y\n', /open\.csv:2: CSV: Quote Not Closed/],
];

// Independent processes that fail before any tool server starts: run them side by side.
describe.concurrent('a bad questions file stops generate before anything is written: exit 2, file and line', () => {
  for (const [name, fileName, content, pattern] of BAD) {
    it(name, async () => {
      const dir = tempDir('tf-input-');
      const q = join(dir, fileName);
      writeFileSync(q, content);
      const res = await runCli(['generate', '--config', writeConfig(dir, sim.url), '--questions', q]);
      expect(res.code, res.stderr).toBe(2);
      expect(res.stderr).toMatch(pattern);
      expect(res.stderr).not.toMatch(/\n\s+at |internal error/);
      // The whole message is one readable line, whatever the bytes were.
      expect(res.stderr.trim().split('\n')).toHaveLength(1);
      expect(res.stderr).not.toContain('"type":"Buffer"');
      expect(existsSync(join(dir, 'run', 'manifest.json'))).toBe(false);
    });
  }

  it('a 50 MB line: named by its line, with a short message, before any sample runs', async () => {
    const dir = tempDir('tf-input-big-');
    const q = join(dir, 'big.jsonl');
    writeFileSync(q, line({ id: 'a', question: 'fine?' }) + 'x'.repeat(MB50) + '\n' + line({ id: 'c', question: 'also fine?' }));
    const t0 = Date.now();
    const res = await runCli(['generate', '--config', writeConfig(dir, sim.url), '--questions', q]);
    expect(res.code, res.stderr.slice(0, 500)).toBe(2);
    expect(res.stderr).toMatch(/big\.jsonl:2: invalid JSON/);
    expect(res.stderr.length).toBeLessThan(1_000);
    expect(Date.now() - t0).toBeLessThan(20_000);
    expect(existsSync(join(dir, 'run', 'manifest.json'))).toBe(false);
  });

  it('--on-bad-row with a value other than error or skip is a usage error', async () => {
    const dir = tempDir('tf-input-');
    const res = await runCli(['generate', '--config', writeConfig(dir, sim.url), '--on-bad-row', 'ignore']);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/--on-bad-row: expected error or skip, got "ignore"/);
  });
});

describe('--on-bad-row skip', () => {
  it('JSONL: a 50 MB line, invalid UTF-8, a mistyped and a missing field are skipped and counted; duplicates are skipped; the good rows run once', async () => {
    const dir = tempDir('tf-skip-');
    const q = join(dir, 'mixed.jsonl');
    writeFileSync(
      q,
      Buffer.concat([
        Buffer.from(line({ id: 'good-1', question: 'In which version of Chrome was the CSS property grid first supported?' })),
        Buffer.from('{"id": "huge", "question": "' + 'x'.repeat(MB50) + '\n'), // line 2: 50 MB, never closed
        Buffer.from('{"id": "bad-utf8", "question": "caf'),
        Buffer.from([0xff]),
        Buffer.from('?"}\n'), // line 3
        Buffer.from(line({ id: 'typed', question: ['not', 'a', 'string'] })), // line 4
        Buffer.from(line({ id: 'no-question', answer: '7' })), // line 5
        Buffer.from(line({ id: 'good-1', question: 'A different question under an id already read?' })), // line 6: duplicate id
        Buffer.from(line({ id: 'good-2', question: 'Which Firefox version first supported the HTML element video?' })),
        Buffer.from(line({ question: 'In which version of Safari was the JavaScript builtin Promise first supported?' })),
      ]),
    );
    const res = await runCli(['generate', '--config', writeConfig(dir, sim.url), '--questions', q, '--on-bad-row', 'skip']);
    expect(res.code, res.stderr.slice(0, 2_000)).toBe(0);
    expect(res.stdout).toMatch(/^input {6}8 rows read; 4 bad rows skipped \(line 2: invalid JSON[^;]*; line 3: invalid UTF-8; line 4: question: expected a string, got array; …\); 1 duplicate ids skipped$/m);
    expect(res.stdout.length).toBeLessThan(5_000);
    const files = checkRunDir(join(dir, 'run'));
    const ids = [...accountedIds(files)].sort();
    expect(ids).toHaveLength(3);
    expect(ids.slice(0, 2)).toEqual(['good-1', 'good-2']);
    expect(ids[2]).toMatch(/^q-[0-9a-f]{16}$/); // the row without an id got a stable one
    expect(files.ok.length + files.failed.length).toBe(3);
    // The first row with an id wins; the duplicate's question was never run.
    const good1 = [...files.ok, ...files.failed].find((t) => t.id === 'good-1')!;
    expect(good1.question).toMatch(/^In which version of Chrome/);
  });

  it('CSV: a quoted field spanning lines is one question; a bad row after it is reported by the line it starts on', async () => {
    const dir = tempDir('tf-skip-csv-');
    const q = join(dir, 'multi.csv');
    writeFileSync(q, 'id,question,answer\nm1,"In which version of Chrome was\nthe CSS property grid first supported?",57\nbad,,x\nm2,"Which Firefox version first supported, ""in full"", the HTML element video?",3.5\n');
    const res = await runCli(['generate', '--config', writeConfig(dir, sim.url), '--questions', q, '--on-bad-row', 'skip']);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/^input {6}3 rows read; 1 bad rows skipped \(line 4: question: empty\); 0 duplicate ids skipped$/m);
    const files = checkRunDir(join(dir, 'run'));
    const all = [...files.ok, ...files.failed];
    expect(all.map((t) => t.id).sort()).toEqual(['m1', 'm2']);
    expect(all.find((t) => t.id === 'm1')!.question).toBe('In which version of Chrome was\nthe CSS property grid first supported?');
    expect(all.find((t) => t.id === 'm2')!.question).toBe('Which Firefox version first supported, "in full", the HTML element video?');
  });

  it('still stops on a broken CSV quote: past it the parser cannot find the next row', async () => {
    const dir = tempDir('tf-skip-');
    const q = join(dir, 'open.csv');
    writeFileSync(q, 'id,question\na,"never closed?\nb,fine?\n');
    const res = await runCli(['generate', '--config', writeConfig(dir, sim.url), '--questions', q, '--on-bad-row', 'skip']);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/open\.csv:2: CSV: Quote Not Closed/);
  });
});
