/**
 * Properties of the repairers and parsers that tests/dialects/* do not already state.
 *
 * Already there (tests/dialects/tulu.test.ts, "properties" and "linear time"): tulu.repairTurn
 * never throws on fragment soup, yields at most one action, keeps no <tool_output>, is
 * idempotent; parseTrajectory tiles its input; rendered tool output parses back as one
 * output; work grows linearly on one fixed pattern. tests/dialects/mcp-xml.test.ts: mcpXml
 * parseTrajectory tiles its input and stays linear on broken calls; repairTurn never throws
 * and keeps at most one call (12 fragments).
 *
 * Added here: any string at all (lone surrogates included) for both dialects; linear work on
 * random inputs at doubling sizes for both dialects, repairer and parser; mcp-xml's kept
 * text holds no tool output and its rendered output cannot forge structure; and random
 * valid trajectories surviving serialise → parse unchanged, in both dialects.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { mcpXml } from '../../pipeline/dialects/mcp-xml.js';
import { canonicalCall, tulu } from '../../pipeline/dialects/tulu.js';
import type { Dialect, FinishReason, ParsedCall, Segment, ToolDocument } from '../../pipeline/dialects/types.js';
import { FAULT_SEED, FULL } from './util.js';

const RUNS = FULL ? 5_000 : 600;
const finish = fc.constantFrom<FinishReason>('stop', 'length', 'other');
const anyString = fc.oneof(fc.string({ unit: 'binary', maxLength: 400 }), fc.string({ unit: 'grapheme', maxLength: 200 }));

const TULU_FRAGMENTS = ['<call_tool name="a">', "<call_tool name='b' k=1>", '<call_tool', '</call_tool>', '</call>', '<answer>', '</answer>', '<tool_output>', '</tool_output>', '<think>', '</think>', '<snippet id=x>', '</snippet>', '<cite id="1,2">', '</cite>', 'words ', '\n', '"', "'", '<', '>', '=', '/'];
const XML_FRAGMENTS = ['<use_mcp_tool>', '</use_mcp_tool>', '<server_name>s</server_name>', '<tool_name>t</tool_name>', '<server_name>', '<tool_name>', '<arguments>', '</arguments>', '{"q": "}"}', '<tool_output>', '</tool_output>', '<think>', '</think>', '<answer>', '</answer>', '\\boxed{', '}', '{', '\\{', 'words ', '\n', '<', '>'];
const soup = (fragments: string[]) => fc.array(fc.constantFrom(...fragments), { maxLength: 60 }).map((p) => p.join(''));

/** Turns this suite found breaking a property once; kept as fixed examples. */
const REGRESSIONS = [
  '<answer></answer><answer>',
  '<answer></answer>\\boxed{',
  '<answer><use_mcp_tool><server_name>s</server_name><tool_name>t</tool_name>',
  '<answer></answer><use_mcp_tool>',
  '<answer></answer><tool_output>',
  '\\boxed{}<use_mcp_tool><tool_name>{<server_name>s</server_name>',
];

const kinds = (segments: readonly Segment[]) => segments.filter((s) => s.kind !== 'text').map((s) => s.kind);
const count = (segments: readonly Segment[], kind: Segment['kind']) => segments.filter((s) => s.kind === kind).length;

describe.each([
  ['tulu', tulu, TULU_FRAGMENTS],
  ['mcp-xml', mcpXml, XML_FRAGMENTS],
] as [string, Dialect, string[]][])('%s: for any string', (_name, dialect, fragments) => {
  it('repairTurn returns without throwing, with at most one action, and keeps no tool output', () => {
    fc.assert(
      fc.property(fc.oneof(anyString, soup(fragments)), finish, (raw, f) => {
        const r = dialect.repairTurn(raw, f);
        expect(['call', 'answer', 'none']).toContain(r.action.kind);
        const segs = dialect.parseTrajectory(r.text).segments;
        expect(count(segs, 'output')).toBe(0);
        expect(count(segs, 'call') + count(segs, 'answer')).toBeLessThanOrEqual(1);
        if (r.action.kind === 'call') expect(count(segs, 'call')).toBe(1);
        // What is kept is what the model wrote, never more than it (plus the closing tags put back).
        expect(r.text.length).toBeLessThanOrEqual(raw.length + 64);
      }),
      // Found by this property with other seeds (and fixed): kept always one action.
      { numRuns: RUNS, seed: FAULT_SEED, examples: REGRESSIONS.map((raw) => [raw, 'stop'] as [string, FinishReason]) },
    );
  });

  it('parseTrajectory returns without throwing, and its segments tile the input with their offsets', () => {
    fc.assert(
      fc.property(fc.oneof(anyString, soup(fragments)), (text) => {
        const { segments } = dialect.parseTrajectory(text);
        let at = 0;
        for (const s of segments) {
          expect(s.offset).toBe(at);
          at += s.text.length;
        }
        expect(at).toBe(text.length);
      }),
      { numRuns: RUNS, seed: FAULT_SEED },
    );
  });

  it('rendered tool output is exactly one output, whatever the tool returned, in both dialects’ parsers', () => {
    fc.assert(
      fc.property(fc.oneof(anyString, soup([...TULU_FRAGMENTS, ...XML_FRAGMENTS])), fc.oneof(anyString, soup(fragments)), (title, text) => {
        for (const view of [{ documents: [{ id: `d"1'<x>`, title, text }] }, { text, textId: 'c-0' }, { error: text }]) {
          const out = dialect.renderToolOutput(view);
          for (const parser of [tulu, mcpXml]) expect(kinds(parser.parseTrajectory(out.text).segments)).toEqual(['output']);
          // After a call, the output cannot end the output early and write an answer of its own.
          const after = dialect.parseTrajectory(`${out.text}\n`).segments;
          expect(count(after, 'answer')).toBe(0);
        }
      }),
      { numRuns: RUNS, seed: FAULT_SEED },
    );
  });
});

describe('linear time: random inputs at doubling sizes', () => {
  /**
   * CPU milliseconds this process spent, best of 3: other processes (the suites run in
   * parallel) do not count, and scheduling noise only ever adds time.
   */
  const best = (f: () => void): number => {
    let min = Infinity;
    for (let k = 0; k < 3; k++) {
      const t0 = process.cpuUsage();
      f();
      const d = process.cpuUsage(t0);
      min = Math.min(min, (d.user + d.system) / 1000);
    }
    return min;
  };
  const SIZES = [1 << 17, 1 << 18, 1 << 19, 1 << 20];

  for (const [name, dialect, fragments] of [
    ['tulu', tulu, TULU_FRAGMENTS],
    ['mcp-xml', mcpXml, XML_FRAGMENTS],
  ] as [string, Dialect, string[]][]) {
    it(`${name}: repairTurn and parseTrajectory do about twice the work on twice the input`, () => {
      const seeds = fc.sample(fc.array(fc.constantFrom(...fragments), { minLength: 4, maxLength: 30 }), { numRuns: FULL ? 12 : 3, seed: FAULT_SEED });
      // Found by this test with another seed: mcp-xml's box search read to the end of the text
      // for every text segment (quadratic). Kept for both dialects.
      seeds.push(['}', '<tool_output>', '<think>', '<tool_output>', '</answer>', '>', '\\{', '{', '<tool_name>', '<think>', '</tool_output>']);
      for (const parts of seeds) {
        const unit = parts.join('');
        const input = (n: number): string => unit.repeat(Math.ceil(n / unit.length)).slice(0, n);
        const times = SIZES.map((n) => {
          const s = input(n);
          dialect.parseTrajectory(s); // warm up, and flatten the string
          return best(() => {
            dialect.repairTurn(s, 'length');
            dialect.parseTrajectory(s);
          });
        });
        // From 128 K to 1 M characters (8× the input, times well above timer noise): linear
        // work takes ~8× the time, quadratic ~64×. The slack (32) absorbs GC and a busy machine.
        const ratio = times.at(-1)! / Math.max(times.at(-4)!, 0.5);
        if (process.env.TF_PRINT_RATIOS) console.log(`[ratios] ${ratio.toFixed(1)}`);
        expect(ratio, `${JSON.stringify(unit)}: ${times.map((t) => t.toFixed(1)).join(' → ')} ms of CPU at ${SIZES.join(", ")} chars`).toBeLessThan(32);
      }
    });
  }
});

// ---------------------------------------------------------------------------------------
// Random valid trajectories: serialise → parse gives back what was serialised.

/** Text a model writes between tags: anything but `<` (which would start a tag). */
const prose = fc.string({ unit: fc.constantFrom(...'abc xyz 019 .,;:!?()-_/"\'&=>é中🙂'.split('')), maxLength: 40 });
const word = fc.stringMatching(/^[a-z][a-z0-9_]{0,11}$/);
const attrValue = fc.string({ unit: fc.constantFrom(...'abc 019.,;:-_/\'é'.split('')), maxLength: 12 });
const snippetId = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,15}$/);
const docs = fc.array(
  fc.record({ id: snippetId, title: fc.oneof(fc.constant(undefined), anyString), text: anyString }) as fc.Arbitrary<ToolDocument>,
  { minLength: 1, maxLength: 4 },
).map((ds) => ds.map((d, i) => ({ ...d, id: `${d.id}${i}` })));

interface Turn {
  think: string | undefined;
  call: ParsedCall;
  docs: ToolDocument[];
}
const tuluCall: fc.Arbitrary<ParsedCall> = fc.record({
  toolName: word,
  attributes: fc.dictionary(word.filter((k) => k !== 'name'), attrValue, { maxKeys: 3 }),
  query: prose.map((q) => q.trim()).filter((q) => q !== ''),
});
const tuluTurn: fc.Arbitrary<Turn> = fc.record({ think: fc.option(prose, { nil: undefined }), call: tuluCall, docs });

describe('random valid trajectories survive serialise → parse unchanged', () => {
  it('tulu: thinks, calls, outputs and a cited answer come back as written; each turn repairs to itself', () => {
    fc.assert(
      fc.property(fc.array(tuluTurn, { maxLength: 5 }), prose, fc.nat(), (turns, claim, pick) => {
        const pieces: string[] = [];
        const shown: string[] = [];
        const expected: { kind: Segment['kind']; check: (s: Segment) => void }[] = [];
        for (const t of turns) {
          const callText = canonicalCall(t.call);
          const turnText = t.think === undefined ? callText : `<think>${t.think}</think>\n${callText}`;
          // What the model wrote (the endpoint strips the stop string): the repairer gives it back whole.
          const repaired = tulu.repairTurn(turnText.slice(0, -'</call_tool>'.length), 'stop');
          expect(repaired.text).toBe(turnText);
          expect(repaired.repairs).toEqual([]);
          expect(repaired.action).toEqual({ kind: 'call', call: t.call });
          const out = tulu.renderToolOutput({ header: 'Found some results.', documents: t.docs });
          pieces.push(turnText, out.text);
          shown.push(...out.snippetIds);
          if (t.think !== undefined) expected.push({ kind: 'think', check: (s) => expect(s.text).toBe(`<think>${t.think}</think>`) });
          expected.push({ kind: 'call', check: (s) => expect(s.kind === 'call' && s.call).toEqual(t.call) });
          expected.push({
            kind: 'output',
            check: (s) => {
              expect(s.text).toBe(out.text);
              expect(s.kind === 'output' && s.snippetIds).toEqual(t.docs.map((d) => d.id));
            },
          });
        }
        const cited = shown.length === 0 ? [] : [...new Set([shown[pick % shown.length]!, shown[(pick >> 3) % shown.length]!])];
        const inner = cited.length === 0 ? claim : `${claim} <cite id="${cited.join(',')}">${claim}</cite>`;
        const answerText = `<answer>${inner}</answer>`;
        expect(tulu.repairTurn(answerText, 'stop')).toMatchObject({ text: answerText, repairs: [], action: { kind: 'answer', answer: inner.trim() } });
        pieces.push(answerText);
        expected.push({ kind: 'answer', check: (s) => expect(s.kind === 'answer' && s.answer).toBe(inner.trim()) });

        const text = pieces.join('\n');
        const parsed = tulu.parseTrajectory(text);
        const segs = parsed.segments.filter((s) => s.kind !== 'text');
        expect(segs.map((s) => s.kind)).toEqual(expected.map((e) => e.kind));
        segs.forEach((s, i) => expected[i]!.check(s));
        expect(parsed.citedIds).toEqual(cited);
        expect(parsed.segments.map((s) => s.text).join('')).toBe(text);
      }),
      { numRuns: RUNS, seed: FAULT_SEED },
    );
  });

  const json = fc.jsonValue({ maxDepth: 2 }).map((v) => JSON.stringify(v));
  const xmlTurn = fc.record({ think: fc.option(prose, { nil: undefined }), server: word, tool: word, args: json, docs });

  it('mcp-xml: thinks, calls (server, tool, JSON arguments), outputs and a boxed answer come back as written', () => {
    fc.assert(
      fc.property(fc.array(xmlTurn, { maxLength: 5 }), prose.filter((a) => !/[{}\\]/.test(a) && a.trim() !== ''), (turns, answer) => {
        const pieces: string[] = [];
        const expected: { kind: Segment['kind']; check: (s: Segment) => void }[] = [];
        for (const t of turns) {
          const callText = `<use_mcp_tool>\n<server_name>${t.server}</server_name>\n<tool_name>${t.tool}</tool_name>\n<arguments>\n${t.args}\n</arguments>\n</use_mcp_tool>`;
          const turnText = t.think === undefined ? callText : `<think>${t.think}</think>\n${callText}`;
          const call: ParsedCall = { toolName: t.tool, attributes: { server_name: t.server }, query: t.args.trim() };
          const repaired = mcpXml.repairTurn(turnText.slice(0, -'</use_mcp_tool>'.length), 'stop');
          expect(repaired.action).toEqual({ kind: 'call', call });
          expect(repaired.repairs).toEqual([]);
          const out = mcpXml.renderToolOutput({ documents: t.docs });
          pieces.push(turnText, out.text);
          if (t.think !== undefined) expected.push({ kind: 'think', check: (s) => expect(s.text).toBe(`<think>${t.think}</think>`) });
          expected.push({ kind: 'call', check: (s) => expect(s.kind === 'call' && s.call).toEqual(call) });
          expected.push({ kind: 'output', check: (s) => expect(s.text).toBe(out.text) });
        }
        const box = `\\boxed{${answer}}`;
        expect(mcpXml.repairTurn(box, 'stop').action).toEqual({ kind: 'answer', answer: answer.trim() });
        pieces.push(box);
        expected.push({ kind: 'answer', check: (s) => expect(s.kind === 'answer' && s.answer).toBe(answer.trim()) });

        const text = pieces.join('\n');
        const segs = mcpXml.parseTrajectory(text).segments.filter((s) => s.kind !== 'text');
        expect(segs.map((s) => s.kind)).toEqual(expected.map((e) => e.kind));
        segs.forEach((s, i) => expected[i]!.check(s));
      }),
      { numRuns: RUNS, seed: FAULT_SEED },
    );
  });
});
