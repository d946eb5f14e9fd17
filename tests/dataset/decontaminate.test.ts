/**
 * trajforge decontaminate: the real CLI over rows built from the real MDN corpus (5,272
 * documents as tool outputs) and real question banks. Eval questions planted inside questions,
 * tool outputs and answers are found and attributed; the false-positive rate on the corpus
 * against eval sets from the same template family is bounded; short items, partial overlaps,
 * every eval file format, --drop, the row field, `stats` and bad input behave as docs/curate.md says.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ContaminationFlag, Trajectory } from '../../schemas/index.js';
import { forEachNgram, hashWord, words } from '../../pipeline/dataset/shingles.js';
import { BCD_QUESTIONS, CORPUS, DRTULU_QUESTIONS, normalisedWords, trajRow, writeRows } from '../curate-fixtures.js';
import { readJsonl, runCli, tempDir } from '../helpers.js';

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

/**
 * Eval items and rows from the same templates, browsers and corpus features, told apart only by
 * which features they ask about: the hardest case for false positives. Two of the templates hold
 * 13 or more fixed words with a three-word browser ("What is the earliest version of Safari on
 * iOS that supports the …"), so a row and an eval item share a 13-gram while neither holds the other.
 */
const BROWSERS = ['Chrome', 'Chrome Android', 'Firefox for Android', 'Safari on iOS', 'Samsung Internet', 'Opera'];
const TEMPLATES = [
  (b: string, f: string) => `What is the earliest version of ${b} that supports the ${f}?`,
  (b: string, f: string) => `In which version of ${b} was the ${f} first supported, according to the compatibility data?`,
  (b: string, f: string) => `Since which version has ${b} supported the ${f}?`,
];
const feature = (i: number): string => CORPUS[i]!.title.replace(':', '');
const templated = (i: number, feat: number): string => TEMPLATES[i % TEMPLATES.length]!(BROWSERS[Math.floor(i / TEMPLATES.length) % BROWSERS.length]!, feature(feat));

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
  /** Rows that hold an eval item verbatim (normalised words, in order): what must be flagged, found without the code under test. */
  const verbatim = new Set<string>();

  beforeAll(async () => {
    // Eval: 1,500 templated questions about the even-numbered features, the bundled bank and DR Tulu's.
    const evalItems = [
      ...Array.from({ length: 1500 }, (_, i) => ({ id: `tpl-${i}`, question: templated(i, 2 * i) })),
      ...BCD_QUESTIONS.map((q, i) => ({ id: `bcd-${i}`, question: q })),
      ...DRTULU_QUESTIONS.map((q, i) => ({ id: `tulu-${i}`, question: q })),
    ];
    writeFileSync(evalFile, evalItems.map((e) => JSON.stringify(e)).join('\n') + '\n');
    const bcdFeatures = new Set(BCD_QUESTIONS.map((q) => normalisedWords(q).slice(-4).join(' ')));
    const rows = CORPUS.map((doc, i) => {
      const id = `row-${i}`;
      // Rows ask the same templates about the odd-numbered features (none of them in the eval set).
      let question = templated(i, (2 * i + 1) % CORPUS.length);
      if (bcdFeatures.has(normalisedWords(question).slice(-4).join(' '))) question = templated(i + 1, (2 * i + 3) % CORPUS.length);
      let output = doc.abstract;
      let answer = firstSentence(doc.abstract);
      // Plant eval items: every 97th row in its question, 101st in a tool output, 103rd in its answer.
      const pick = (k: number) => evalItems[(k * 7919) % evalItems.length]!;
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
    // The oracle: a plain substring search over normalised words, indexed by each item's first word.
    const byFirst = new Map<string, string[]>();
    for (const e of evalItems) {
      const w = normalisedWords(e.question);
      if (w.length < 8) continue;
      byFirst.set(w[0]!, [...(byFirst.get(w[0]!) ?? []), ` ${w.join(' ')} `]);
    }
    for (const row of rows) {
      for (const text of [row.question, row.final_answer, ...row.tool_calls.map((c) => c.output_text)]) {
        const w = normalisedWords(text);
        const padded = ` ${w.join(' ')} `;
        if ([...new Set(w)].some((first) => (byFirst.get(first) ?? []).some((item) => padded.includes(item)))) verbatim.add(row.id);
      }
    }
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

  it('flags every row that holds an eval item verbatim, and others at a rate under 0.1%, on 5,272 same-template rows', async () => {
    // Every row asks one of the eval items' templates about another feature, and its tool outputs
    // are the corpus the eval questions are about. A few features' names contain another's
    // (`@keyframes` in `@keyframes descriptor …`, `WOFF` in `WOFF 2`): such a row holds an eval
    // question verbatim and is rightly flagged. Any other flag is false. Under 0.1% is what lets a
    // 1M-row set lose fewer than 1,000 rows to chance.
    for (const id of [...inQuestion.keys(), ...inOutput.keys(), ...inAnswer.keys()]) expect(verbatim.has(id), id).toBe(true);
    const flagged = new Set(flags.map((f) => f.id));
    expect([...verbatim].filter((id) => !flagged.has(id))).toEqual([]);
    const falsePositives = flags.filter((f) => !verbatim.has(f.id));
    expect(falsePositives.length / (CORPUS.length - verbatim.size)).toBeLessThan(0.001);
    expect(summary.flagged).toBe(flags.length);
    expect(summary.rows).toBe(CORPUS.length);
    // The same rows under n-grams alone (GPT-3's rule): the shared 13-word template text flags hundreds.
    const loose = await runCli(['decontaminate', join(dir, 'rows.jsonl'), '--against', evalFile, '--ngrams-only', '--json', '--report', join(dir, 'loose.jsonl')]);
    expect(loose.code).toBe(0);
    expect(JSON.parse(loose.stdout).flagged - verbatim.size).toBeGreaterThan(500);
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
    const rowsWith = (field: string) => new Set(flags.filter((f) => f.matches.some((m) => m.field === field)).map((f) => f.id)).size;
    expect(d).toEqual({
      checked: CORPUS.length,
      flagged: flags.length,
      by_field: { question: rowsWith('question'), tool_output: rowsWith('tool_output'), answer: rowsWith('answer') },
      by_eval_file: { [evalFile]: flags.length },
    });
    expect(d.by_field.answer).toBeGreaterThanOrEqual(inAnswer.size);
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

  it('flags a long item with a function word changed, not a 13-word run of it (unless --ngrams-only), and honours --min-ngrams', async () => {
    const part = longWords.slice(3, 16).join(' ');
    // A function word in the middle changed: the n-grams around it are gone, the rest still cover every content word.
    const middle = longWords.findIndex((w, i) => i > 13 && i < longWords.length - 14 && /^(the|of|in|for|with|to)$/.test(w));
    expect(middle).toBeGreaterThan(0);
    const edited = longWords.map((w, i) => (i === middle ? (w === 'the' ? 'a' : 'at') : w)).join(' ');
    const rows = [trajRow({ id: 'part', question: `Tell me: ${part}` }), trajRow({ id: 'edited', question: edited })];
    const of = normalisedWords(long).length - 12;
    const strict = await flagsFor(rows, `${long}\n`);
    expect(strict.report.map((f) => [f.id, f.matches[0]!.ngrams < f.matches[0]!.of, f.matches[0]!.of])).toEqual([['edited', true, of]]);
    const loose = await flagsFor(rows, `${long}\n`, '--ngrams-only');
    expect(loose.report.map((f) => [f.id, f.matches[0]!.ngrams])).toEqual([['part', 1], ['edited', of - 13]]);
    const five = await flagsFor(rows, `${long}\n`, '--ngrams-only', '--min-ngrams', '5');
    expect(five.report.map((f) => f.id)).toEqual(['edited']);
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

  it('finds an item whose first or last word is glued to markup: <snippet id="…">How, text</snippet>, a|b, id=x (20 of 20, short and long)', async () => {
    // Ten items of 8–12 words (matched only whole) and ten of 13+, from the real banks.
    const short = [...BCD_QUESTIONS, ...DRTULU_QUESTIONS].filter((q) => normalisedWords(q).length >= 8 && normalisedWords(q).length < 13).slice(0, 10);
    const longer = DRTULU_QUESTIONS.filter((q) => normalisedWords(q).length >= 13).slice(0, 10);
    expect([short.length, longer.length]).toEqual([10, 10]);
    const items = [...short, ...longer];
    const glue = [(q: string) => q, (q: string) => `a|${q}|b`, (q: string) => `<td id=${q}</td>`, (q: string) => `key=${q}`];
    // A tool output is the item alone: trajRow wraps it as <snippet id="…">item</snippet>, glued at both ends.
    const rows = items.map((q, i) => trajRow({ id: `r${i}`, question: 'q', outputs: [glue[i % glue.length]!(q)] }));
    const r = await flagsFor(rows, items.map((q) => `${q}\n`).join(''));
    expect(r.report.map((f) => [f.id, f.matches[0]!.eval_id])).toEqual(items.map((_, i) => [`r${i}`, `line ${i + 1}`]));
  });

  it('reads markup symbols as spaces, as docs/curate.md says', () => {
    expect(words('<snippet id="s-1">How</snippet> a|b id=x `code`')).toEqual(['snippet', 'id', 's', '1', 'how', 'snippet', 'a', 'b', 'id', 'x', 'code']);
    expect(words('C++ costs $5 at 20°')).toEqual(['c++', 'costs', '$5', 'at', '20°']);
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
    const { CLI } = await import('../helpers.js');
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

describe('trajforge stats over decontamination fields it did not write', () => {
  it('counts only well-formed fields and never fails on the others', async () => {
    const dir = tempDir('tf-decon-stats-');
    const base = (id: string) => ({ ...trajRow({ id, question: `Question ${id}?` }) }) as Record<string, unknown>;
    const file = writeRows(join(dir, 'rows.jsonl'), [
      { ...base('clean'), decontamination: { n: 13, against: ['e.jsonl'], matches: [] } },
      { ...base('flagged'), decontamination: { n: 13, against: ['e.jsonl'], matches: [{ eval_file: 'e.jsonl', eval_id: '1', field: 'answer', ngrams: 2, of: 2 }, { eval_file: 'e.jsonl', eval_id: '2', field: 'answer', ngrams: 1, of: 1 }] } },
      { ...base('string'), decontamination: 'yes' },
      { ...base('null'), decontamination: null },
      { ...base('not-a-list'), decontamination: { matches: 'x' } },
      { ...base('junk-entries'), decontamination: { matches: [null, { field: 5 }, 'q'] } },
      base('none'),
    ]);
    const r = await runCli(['stats', file, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).decontamination).toEqual({ checked: 3, flagged: 2, by_field: { answer: 1 }, by_eval_file: { 'e.jsonl': 1 } });
  });
});

describe('words() matches docs/curate.md', () => {
  it('is what both commands compare', () => {
    expect(words('In phase III trials, how does X compare?')).toEqual(['in', 'phase', 'iii', 'trials', 'how', 'does', 'x', 'compare']);
  });
});
