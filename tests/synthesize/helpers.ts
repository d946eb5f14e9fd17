/** Shared by the synthesis suites: a config against a sim, the run's rows read back with their schemas, a knowledge graph to walk, and a measure of each check against what the sim planted. */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { RejectedDraft, SynthesizedQuestion, type SynthesisCheck } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { plantKey, type Planted, type PlantedDefect } from '../../sim/synth.js';
import { CORPUS_SERVER } from '../helpers.js';

export const CORPUS = join(PACKAGE_ROOT, 'data', 'corpus.jsonl');

/** A run config with a synthesis section, against the sim at `baseUrl` (which is its judge too), written to `dir/config.yaml`. */
export function synthConfig(dir: string, baseUrl: string, synthesis: Record<string, unknown>, patch: Record<string, unknown> = {}): string {
  const cfg: Record<string, unknown> = {
    endpoint: { base_url: baseUrl, model: 'trajforge-sim', api_key_env: 'none', max_tokens: 1024, retry_base_ms: 20, retry_max_ms: 200 },
    dialect: 'tulu',
    mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, '--corpus', CORPUS] } },
    tools: { aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' } }, limits: { pubmed_search: 5 } },
    budgets: { max_turns: 8, max_tool_calls: 5 },
    validation: { judge: { base_url: baseUrl, model: 'trajforge-sim', api_key_env: 'none', retry_base_ms: 20, retry_max_ms: 200 } },
    concurrency: 8,
    output: { dir: join(dir, 'run') },
    synthesis: { source: { kind: 'documents', path: CORPUS }, ...synthesis },
    ...patch,
  };
  const file = join(dir, 'config.yaml');
  writeFileSync(file, stringify(cfg));
  return file;
}

export const load = (file: string) => loadConfig(file, {}, { ...process.env });

function lines(file: string): unknown[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as unknown);
}

/** Both files of a synthesis run, every line parsed with its schema (a line that fails throws). */
export function readRun(dir: string): { kept: SynthesizedQuestion[]; rejected: RejectedDraft[] } {
  return { kept: lines(join(dir, 'questions.jsonl')).map((v) => SynthesizedQuestion.parse(v)), rejected: lines(join(dir, 'rejected.jsonl')).map((v) => RejectedDraft.parse(v)) };
}

/** The key the sim planted a row's seed under: its documents, or its walk. */
export function rowKey(row: SynthesizedQuestion | RejectedDraft): string {
  if (row.source.docs !== undefined) return plantKey(row.source.docs);
  return plantKey(undefined, (row.evidence ?? []) as { subject: string; relation: string; object: string }[]);
}

/** The check that must catch each planted defect. */
export const CATCHES: Readonly<Record<PlantedDefect, SynthesisCheck>> = { bad_quote: 'verbatim', leak: 'no_leak', ambiguous: 'unique', easy: 'closed_book' };

export interface Measure {
  readonly planted: number;
  readonly caught: number;
  readonly flagged: number;
  readonly recall: number;
  readonly precision: number;
}

/**
 * Per defect: recall (of the seeds planted with it, the share its check rejected) and precision
 * (of the seeds its check rejected, the share planted with it), from the sim's own record.
 */
export function measure(rows: readonly (SynthesizedQuestion | RejectedDraft)[], planted: readonly Planted[]): Record<PlantedDefect, Measure> {
  const byKey = new Map(planted.map((p) => [p.key, p.defect]));
  const out = {} as Record<PlantedDefect, Measure>;
  for (const [defect, check] of Object.entries(CATCHES) as [PlantedDefect, SynthesisCheck][]) {
    const withIt = rows.filter((r) => byKey.get(rowKey(r)) === defect);
    const flaggedRows = rows.filter((r) => 'rejected_by' in r && r.rejected_by === check);
    const caught = withIt.filter((r) => 'rejected_by' in r && r.rejected_by === check).length;
    const tp = flaggedRows.filter((r) => byKey.get(rowKey(r)) === defect).length;
    out[defect] = { planted: withIt.length, caught, flagged: flaggedRows.length, recall: withIt.length ? caught / withIt.length : NaN, precision: flaggedRows.length ? tp / flaggedRows.length : NaN };
  }
  return out;
}

/** Pseudo-words: names no check can confuse with a number or an English word. */
function name(n: number, salt: number): string {
  const syl = ['ka', 'lo', 'mi', 'zu', 're', 'ta', 'vo', 'ne', 'shi', 'ar', 'bel', 'dor'];
  let x = n * 7919 + salt * 104729 + 13;
  let s = '';
  for (let i = 0; i < 3; i++) {
    s += syl[x % syl.length];
    x = Math.floor(x / syl.length) + 31 * i;
  }
  return `${s[0]!.toUpperCase()}${s.slice(1)}${String.fromCharCode(97 + (n % 26))}`;
}

/**
 * A knowledge graph of people, the cities they were born in, the countries the cities are in,
 * and those countries' currencies: JSONL of triples, and a JSONL of descriptions of the people.
 */
export function writeGraph(dir: string, people = 120): { triples: string; descriptions: string } {
  const cities = Array.from({ length: 30 }, (_, i) => `${name(i, 2)} City`);
  const countries = Array.from({ length: 8 }, (_, i) => `${name(i, 3)}land`);
  const currencies = countries.map((_, i) => `${name(i, 4)} coin`);
  const t: string[] = [];
  const d: string[] = [];
  for (let i = 0; i < people; i++) {
    const who = `${name(i, 1)} ${name(i, 5)}`;
    t.push(JSON.stringify({ subject: who, relation: 'born_in', object: cities[(i * 7) % cities.length] }));
    d.push(JSON.stringify({ entity: who, description: `the person entered as record ${1000 + i} of the register` }));
  }
  cities.forEach((c, i) => t.push(JSON.stringify({ subject: c, relation: 'located_in', object: countries[i % countries.length] })));
  countries.forEach((c, i) => t.push(JSON.stringify({ subject: c, relation: 'currency', object: currencies[i] })));
  const triples = join(dir, 'graph.jsonl');
  const descriptions = join(dir, 'descriptions.jsonl');
  writeFileSync(triples, `${t.join('\n')}\n`);
  writeFileSync(descriptions, `${d.join('\n')}\n`);
  return { triples, descriptions };
}
