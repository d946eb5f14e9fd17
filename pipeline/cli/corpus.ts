/** `trajforge corpus index DOCS.jsonl[.gz] --out DIR`: build (or finish) the on-disk index the corpus server's `--index DIR` serves. */
import type { BuildProgress, BuildSummary } from '../../tools/corpus/build.js';
import { DEFAULT_BATCH_DOCS, withSqlite } from '../../tools/corpus/fts.js';
import { TrajforgeError } from '../errors.js';
import { choiceFlag, numberFlag, ON_BAD_ROW, parseFlags } from './flags.js';

const HELP = `Usage: trajforge corpus index DOCS.jsonl[.gz] --out DIR [options]

Builds an on-disk full-text index (SQLite FTS5) of a corpus of JSONL documents, one per line,
gzipped or not, for the corpus server: node dist/tools/corpus/server.js --index DIR. A row
needs an id (id, paperId, docid, doc_id or _id) and a title or a text (text, contents,
content, abstract or body); url, authors, year and venue are kept when present.

The build commits every --batch documents. Killed midway, the same command goes on from the
last commit (after checking that the lines indexed are still the same): no document twice.
Run on a finished index, it says so and does nothing.

  --out DIR         the index directory (required; new, empty, or an index of this same file)
  --batch N         documents per commit (default ${DEFAULT_BATCH_DOCS})
  --on-bad-row M    error (default: a bad row stops the build, naming file, line and field)
                    or skip (counted; the first ten are listed)
  --quiet           no progress lines on stderr
`;

const mb = (bytes: number): string => `${(bytes / 1e6).toFixed(1)} MB`;

function progressLine(p: BuildProgress): string {
  const done = p.bytesTotal > 0 ? ` (${Math.min(100, Math.round((100 * p.bytesRead) / p.bytesTotal))}% of the input)` : '';
  const rate = p.seconds > 0 ? `, ${Math.round((p.lines - p.resumedAt) / p.seconds).toLocaleString('en-US')} lines/s` : '';
  return `corpus index: ${p.docs.toLocaleString('en-US')} documents, line ${p.lines.toLocaleString('en-US')}${done}${rate}\n`;
}

export function formatSummary(out: string, s: BuildSummary): string {
  if (s.alreadyComplete) return `corpus index: ${out} is already complete: ${s.docs} documents, ${mb(s.bytesOnDisk)}; nothing to do\n`;
  const parts = [`corpus index: ${out}: ${s.docs} documents from ${s.lines} lines in ${s.seconds.toFixed(1)} s, ${mb(s.bytesOnDisk)} on disk`];
  if (s.resumedAt > 0) parts.push(`resumed at line ${s.resumedAt}`);
  if (s.skipped > 0) parts.push(`${s.skipped} bad rows skipped`);
  return `${parts.join('; ')}\n${s.badRows.map((b) => `  ${b}\n`).join('')}`;
}

export async function run(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === '--help' || sub === '-h') {
    process.stdout.write(HELP);
    return sub === undefined ? 2 : 0;
  }
  if (sub !== 'index') throw new TrajforgeError('BAD_USAGE', `corpus: unknown subcommand "${sub}" (have: index)`);
  const parsed = parseFlags('corpus index', rest, { out: { type: 'string', short: 'o' }, batch: { type: 'string' }, 'on-bad-row': { type: 'string' }, quiet: { type: 'boolean' } }, { help: HELP });
  if (!parsed) return 0;
  const { values, positionals } = parsed;
  if (positionals.length !== 1) throw new TrajforgeError('BAD_USAGE', `corpus index: expected one input file, got ${positionals.length}`);
  if (values.out === undefined) throw new TrajforgeError('BAD_USAGE', 'corpus index: --out DIR is required');
  const batch = numberFlag('batch', values.batch) ?? DEFAULT_BATCH_DOCS;
  if (!Number.isInteger(batch) || batch < 1) throw new TrajforgeError('BAD_USAGE', `--batch: expected a whole number of at least 1, got "${values.batch}"`);
  const onBadRow = choiceFlag('on-bad-row', values['on-bad-row'], ON_BAD_ROW) ?? 'error';
  const { buildIndex } = await withSqlite(() => import('../../tools/corpus/build.js'));
  let last = 0;
  const summary = await buildIndex({
    input: positionals[0]!,
    outDir: values.out,
    batchDocs: batch,
    onBadRow,
    // A line every two seconds at most: a build of millions of documents commits hundreds of batches.
    onProgress: (p) => {
      if (values.quiet || p.seconds - last < 2) return;
      last = p.seconds;
      process.stderr.write(progressLine(p));
    },
  });
  process.stdout.write(formatSummary(values.out, summary));
  return 0;
}
