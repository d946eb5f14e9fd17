/**
 * The README is a guide that links into docs/ for everything else: a link that leads nowhere
 * (a moved file, a renamed heading) leaves a reader stuck. Every relative link in the README,
 * docs/ and RELIABILITY.md must name a file that exists and, with `#anchor`, a heading in it
 * (anchors as GitHub makes them from headings).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../pipeline/paths.js';

/** GitHub's heading anchor: lower case, punctuation but `-` and `_` dropped, spaces to `-`. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/ /g, '-');
}

/** Lines outside fenced code blocks. */
function prose(text: string): string[] {
  let fenced = false;
  return text.split('\n').filter((line) => {
    if (line.startsWith('```')) fenced = !fenced;
    return !fenced && !line.startsWith('```');
  });
}

function anchorsOf(file: string): Set<string> {
  const out = new Set<string>();
  for (const line of prose(readFileSync(file, 'utf8'))) {
    const m = /^#{1,6} (.*)$/.exec(line);
    if (m) out.add(anchor(m[1]!));
  }
  return out;
}

const files = [
  join(PACKAGE_ROOT, 'README.md'),
  join(PACKAGE_ROOT, 'RELIABILITY.md'),
  ...readdirSync(join(PACKAGE_ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => join(PACKAGE_ROOT, 'docs', f)),
];

describe('links in the README and docs/', () => {
  it('computes anchors as GitHub does', () => {
    expect(anchor('Curate: from a run to training files')).toBe('curate-from-a-run-to-training-files');
    expect(anchor('Preference pairs: export --format dpo')).toBe('preference-pairs-export---format-dpo');
    expect(anchor('k samples: pass@1 and pass@k')).toBe('k-samples-pass1-and-passk');
  });

  for (const file of files) {
    it(`${relative(PACKAGE_ROOT, file)}: every relative link leads to a file and a heading that exist`, () => {
      const broken: string[] = [];
      for (const line of prose(readFileSync(file, 'utf8'))) {
        for (const m of line.matchAll(/\]\(([^)\s]+)\)/g)) {
          const target = m[1]!;
          if (/^[a-z]+:/i.test(target)) continue; // http:, https:, mailto:
          const [path, hash] = target.split('#') as [string, string | undefined];
          const dest = path === '' ? file : resolve(dirname(file), path);
          if (!existsSync(dest)) broken.push(`${target}: no such file`);
          else if (hash !== undefined && dest.endsWith('.md') && !anchorsOf(dest).has(hash)) broken.push(`${target}: no such heading`);
        }
      }
      expect(broken).toEqual([]);
    });
  }
});
