/** `trajforge dedup <in…> --out F [--rejects F] [--clusters F]`: drop near-duplicate rows, one kept per cluster. */
import { DEDUP_KEEP_RULES, DedupOptions } from '../../schemas/index.js';
import { indexNearDuplicates, writeDeduplicated, type DedupSummary } from '../dataset/dedup.js';
import { banding, minimumHashes } from '../dataset/minhash.js';
import { TrajforgeError } from '../errors.js';
import { parseDatasetInputs, readOptions } from './common.js';
import { curateInputs } from '../dataset/curate-rows.js';
import { Outputs } from './output.js';
import { checkedOptions, numberFlag } from './flags.js';

const D = DedupOptions.parse({});

const HELP = `Usage: trajforge dedup <file|run>… --out F [--rejects F] [--clusters F] [options]

Finds near-duplicate rows (MinHash and LSH over word shingles, candidates checked by their
Jaccard similarity), clusters them, keeps one row per cluster and writes it to --out; the
others go to --rejects. Several inputs are one dataset, read in order (shards of one job).
The input is read twice; stdin is not accepted. Files are written whole or not at all.

  --out F           kept rows, JSONL ('-' for stdout; required)
  --rejects F       dropped rows, JSONL
  --clusters F      one JSON line per cluster of two or more rows: members, the kept one, similarity
  --by W            what near-duplicates share: question (default), answer (final answers), or both
  --threshold T     Jaccard similarity at or above which two texts are near-duplicates (default ${D.threshold})
  --shingle K       words per shingle (default ${D.shingle_size})
  --prefer RULE     which row of a cluster is kept (default ${D.keep}; ties go to the earlier row;
                    was --keep, which filter and export use for an expression):
                    ${DEDUP_KEEP_RULES.join(', ')}
                    (accepted: status ok first; shortest/longest: characters of the trajectory;
                    most-calls/fewest-calls: tool calls)
  --slots-may-differ     let Jaccard alone decide: by default near-duplicates must have the same
                    content words (all but function words like the, is, with, what/which), so
                    "capital of France" and "capital of Peru", "Chrome" and "Chrome Android",
                    "52 weeks" and "26 weeks" never make near-duplicates, however long the rest
  --exact-words     compare words as written: by default common words that WordNet gives the
                    same most frequent meaning count as one ("biggest"/"largest", "buy"/
                    "purchase"), inflections as their lemma, where numbers and names agree
  --max-hashes N    MinHash functions the LSH index may use (default ${D.max_hashes})
  --sketch-size N   shingles kept per text; texts within it are compared exactly (default ${D.sketch_size})
  --bucket-window N earlier rows of an LSH bucket each row is compared with (default ${D.bucket_window})
  --json            print the summary as JSON on stdout
  --input-format F  input row format: auto (default), trajforge, drtulu, chat, or bank: a
                    question bank (JSONL, JSON array, CSV/TSV, gzip; auto knows one by its
                    form), written back as a bank of the same rows (JSON Lines) (was --format)
  --on-bad-row M    error (default) or skip
`;

const FLAGS: Record<string, string> = {
  by: 'by',
  threshold: 'threshold',
  shingle_size: 'shingle',
  keep: 'prefer',
  max_hashes: 'max-hashes',
  sketch_size: 'sketch-size',
  bucket_window: 'bucket-window',
};

export function formatDedupSummary(s: DedupSummary): string {
  const parts = [`dedup: ${s.rows} rows in, ${s.kept} kept, ${s.dropped} dropped in ${s.clusters} clusters (largest ${s.largest_cluster})`];
  if (s.bad) parts.push(`${s.bad} bad rows skipped`);
  if (s.empty) parts.push(`${s.empty} rows with no text to compare kept as they are`);
  if (s.sub_agent_sessions) {
    parts.push(`${s.sub_agent_sessions} sub-agent sessions followed their root (${s.dropped_with_root} dropped with it${s.without_root ? `, ${s.without_root} without their root in the input kept` : ''})`);
  }
  if (s.window_overflows) parts.push(`${s.window_overflows} bucket entries beyond --bucket-window were not compared`);
  return `${parts.join('; ')}\n`;
}

export async function run(argv: string[]): Promise<number> {
  const args = parseDatasetInputs('dedup', argv, {
    out: { type: 'string', short: 'o' },
    rejects: { type: 'string' },
    clusters: { type: 'string' },
    by: { type: 'string' },
    threshold: { type: 'string' },
    shingle: { type: 'string' },
    prefer: { type: 'string' },
    'slots-may-differ': { type: 'boolean' },
    'exact-words': { type: 'boolean' },
    'max-hashes': { type: 'string' },
    'sketch-size': { type: 'string' },
    'bucket-window': { type: 'string' },
    json: { type: 'boolean' },
  }, HELP, { keep: 'prefer' });
  if (!args) return 0;
  const { values, inputs } = args;
  const options = checkedOptions('dedup', DedupOptions, {
    by: values.by,
    threshold: numberFlag('threshold', values.threshold),
    shingle_size: numberFlag('shingle', values.shingle),
    keep: values.prefer,
    max_hashes: numberFlag('max-hashes', values['max-hashes']),
    sketch_size: numberFlag('sketch-size', values['sketch-size']),
    bucket_window: numberFlag('bucket-window', values['bucket-window']),
    slot_guard: values['slots-may-differ'] ? false : undefined,
    synonyms: values['exact-words'] ? false : undefined,
  }, FLAGS);
  if (!values.out) throw new TrajforgeError('BAD_USAGE', 'dedup: --out F is required (- for stdout)');
  const outputs = Outputs.check('dedup', { out: values.out, rejects: values.rejects, clusters: values.clusters }, inputs);
  if (values.json && [values.out, values.rejects, values.clusters].includes('-')) throw new TrajforgeError('BAD_USAGE', 'dedup: --json prints on stdout, so no output can be -');
  if (banding(options.threshold, options.max_hashes) === undefined) {
    throw new TrajforgeError('BAD_USAGE', `dedup: --max-hashes ${options.max_hashes} is too few for --threshold ${options.threshold}: LSH needs at least ${minimumHashes(options.threshold)}`);
  }
  const { bank, format } = curateInputs('dedup', inputs, values['input-format'], { '--out': values.out, '--rejects': values.rejects });
  const read = readOptions(format, values['on-bad-row'], 'dedup');
  return outputs.write(
    async (w) => {
      const index = await indexNearDuplicates(inputs, read, options, bank);
      await writeDeduplicated(index, { out: w.out!, rejects: w.rejects, clusters: w.clusters });
      return index.summary;
    },
    (summary) => {
      if (values.json) process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
      process.stderr.write(formatDedupSummary(summary));
    },
  );
}
