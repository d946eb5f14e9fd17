/**
 * trajforge decontaminate: the real CLI over rows built from the real MDN corpus (5,272
 * documents as tool outputs) and real question banks. Eval questions planted inside questions,
 * tool outputs and answers are found and attributed; the false-positive rate on the corpus
 * against eval sets from the same template family is bounded; short items, partial overlaps,
 * every eval file format, --drop, the row field, `stats` and bad input behave as the README says.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ContaminationFlag, Trajectory } from '../schemas/index.js';
import { forEachNgram, hashWord, words } from '../pipeline/dataset/shingles.js';
import { BCD_QUESTIONS, CORPUS, DRTULU_QUESTIONS, normalisedWords, trajRow, writeRows } from './curate-fixtures.js';
import { readJsonl, runCli, tempDir } from './helpers.js';

describe('n-gram hashes', () => {
  it('give each window the hash of the same words hashed alone, wherever the window sits', () => {
    const text = 'a b c d e f g h i j k l m n o p q r s t u v w x y z'.split(' ');
    const hashes = text.map(hashWord);
    const rolled: string[] = [];
    forEachNgram(hashes, 13, (hi, lo) => rolled.push(`${hi}:${lo}`));
    expect(rolled).toHaveLength(text.length - 12);
    rolled.forEach((h, i) => {
      const alone: string[] = [];
      forEachNgram(hashes.slice(i, i + 13), 13, (hi, lo) => alone.push(`${hi}:${lo}`));
      expect(alone).toEqual([h]);
    });
    expect(new Set(rolled).size).toBe(rolled.length);
    // The same words as a shorter window hash differently.
    const short: string[] = [];
    forEachNgram(hashes.slice(0, 12), 12, (hi, lo) => short.push(`${hi}:${lo}`));
    expect(rolled).not.toContain(short[0]);
  });
});

/** Eval sets from the same families as the rows: the hardest case for false positives. */
const EVAL_BCD = BCD_QUESTIONS.filter((_, i) => i % 2 === 1);
const ROW_BCD = BCD_QUESTIONS.filter((_, i) => i % 2 === 0);

/** The first sentence of an abstract: the answer a model would write from it. */
const firstSentence = (s: string): string => s.split(/(?<=\.)\s/)[0]!;

describe('trajforge decontaminate over the MDN corpus', () => {
  const dir = tempDir('tf-decon-');
  const evalFile = join(dir, 'eval.jsonl');
  const inQuestion = new Map<string, string>();
  const inOutput = new Map<string, string>();
  const inAnswer = new Map<string, string>();
  let summary: any;
  let flags: ContaminationFlag[];
  let stderr: string;

  beforeAll(async () => {
    // Eval: half the bundled bank (same template and features as the corpus) plus DR Tulu's bank.
    const evalItems = [...EVAL_BCD.map((q, i) => ({ id: `bcd-${i}`, question: q })), ...DRTULU_QUESTIONS.map((q, i) => ({ id: `tulu-${i}`, question: q }))];
    writeFileSync(evalFile, evalItems.map((e) => JSON.stringify(e)).join('\n') + '\n');
    const rows = CORPUS.map((doc, i) => {
      const id = `row-${i}`;
      let question = ROW_BCD[i % ROW_BCD.length]!;
      let output = doc.abstract;
      let answer = firstSentence(doc.abstract);
      // Plant eval items: every 97th row in its question, 101st in a tool output, 103rd in its answer.
      const pick = (k: number) => evalItems[k % evalItems.length]!;
      if (i % 97 === 5) {
        const e = pick(i);
        inQuestion.set(id, e.id);
        question = `Background for a colleague — ${e.question.toUpperCase().replace(/\?$/, '')}!! Please cite sources.`;
      }
      if (i % 101 === 7) {
        const e = pick(i + 1);
        inOutput.set(id, e.id);
        const cut = output.indexOf('. ') + 2;
        output = `${output.slice(0, cut)}Forum post: “${e.question}” ${output.slice(cut)}`;
      }
      if (i % 103 === 11) {
        const e = pick(i + 2);
        inAnswer.set(id, e.id);
        answer = `${answer} (This answers: ${e.question.toLowerCase()})`;
      }
      return trajRow({ id, question, outputs: [firstSentence(CORPUS[(i + 1) % CORPUS.length]!.abstract), output], answer });
    });
    const input = writeRows(join(dir, 'rows.jsonl'), rows);
    const r = await runCli(['decontaminate', input, '--against', evalFile, '--out', join(dir, 'out.jsonl'), '--report', join(dir, 'report.jsonl'), '--json']);
    expect(r.code, r.stderr).toBe(0);
    stderr = r.stderr;
    summary = JSON.parse(r.stdout);
    flags = readJsonl(join(dir, 'report.jsonl')).map((f) => ContaminationFlag.parse(f));
  });

  it('plants enough of each kind to mean something', () => {
    expect(inQuestion.size).toBeGreaterThan(40);
    expect(inOutput.size).toBeGreaterThan(40);
    expect(inAnswer.size).toBeGreaterThan(40);
  });

  it('finds every planted eval question inside questions, tool outputs and answers, with the item it came from', () => {
    const flagged = new Map(flags.map((f) => [f.id, f]));
    for (const [where, planted, field, call] of [
      ['question', inQuestion, 'question', undefined],
      ['tool output', inOutput, 'tool_output', 1],
      ['answer', inAnswer, 'answer', undefined],
    ] as const) {
      for (const [row, item] of planted) {
        const f = flagged.get(row);
        expect(f, `${where}: ${row} not flagged`).toBeDefined();
        const m = f!.matches.find((x) => x.eval_id === item && x.field === field);
        expect(m, `${where}: ${row} lacks ${item}`).toBeDefined();
        expect(m!.call_index).toBe(call);
        expect(m!.eval_file).toBe(evalFile);
        // The whole item is there: every one of its n-grams.
        expect(m!.ngrams).toBe(m!.of);
      }
    }
  });

  it('flags nothing else: the false-positive rate on 5,272 same-domain rows is under 0.1%', () => {
    // The rows share the eval items' template, browsers, features and vocabulary (their tool
    // outputs are the corpus the eval questions are about) but hold none of their text; a flag
    // needs 13 consecutive words of an item, or all of one of 8–12 words. Any flag here is false.
    const planted = new Set([...inQuestion.keys(), ...inOutput.keys(), ...inAnswer.keys()]);
    const falsePositives = flags.filter((f) => !planted.has(f.id));
    const clean = CORPUS.length - planted.size;
    expect(falsePositives.length / clean).toBeLessThan(0.001);
    expect(falsePositives).toEqual([]);
    expect(summary.flagged).toBe(planted.size);
    expect(summary.rows).toBe(CORPUS.length);
  });

  it('writes every row with its decontamination field, schema-valid, the clean ones with no matches', () => {
    const out = readJsonl(join(dir, 'out.jsonl'));
    expect(out).toHaveLength(CORPUS.length);
    for (const row of out) {
      const t = Trajectory.parse(row);
      expect(t.decontamination!.n).toBe(13);
      expect(t.decontamination!.against).toEqual([evalFile]);
    }
    expect(out.filter((r) => r.decontamination.matches.length > 0).map((r) => r.id).sort()).toEqual(flags.map((f) => f.id).sort());
    expect(stderr).toContain(`${CORPUS.length} rows in, ${flags.length} flagged`);
  });

  it('lets stats count what decontaminate found', async () => {
    const r = await runCli(['stats', join(dir, 'out.jsonl'), '--json']);
    expect(r.code).toBe(0);
    const d = JSON.parse(r.stdout).decontamination;
    expect(d).toEqual({
      checked: CORPUS.length,
      flagged: flags.length,
      by_field: expect.objectContaining({ question: inQuestion.size, answer: inAnswer.size }),
      by_eval_file: { [evalFile]: flags.length },
    });
    // Planted rows may overlap in field; each row counts once per field.
    expect(d.by_field.tool_output).toBe(new Set(flags.filter((f) => f.matches.some((m) => m.field === 'tool_output')).map((f) => f.id)).size);
    const table = await runCli(['stats', join(dir, 'out.jsonl')]);
    expect(table.stdout).toMatch(/decontamination\s+rows\s+share/);
    expect(table.stdout).toMatch(new RegExp(`flagged\\s+${flags.length}\\s`));
  });

  it('with --drop writes the clean rows to --out and the flagged ones to --rejects', async () => {
    const r = await runCli(['decontaminate', join(dir, 'rows.jsonl'), '--against', evalFile, '--drop', '--out', join(dir, 'clean.jsonl'), '--rejects', join(dir, 'dirty.jsonl')]);
    expect(r.code, r.stderr).toBe(0);
    const clean = readJsonl(join(dir, 'clean.jsonl'));
    const dirty = readJsonl(join(dir, 'dirty.jsonl'));
    expect(clean.every((x) => x.decontamination.matches.length === 0)).toBe(true);
    expect(dirty.map((x) => x.id).sort()).toEqual(flags.map((f) => f.id).sort());
    expect(clean.length + dirty.length).toBe(CORPUS.length);
  });

  it('replaces the field when it runs again over its own output, never writing it twice', async () => {
    const other = join(dir, 'other.txt');
    writeFileSync(other, `${DRTULU_QUESTIONS[0]}\n`);
    const r = await runCli(['decontaminate', join(dir, 'out.jsonl'), '--against', other, '--out', join(dir, 'again.jsonl')]);
    expect(r.code, r.stderr).toBe(0);
    const lines = readFileSync(join(dir, 'again.jsonl'), 'utf8').split('\n').filter(Boolean);
    expect(lines.every((l) => l.split('"decontamination"').length === 2)).toBe(true);
    expect(JSON.parse(lines[0]!).decontamination.against).toEqual([other]);
  });
});

describe('trajforge decontaminate: the rule at its edges', () => {
  const dir = tempDir('tf-decon-edge-');
  const long = DRTULU_QUESTIONS.find((q) => normalisedWords(q).length >= 30)!;
  const longWords = long.split(/\s+/);
  const ten = 'Which browser first shipped the CSS property accent-color by default?';
  const five = 'What is CSS grid?';

  async function flagsFor(rows: ReturnType<typeof trajRow>[], evalText: string, ...flags: string[]): Promise<{ summary: any; report: ContaminationFlag[]; stderr: string }> {
    const input = writeRows(join(dir, `rows-${Math.random().toString(36).slice(2)}.jsonl`), rows);
    const evalFile = join(dir, `eval-${Math.random().toString(36).slice(2)}.txt`);
    writeFileSync(evalFile, evalText);
    const report = join(dir, `report-${Math.random().toString(36).slice(2)}.jsonl`);
    const r = await runCli(['decontaminate', input, '--against', evalFile, '--report', report, '--json', ...flags]);
    expect(r.code, r.stderr).toBe(0);
    return { summary: JSON.parse(r.stdout), report: readJsonl(report).map((f) => ContaminationFlag.parse(f)), stderr: r.stderr };
  }

  it('flags a row holding one 13-word run of a long item, unless --min-ngrams asks for more', async () => {
    const part = longWords.slice(3, 16).join(' ');
    const rows = [trajRow({ id: 'part', question: `Tell me: ${part}` }), trajRow({ id: 'twelve', question: longWords.slice(3, 15).join(' ') })];
    const one = await flagsFor(rows, `${long}\n`);
    expect(one.report.map((f) => [f.id, f.matches[0]!.ngrams, f.matches[0]!.of])).toEqual([['part', 1, normalisedWords(long).length - 12]]);
    const five = await flagsFor(rows, `${long}\n`, '--min-ngrams', '5');
    expect(five.report).toEqual([]);
  });

  it('matches an item of 8–12 words only whole, and does not check one under --min-words (saying so)', async () => {
    const rows = [
      trajRow({ id: 'whole', question: `quiz: ${ten.toLowerCase()} (answer in one word)` }),
      trajRow({ id: 'most', question: ten.split(' ').slice(0, -1).join(' ') }),
      trajRow({ id: 'tiny', question: five }),
    ];
    const r = await flagsFor(rows, `${ten}\n${five}\n`);
    expect(r.report.map((f) => [f.id, f.matches[0]!.eval_id, f.matches[0]!.of])).toEqual([['whole', 'line 1', 1]]);
    expect(r.summary.eval).toMatchObject({ items: 2, checked: 1, too_short: 1, too_short_examples: [{ id: 'line 2', text: five }] });
    expect(r.stderr).toContain('1 eval items are shorter than --min-words and were not checked');
    const lower = await flagsFor(rows, `${ten}\n${five}\n`, '--min-words', '3');
    expect(lower.report.map((f) => f.id).sort()).toEqual(['tiny', 'whole']);
  });

  it('scans only the fields it is given', async () => {
    const rows = [trajRow({ id: 'out', question: 'q', outputs: [long] })];
    expect((await flagsFor(rows, `${long}\n`)).report).toHaveLength(1);
    expect((await flagsFor(rows, `${long}\n`, '--fields', 'question,answer')).report).toEqual([]);
  });
});

describe('trajforge decontaminate: eval files and inputs', () => {
  const dir = tempDir('tf-decon-io-');
  const item = DRTULU_QUESTIONS[4]!;
  const rows = writeRows(join(dir, 'rows.jsonl'), [trajRow({ id: 'hit', question: item }), trajRow({ id: 'miss', question: DRTULU_QUESTIONS[5]! })]);

  it.each([
    ['CSV with a header', 'eval.csv', `id,prompt\nE-7,"${item.replace(/"/g, '""')}"\n`, [], 'E-7'],
    ['a JSON array', 'eval.json', JSON.stringify([{ qid: 'J1', query: item }]), [], 'J1'],
    ['JSONL with a named field', 'eval.jsonl', `${JSON.stringify({ uid: 'U1', body: item })}\n`, ['--eval-field', 'body', '--eval-id', 'uid'], 'U1'],
    ['plain lines', 'eval.txt', `\n${DRTULU_QUESTIONS[9]}\n${item}\n`, [], 'line 3'],
    ['plain lines, forced', 'eval.list', `${item}\n`, ['--eval-format', 'lines'], 'line 1'],
  ])('reads %s', async (_, name, text, extra, id) => {
    const evalFile = join(dir, name);
    writeFileSync(evalFile, text);
    const r = await runCli(['decontaminate', rows, '--against', evalFile, '--report', join(dir, `${name}.report`), ...extra]);
    expect(r.code, r.stderr).toBe(0);
    const report = readJsonl(join(dir, `${name}.report`));
    expect(report.map((f) => [f.id, f.matches[0].eval_id, f.matches[0].eval_file])).toEqual([['hit', id, evalFile]]);
  });

  it('reads rows from stdin, several eval files at once, and foreign rows', async () => {
    const a = join(dir, 'a.txt');
    const b = join(dir, 'b.txt');
    writeFileSync(a, `${DRTULU_QUESTIONS[20]}\n`);
    writeFileSync(b, `${item}\n`);
    const { spawnSync } = await import('node:child_process');
    const { CLI } = await import('./helpers.js');
    const r = spawnSync(process.execPath, [CLI, 'decontaminate', '-', '--against', a, '--against', b, '--out', '-'], { input: readFileSync(rows) });
    expect(r.status, r.stderr.toString()).toBe(0);
    const out = r.stdout.toString().split('\n').filter(Boolean).map((l) => JSON.parse(l));
    expect(out.map((x) => [x.id, x.decontamination.matches.map((m: any) => m.eval_file)])).toEqual([['hit', [b]], ['miss', []]]);
    expect(out[0].decontamination.against).toEqual([a, b]);
  });

  it.each([
    [['--out', 'o.jsonl'], /--against EVAL is required/],
    [['--against', 'missing.jsonl', '--out', 'o.jsonl'], /missing\.jsonl: cannot read/],
    [['--against', 'EVAL', '--out', 'o.jsonl', '--n', '0'], /--n: /],
    [['--against', 'EVAL', '--out', 'o.jsonl', '--fields', 'question,thoughts'], /--fields: /],
    [['--against', 'EVAL', '--out', 'o.jsonl', '--rejects', 'r.jsonl'], /--rejects takes the rows --drop leaves out/],
    [['--against', 'EVAL'], /give --out F .* or --report F/],
    [['--against', 'EVAL', '--out', 'EVAL'], /is also an input/],
    [['--against', 'BADCSV', '--out', 'o.jsonl'], /bad\.csv:2: question: missing/],
  ])('%j exits 2: %s', async (args, message) => {
    const evalFile = join(dir, 'e.txt');
    writeFileSync(evalFile, `${item}\n`);
    const badCsv = join(dir, 'bad.csv');
    writeFileSync(badCsv, 'name,score\nfoo,1\n');
    const real = args.map((a) => (a === 'EVAL' ? evalFile : a === 'BADCSV' ? badCsv : a.endsWith('.jsonl') && a !== 'missing.jsonl' ? join(dir, a) : a));
    const r = await runCli(['decontaminate', rows, ...real]);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.code).toBe(2);
  });
});

describe('words() matches the README', () => {
  it('is what both commands compare', () => {
    expect(words('In phase III trials, how does X compare?')).toEqual(['in', 'phase', 'iii', 'trials', 'how', 'does', 'x', 'compare']);
  });
});
