/** What the dedup and decontaminate suites share: real question banks, the real corpus, and rows built around them. */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SCHEMA_VERSION, Trajectory } from '../schemas/index.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { FIXTURES, QUESTIONS } from './helpers.js';

function jsonl(file: string): Record<string, any>[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l));
}

/** The bundled browser-compatibility bank (255, templated) and DR Tulu's biomedical bank (40). */
export const BCD_QUESTIONS: string[] = jsonl(QUESTIONS).map((r) => r.question);
export const DRTULU_QUESTIONS: string[] = jsonl(join(FIXTURES, 'drtulu-questions.jsonl')).map((r) => r.question);
/** data/corpus.jsonl: 5,272 MDN feature documents. */
export const CORPUS: { paperId: string; title: string; abstract: string }[] = jsonl(join(PACKAGE_ROOT, 'data/corpus.jsonl')) as any;

export interface RowSpec {
  id: string;
  question: string;
  status?: 'ok' | 'failed';
  answer?: string;
  /** Tool output texts, one call each. */
  outputs?: string[];
}

/** A schema-valid trajforge trajectory around a question, its tool outputs and answer. */
export function trajRow(s: RowSpec): Trajectory {
  const outputs = s.outputs ?? [];
  const answer = s.answer ?? 'See the sources.';
  const calls = outputs.map((text, i) => ({
    schema_version: SCHEMA_VERSION,
    call_id: `${s.id}-${i}`,
    turn: i,
    tool_name: 'pubmed_search',
    server: 'corpus',
    mcp_tool: 'pubmed_search',
    parameters: {},
    query: 'q',
    arguments: {},
    result: null,
    output_text: `<tool_output>\n<snippet id="${s.id}-${i}-0">${text}</snippet>\n</tool_output>`,
    snippet_ids: [`${s.id}-${i}-0`],
    cached: false,
    duration_ms: 1,
    timestamp: '2025-01-01T00:00:00.000Z',
  }));
  const text = [...calls.flatMap((c) => [`<call_tool name="pubmed_search">q</call_tool>`, c.output_text]), `<answer>${answer}</answer>`].join('\n');
  return Trajectory.parse({
    schema_version: SCHEMA_VERSION,
    id: s.id,
    question_id: s.id,
    question: s.question,
    dialect: 'tulu',
    model: 'trajforge-sim',
    status: s.status ?? 'ok',
    ...(s.status === 'failed' ? { reason: 'max_turns' } : {}),
    final_answer: answer,
    interleaved_text: text,
    messages: [],
    tool_calls: calls,
    total_tool_calls: calls.length,
    tools_used: calls.length ? ['pubmed_search'] : [],
    cited_ids: [],
    unresolved_cited_ids: [],
    turns: calls.length + 1,
    repairs: [],
    rollbacks: [],
    validation: { passed: true, issues: [] },
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: calls.length + 1 },
    timing: { started_at: '', finished_at: '', duration_ms: 0, llm_ms: 0, tool_ms: 0 },
    attempt: 0,
    run_id: 'test',
  });
}

export function writeRows(file: string, rows: readonly (Trajectory | Record<string, unknown>)[]): string {
  writeFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return file;
}

/** The test's own reading of the normalisation docs/curate.md states, to judge expectations independently of the code. */
export function normalisedWords(text: string): string[] {
  return text.normalize('NFKC').toLowerCase().replace(/\p{P}+/gu, ' ').trim().split(/\s+/).filter(Boolean);
}
