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
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim, type Sim } from '../../sim/server.js';
import { CORPUS_SERVER, FIXTURES, runCli, tempDir, writeConfig } from '../helpers.js';
import { checkRunDir } from './util.js';

const DIALECTS = ['tulu', 'mcp-xml', 'native'] as const;

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

/** Words that the sim, searching with words from the question, finds in the corpus below. */
const QUESTION = 'In which version of Firefox was the CSS property grid first supported?';

/** A corpus whose every text field holds junk: control characters, ANSI colours, lone surrogates, CRLF, a C1 control. */
function dirtyCorpus(dir: string): string {
  const file = join(dir, 'dirty.jsonl');
  const docs = [
    {
      paperId: 'css\u0000grid',
      title: 'CSS property:\u0007 grid \ud83d',
      authors: ['MDN\u001b[31m contributors\u001b[0m'],
      year: 2017,
      venue: 'MDN\u0085',
      abstract: 'The CSS property grid\u0000 was first supported in Firefox 52.\r\nFirefox 52 was\u000b released in\rMarch 2017 \udc00 with grid.\u007f',
    },
    {
      paperId: 'html.elements.video',
      title: 'HTML element: video',
      authors: ['MDN contributors'],
      year: 2010,
      venue: 'MDN',
      abstract: 'Firefox first supported the HTML element video in version 3.5.\u0000\u0000 Clean otherwise: café 😀 ✓',
    },
  ];
  writeFileSync(file, docs.map((d) => JSON.stringify(d)).join('\n') + '\n');
  return file;
}

/** An MCP server of this test's own: `pubmed_search` answers in plain text with junk, and every other call fails with junk in its error. */
function dirtyTextServer(dir: string): string {
  const sdk = (p: string): string => pathToFileURL(join(PACKAGE_ROOT, 'node_modules/@modelcontextprotocol/sdk/dist/esm', p)).href;
  const file = join(dir, 'dirty-server.mjs');
  writeFileSync(
    file,
    [
      `import { McpServer } from ${JSON.stringify(sdk('server/mcp.js'))};`,
      `import { StdioServerTransport } from ${JSON.stringify(sdk('server/stdio.js'))};`,
      `import { z } from ${JSON.stringify(pathToFileURL(join(PACKAGE_ROOT, 'node_modules/zod/index.js')).href)};`,
      `const server = new McpServer({ name: 'dirty', version: '1.0.0' });`,
      `let n = 0;`,
      `server.registerTool('pubmed_search', { description: 'Search', inputSchema: { query: z.string() } }, async ({ query }) => {`,
      `  n++;`,
      `  if (n % 2 === 0) return { isError: true, content: [{ type: 'text', text: 'upstream\\u0000 failed \\ud800 with\\u001b[1m ESC\\r\\n' }] };`,
      `  return { content: [{ type: 'text', text: 'Firefox 52\\u0000 first supported the CSS property grid.\\r\\nIt was\\u0007 released in 2017 \\ude00\\u009f.' }] };`,
      `});`,
      `await server.connect(new StdioServerTransport());`,
    ].join('\n'),
  );
  return file;
}

let sim: Sim;
beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 14, misbehave: { dirty_text: 1 } });
});
afterAll(() => sim.close());

function questions(dir: string): string {
  const file = join(dir, 'q.jsonl');
  writeFileSync(
    file,
    [
      { id: 'grid', question: QUESTION, answer: '52' },
      { id: 'video', question: 'In which version did Firefox first support the HTML element video?', answer: '3.5' },
      { id: 'grid-again', question: 'Which Firefox version first supported CSS grid, and when was it released?' },
    ]
      .map((q) => JSON.stringify(q))
      .join('\n') + '\n',
  );
  return file;
}

describe.each(DIALECTS)('%s: a model and tools that write control characters and lone surrogates', (dialect) => {
  const dir = tempDir(`tf-text-${dialect}-`);
  const run = join(dir, 'run');
  const callLog = join(dir, 'calls.jsonl');

  beforeAll(async () => {
    const config = writeConfig(dir, sim.url, {
      dialect,
      questions: { path: questions(dir) },
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, '--corpus', dirtyCorpus(dir)], env: { CORPUS_CALL_LOG: callLog } } },
    });
    const res = await runCli(['generate', '--config', config]);
    expect(res.code, res.stderr).toBe(0);
  }, 60_000);

  it('every record is clean text, the removals are recorded as control_chars repairs, and the tool got clean arguments', () => {
    const records = [...expectCleanJsonl(join(run, 'trajectories.jsonl')), ...(checkRunDir(run).failed.length > 0 ? expectCleanJsonl(join(run, 'failures.jsonl')) : [])];
    expectClean(JSON.parse(readFileSync(join(run, 'manifest.json'), 'utf8')), 'manifest.json');
    expect(records).toHaveLength(3);
    const repairs = records.flatMap((t) => t.repairs.filter((r: { kind: string }) => r.kind === 'control_chars').map((r: { detail: string }) => r.detail));
    // The sim dirtied every turn, and the corpus every result: both sides show in the repairs.
    expect(repairs.some((d: string) => d.startsWith('model text: removed'))).toBe(true);
    expect(repairs.some((d: string) => /^tool text of \S+ \(pubmed_search\): removed .*NUL/.test(d))).toBe(true);
    if (dialect !== 'tulu') expect(repairs.some((d: string) => /^arguments of pubmed_search: removed .*NUL.*lone surrogate/.test(d))).toBe(true);
    // Every turn of every record was dirty when the sim sent it (its text, or a native call's
    // arguments when the turn had no text): at least one repair from the model per turn kept.
    for (const t of records) {
      const fromModel = t.repairs.filter((r: { kind: string; detail: string }) => r.kind === 'control_chars' && /^(model text|arguments of)/.test(r.detail));
      expect(new Set(fromModel.map((r: { turn: number }) => r.turn)).size).toBe(t.turns);
    }
    // What reached the tool server: no junk in any query.
    const calls = readFileSync(callLog, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
    expect(calls.length).toBeGreaterThan(0);
    for (const c of calls) expectClean(c.query, 'a query the corpus server received');
    // The answer is still found and cited, through the cleaned id of the dirty document.
    const grid = records.find((t) => t.id === 'grid')!;
    expect(grid.status).toBe('ok');
    expect(grid.final_answer).toMatch(/52/);
    expect(grid.interleaved_text).toContain('first supported in Firefox 52.\nFirefox 52 was released in\nMarch 2017  with grid.');
  });

  it.each(['messages', 'sharegpt', 'text'])('export --format %s: clean text a strict UTF-8 reader takes', async (format) => {
    const out = join(dir, `export-${format}.jsonl`);
    const res = await runCli(['export', run, '--format', format, '--out', out, '--all']);
    expect(res.code, res.stderr).toBe(0);
    const rows = expectCleanJsonl(out);
    expect(rows.length).toBe(3);
    // Nothing left to clean: the records already were.
    expect(res.stderr).not.toMatch(/control characters or lone surrogates removed/);
    if (format === 'text') {
      for (const r of rows) {
        const points = [...r.text];
        for (const [start, end] of r.mask_spans) {
          // Widened to whole tokens (#16): at most the whitespace around the tags joins the span.
          const span = points.slice(start, end).join('').trim();
          expect(span.startsWith('<tool_output')).toBe(true);
          expect(span.endsWith('</tool_output>')).toBe(true);
        }
      }
    }
  });
});

describe.each(DIALECTS)('%s: a tool server that answers and fails with junk in plain text', (dialect) => {
  it('the results and the errors are cleaned before the model sees them, and recorded', async () => {
    const dir = tempDir(`tf-text-tool-${dialect}-`);
    const config = writeConfig(dir, sim.url, {
      dialect,
      questions: { path: questions(dir) },
      mcpServers: { corpus: { command: process.execPath, args: [dirtyTextServer(dir)] } },
    });
    const res = await runCli(['generate', '--config', config]);
    expect(res.code, res.stderr).toBe(0);
    const run = join(dir, 'run');
    const { ok, failed } = checkRunDir(run);
    const records = [...expectCleanJsonl(join(run, 'trajectories.jsonl')), ...(failed.length > 0 ? expectCleanJsonl(join(run, 'failures.jsonl')) : [])];
    expect(records.length).toBe(ok.length + failed.length);
    const calls = records.flatMap((t) => t.tool_calls);
    const answered = calls.filter((c: { error?: string }) => c.error === undefined);
    const errored = calls.filter((c: { error?: string }) => c.error !== undefined);
    expect(answered.length).toBeGreaterThan(0);
    expect(errored.length).toBeGreaterThan(0);
    for (const c of answered) expect(c.output_text).toContain('Firefox 52 first supported the CSS property grid.\nIt was released in 2017 .');
    for (const c of errored) expect(c.error).toMatch(/upstream failed {2}with\[1m ESC/);
    const details = records.flatMap((t) => t.repairs.filter((r: { kind: string }) => r.kind === 'control_chars').map((r: { detail: string }) => r.detail));
    expect(details.filter((d: string) => d.startsWith('tool text of')).length).toBe(calls.filter((c: { skipped: boolean }) => !c.skipped).length);
  }, 60_000);
});

describe('generate and a questions file with a lone surrogate escape', () => {
  // Valid UTF-8 bytes, valid JSON, and yet no text: `\ud800` is half of a surrogate pair.
  const rows = '{"id": "a", "question": "In which version of Firefox was CSS grid first supported?"}\n{"id": "b", "question": "What is \\ud800 this?"}\n';

  it('is refused like invalid UTF-8: exit 2, the file, the line and the field, nothing written', async () => {
    const dir = tempDir('tf-text-q-');
    const q = join(dir, 'q.jsonl');
    writeFileSync(q, rows);
    const res = await runCli(['generate', '--config', writeConfig(dir, sim.url), '--questions', q]);
    expect(res.code, res.stderr).toBe(2);
    expect(res.stderr.trim()).toBe(`error: ${q}:2: question: a lone surrogate (U+D800) at character 9: not text that UTF-8 can hold`);
    expect(existsSync(join(dir, 'run', 'manifest.json'))).toBe(false);
  });

  it('with --on-bad-row skip: skipped and counted, the other row runs', async () => {
    const dir = tempDir('tf-text-q-');
    const q = join(dir, 'q.jsonl');
    writeFileSync(q, rows);
    const res = await runCli(['generate', '--config', writeConfig(dir, sim.url), '--questions', q, '--on-bad-row', 'skip']);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/1 bad rows? skipped \(line 2: question: a lone surrogate/);
    const { ok, failed } = checkRunDir(join(dir, 'run'));
    expect([...ok, ...failed].map((t) => t.id)).toEqual(['a']);
  }, 60_000);
});

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
        // The result as the row sent it (a plain user turn: no <tool_output> it was never sent), cleaned.
        expect([...rows[0]!.text].slice(start, end).join('').trim()).toBe('Firefox 52 (2017)\nfirst  supported grid.');
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
