/**
 * A synthesis run directory (`trajforge synthesize`) as `stats` and `report` show it: the
 * funnel (seeds → drafts → each check → kept), the difficulty of the questions (pass rate over
 * k rollouts; answered closed-book), and the cost per kept question. One streaming pass over
 * its two files (questions.jsonl, rejected.jsonl); a row is forgotten once it is counted.
 * (The rollouts in `DIR/solve` are an ordinary run: `stats DIR/solve`, and the report lists them.)
 */
import { createReadStream, existsSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { SYNTHESIS_CHECKS } from '../../schemas/index.js';
import { inputError } from '../errors.js';
import { statPath } from '../files.js';
import { MANIFEST, SYNTH_QUESTIONS, SYNTH_REJECTED, TRAJECTORIES } from '../core/run-dir/names.js';
import { card } from './report/page.js';
import { esc, fmt, hbars } from './report/svg.js';

/** A directory that holds a synthesis run: a manifest and its lines, and no trajectories of its own. */
export function isSynthesisRun(input: string): boolean {
  if (input === '-' || statPath(input)?.isDirectory() !== true) return false;
  return existsSync(join(input, MANIFEST)) && !existsSync(join(input, TRAJECTORIES)) && (existsSync(join(input, SYNTH_QUESTIONS)) || existsSync(join(input, SYNTH_REJECTED)));
}

export interface FunnelStep {
  /** `drafts`, or a check's name. */
  readonly step: string;
  /** Seeds that reached it, and those it rejected. */
  entered: number;
  rejected: number;
  /** closed_book in mark mode: failed, and kept marked. */
  marked: number;
}

export interface SynthesisFigures {
  /** Seeds on record (each has exactly one line). */
  seeds: number;
  kept: number;
  rejected: number;
  /** In check order; only the checks some seed reached. */
  funnel: FunnelStep[];
  /** Pass rate (as `correct/k`) → questions: every question rated, and those kept. */
  pass_rates: { rated: Record<string, number>; kept: Record<string, number> };
  /** Kept questions the closed-book solver answered correctly (marked), of those it was asked. */
  closed_book: { asked: number; correct: number };
  hops: Record<string, number>;
  cost: { requests: number; prompt_tokens: number; completion_tokens: number; per_kept: { requests: number; tokens: number } | null };
}

interface Line {
  readonly rejected_by?: string;
  readonly checks?: Record<string, { verdict?: string }>;
  readonly difficulty?: { pass_rate?: number | null; k?: number; closed_book_correct?: boolean | null };
  readonly hops?: number;
  readonly cost?: { requests?: number; prompt_tokens?: number; completion_tokens?: number };
}

export async function synthesisFigures(dir: string): Promise<SynthesisFigures> {
  const f: SynthesisFigures = { seeds: 0, kept: 0, rejected: 0, funnel: [], pass_rates: { rated: {}, kept: {} }, closed_book: { asked: 0, correct: 0 }, hops: {}, cost: { requests: 0, prompt_tokens: 0, completion_tokens: 0, per_kept: null } };
  const steps = new Map<string, FunnelStep>();
  for (const [name, kept] of [[SYNTH_QUESTIONS, true], [SYNTH_REJECTED, false]] as const) {
    const file = join(dir, name);
    if (!existsSync(file)) continue;
    let n = 0;
    for await (const text of createInterface({ input: createReadStream(file, 'utf8'), crlfDelay: Infinity })) {
      n++;
      if (text.trim() === '') continue;
      let row: Line;
      try {
        row = JSON.parse(text) as Line;
      } catch {
        throw inputError(file, n, undefined, 'not valid JSON');
      }
      count(f, steps, row, kept);
    }
  }
  f.funnel = SYNTHESIS_CHECKS.flatMap((c) => (steps.has(c) ? [steps.get(c)!] : []));
  const tokens = f.cost.prompt_tokens + f.cost.completion_tokens;
  f.cost.per_kept = f.kept === 0 ? null : { requests: f.cost.requests / f.kept, tokens: tokens / f.kept };
  return f;
}

function count(f: SynthesisFigures, steps: Map<string, FunnelStep>, row: Line, kept: boolean): void {
  f.seeds++;
  if (kept) f.kept++;
  else f.rejected++;
  for (const [check, result] of Object.entries(row.checks ?? {})) {
    let s = steps.get(check);
    if (s === undefined) steps.set(check, (s = { step: check, entered: 0, rejected: 0, marked: 0 }));
    s.entered++;
    if (result?.verdict === 'marked') s.marked++;
  }
  if (row.rejected_by !== undefined) {
    const s = steps.get(row.rejected_by);
    if (s !== undefined) s.rejected++;
  }
  const d = row.difficulty;
  if (typeof d?.pass_rate === 'number' && typeof d.k === 'number' && d.k > 0) {
    const bin = `${Math.round(d.pass_rate * d.k)}/${d.k}`;
    f.pass_rates.rated[bin] = (f.pass_rates.rated[bin] ?? 0) + 1;
    if (kept) f.pass_rates.kept[bin] = (f.pass_rates.kept[bin] ?? 0) + 1;
  }
  if (kept && typeof d?.closed_book_correct === 'boolean') {
    f.closed_book.asked++;
    if (d.closed_book_correct) f.closed_book.correct++;
  }
  if (kept && typeof row.hops === 'number') f.hops[row.hops] = (f.hops[row.hops] ?? 0) + 1;
  f.cost.requests += row.cost?.requests ?? 0;
  f.cost.prompt_tokens += row.cost?.prompt_tokens ?? 0;
  f.cost.completion_tokens += row.cost?.completion_tokens ?? 0;
}

/** Pass-rate bins in order: 0/k first. */
const binOrder = (m: Record<string, number>): [string, number][] => Object.entries(m).sort((a, b) => Number(a[0].split('/')[0]) - Number(b[0].split('/')[0]));

/** The terminal view, for `trajforge stats DIR`. */
export function formatSynthesis(f: SynthesisFigures, source: string): string {
  const out = [`stats of ${source} (a synthesis run: one line per seed)`, '', 'funnel                 entered  rejected  left'];
  out.push(`${'seeds'.padEnd(22)} ${String(f.seeds).padStart(7)}`);
  for (const s of f.funnel) out.push(`${s.step.padEnd(22)} ${String(s.entered).padStart(7)}  ${String(s.rejected).padStart(8)}  ${String(s.entered - s.rejected).padStart(4)}${s.marked ? `  (${s.marked} kept, marked)` : ''}`);
  out.push(`${'kept'.padEnd(22)} ${String(f.kept).padStart(7)}`, '');
  const bins = binOrder(f.pass_rates.rated);
  if (bins.length > 0) {
    const top = Math.max(...bins.map(([, n]) => n));
    out.push('difficulty: rollouts judged correct (all rated · kept)');
    for (const [bin, n] of bins) out.push(`  ${bin.padEnd(6)} ${'#'.repeat(Math.max(1, Math.round((30 * n) / top))).padEnd(30)} ${n} · ${f.pass_rates.kept[bin] ?? 0}`);
    out.push('');
  }
  if (f.closed_book.asked) out.push(`closed book: ${f.closed_book.correct} of ${f.closed_book.asked} kept questions answered without tools (kept, marked)`);
  const c = f.cost;
  out.push(`cost: ${c.requests} requests, ${c.prompt_tokens + c.completion_tokens} tokens (${c.prompt_tokens} prompt, ${c.completion_tokens} completion)`);
  out.push(c.per_kept === null ? 'per kept question: - (none kept)' : `per kept question: ${c.per_kept.requests.toFixed(1)} requests, ${Math.round(c.per_kept.tokens)} tokens`);
  return `${out.join('\n')}\n`;
}

/** The report's section for a synthesis run, above the rollouts' overview. */
export function synthesisSection(f: SynthesisFigures): string {
  const funnel = [{ label: 'seeds', value: f.seeds }, ...f.funnel.map((s) => ({ label: `after ${s.step}`, value: s.entered - s.rejected, note: `${fmt(s.rejected)} rejected` })), { label: 'kept', value: f.kept, color: '#2e8b57' }];
  const rejected = f.funnel.filter((s) => s.rejected > 0).map((s) => ({ label: s.step, value: s.rejected, color: '#c0392b' }));
  const rates = binOrder(f.pass_rates.rated).map(([bin, n]) => ({ label: `${bin} correct`, value: n, note: `${fmt(f.pass_rates.kept[bin] ?? 0)} kept`, color: '#3867d6' }));
  const c = f.cost;
  const per = c.per_kept === null ? '-' : `${c.per_kept.requests.toFixed(1)} requests, ${fmt(c.per_kept.tokens)} tokens`;
  return `<section id="synthesis"><h2>Synthesis</h2>
<div class="grid">
${card('Funnel: seeds → drafts → each check → kept', hbars(funnel, { label: 'funnel' }), ' id="chart-funnel"')}
${card('Rejected, by the check that rejected them', hbars(rejected, { label: 'rejected by check' }), ' id="chart-rejected"')}
${card('Difficulty: rollouts judged correct (rated · kept)', hbars(rates, { label: 'pass rates' }), ' id="chart-difficulty"')}
${card('Cost', `<table class="t"><tr><td>requests</td><td>${fmt(c.requests)}</td></tr><tr><td>tokens</td><td>${fmt(c.prompt_tokens + c.completion_tokens)}</td></tr><tr><td>per kept question</td><td>${esc(per)}</td></tr><tr><td>closed book answered (kept, marked)</td><td>${fmt(f.closed_book.correct)} of ${fmt(f.closed_book.asked)}</td></tr></table>`)}
</div></section>`;
}
