/**
 * The dataset card written beside an exported Parquet file: a README.md in Hugging Face's
 * form (https://huggingface.co/docs/hub/datasets-cards): a YAML header with `license`,
 * `tags`, `configs` (which file is which config and split) and `dataset_info` (the features
 * of each config, from the same column types the file was written with), then a body that
 * says where the rows came from: the trajforge version, the source run's config fingerprint,
 * the counts.
 *
 * One card can describe several exports into one folder (a `messages` and a `sharegpt`
 * file): each is a config named after its file, and exporting again replaces that config's
 * entries and body section only. A README.md trajforge did not write is never overwritten:
 * the command stops before reading anything (`--card F` names another file, `--card none`
 * writes none).
 */
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';
import { parse, stringify } from 'yaml';
import { TrajforgeError } from '../../errors.js';
import { feature, type ColumnType } from './parquet-schema.js';
import { tempBeside } from './parquet-file.js';

/** The comment that marks a card as trajforge's own (and so its to update). */
const MARK = '# trajforge export: re-exporting into this folder updates its config here';

export interface CardFacts {
  readonly parquetPath: string;
  readonly format: string;
  readonly license: string;
  readonly rows: number;
  readonly bytes: number;
  readonly columns: ColumnType & { kind: 'struct' };
  readonly trajforgeVersion: string;
  /** What the source run's manifest says, when the input was a run directory. */
  readonly source: { readonly input: string; readonly run_id?: string; readonly config_fingerprint?: string; readonly trajforge_version?: string; readonly model?: string; readonly dialect?: string } ;
  /** Lines of counts for the body: rows by agent, tokens. */
  readonly counts: readonly string[];
}

/** The card file for `--card` (`undefined`: none), checked before anything is written. */
export function cardPathFor(parquetPath: string, card: string | undefined): string | undefined {
  if (card === 'none') return undefined;
  const path = card ?? join(dirname(parquetPath), 'README.md');
  if (existsSync(path) && !readFileSync(path, 'utf8').includes(MARK)) {
    throw new TrajforgeError('BAD_USAGE', `${path} exists and trajforge did not write it; name another card file with --card F, or write none with --card none`, { file: path, field: 'card' });
  }
  return path;
}

export function configName(parquetPath: string): string {
  return basename(parquetPath, extname(parquetPath));
}

function section(f: CardFacts, name: string): string {
  const src = f.source;
  const from = [
    `- source: \`${src.input}\``,
    ...(src.run_id ? [`- run: ${src.run_id} (trajforge ${src.trajforge_version ?? 'unknown'}, config fingerprint \`${src.config_fingerprint ?? 'unknown'}\`, model \`${src.model ?? 'unknown'}\`, dialect ${src.dialect ?? 'unknown'})`] : ['- not a run directory: no manifest, so no config fingerprint']),
    `- exported by trajforge ${f.trajforgeVersion} as \`--format ${f.format}\` (its columns: trajforge's docs/export.md)`,
  ];
  const rel = basename(f.parquetPath);
  return [
    `<!-- trajforge:config ${name} -->`,
    `## ${name}`,
    '',
    `\`${rel}\`: ${f.rows} rows, ${f.bytes} bytes.`,
    '',
    ...from,
    ...f.counts.map((c) => `- ${c}`),
    '',
    '```python',
    'from datasets import load_dataset',
    `ds = load_dataset("parquet", data_files="${rel}", split="train")`,
    '```',
    `<!-- /trajforge:config ${name} -->`,
  ].join('\n');
}

interface ConfigEntry {
  config_name: string;
  [k: string]: unknown;
}

interface Header {
  configs?: ConfigEntry[];
  dataset_info?: ConfigEntry[];
  [k: string]: unknown;
}

function readExisting(path: string): { header: Header; body: string } {
  if (!existsSync(path)) return { header: {}, body: '' };
  const text = readFileSync(path, 'utf8');
  const m = /^---\n([\s\S]*?)\n---\n?([\s\S]*)$/.exec(text);
  return m ? { header: (parse(m[1]!) as Header | null) ?? {}, body: m[2]! } : { header: {}, body: '' };
}

function upsert<T extends { config_name: string }>(list: T[] | undefined, entry: T): T[] {
  const rest = (list ?? []).filter((e) => e.config_name !== entry.config_name);
  return [...rest, entry].sort((a, b) => a.config_name.localeCompare(b.config_name));
}

/** Writes (or updates) the card at `path` for one exported file. */
export function writeCard(path: string, f: CardFacts): void {
  const name = configName(f.parquetPath);
  const { header, body } = readExisting(path);
  const rel = basename(f.parquetPath);
  const next: Header = {
    ...header,
    license: header.license ?? f.license,
    tags: [...new Set([...((header.tags as string[] | undefined) ?? ['trajforge', 'agent-trajectories', 'tool-use', 'synthetic']), f.format])],
    task_categories: header.task_categories ?? ['text-generation'],
    configs: upsert(header.configs, { config_name: name, data_files: [{ split: 'train', path: rel }] }),
    dataset_info: upsert(header.dataset_info, {
      config_name: name,
      features: [...f.columns.fields].map(([k, t]) => feature(k, t)),
      splits: [{ name: 'train', num_bytes: f.bytes, num_examples: f.rows }],
    }),
  };
  if (f.license !== 'other') next.license = f.license;
  const open = `<!-- trajforge:config ${name} -->`;
  const close = `<!-- /trajforge:config ${name} -->`;
  const start = body.indexOf(open);
  const end = body.indexOf(close);
  const title = '# Agent trajectories exported by trajforge\n';
  const kept = start >= 0 && end > start ? body.slice(0, start) + body.slice(end + close.length) : body;
  const rest = kept.replace(title, '').trim();
  const text = `---\n${MARK}\n${stringify(next).trimEnd()}\n---\n${title}\n${[rest, section(f, name)].filter((s) => s !== '').join('\n\n')}\n`;
  const tmp = tempBeside(path, 'tmp');
  try {
    writeFileSync(tmp, text);
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw new TrajforgeError('WRITE_FAILED', `${path}: cannot write the dataset card (${(err as Error).message})`, { file: path, cause: err });
  }
}
