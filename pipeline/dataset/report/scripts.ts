/**
 * The report page's scripts, as the page inlines them (the page is one self-contained file, so
 * nothing is fetched): browser/*.ts, type-checked against the DOM and built by its own tsconfig
 * into dist/ (`npm run build`), read once and wrapped here. Each script is the shared helpers
 * (browser/dom.ts), its own helpers (the report's viewer-parts.ts) and the script itself in one
 * function, so nothing becomes a global of the page but what a script sets on `window` itself.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../../paths.js';

/** Where the build puts the browser scripts; the same from source (tests) and from dist/. */
const BUILT = join(PACKAGE_ROOT, 'dist', 'pipeline', 'dataset', 'report', 'browser');

const cache = new Map<string, string>();

function built(name: string): string {
  const file = join(BUILT, `${name}.js`);
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new Error(`the report's browser scripts are not built (${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); run npm run build`, { cause: err });
  }
}

/** The files each script is made of, in order: the shared helpers first, the script last. */
const PARTS = { report: ['dom', 'viewer-parts', 'report'], live: ['dom', 'live'] } as const;

/** The script's parts in one function, ready to sit in a `<script>` element. */
function inlined(name: keyof typeof PARTS): string {
  let script = cache.get(name);
  if (script === undefined) {
    script = `(function () {\n${PARTS[name].map(built).join('\n')}\n})();`;
    // Either would end the script element early, or change how HTML reads it.
    if (/<\/script|<!--/i.test(script)) throw new Error(`the report's ${name} script holds </script or <!--, which cannot sit inline`);
    cache.set(name, script);
  }
  return script;
}

/** The page's own script: the list, its filters and search, the viewer (browser/report.ts). */
export function reportScript(): string {
  return inlined('report');
}

/** A served page's live script, run after the page's own (browser/live.ts). */
export function liveScript(): string {
  return inlined('live');
}
