/**
 * Builds the bundled offline corpus (`data/corpus.jsonl`) and question bank
 * (`data/questions.jsonl`) from @mdn/browser-compat-data.
 *
 * The output must be byte-identical on every run for a given BCD version: documents are sorted
 * by path, questions are picked by position rather than at random, and nothing depends on the
 * clock. Usage: `node dist/data/build/build-corpus.js [--out DIR]` (default `<package root>/data`).
 */
import { mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { CorpusIndex, indexPathFor, parseCorpus, sha256 } from '../../tools/corpus/search.js';

interface SimpleSupport {
  version_added?: unknown;
  version_removed?: unknown;
  flags?: unknown;
  prefix?: unknown;
  alternative_name?: unknown;
  partial_implementation?: unknown;
}

interface CompatStatement {
  description?: string;
  support?: Record<string, SimpleSupport | SimpleSupport[]>;
  status?: { experimental?: boolean; standard_track?: boolean; deprecated?: boolean };
}

interface BrowserInfo {
  name: string;
  releases: Record<string, { release_date?: string }>;
}

interface Bcd {
  __meta: { version: string };
  browsers: Record<string, BrowserInfo>;
  [area: string]: unknown;
}

export interface CorpusDocument {
  paperId: string;
  title: string;
  authors: string[];
  year: number;
  venue: string;
  abstract: string;
}

export interface QuestionRow {
  id: string;
  question: string;
  answer: string;
  meta: { feature: string; browser: string };
}

interface BrowserFirst {
  browser: string;
  version: string;
  date: string;
}

interface Feature {
  path: string[];
  kind: string;
  name: string;
  /** Which question quota the feature counts towards; null keeps it out of the question bank. */
  group: string | null;
  firsts: BrowserFirst[];
  doc: CorpusDocument;
}

/** Desktop first, then mobile: the order of the per-browser sentences in every abstract. */
export const BROWSERS = [
  'chrome',
  'edge',
  'firefox',
  'safari',
  'opera',
  'chrome_android',
  'firefox_android',
  'safari_ios',
] as const;

const VENUE = 'MDN browser-compat-data';
const PLAIN_VERSION = /^\d+(\.\d+)*$/;

/**
 * Question quotas per group (about 255 in all). The spread keeps the bank from being mostly
 * CSS, which is what BCD itself mostly is.
 */
const QUOTAS: ReadonlyArray<[string, number]> = [
  ['css-property', 45],
  ['css-selector', 15],
  ['css-at-rule', 10],
  ['css-type', 10],
  ['html-element', 25],
  ['html-attribute', 15],
  ['html-global-attribute', 5],
  ['js-object', 15],
  ['js-member', 30],
  ['js-syntax', 10],
  ['api-interface', 35],
  ['api-member', 25],
  ['http-header', 10],
  ['svg-element', 5],
];

/**
 * Interfaces whose members are all included. Members of all ~1,100 interfaces would be ~8,000
 * documents, too many for a small bundled corpus; these are the ones people ask about.
 */
const API_MEMBER_INTERFACES = new Set([
  'AbortController', 'AbortSignal', 'Blob', 'Cache', 'CacheStorage', 'CanvasRenderingContext2D',
  'Clipboard', 'Crypto', 'CSSStyleDeclaration', 'CustomElementRegistry', 'Document', 'DOMTokenList',
  'Element', 'Event', 'EventTarget', 'File', 'FileReader', 'FormData', 'Geolocation', 'Headers',
  'History', 'HTMLCanvasElement', 'HTMLElement', 'HTMLInputElement', 'HTMLMediaElement',
  'IntersectionObserver', 'Location', 'MediaDevices', 'MutationObserver', 'Navigator', 'Node',
  'Notification', 'Performance', 'Range', 'ReadableStream', 'Request', 'ResizeObserver', 'Response',
  'Screen', 'Selection', 'ServiceWorkerContainer', 'ShadowRoot', 'Storage', 'SubtleCrypto',
  'TextDecoder', 'TextEncoder', 'URL', 'URLSearchParams', 'WebSocket', 'Window', 'Worker',
  'XMLHttpRequest',
]);

const JS_SYNTAX_KINDS: Record<string, string> = {
  operators: 'JavaScript operator',
  statements: 'JavaScript statement',
  functions: 'JavaScript functions feature',
  classes: 'JavaScript classes feature',
  grammar: 'JavaScript grammar',
  regular_expressions: 'JavaScript regular expressions',
};

const ENTITIES: Record<string, string> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'", nbsp: ' ' };

export function stripHtml(html: string): string {
  return html
    .replace(/<[^<>]*>/g, '')
    .replace(/&(#\d+|#x[0-9a-f]+|[a-z]+);/gi, (whole, ent: string) => {
      if (ent[0] === '#') {
        const code = ent[1] === 'x' || ent[1] === 'X' ? parseInt(ent.slice(2), 16) : parseInt(ent.slice(1), 10);
        return Number.isFinite(code) ? String.fromCodePoint(code) : whole;
      }
      return ENTITIES[ent.toLowerCase()] ?? whole;
    })
    .replace(/\s+/g, ' ')
    .trim();
}

/** A description short enough to stand in for the feature's name in a title ("::after", "abs()"). */
function shortName(desc: string): string | null {
  return desc && desc.length <= 40 && !/[.!?]$/.test(desc) ? desc : null;
}

/**
 * Decides whether a path becomes a document, and how it is named. Returning null leaves it out;
 * that is how the corpus stays within a few thousand documents.
 */
function classify(path: string[], desc: string): { kind: string; name: string; group: string | null } | null {
  const [area, sub, a, b] = path;
  const depth = path.length;
  const short = shortName(desc);
  if (area === 'css') {
    if (sub === 'properties' && depth === 3 && a) return { kind: 'CSS property', name: short ?? a, group: 'css-property' };
    if (sub === 'selectors' && depth === 3 && a) return { kind: 'CSS selector', name: short ?? `:${a}`, group: 'css-selector' };
    if (sub === 'at-rules' && depth === 3 && a) return { kind: 'CSS at-rule', name: `@${a}`, group: 'css-at-rule' };
    if (sub === 'at-rules' && depth === 4 && a && b) {
      const kind = a === 'media' ? 'CSS media feature' : `CSS at-rule @${a} descriptor`;
      return { kind, name: short ?? b, group: null };
    }
    if (sub === 'types' && depth === 3 && a) return { kind: 'CSS type', name: short ?? a, group: 'css-type' };
    return null;
  }
  if (area === 'html') {
    if (sub === 'elements' && depth === 3 && a) return { kind: 'HTML element', name: `<${a}>`, group: 'html-element' };
    if (sub === 'elements' && depth === 4 && a && b) {
      // Depth-4 entries are mostly attributes; the rest (behaviours) only have a description.
      if (desc && !/attribute$/.test(desc) && desc !== b) return { kind: `HTML element <${a}>`, name: desc, group: null };
      return { kind: `HTML element <${a}> attribute`, name: b, group: 'html-attribute' };
    }
    if (sub === 'global_attributes' && depth === 3 && a) {
      return { kind: 'HTML global attribute', name: short ?? a, group: 'html-global-attribute' };
    }
    return null;
  }
  if (area === 'javascript') {
    if (sub === 'builtins' && depth === 3 && a) return { kind: 'JavaScript built-in object', name: a, group: 'js-object' };
    if (sub === 'builtins' && depth === 4 && a && b) {
      if (a === b) return { kind: 'JavaScript built-in constructor', name: `${a}()`, group: 'js-member' };
      if (b.startsWith('@@')) return { kind: 'JavaScript built-in', name: `${a}${short ?? b}`, group: null };
      // Sub-features such as "serializable_object" describe behaviour, not a member name.
      if (desc && !desc.includes(b)) return { kind: `JavaScript built-in ${a}`, name: desc, group: null };
      return { kind: 'JavaScript built-in', name: `${a}.${b}`, group: 'js-member' };
    }
    const syntaxKind = sub ? JS_SYNTAX_KINDS[sub] : undefined;
    if (syntaxKind && depth === 3 && a) return { kind: syntaxKind, name: desc || a.replace(/_/g, ' '), group: 'js-syntax' };
    return null;
  }
  if (area === 'api') {
    if (depth === 2 && sub) {
      // Lower-case top-level entries (fetch, setTimeout, crypto) are globals, not interfaces.
      const kind = /^[a-z]/.test(sub) ? 'Web API global' : 'Web API interface';
      return { kind, name: sub, group: kind === 'Web API interface' ? 'api-interface' : null };
    }
    if (depth === 3 && sub && a && API_MEMBER_INTERFACES.has(sub)) {
      if (a === sub) return { kind: 'Web API constructor', name: `${sub}()`, group: 'api-member' };
      if (a.endsWith('_event')) return { kind: 'Web API event', name: `${sub} ${a.slice(0, -6)} event`, group: null };
      if (a.endsWith('_static')) return { kind: 'Web API static member', name: `${sub}.${a.slice(0, -7)}`, group: null };
      if (a.endsWith('_permission')) return null;
      // "worker_support", "secure_context_required": behaviour of the interface, not a member.
      if (desc && !desc.includes(a)) return { kind: `Web API ${sub}`, name: desc, group: null };
      return { kind: 'Web API member', name: `${sub}.${a}`, group: 'api-member' };
    }
    return null;
  }
  if (area === 'http' && sub === 'headers' && depth === 3 && a) return { kind: 'HTTP header', name: a, group: 'http-header' };
  if (area === 'svg' && sub === 'elements' && depth === 3 && a) return { kind: 'SVG element', name: `<${a}>`, group: 'svg-element' };
  if (area === 'mathml' && sub === 'elements' && depth === 3 && a) return { kind: 'MathML element', name: `<${a}>`, group: null };
  return null;
}

/**
 * The statement that says when the browser first shipped the feature as it is named: not behind a
 * flag, not prefixed or renamed, not partial and not since removed. BCD lists the current,
 * most relevant statement first, so the first statement that qualifies is the one.
 */
function firstSupport(bcd: Bcd, browser: string, support: SimpleSupport | SimpleSupport[] | undefined): BrowserFirst | null {
  if (!support) return null;
  const statements = Array.isArray(support) ? support : [support];
  const usable = statements.find(
    (s) => !s.flags && !s.prefix && !s.alternative_name && !s.partial_implementation && s.version_removed === undefined,
  );
  const version = usable?.version_added;
  if (typeof version !== 'string' || !PLAIN_VERSION.test(version)) return null;
  const info = bcd.browsers[browser];
  const date = info?.releases[version]?.release_date;
  if (!info || !date) return null;
  return { browser: info.name, version, date };
}

function statusPhrase(status: CompatStatement['status']): string {
  const words: string[] = [];
  if (status?.deprecated) words.push('deprecated');
  if (status?.experimental) words.push('experimental');
  if (status?.standard_track) words.push('standardized');
  else words.push('non-standard');
  return `${words.join(', ')} feature`;
}

function article(phrase: string): string {
  return /^[aeiou]/i.test(phrase) ? 'an' : 'a';
}

function makeFeature(bcd: Bcd, path: string[], compat: CompatStatement): Feature | null {
  const desc = compat.description ? stripHtml(compat.description).replace(/\.$/, '') : '';
  const named = classify(path, desc);
  if (!named) return null;
  const firsts: BrowserFirst[] = [];
  for (const browser of BROWSERS) {
    const first = firstSupport(bcd, browser, compat.support?.[browser]);
    if (first) firsts.push(first);
  }
  if (firsts.length === 0) return null;
  const paperId = path.join('.');
  const title = `${named.kind}: ${named.name}`;
  const pathWords = path.join(' ').replace(/_/g, ' ');
  const status = statusPhrase(compat.status);
  const described = desc && desc !== named.name ? `, described as "${desc}"` : '';
  const intro = `The ${named.kind} ${named.name} (${pathWords}) is ${article(status)} ${status}${described}.`;
  const sentences = firsts.map((f) => `${f.browser} first supported it in version ${f.version}, released ${f.date}.`);
  const year = Math.min(...firsts.map((f) => Number(f.date.slice(0, 4))));
  return {
    path,
    kind: named.kind,
    name: named.name,
    group: named.group,
    firsts,
    doc: { paperId, title, authors: ['MDN contributors'], year, venue: VENUE, abstract: [intro, ...sentences].join(' ') },
  };
}

function collect(bcd: Bcd): Feature[] {
  const out: Feature[] = [];
  const walk = (node: Record<string, unknown>, path: string[]): void => {
    for (const key of Object.keys(node)) {
      if (key === '__compat') continue;
      const child = node[key];
      if (!child || typeof child !== 'object') continue;
      const childPath = [...path, key];
      const compat = (child as { __compat?: CompatStatement }).__compat;
      if (compat) {
        const feature = makeFeature(bcd, childPath, compat);
        if (feature) out.push(feature);
      }
      walk(child as Record<string, unknown>, childPath);
    }
  };
  for (const area of Object.keys(bcd)) {
    if (area === '__meta' || area === 'browsers') continue;
    walk(bcd[area] as Record<string, unknown>, [area]);
  }
  // Code-unit order, not locale order, so the output does not depend on the machine's locale.
  out.sort((x, y) => (x.doc.paperId < y.doc.paperId ? -1 : x.doc.paperId > y.doc.paperId ? 1 : 0));
  return out;
}

function pickBrowser(bcd: Bcd, feature: Feature, start: number): BrowserFirst | undefined {
  for (let k = 0; k < BROWSERS.length; k++) {
    const name = bcd.browsers[BROWSERS[(start + k) % BROWSERS.length]!]?.name;
    const first = feature.firsts.find((f) => f.browser === name);
    if (first) return first;
  }
  return undefined;
}

const TEMPLATES: ReadonlyArray<(browser: string, phrase: string) => string> = [
  (b, p) => `In which version of ${b} was the ${p} first supported?`,
  (b, p) => `Which ${b} version first supported the ${p}?`,
  (b, p) => `What is the earliest version of ${b} that supports the ${p}?`,
  (b, p) => `Since which version has ${b} supported the ${p}?`,
];

/**
 * Picks questions by even spacing through each group's path-sorted candidates, so the bank
 * covers the alphabet of each category and changes only when BCD changes.
 */
function makeQuestions(bcd: Bcd, features: Feature[]): QuestionRow[] {
  // Two features that read the same ("CSS property: x" twice) cannot both be answered from
  // the question text, so a duplicated title never becomes a question.
  const titleCount = new Map<string, number>();
  for (const f of features) titleCount.set(f.doc.title.toLowerCase(), (titleCount.get(f.doc.title.toLowerCase()) ?? 0) + 1);
  const rows: QuestionRow[] = [];
  for (const [group, quota] of QUOTAS) {
    // Three or more browsers: features a single engine ships make dull, skewed questions.
    const candidates = features.filter(
      (f) => f.group === group && f.firsts.length >= 3 && titleCount.get(f.doc.title.toLowerCase()) === 1,
    );
    const picks = Math.min(quota, candidates.length);
    for (let i = 0; i < picks; i++) {
      const feature = candidates[Math.floor(((i + 0.5) * candidates.length) / picks)];
      if (!feature) continue;
      const n = rows.length;
      // Walks the browser list so that every template meets every browser, then falls back to
      // the next browser that has a dated version for this feature.
      const want = (n + Math.floor(n / TEMPLATES.length)) % BROWSERS.length;
      const first = pickBrowser(bcd, feature, want);
      const template = TEMPLATES[n % TEMPLATES.length];
      if (!first || !template) continue;
      rows.push({
        id: `bcd-q-${String(n + 1).padStart(4, '0')}`,
        question: template(first.browser, `${feature.kind} ${feature.name}`),
        answer: first.version,
        meta: { feature: feature.doc.paperId, browser: first.browser },
      });
    }
  }
  return rows;
}

export function loadBcd(): Bcd {
  // BCD ships as a JSON main entry; require() reads it without import attributes.
  return createRequire(import.meta.url)('@mdn/browser-compat-data') as Bcd;
}

export function buildCorpus(bcd: Bcd = loadBcd()): { documents: CorpusDocument[]; questions: QuestionRow[]; version: string } {
  const features = collect(bcd);
  return { documents: features.map((f) => f.doc), questions: makeQuestions(bcd, features), version: bcd.__meta.version };
}

function toJsonl(rows: unknown[]): string {
  return rows.map((r) => JSON.stringify(r)).join('\n') + '\n';
}

function main(argv: string[]): void {
  const outFlag = argv.indexOf('--out');
  const outDir = outFlag >= 0 && argv[outFlag + 1] ? argv[outFlag + 1]! : join(PACKAGE_ROOT, 'data');
  const { documents, questions, version } = buildCorpus();
  mkdirSync(outDir, { recursive: true });
  const corpusText = toJsonl(documents);
  const corpusPath = join(outDir, 'corpus.jsonl');
  writeFileSync(corpusPath, corpusText);
  writeFileSync(join(outDir, 'questions.jsonl'), toJsonl(questions));
  // Loading a saved index is several times faster than indexing at every server start; the
  // server checks the corpus hash recorded inside and rebuilds in memory if it does not match.
  const index = CorpusIndex.build(parseCorpus(corpusPath, corpusText));
  writeFileSync(indexPathFor(corpusPath), index.serialize(sha256(corpusText)));
  const mb = (Buffer.byteLength(corpusText) / 1e6).toFixed(2);
  process.stderr.write(
    `browser-compat-data ${version}: ${documents.length} documents (${mb} MB), ${questions.length} questions -> ${outDir}\n`,
  );
}

// Importing the module (tests, the integrator) must not rewrite the bundled data.
const entry = process.argv[1];
if (entry && realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url))) main(process.argv.slice(2));
