/**
 * MCP results → what the model sees and what the record keeps (tool-result.ts), with every
 * content kind and hostile shapes a server may send, rendered through every dialect.
 */
import { describe, expect, it } from 'vitest';
import { getDialect } from '../../pipeline/dialects/index.js';
import { sanitizeSnippetId } from '../../pipeline/dialects/tool-output.js';
import { base64Bytes, jsonFitsUnder, limitResult, renderResult, resultText } from '../../pipeline/generate/tool-result.js';

const limits = { maxResultChars: 200_000, maxSnippetChars: 2_000 };
/** base64 of `n` bytes, as a server would send an image. */
const b64 = (n: number): string => Buffer.alloc(n, 7).toString('base64');

describe('every content kind is rendered', () => {
  it('an image or audio part is a placeholder with its type and size; the bytes stay in the record, out of the prompt', () => {
    const image = b64(4_000);
    const audio = b64(123_456);
    const raw = { content: [{ type: 'text', text: 'Here it is:' }, { type: 'image', data: image, mimeType: 'image/png' }, { type: 'audio', data: audio, mimeType: 'audio/wav' }] };
    const r = renderResult(raw, 'c0ffee00', limits);
    expect(r.view.text).toBe('Here it is:\n[image: image/png, 4.0 kB]\n[audio: audio/wav, 123.5 kB]');
    expect(r.view.textId).toBe('c0ffee00-0');
    expect(r.result).toBe(raw);
    expect(r.truncated).toBe(false);
    expect(JSON.stringify(r.view)).not.toContain(image.slice(0, 40));
  });

  it('an image alone is not an empty result', () => {
    const r = renderResult({ content: [{ type: 'image', data: b64(10), mimeType: 'image/jpeg' }] }, 'c', limits);
    expect(r.view.text).toBe('[image: image/jpeg, 10 bytes]');
  });

  it('embedded resources: text as its text, binary as a placeholder; resource links are listed', () => {
    const raw = {
      content: [
        { type: 'resource', resource: { uri: 'file:///notes.md', mimeType: 'text/markdown', text: '# Notes\nbody' } },
        { type: 'resource', resource: { uri: 'file:///scan.pdf', mimeType: 'application/pdf', blob: b64(2_500) } },
        { type: 'resource_link', uri: 'https://example.org/paper', name: 'paper', title: 'The paper', mimeType: 'text/html', description: 'the full text' },
        { type: 'resource_link', uri: 'file:///data.csv', name: 'data.csv', size: 5_000_000 },
      ],
    };
    expect(renderResult(raw, 'c', limits).view.text).toBe(
      [
        '[resource: file:///notes.md (text/markdown)]',
        '# Notes',
        'body',
        '[resource: file:///scan.pdf (application/pdf, 2.5 kB)]',
        '[link: The paper https://example.org/paper (text/html)] the full text',
        '[link: data.csv file:///data.csv (5.0 MB)]',
      ].join('\n'),
    );
  });

  it('a list of records with no text field shows each as JSON, not as empty snippets', () => {
    const rows = [{ id: 'r1', name: 'alpha', score: 3 }, { id: 'r2', name: 'beta', score: 5, tags: ['x'] }];
    const view = renderResult({ content: [{ type: 'text', text: JSON.stringify(rows) }] }, 'c', limits).view;
    expect(view.documents?.map((d) => [d.id, d.text])).toEqual([
      ['r1', JSON.stringify(rows[0])],
      ['r2', JSON.stringify(rows[1])],
    ]);
  });

  it('structured content is shown as JSON when no part is text, and not twice when one is', () => {
    const data = { temperature: 36, conditions: 'drizzle' };
    expect(renderResult({ content: [], structuredContent: data }, 'c', limits).view.text).toBe(JSON.stringify(data));
    expect(renderResult({ content: [{ type: 'image', data: b64(3), mimeType: 'image/png' }], structuredContent: data }, 'c', limits).view.text).toBe(
      `[image: image/png, 3 bytes]\n${JSON.stringify(data)}`,
    );
    expect(renderResult({ content: [{ type: 'text', text: 'It drizzles.' }], structuredContent: data }, 'c', limits).view.text).toBe('It drizzles.');
    // Structured search results become documents like a JSON text does.
    const docs = renderResult({ structuredContent: { results: [{ id: 'd1', title: 'T', snippet: 's' }] } }, 'c', limits).view.documents;
    expect(docs?.map((d) => d.id)).toEqual(['d1']);
  });

  it('a tool error shows every part too', () => {
    const r = renderResult({ isError: true, content: [{ type: 'text', text: 'render failed' }, { type: 'image', data: b64(9), mimeType: 'image/png' }] }, 'c', limits);
    expect(r.isError).toBe(true);
    expect(r.view.error).toBe('render failed\n[image: image/png, 9 bytes]');
  });

  it('survives what a broken server sends: no content, junk parts, unknown kinds', () => {
    for (const raw of [null, undefined, 7, 'text', {}, { content: 'x' }, { content: [null, 3, 'a', [], { type: 42 }, { type: 'video', uri: 'x' }, { type: 'image' }, { type: 'resource' }] }]) {
      const r = renderResult(raw, 'c', limits);
      expect(r.isError).toBe(false);
      expect(typeof (r.view.text ?? '')).toBe('string');
    }
    expect(resultText({ content: [{ type: 'video' }, { type: 'image' }, { type: 'resource' }] })).toBe('[video content]\n[image: unknown type]\n[resource: (no uri) (binary)]');
  });
});

describe('limits count every part', () => {
  it('a small text with a large image is over max_result_chars: the record is cut to the limit, the image bytes left out with their size', () => {
    const raw = { content: [{ type: 'text', text: 'a chart' }, { type: 'image', data: b64(1_000_000), mimeType: 'image/png' }] };
    const r = renderResult(raw, 'c', { maxResultChars: 10_000, maxSnippetChars: 2_000 });
    expect(r.truncated).toBe(true);
    expect(JSON.stringify(r.result).length).toBeLessThanOrEqual(10_000);
    expect(r.result).toEqual({
      content: [{ type: 'text', text: 'a chart' }, { type: 'image', mimeType: 'image/png', data_omitted_bytes: 1_000_000 }],
      truncated_from_chars: JSON.stringify(raw).length,
    });
    // The model's view does not depend on the record's cut.
    expect(r.view.text).toBe('a chart\n[image: image/png, 1.0 MB]');
  });

  it('text is cut where the room ends, escapes counted; structured content is kept whole or left out', () => {
    const text = '"quoted"\n'.repeat(5_000);
    const raw = { content: [{ type: 'text', text }], structuredContent: { big: 'x'.repeat(50_000) } };
    const { result, truncated } = limitResult(raw, 20_000);
    expect(truncated).toBe(true);
    const json = JSON.stringify(result);
    expect(json.length).toBeLessThanOrEqual(20_000);
    expect(json.length).toBeGreaterThan(19_900);
    const kept = result as { content: { text: string }[]; structuredContent?: unknown; structuredContent_omitted_chars?: number };
    expect(text.startsWith(kept.content[0]!.text)).toBe(true);
    expect(kept.structuredContent).toBeUndefined();
    expect(kept.structuredContent_omitted_chars).toBeGreaterThan(50_000);
  });

  it('a result within the limit is kept as it came', () => {
    const raw = { content: [{ type: 'image', data: b64(100), mimeType: 'image/png' }], structuredContent: { a: 1 } };
    expect(limitResult(raw, 10_000)).toEqual({ result: raw, truncated: false });
  });

  it('base64Bytes counts padding and ignores line breaks', () => {
    for (const n of [0, 1, 2, 3, 4, 5, 1000, 1001]) expect(base64Bytes(b64(n))).toBe(n);
    expect(base64Bytes(`${b64(300).slice(0, 200)}\n${b64(300).slice(200)}`)).toBe(300);
  });
});

describe.each(['tulu', 'mcp-xml', 'native'] as const)('%s renders every content kind', (name) => {
  it('placeholders, resource text and links reach the output; base64 never does', () => {
    const image = b64(4_000);
    const raw = {
      content: [
        { type: 'text', text: 'Here it is:' },
        { type: 'image', data: image, mimeType: 'image/png' },
        { type: 'resource', resource: { uri: 'file:///a.txt', mimeType: 'text/plain', text: 'resource body' } },
        { type: 'resource_link', uri: 'https://example.org/x', name: 'x' },
      ],
    };
    const out = getDialect(name).renderToolOutput(renderResult(raw, 'abcd1234', limits).view);
    expect(out.text).toContain('[image: image/png, 4.0 kB]');
    expect(out.text).toContain('resource body');
    expect(out.text).toContain('[link: x https://example.org/x]');
    expect(out.text).not.toContain(image.slice(0, 40));
  });
});

/**
 * limitResult skips the exact serialisation when a bound says the result fits: the bound must
 * never say "fits" for JSON that does not. Every value here is tried at its exact JSON length
 * (must not matter: fitting there is allowed) and one below it (must say no).
 */
describe('the size bound limitResult trusts before serialising', () => {
  const escapes = '\u0000\u001f"\\\n\t\ud800\udfff\u2028';
  const nested = (depth: number): unknown => (depth === 0 ? 'x' : { [`k${depth}`]: [nested(depth - 1)] });
  const values: [string, unknown][] = [
    ['plain text', { content: [{ type: 'text', text: 'hello world' }] }],
    ['every character JSON escapes, and lone surrogates', { content: [{ type: 'text', text: escapes.repeat(50) }], [escapes]: escapes }],
    ['numbers of every form', [0, -0, 1e21, -1.5e-7, 2 ** 53, Number.NaN, Number.POSITIVE_INFINITY, 123456789.125]],
    ['null, booleans and undefined in arrays and objects', { a: null, b: true, c: false, d: undefined, e: [undefined, null, true] }],
    ['empty containers', { a: {}, b: [], c: '' }],
    ['a deep nesting (past the bound\'s depth)', nested(60)],
    ['a Date (toJSON)', { when: new Date(0) }],
    ['a null-prototype object', Object.assign(Object.create(null) as object, { text: 'x'.repeat(100) })],
  ];
  for (const [label, v] of values) {
    it(`${label}: never "fits" under its exact JSON length`, () => {
      const exact = JSON.stringify(v).length;
      expect(jsonFitsUnder(v, exact - 1)).toBe(false);
      expect(limitResult(v, exact - 1).truncated).toBe(true);
      expect(limitResult(v, exact)).toEqual({ result: v, truncated: false });
    });
  }

  it('an ordinary search result fits far under the default limit without being serialised', () => {
    const raw = { content: [{ type: 'text', text: JSON.stringify({ results: Array.from({ length: 5 }, (_, i) => ({ id: `d${i}`, title: 't', text: 'word '.repeat(150) })) }) }] };
    expect(jsonFitsUnder(raw, 200_000)).toBe(true);
    expect(jsonFitsUnder(raw, 1_000)).toBe(false);
  });
});

describe('snippet ids', () => {
  it('quotes, angle brackets, list separators, ampersands and white space become _; the ends are trimmed; other characters, pairs and lone surrogates alike, stay', () => {
    expect(sanitizeSnippetId('  a"b\'c<d>e,f;g&h i\tj\u00a0k\u2028l  ')).toBe('a_b_c_d_e_f_g_h_i_j_k_l');
    expect(sanitizeSnippetId('doc-😀-\ud800-é')).toBe('doc-😀-\ud800-é');
  });
});
