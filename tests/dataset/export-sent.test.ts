/**
 * The acceptance of #25 item 1: what is exported is what the endpoint was sent. Runs in the
 * three dialects and with data/configs/miroverse.yaml go through a logging proxy (tests/proxy.ts);
 * every accepted row exported with the defaults (`trajforge export --format messages`) equals,
 * message by message, the last request sent for its session plus the reply that ended it — for
 * the main agent with `final_answer: always`, the summary exchange included.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QWEN3, readJsonl, runCli, tempDir } from '../helpers.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim } from '../../sim/server.js';
import { readRun } from '../families-runs.js';
import type { Trajectory } from '../../schemas/index.js';
import { ChatTemplate } from '../../pipeline/core/tokens/chat-template.js';
import { loadHfTokenizer } from '../../pipeline/core/tokens/tokenizer.js';
import { dialectSentRun, lastRequest, miroverseSentRun, said, type Said, type SentRun } from './sent-runs.js';

const runs: SentRun[] = [];
beforeAll(async () => {
  // One after another: a 2-core machine.
  for (const d of ['tulu', 'mcp-xml', 'native'] as const) runs.push(await dialectSentRun(d, 10));
  runs.push(await miroverseSentRun(Number(process.env.MV_LIMIT ?? 12)));
}, 600_000);
afterAll(() => undefined);

async function exported(run: SentRun, args: string[] = []): Promise<Map<string, any>> {
  const out = join(tempDir('tf-sent-out-'), 'rows.jsonl');
  const r = await runCli(['export', run.dir, '--format', 'messages', '--out', out, ...args]);
  expect(r.code, r.stderr).toBe(0);
  return new Map(readJsonl(out).map((row) => [row.id as string, row]));
}

/** What the model was sent, then what it replied: the row the export must equal. */
function sentThenReplied(run: SentRun, id: string): Said[] | undefined {
  const t = run.ok.find((x) => x.id === id)!;
  const x = lastRequest(t, run.exchanges);
  if (x === undefined || x.reply === undefined) return undefined;
  return [...(x.body.messages ?? []).map(said), said(x.reply)];
}

/** The reply as the record keeps it: a repaired turn (a closed call, a cut at the stop string) is not the raw reply. */
function repairedAtEnd(run: SentRun, id: string): boolean {
  const t = run.ok.find((x) => x.id === id)!;
  return t.repairs.some((r) => r.turn === t.turns - 1 && r.kind !== 'forced_answer');
}

describe('exported = sent (#25 item 1)', () => {
  it('the runs have what the check needs: accepted rows of every run, nudges, parallel calls, summaries', () => {
    for (const run of runs) expect(run.ok.length, run.name).toBeGreaterThanOrEqual(4);
    expect(runs.some((r) => r.ok.some((t) => t.repairs.some((x) => x.kind === 'no_action')))).toBe(true);
    const native = runs.find((r) => r.name === 'native')!;
    expect(native.ok.some((t) => t.messages.some((m) => (m.tool_calls?.length ?? 0) > 1))).toBe(true);
  });

  for (const name of ['tulu', 'mcp-xml', 'native', 'miroverse'] as const) {
    it(`${name}: every accepted row whose turns are all trained equals the last request plus the final reply`, async () => {
      const run = runs.find((r) => r.name === name)!;
      const rows = await exported(run);
      let compared = 0;
      for (const t of run.ok) {
        if (t.repairs.some((r) => r.kind === 'no_action')) continue;
        const want = sentThenReplied(run, t.id);
        expect(want, `${t.id}: no request sent`).toBeDefined();
        const got = (rows.get(t.id)?.messages as any[]).map(said);
        expect(got.length, t.id).toBe(want!.length);
        expect(got.slice(0, -1), t.id).toEqual(want!.slice(0, -1));
        if (!repairedAtEnd(run, t.id)) expect(got.at(-1), t.id).toEqual(want!.at(-1));
        else expect(got.at(-1)!.role).toBe('assistant');
        compared++;
      }
      expect(compared, name).toBeGreaterThanOrEqual(3);
    });
  }

  it('with --untrained keep, rows with nudged turns equal what was sent too', async () => {
    let compared = 0;
    for (const run of runs) {
      const rows = await exported(run, ['--untrained', 'keep']);
      for (const t of run.ok.filter((x) => x.repairs.some((r) => r.kind === 'no_action'))) {
        const want = sentThenReplied(run, t.id)!;
        const got = (rows.get(t.id)?.messages as any[]).map(said);
        expect(got.slice(0, -1), t.id).toEqual(want.slice(0, -1));
        compared++;
      }
    }
    expect(compared).toBeGreaterThanOrEqual(2);
  });

  it('miroverse: a main session sent the summary prompt keeps the summary exchange in record and export', async () => {
    const run = runs.find((r) => r.name === 'miroverse')!;
    let withSummary = 0;
    // Failed sessions too: a record is what happened, whatever became of it.
    for (const t of [...run.ok, ...run.failed].filter((x) => x.agent === 'main' && x.reason !== 'parent_failed')) {
      const x = lastRequest(t, run.exchanges)!;
      const lastSent = x.body.messages!.at(-1)!;
      // The summary prompt is the last user turn of the last request.
      expect(lastSent.role, t.id).toBe('user');
      expect(t.messages.at(-2)!.content, t.id).toBe(lastSent.content);
      expect(said(t.messages.at(-1)!).content, t.id).toBe(said(x.reply!).content);
      withSummary++;
    }
    expect(withSummary).toBeGreaterThanOrEqual(4);
  });

  it('every row is accounted for: rows in = exported + each reason skipped, and the split rows make up the rows written (#25 item 11)', async () => {
    // The run with failed rows (they are skipped) in it.
    const run = [...runs].sort((a, b) => b.failed.length - a.failed.length)[0]!;
    const out = join(tempDir('tf-sent-counts-'), 'rows.jsonl');
    const r = await runCli(['export', run.dir, '--format', 'tokens', '--tokenizer', QWEN3, '--max-tokens', '2500', '--drop', 'tool_calls >= 3', '--out', out]);
    expect(r.code, r.stderr).toBe(0);
    const n = (what: string): number => Number(new RegExp(`(\\d+) ${what}`).exec(r.stderr)?.[1] ?? 0);
    const rows = readJsonl(out);
    const [inRows, written, exported, failed, unselected, dropped, droppedWhole] = ['rows in', 'written', 'exported', 'failed skipped', 'not selected', 'dropped over 2500', 'dropped whole'].map(n);
    const split = /(\d+) rows split into (\d+)/.exec(r.stderr);
    // The run makes every kind: failed rows, rows left out by --drop, rows split, parts over the limit.
    expect(split, r.stderr).not.toBeNull();
    expect(failed * unselected * dropped, r.stderr).toBeGreaterThan(0);
    expect(inRows, r.stderr).toBe(exported + droppedWhole + failed + unselected);
    expect(written).toBe(rows.length);
    expect(new Set(rows.map((x) => x.id)).size).toBe(exported);
    const parts = new Map<string, number>();
    for (const x of rows) parts.set(x.id, x.parts);
    expect(written + dropped).toBe([...parts.values()].reduce((a, b) => a + b, 0) + droppedWhole);
  });

  /** Trained turns with a think, and how many of those thinks Qwen3's template shows when it renders each row whole (as TRL's SFTTrainer does). */
  function thinksRendered(rows: readonly any[]): { thinks: number; shown: number } {
    const template = new ChatTemplate(loadHfTokenizer(QWEN3), undefined);
    let thinks = 0;
    let shown = 0;
    for (const row of rows) {
      const text = template.render(row.messages.map(({ train: _, ...m }: any) => m), row.tools, false);
      let at = 0;
      for (const m of row.messages) {
        if (m.role !== 'assistant' || !m.train) continue;
        const inline = /^<think>([\s\S]*?)<\/think>/.exec(m.content)?.[1];
        const think = (m.reasoning_content ?? inline ?? '').replace(/^\n+|\n+$/g, '');
        if (think.trim() === '') continue;
        thinks++;
        // Qwen3 writes a kept think as <think>\n…\n</think>.
        const found = text.indexOf(`<think>\n${think}\n</think>`, at);
        if (found !== -1) {
          shown++;
          at = found;
        }
      }
    }
    return { thinks, shown };
  }

  for (const name of ['tulu', 'mcp-xml', 'native', 'miroverse'] as const) {
    it(`${name}: with --tokenizer (Qwen3), every messages row rendered whole through its template keeps every think of a trained turn (#25 item 4)`, async () => {
      const run = runs.find((r) => r.name === name)!;
      const out = join(tempDir('tf-sent-split-'), 'rows.jsonl');
      const r = await runCli(['export', run.dir, '--format', 'messages', '--tokenizer', QWEN3, '--out', out]);
      expect(r.code, r.stderr).toBe(0);
      const rows = readJsonl(out);
      const split = thinksRendered(rows);
      expect(split.thinks, name).toBeGreaterThan(0);
      expect(split.shown, name).toBe(split.thinks);
      // Without the template the rows are whole, and the template drops thinks of trained turns: what the split is for
      // (native rows here send no reasoning back, so only their last turn has a think, which the template keeps).
      const whole = thinksRendered([...(await exported(run)).values()]);
      if (name !== 'native') expect(whole.shown, name).toBeLessThan(whole.thinks);
      // Every trained turn of the whole rows is trained once, in one of the parts.
      const trained = (rs: readonly any[]): number => rs.reduce((n, x) => n + x.messages.filter((m: any) => m.role === 'assistant' && m.train).length, 0);
      expect(trained(rows)).toBe(trained([...(await exported(run)).values()]));
      // The account adds up: rows in = exported + skipped; the split rows make up the rows written.
      const n = (what: string): number => Number(new RegExp(`(\\d+) ${what}`).exec(r.stderr)?.[1] ?? 0);
      const splitInto = /(\d+) rows split into (\d+)/.exec(r.stderr);
      if (whole.shown < whole.thinks) expect(splitInto, r.stderr).not.toBeNull();
      expect(n('rows in'), r.stderr).toBe(n('exported') + n('failed skipped'));
      expect(n('written')).toBe(rows.length);
      const parts = new Map<string, number>();
      for (const x of rows) parts.set(x.id, x.parts);
      expect(new Set(rows.map((x) => x.id)).size).toBe(n('exported'));
      expect(rows.length).toBe([...parts.values()].reduce((a, b) => a + b, 0));
      expect(Number(splitInto?.[2] ?? 0) - Number(splitInto?.[1] ?? 0)).toBe(rows.length - parts.size);
      expect(r.stderr).not.toContain('thinks not checked');
    });
  }

  for (const name of ['tulu', 'mcp-xml', 'native', 'miroverse'] as const) {
    it(`${name}: the text export holds only what was sent, tool results read from the record and masked (#25 item 2)`, async () => {
      const run = runs.find((r) => r.name === name)!;
      const out = join(tempDir('tf-sent-text-'), 'rows.jsonl');
      const r = await runCli(['export', run.dir, '--format', 'text', '--out', out]);
      expect(r.code, r.stderr).toBe(0);
      const rows = new Map(readJsonl(out).map((row) => [row.id as string, row]));
      let compared = 0;
      for (const t of run.ok) {
        if (t.repairs.some((x) => x.kind === 'no_action') || repairedAtEnd(run, t.id)) continue;
        const x = lastRequest(t, run.exchanges)!;
        const row = rows.get(t.id)!;
        const cps = [...row.text];
        const masked = (from: number, to: number): boolean => row.mask_spans.some(([s, e]: [number, number]) => s <= from && to <= e);
        const sent = [...x.body.messages!.slice(2).map(said), said(x.reply!)];
        // Every user and tool turn sent after the question is in the text, in order, and masked whole.
        let at = 0;
        for (const m of sent) {
          if (m.role === 'assistant') continue;
          const found = row.text.indexOf(m.content, at);
          expect(found, `${t.id}: a sent ${m.role} turn`).toBeGreaterThanOrEqual(0);
          const start = [...row.text.slice(0, found)].length;
          expect(masked(start, start + [...m.content].length), `${t.id}: ${m.role} turn at ${start} masked`).toBe(true);
          at = found + m.content.length;
        }
        if (name !== 'native') {
          // XML dialects: the text is exactly the turns sent after the question and the reply, joined by newlines.
          expect(row.text, t.id).toBe(sent.map((m) => m.content).join('\n'));
        } else {
          // Native: every model turn's text is there; the calls are written as <tool_call> JSON, an <answer> only if the model wrote one.
          for (const m of sent.filter((y) => y.role === 'assistant')) expect(row.text).toContain(m.content);
          if (!sent.some((m) => m.content.includes('<answer>'))) expect(row.text).not.toContain('<answer>');
        }
        // Nothing but sent turns is trained: the unmasked text is the model's own.
        const trained = cps.filter((_, i) => !masked(i, i + 1)).join('');
        const own = sent.filter((m) => m.role === 'assistant').map((m) => m.content).join('');
        if (name !== 'native') expect(trained.replaceAll('\n', ''), t.id).toBe(own.replaceAll('\n', ''));
        compared++;
      }
      expect(compared, name).toBeGreaterThanOrEqual(3);
    });
  }

  it('without a chat template the messages summary says thinks may be dropped', async () => {
    const run = runs.find((r) => r.name === 'tulu')!;
    const r = await runCli(['export', run.dir, '--format', 'messages', '--out', join(tempDir('tf-sent-nosplit-'), 'rows.jsonl')]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('thinks not checked');
    expect(r.stderr).not.toContain('rows split');
  });

  /** Each tool's description against what a real call showed the model: JSON only if it says JSON, snippets if it says snippets. */
  function checkDescriptions(rows: readonly Trajectory[]): number {
    let checked = 0;
    for (const t of rows) {
      const described = new Map((t.tools ?? []).map((x: any) => [x.function.name as string, x.function.description as string]));
      for (const c of t.tool_calls) {
        const desc = described.get(c.tool_name);
        if (desc === undefined || c.error !== undefined || c.message_index === undefined) continue;
        const shown = t.messages[c.message_index]!.content.replace(/^<tool_output>\n?/, '');
        if (/Returns JSON/.test(desc)) expect(() => JSON.parse(shown), `${t.id} ${c.tool_name}: described as JSON`).not.toThrow();
        if (desc.includes('<snippet id=')) expect(shown, `${t.id} ${c.tool_name}`).toContain('<snippet id="');
        if (desc.includes('Found N results')) expect(shown, `${t.id} ${c.tool_name}`).toMatch(/^Found \d+ results/);
        checked++;
      }
    }
    return checked;
  }

  it('bundled configs describe each tool by what a real call shows the model (#25 item 12)', async () => {
    const mv = runs.find((r) => r.name === 'miroverse')!;
    expect(checkDescriptions(mv.ok)).toBeGreaterThan(5);
    // The demo config (tulu) against the sim, through the CLI as a user runs it.
    const sim = await startSim({ port: 0, seed: 3 });
    try {
      const dir = join(tempDir('tf-sent-demo-'), 'run');
      const r = await runCli(['generate', '--config', join(PACKAGE_ROOT, 'data/configs/demo.yaml'), '--base-url', sim.url, '--out', dir, '--limit', '3', '--no-cache']);
      expect(r.code, r.stderr).toBe(0);
      const demo = readRun(dir);
      expect(checkDescriptions(demo.all)).toBeGreaterThan(2);
      for (const t of demo.all) for (const x of t.tools ?? []) expect(JSON.stringify(x)).not.toContain('Returns JSON');
    } finally {
      await sim.close();
    }
  });
});
