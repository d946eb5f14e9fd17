/**
 * pipeline/dataset/report/scripts.ts: the page's scripts are the browser/ modules as the build
 * checked and compiled them, inlined so the page stays one file. (What they do in a browser is
 * tests/browser's.)
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { liveScript, reportScript } from '../../../pipeline/dataset/report/scripts.js';
import { PACKAGE_ROOT } from '../../../pipeline/paths.js';

const BUILT = join(PACKAGE_ROOT, 'dist', 'pipeline', 'dataset', 'report', 'browser');

describe('the report page scripts', () => {
  for (const [name, script] of [
    ['report', reportScript],
    ['live', liveScript],
  ] as const) {
    it(`${name}: the built dom.js and ${name}.js in one function, which parses and sits inline`, () => {
      const text = script();
      expect(text.startsWith('(function () {\n')).toBe(true);
      expect(text.endsWith('\n})();')).toBe(true);
      expect(text).toContain(readFileSync(join(BUILT, 'dom.js'), 'utf8'));
      expect(text).toContain(readFileSync(join(BUILT, `${name}.js`), 'utf8'));
      // Parsed, not run: a syntax error would throw here.
      expect(() => new Function(text)).not.toThrow();
      expect(text).not.toMatch(/<\/script|<!--/i);
    });
  }

  it('the helpers are written once, in browser/dom.ts, and the page scripts use them', () => {
    const src = (f: string): string => readFileSync(join(PACKAGE_ROOT, 'pipeline', 'dataset', 'report', 'browser', f), 'utf8');
    for (const f of ['report.ts', 'live.ts']) {
      expect(src(f), f).not.toMatch(/function (el|num|byId)\b|createElement\(/);
      expect(src(f), f).toMatch(/\bel\(/);
    }
    expect(src('dom.ts')).toMatch(/function el\b/);
  });
});
