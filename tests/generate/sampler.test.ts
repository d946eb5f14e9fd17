import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { TrajforgeError } from '../../pipeline/errors.js';
import {
  countSamples,
  parseShard,
  sampleQuestions,
  type SamplerOptions,
} from '../../pipeline/generate/sampler.js';
import { questionIdFor } from '../../pipeline/core/ids.js';
import { QuestionsConfig, Sample } from '../../schemas/index.js';
import { FIXTURES } from '../helpers.js';

const FIXTURE = join(FIXTURES, 'drtulu-questions.jsonl');
const dir = mkdtempSync(join(tmpdir(), 'trajforge-sampler-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(name: string, content: string | Buffer): string {
  const path = join(dir, `${n++}-${name}`);
  writeFileSync(path, content);
  return path;
}

function jsonl(rows: unknown[]): string {
  return rows.map((r) => JSON.stringify(r)).join('\n') + '\n';
}

function cfg(input: Record<string, unknown> = {}): QuestionsConfig {
  return QuestionsConfig.parse(input);
}

async function collect(opts: Omit<SamplerOptions, 'config'> & { config?: QuestionsConfig }) {
  const { samples, report } = sampleQuestions({ ...opts, config: opts.config ?? cfg() });
  const out: Sample[] = [];
  for await (const s of samples) out.push(s);
  return { samples: out, report };
}

async function ids(path: string, config: Record<string, unknown> = {}): Promise<string[]> {
  return (await collect({ path, config: cfg(config) })).samples.map((s) => s.sample_id);
}

async function failure(promise: Promise<unknown>): Promise<TrajforgeError> {
  try {
    await promise;
  } catch (err) {
    expect(err).toBeInstanceOf(TrajforgeError);
    return err as TrajforgeError;
  }
  throw new Error('expected a TrajforgeError, nothing was thrown');
}

/** Forty questions with ids q0…q39. */
const forty = file(
  'forty.jsonl',
  jsonl(Array.from({ length: 40 }, (_, i) => ({ id: `q${i}`, question: `Question number ${i}?` }))),
);

describe('questionIdFor', () => {
  it('is stable under case, spacing and Unicode compatibility forms', () => {
    const id = questionIdFor('What is the capital of France?');
    expect(id).toMatch(/^q-[0-9a-f]{16}$/);
    expect(questionIdFor('  what IS the\tcapital  of\nFrance? ')).toBe(id);
    // Fullwidth letters fold to ASCII under NFKC.
    expect(questionIdFor('Ｗhat is the capital of France?')).toBe(id);
    expect(questionIdFor('What is the capital of Spain?')).not.toBe(id);
  });
});

describe('parseShard', () => {
  it('reads i/n', () => {
    expect(parseShard('0/1')).toEqual({ index: 0, count: 1 });
    expect(parseShard('2/3')).toEqual({ index: 2, count: 3 });
  });
  it.each(['3/3', '0/0', '-1/2', 'a/b', '1', '1/2/3', ''])('rejects %j', (spec) => {
    let err: unknown;
    try {
      parseShard(spec);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TrajforgeError);
    expect((err as TrajforgeError).code).toBe('BAD_USAGE');
  });
});

describe('reading the DR Tulu question bank', () => {
  const raw = readFileSync(FIXTURE, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);

  it('gives every row a stable generated id and keeps the other fields in meta', async () => {
    const { samples, report } = await collect({ path: FIXTURE });
    expect(raw).toHaveLength(40);
    expect(samples).toHaveLength(40);
    expect(report).toMatchObject({ rows: 40, questions: 40, duplicates: 0, selected: 40, emitted: 40, skippedDone: 0 });
    expect(report.badRows).toEqual([]);
    samples.forEach((s, i) => {
      const row = raw[i]!;
      expect(Sample.parse(s)).toEqual(s);
      expect(s.question.schema_version).toBe(1);
      expect(s.sample_index).toBe(0);
      expect(s.question.question).toBe(row.question);
      expect(s.question.id).toBe(questionIdFor(row.question as string));
      expect(s.sample_id).toBe(s.question.id);
      expect(s.question.answer).toBeUndefined();
      expect(s.question.meta).toEqual({
        topic: row.topic,
        question_type: row.question_type,
        expected_search_terms: row.expected_search_terms,
      });
    });
    expect(new Set(samples.map((s) => s.sample_id)).size).toBe(40);
  });

  it('gives the same ids on a second read', async () => {
    expect(await ids(FIXTURE)).toEqual(await ids(FIXTURE));
  });

  it('counts the samples it would emit', async () => {
    expect(await countSamples({ path: FIXTURE, config: cfg() })).toBe(40);
    expect(await countSamples({ path: FIXTURE, config: cfg({ samples: 3, limit: 5 }) })).toBe(15);
    expect(await countSamples({ path: FIXTURE, config: cfg({ shuffle: true, limit: 7, samples: 2 }) })).toBe(14);
  });
});

describe('field mapping', () => {
  it('takes ids and gold answers, and passes every other field through', async () => {
    const path = file(
      'gold.jsonl',
      jsonl([
        { id: 'a1', question: '  Who wrote Hamlet?  ', answer: 'Shakespeare', source: 'quiz', extra: { nested: [1, 2] } },
        { id: 7, question: 'What is 6 * 7?', answer: 42 },
        { id: 'a3', question: 'Name a primary colour.', answer: ['red', 'blue', 'yellow'] },
        { id: 'a4', question: 'No gold here', answer: '' },
        { id: 'a5', question: 'Gold is null', answer: null },
        { id: 'a6', question: 'Empty gold list', answer: [], gold: 'not used: answer came first' },
      ]),
    );
    const { samples } = await collect({ path });
    expect(samples.map((s) => s.question)).toEqual([
      {
        schema_version: 1,
        id: 'a1',
        question: 'Who wrote Hamlet?',
        answer: 'Shakespeare',
        meta: { source: 'quiz', extra: { nested: [1, 2] } },
      },
      { schema_version: 1, id: '7', question: 'What is 6 * 7?', answer: '42' },
      {
        schema_version: 1,
        id: 'a3',
        question: 'Name a primary colour.',
        answer: 'red',
        meta: { answers: ['red', 'blue', 'yellow'] },
      },
      // An empty gold answer would match anything; it is dropped, and the field stays in meta.
      { schema_version: 1, id: 'a4', question: 'No gold here', meta: { answer: '' } },
      { schema_version: 1, id: 'a5', question: 'Gold is null', meta: { answer: null } },
      {
        schema_version: 1,
        id: 'a6',
        question: 'Empty gold list',
        meta: { answer: [], gold: 'not used: answer came first' },
      },
    ]);
  });

  it('tries the aliases in order', async () => {
    const path = file(
      'alias.jsonl',
      jsonl([
        { qid: 'x1', query: 'aliased question', gold: 'aliased answer' },
        // `question` comes before `query` in the alias list; the loser goes to meta.
        { _id: 'x2', query: 'second', question: 'first', target: 't' },
        { id: null, qid: 'x3', prompt: 'null id falls through to the next alias' },
      ]),
    );
    const { samples } = await collect({ path });
    expect(samples.map((s) => s.question)).toEqual([
      { schema_version: 1, id: 'x1', question: 'aliased question', answer: 'aliased answer' },
      { schema_version: 1, id: 'x2', question: 'first', answer: 't', meta: { query: 'second' } },
      { schema_version: 1, id: 'x3', question: 'null id falls through to the next alias', meta: { id: null } },
    ]);
  });

  it('uses configured alias lists', async () => {
    const path = file('custom.jsonl', jsonl([{ key: 'k1', text: 'custom field names', solution: 'yes', question: 'not me' }]));
    const { samples } = await collect({
      path,
      config: cfg({ fields: { id: ['key'], question: ['text'], answer: ['solution'] } }),
    });
    expect(samples[0]!.question).toEqual({
      schema_version: 1,
      id: 'k1',
      question: 'custom field names',
      answer: 'yes',
      meta: { question: 'not me' },
    });
  });

  it('keeps a __proto__ field as plain data', async () => {
    const path = file('proto.jsonl', '{"question": "q", "__proto__": {"polluted": true}}\n');
    const { samples } = await collect({ path });
    const meta = samples[0]!.question.meta!;
    expect(Object.getPrototypeOf(meta)).toBe(Object.prototype);
    expect(Object.hasOwn(meta, '__proto__')).toBe(true);
    expect(JSON.stringify(meta)).toBe('{"__proto__":{"polluted":true}}');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});

describe('formats', () => {
  it('reads a pretty-printed JSON array and reports elements by line', async () => {
    const text = JSON.stringify(
      [
        { id: 'j1', question: 'first', answer: 'a' },
        { id: 'j2', question: 'second with "quotes", [brackets] and {braces}' },
        { id: 'j3', prompt: 42 },
      ],
      null,
      2,
    );
    const path = file('array.json', text);
    const good = await collect({ path, config: cfg({ on_bad_row: 'skip' }) });
    expect(good.samples.map((s) => s.question.question)).toEqual(['first', 'second with "quotes", [brackets] and {braces}']);
    const line = text.split('\n').findIndex((l) => l.includes('"j3"')); // the element opens one line above its id
    expect(good.report.badRows).toEqual([{ line, field: 'prompt', message: 'prompt: expected a string, got number' }]);

    const err = await failure(collect({ path }));
    expect(err.message).toBe(`${path}:${line}: prompt: expected a string, got number`);
  });

  it('wants an array at the top of a JSON file, and objects in it', async () => {
    const obj = file('object.json', '[{"question": "fine"}, 7, "text"]');
    const { report } = await collect({ path: obj, config: cfg({ on_bad_row: 'skip' }) });
    expect(report.badRows.map((b) => b.message)).toEqual(['expected an object, got number', 'expected an object, got string']);
    const top = file('top.json', '\n\n{\n  "data": [{"question": "q"}]\n}\n');
    const err = await failure(collect({ path: top, config: cfg({ format: 'json' }) }));
    expect(err.message).toBe(`${top}: expected a JSON array of question objects, got object`);
  });

  it('reports the line of a syntax error in a JSON array, even in skip mode', async () => {
    const path = file('broken.json', '[\n  {"question": "ok"},\n  {"question": "broken",,},\n  {"question": "ok too"}\n]\n');
    for (const on_bad_row of ['error', 'skip']) {
      const err = await failure(collect({ path, config: cfg({ on_bad_row }) }));
      expect(err.line).toBe(3);
      expect(err.message).toMatch(new RegExp(`^${path}:3: invalid JSON: `));
    }
  });

  it('reads CSV with a BOM, a quoted field with newlines, and reports record start lines', async () => {
    const csv =
      '\uFEFFid,question,answer,topic\r\n' +
      'c1,"A question\r\nthat spans\r\nthree lines",yes,t1\r\n' +
      '\r\n' +
      'c2,"Has ""quotes"", and a comma",no,t2\r\n' +
      'c3,,x,t3\r\n' +
      ',,,\r\n' +
      'c4,last one,,t4';
    const path = file('q.csv', csv);
    const { samples, report } = await collect({ path, config: cfg({ on_bad_row: 'skip' }) });
    expect(samples.map((s) => s.question)).toEqual([
      { schema_version: 1, id: 'c1', question: 'A question\r\nthat spans\r\nthree lines', answer: 'yes', meta: { topic: 't1' } },
      { schema_version: 1, id: 'c2', question: 'Has "quotes", and a comma', answer: 'no', meta: { topic: 't2' } },
      { schema_version: 1, id: 'c4', question: 'last one', meta: { topic: 't4', answer: '' } },
    ]);
    // c3 starts on line 7: header 1, c1 on 2–4, a blank line 5, c2 on 6.
    expect(report.badRows).toEqual([{ line: 7, field: 'question', message: 'question: empty' }]);
    expect(report.rows).toBe(4);

    const err = await failure(collect({ path }));
    expect(err.message).toBe(`${path}:7: question: empty`);

    // The same bytes fed one at a time: line numbers must not depend on chunk boundaries.
    const bytes = readFileSync(path);
    const stdin = Readable.from(Array.from(bytes, (b) => Buffer.from([b])));
    const byByte = await collect({ path: '-', stdin, config: cfg({ format: 'csv', on_bad_row: 'skip' }) });
    expect(byByte.samples).toEqual(samples);
    expect(byByte.report.badRows).toEqual(report.badRows);
  });

  it('counts lines right in CSV with LF, CRLF and CR line ends', async () => {
    for (const eol of ['\n', '\r\n', '\r']) {
      const rows = ['id,question', '1,"two', 'lines"', '2,ok', '', '3,"x"y', '4,never'];
      const path = file('eol.csv', rows.join(eol) + eol);
      const err = await failure(collect({ path }));
      expect(err.line).toBe(6);
      expect(err.message).toMatch(new RegExp(`^${path}:6: CSV: Invalid Closing Quote: got "y" instead of delimiter`));
      const good = file('eol-good.csv', ['id,question', '1,"two', 'lines"', '', '2,', '3,fine'].join(eol) + eol);
      const { report } = await collect({ path: good, config: cfg({ on_bad_row: 'skip' }) });
      expect(report.badRows).toEqual([{ line: 5, field: 'question', message: 'question: empty' }]);
    }
  });

  it('reports a CSV record by the line it starts on when it spans several', async () => {
    const path = file('multi.csv', 'question,id\n"one\ntwo\nthree",ok\n"four\nfive",true,extra\n');
    const err = await failure(collect({ path }));
    expect(err.message).toBe(`${path}:5: has 3 fields, the header has 2`);
  });

  it('treats a broken CSV quote as fatal, even in skip mode', async () => {
    const path = file('badquote.csv', 'id,question\n1,fine\n2,"bad"x\n3,never reached\n');
    const err = await failure(collect({ path, config: cfg({ on_bad_row: 'skip' }) }));
    expect(err.message).toMatch(new RegExp(`^${path}:3: CSV: `));
  });

  it('stops at a CSV record longer than the cap, which it cannot skip safely', async () => {
    const path = file('long.csv', `id,question\n1,short\n2,"${'x'.repeat(5000)}"\n3,after\n`);
    const err = await failure(collect({ path, maxLineBytes: 1000, config: cfg({ on_bad_row: 'skip' }) }));
    expect(err.message).toMatch(new RegExp(`^${path}:3: CSV: Max Record Size`));
  });

  it('reads TSV by extension', async () => {
    const path = file('q.tsv', 'id\tquestion\nt1\tcommas, stay, inside\n');
    expect((await collect({ path })).samples[0]!.question).toMatchObject({ id: 't1', question: 'commas, stay, inside' });
  });

  it('sniffs the format when the extension says nothing', async () => {
    const asJsonl = file('questions.txt', '\n  {"question": "from jsonl"}\n');
    const asJson = file('questions.data', '  [{"question": "from json"}]');
    const asCsv = file('questions', 'question\nfrom csv\n');
    expect((await collect({ path: asJsonl })).samples[0]!.question.question).toBe('from jsonl');
    expect((await collect({ path: asJson })).samples[0]!.question.question).toBe('from json');
    expect((await collect({ path: asCsv })).samples[0]!.question.question).toBe('from csv');
  });

  it('reads JSON Lines written under a .json name', async () => {
    const path = file('hf.json', jsonl([{ question: 'one' }, { question: 'two' }]));
    expect((await collect({ path })).samples.map((s) => s.question.question)).toEqual(['one', 'two']);
  });

  it('honours an explicit format', async () => {
    const path = file('explicit.txt', 'question\nfrom csv\n');
    expect((await collect({ path, config: cfg({ format: 'csv' }) })).samples[0]!.question.question).toBe('from csv');
    const err = await failure(collect({ path, config: cfg({ format: 'jsonl' }) }));
    expect(err.message).toMatch(new RegExp(`^${path}:1: invalid JSON`));
  });

  it('strips a BOM from JSONL and skips blank lines', async () => {
    const path = file('bom.jsonl', '\uFEFF{"id": "b1", "question": "bom"}\n\n   \n{"id": "b2", "question": "after blanks"}\r\n');
    const { samples, report } = await collect({ path });
    expect(samples.map((s) => s.sample_id)).toEqual(['b1', 'b2']);
    expect(report.rows).toBe(2);
  });

  it('reads gzip-compressed input', async () => {
    const path = file('q.jsonl.gz', gzipSync(jsonl([{ question: 'zipped' }])));
    expect((await collect({ path })).samples[0]!.question.question).toBe('zipped');
  });

  it('reads stdin', async () => {
    const stdin = Readable.from([Buffer.from('{"question": "from '), Buffer.from('stdin"}\n{"question": "two"}\n')]);
    const { samples } = await collect({ path: '-', stdin });
    expect(samples.map((s) => s.question.question)).toEqual(['from stdin', 'two']);
    const err = await failure(countSamples({ path: '-', config: cfg(), stdin: Readable.from([]) }));
    expect(err.code).toBe('BAD_USAGE');
  });

  it('names stdin in errors', async () => {
    const stdin = Readable.from(['{"question": 1}\n']);
    const err = await failure(collect({ path: '-', stdin }));
    expect(err.message).toBe('<stdin>:1: question: expected a string, got number');
  });
});

describe('duplicates', () => {
  it('keeps the first row of an id and counts the rest', async () => {
    const path = file(
      'dups.jsonl',
      jsonl([
        { id: 'd1', question: 'first d1' },
        { id: 'd2', question: 'd2' },
        { id: 'd1', question: 'second d1' },
        { question: 'What  is X?' },
        { question: 'what is x?' },
        { id: 'd3', question: 'what is x?' },
      ]),
    );
    const { samples, report } = await collect({ path });
    expect(samples.map((s) => s.question.question)).toEqual(['first d1', 'd2', 'What  is X?', 'what is x?']);
    expect(samples[2]!.sample_id).toBe(questionIdFor('what is x?'));
    expect(report).toMatchObject({ rows: 6, questions: 4, duplicates: 2 });
  });
});

describe('selection', () => {
  const all = Array.from({ length: 40 }, (_, i) => `q${i}`);

  it('shuffles reproducibly for a seed, differently across seeds', async () => {
    const a = await ids(forty, { shuffle: true, seed: 1 });
    const b = await ids(forty, { shuffle: true, seed: 1 });
    const c = await ids(forty, { shuffle: true, seed: 2 });
    expect(a).toEqual(b);
    expect(a).not.toEqual(c);
    expect(a).not.toEqual(all);
    expect([...a].sort()).toEqual([...all].sort());
    expect([...c].sort()).toEqual([...all].sort());
  });

  it('shuffles independently of the file order', async () => {
    const rows = Array.from({ length: 40 }, (_, i) => ({ id: `q${i}`, question: `Question number ${i}?` }));
    const reversed = file('reversed.jsonl', jsonl([...rows].reverse()));
    expect(await ids(reversed, { shuffle: true, seed: 5 })).toEqual(await ids(forty, { shuffle: true, seed: 5 }));
  });

  it('limits questions, not samples', async () => {
    expect(await ids(forty, { limit: 3 })).toEqual(['q0', 'q1', 'q2']);
    expect(await ids(forty, { limit: 2, samples: 2 })).toEqual(['q0#0', 'q0#1', 'q1#0', 'q1#1']);
    const shuffled = await ids(forty, { shuffle: true, seed: 9 });
    expect(await ids(forty, { shuffle: true, seed: 9, limit: 5 })).toEqual(shuffled.slice(0, 5));
    expect(await ids(forty, { limit: 100 })).toEqual(all);
  });

  it('partitions questions across shards', async () => {
    const parts = await Promise.all([0, 1, 2].map((i) => ids(forty, { shard: `${i}/3` })));
    for (const part of parts) expect(part.length).toBeGreaterThan(0);
    expect(parts.flat().sort()).toEqual([...all].sort());
    expect(new Set(parts.flat()).size).toBe(40);
    // Each shard keeps file order, and the same shard is the same set under a shuffle.
    for (const [i, part] of parts.entries()) {
      expect(part).toEqual(all.filter((id) => part.includes(id)));
      expect((await ids(forty, { shard: `${i}/3`, shuffle: true, seed: 3 })).sort()).toEqual([...part].sort());
    }
    const { report } = await collect({ path: forty, config: cfg({ shard: '1/3' }) });
    expect(report.outOfShard).toBe(40 - parts[1]!.length);
  });

  it('applies the limit to each shard after sharding', async () => {
    const parts = await Promise.all([0, 1, 2].map((i) => ids(forty, { shard: `${i}/3` })));
    for (const [i, part] of parts.entries()) {
      expect(await ids(forty, { shard: `${i}/3`, limit: 2 })).toEqual(part.slice(0, 2));
    }
  });

  it('rejects an out-of-range shard', async () => {
    const err = await failure(collect({ path: forty, config: cfg({ shard: '3/3' }) }));
    expect(err.code).toBe('BAD_USAGE');
  });

  it('draws k samples per question', async () => {
    const { samples, report } = await collect({ path: forty, config: cfg({ samples: 3, limit: 2 }) });
    expect(samples.map((s) => [s.sample_id, s.sample_index, s.question.id])).toEqual([
      ['q0#0', 0, 'q0'],
      ['q0#1', 1, 'q0'],
      ['q0#2', 2, 'q0'],
      ['q1#0', 0, 'q1'],
      ['q1#1', 1, 'q1'],
      ['q1#2', 2, 'q1'],
    ]);
    expect(report).toMatchObject({ selected: 2, emitted: 6 });
  });

  it('skips samples the run already holds', async () => {
    const done = new Set(['q1', 'q3#1', 'q0#0', 'q2#2']);
    const one = await collect({ path: forty, config: cfg({ limit: 4 }), isDone: (id) => done.has(id) });
    expect(one.samples.map((s) => s.sample_id)).toEqual(['q0', 'q2', 'q3']);
    expect(one.report).toMatchObject({ skippedDone: 1, emitted: 3 });

    const three = await collect({ path: forty, config: cfg({ limit: 4, samples: 3 }), isDone: (id) => done.has(id) });
    expect(three.samples.map((s) => s.sample_id)).toEqual([
      'q0#1', 'q0#2', 'q1#0', 'q1#1', 'q1#2', 'q2#0', 'q2#1', 'q3#0', 'q3#2',
    ]);
    expect(three.report).toMatchObject({ skippedDone: 3, emitted: 9 });
    // The progress total ignores what is done.
    expect(await countSamples({ path: forty, config: cfg({ limit: 4, samples: 3 }), isDone: () => true })).toBe(12);
  });

  it('can be iterated only once', async () => {
    const { samples } = sampleQuestions({ path: forty, config: cfg() });
    for await (const _ of samples) break;
    expect(() => samples[Symbol.asyncIterator]()).toThrow(/only once/);
  });
});

describe('bad rows', () => {
  const rows = [
    '{"id": "ok1", "question": "fine"}', // 1
    '{"id": "broken", "question": ', // 2
    '["not", "an", "object"]', // 3
    '{"id": "nq", "text": "no question field"}', // 4
    '{"id": "eq", "question": "   "}', // 5
    '{"id": "nsq", "question": ["a list"]}', // 6
    '{"id": true, "question": "boolean id"}', // 7
    '{"id": {"x": 1}, "question": "object id"}', // 8
    '{"id": 12345678901234567890, "question": "id too large to be exact"}', // 9
    '{"id": "ans", "question": "object answer", "answer": {"x": 1}}', // 10
    '', // 11, blank: not a row
    '{"id": "ok2", "question": "fine too"}', // 12
    '{"id": "ans2", "question": "list answer", "gold": ["ok", {"x": 1}]}', // 13
  ];
  const expected = [
    { line: 2, field: undefined, message: /^invalid JSON: / },
    { line: 3, field: undefined, message: /^expected an object, got array$/ },
    { line: 4, field: 'question', message: /^question: missing \(looked for question, query, prompt, problem, input\)$/ },
    { line: 5, field: 'question', message: /^question: empty$/ },
    { line: 6, field: 'question', message: /^question: expected a string, got array$/ },
    { line: 7, field: 'id', message: /^id: expected a string or number, got boolean$/ },
    { line: 8, field: 'id', message: /^id: expected a string or number, got object$/ },
    { line: 9, field: 'id', message: /^id: integer .* too large to read exactly; write it as a string$/ },
    { line: 10, field: 'answer', message: /^answer: expected a string, a number or a list of strings, got object$/ },
    { line: 13, field: 'gold', message: /^gold: expected a string, a number or a list of strings, got a list holding object$/ },
  ];

  it.each(expected)('line $line is an error naming file, line and field', async ({ line, field, message }) => {
    // Only the good first row and the bad row under test, at the same line number.
    const lines = rows.map((r, i) => (i === 0 || i === line - 1 ? r : ''));
    const path = file('bad.jsonl', lines.join('\n'));
    const err = await failure(collect({ path }));
    expect(err.code).toBe('BAD_INPUT');
    expect(err.file).toBe(path);
    expect(err.line).toBe(line);
    expect(err.field).toBe(field);
    expect(err.message.startsWith(`${path}:${line}: `)).toBe(true);
    expect(err.message.slice(`${path}:${line}: `.length)).toMatch(message);
  });

  it('skips and counts them in skip mode', async () => {
    const path = file('bad.jsonl', rows.join('\n'));
    const { samples, report } = await collect({ path, config: cfg({ on_bad_row: 'skip' }) });
    expect(samples.map((s) => s.sample_id)).toEqual(['ok1', 'ok2']);
    expect(report.rows).toBe(12);
    expect(report.badRows.map((b) => b.line)).toEqual(expected.map((e) => e.line));
    report.badRows.forEach((b, i) => {
      expect(b.field).toBe(expected[i]!.field);
      expect(b.message).toMatch(expected[i]!.message);
    });
  });

  it('treats invalid UTF-8 as a bad row', async () => {
    const path = file(
      'utf8.jsonl',
      Buffer.concat([
        Buffer.from('{"question": "good"}\n{"question": "bad @ byte"}\n'),
        Buffer.from('{"question": "'),
        Buffer.from([0xc3, 0x28]), // a lead byte without its continuation
        Buffer.from('"}\n{"question": "café"}\n'),
      ]),
    );
    const err = await failure(collect({ path }));
    expect(err.message).toBe(`${path}:3: invalid UTF-8`);
    const { samples, report } = await collect({ path, config: cfg({ on_bad_row: 'skip' }) });
    expect(samples.map((s) => s.question.question)).toEqual(['good', 'bad @ byte', 'café']);
    expect(report.badRows).toEqual([{ line: 3, message: 'invalid UTF-8' }]);
  });

  it('treats invalid UTF-8 in a CSV field and in a JSON array element as a bad row', async () => {
    const csv = file(
      'utf8.csv',
      Buffer.concat([Buffer.from('id,question\n1,ok\n2,"multi\nline '), Buffer.from([0xff]), Buffer.from('"\n3,fine\n')]),
    );
    const c = await collect({ path: csv, config: cfg({ on_bad_row: 'skip' }) });
    expect(c.samples.map((s) => s.sample_id)).toEqual(['1', '3']);
    expect(c.report.badRows).toEqual([{ line: 3, field: 'question', message: 'question: invalid UTF-8' }]);

    const json = file(
      'utf8.json',
      Buffer.concat([Buffer.from('[\n{"question": "ok"},\n{"question":\n "bad '), Buffer.from([0xfe]), Buffer.from('"},\n{"question": "fine"}\n]')]),
    );
    const j = await collect({ path: json, config: cfg({ on_bad_row: 'skip' }) });
    expect(j.samples.map((s) => s.question.question)).toEqual(['ok', 'fine']);
    expect(j.report.badRows).toEqual([{ line: 3, message: 'invalid UTF-8' }]);
  });

  it('treats an overlong line as a bad row without holding it', async () => {
    const path = file('long.jsonl', jsonl([{ question: 'short' }, { question: 'x'.repeat(5000) }, { question: 'after' }]));
    const err = await failure(collect({ path, maxLineBytes: 1000 }));
    expect(err.message).toBe(`${path}:2: line is longer than 1000 bytes`);
    const { samples, report } = await collect({ path, maxLineBytes: 1000, config: cfg({ on_bad_row: 'skip' }) });
    expect(samples.map((s) => s.question.question)).toEqual(['short', 'after']);
    expect(report.badRows).toEqual([{ line: 2, message: 'line is longer than 1000 bytes' }]);
  });

  it('refuses a file where every row is bad, even in skip mode', async () => {
    const path = file('allbad.jsonl', jsonl([{ text: 'a' }, { text: 'b' }]));
    const err = await failure(collect({ path, config: cfg({ on_bad_row: 'skip' }) }));
    expect(err.message).toMatch(new RegExp(`^${path}: no valid questions: all 2 rows are bad \\(first, line 1: question: missing`));
  });
});

describe('empty and unreadable input', () => {
  it.each([
    ['empty.jsonl', ''],
    ['blank.jsonl', '\n  \n\n'],
    ['empty.json', '[]'],
    ['header.csv', 'id,question\n'],
    ['empty.csv', ''],
    ['bom.jsonl', '\uFEFF'],
  ])('%s: no questions found, in either mode', async (name, content) => {
    const path = file(name, content);
    for (const on_bad_row of ['error', 'skip']) {
      const err = await failure(collect({ path, config: cfg({ on_bad_row }) }));
      expect(err.message).toBe(`${path}: no questions found`);
    }
  });

  it('says why a file cannot be read', async () => {
    const path = join(dir, 'does-not-exist.jsonl');
    const err = await failure(collect({ path }));
    expect(err.code).toBe('BAD_INPUT');
    expect(err.message).toMatch(new RegExp(`^${path}: cannot read: ENOENT`));
    const dirErr = await failure(collect({ path: dir, config: cfg({ format: 'jsonl' }) }));
    expect(dirErr.message).toMatch(new RegExp(`^${dir}: cannot read: EISDIR`));
    expect((await failure(countSamples({ path, config: cfg() }))).message).toMatch(/ENOENT/);
  });

  it('says when a file is UTF-16', async () => {
    const path = file('utf16.jsonl', Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('{"question": "q"}\n', 'utf16le')]));
    const err = await failure(collect({ path }));
    expect(err.message).toBe(`${path}: the file is UTF-16; convert it to UTF-8`);
  });
});

describe('streaming', () => {
  it('does not wait for more input once the limit is reached', async () => {
    const stdin = new PassThrough();
    stdin.write('{"question": "one"}\n{"question": "two"}\n{"question": "three"}\n');
    // The stream stays open, like a pipe whose writer is slow: the read must still finish.
    const { samples, report } = await collect({ path: '-', stdin, config: cfg({ limit: 2 }) });
    expect(samples.map((s) => s.question.question)).toEqual(['one', 'two']);
    expect(report.rows).toBe(2);
    stdin.end();
  });

  it('closes the file when the consumer stops early', async () => {
    const handles = () => process.getActiveResourcesInfo().filter((r) => r === 'FileHandle').length;
    const before = handles();
    const { samples } = sampleQuestions({ path: forty, config: cfg() });
    for await (const s of samples) if (s.sample_id === 'q3') break;
    await new Promise((r) => setTimeout(r, 50));
    expect(handles()).toBe(before);
  });

  const big = file(
    'big.jsonl',
    Array.from({ length: 200_000 }, (_, i) => `{"id": "r${i}", "question": "row ${i}", "pad": "${'p'.repeat(20)}"}`).join('\n'),
  );

  it('stops reading once the limit is reached', async () => {
    const started = performance.now();
    const { samples, report } = await collect({ path: big, config: cfg({ limit: 10 }) });
    const elapsed = performance.now() - started;
    expect(samples.map((s) => s.sample_id)).toEqual(Array.from({ length: 10 }, (_, i) => `r${i}`));
    expect(report.rows).toBe(10);
    expect(elapsed).toBeLessThan(1000);
  });

  it('stops early with a shard too, and counts without reading everything', async () => {
    const { report } = await collect({ path: big, config: cfg({ limit: 10, shard: '2/4' }) });
    expect(report.selected).toBe(10);
    expect(report.rows).toBeLessThan(200);
    expect(await countSamples({ path: big, config: cfg({ limit: 10, samples: 4 }) })).toBe(40);
  });

  it('reads the whole file when it shuffles, keeping only what the limit needs', async () => {
    const { samples, report } = await collect({ path: big, config: cfg({ limit: 10, shuffle: true, seed: 4 }) });
    expect(report.rows).toBe(200_000);
    expect(report.questions).toBe(200_000);
    expect(samples).toHaveLength(10);
    expect(samples.map((s) => s.sample_id)).not.toEqual(Array.from({ length: 10 }, (_, i) => `r${i}`));
  });
});
