/**
 * `trajforge stats` for a terminal: the figures (stats.ts) as aligned tables, section by
 * section, then small histograms. `--json` prints the figures themselves instead.
 */
import { costLine } from '../core/cost.js';
import type { PassAtK } from './pass-at-k.js';
import type { Distribution, HistogramBin } from './sketch.js';
import type { Stats } from './stats.js';

/** Columns aligned: the first to the left, the others to the right (numbers read best that way) unless `left`. */
function table(rows: (string | number)[][], indent = '', left = false): string[] {
  const cells = rows.map((r) => r.map(String));
  const widths: number[] = [];
  for (const r of cells) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
  return cells.map((r) => indent + r.map((c, i) => (i === 0 || left ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ').trimEnd());
}

const pct = (n: number, of: number): string => (of ? `${((100 * n) / of).toFixed(1)}%` : '-');
const num = (v: number | null, digits = 0): string => (v === null ? '-' : digits ? v.toFixed(digits) : String(Math.round(v)));

function histogramLines(title: string, bins: HistogramBin[], width = 30): string[] {
  if (bins.length === 0) return [];
  const top = Math.max(...bins.map((b) => b.count));
  // A bin with any rows shows at least one mark, so a rare value does not read as none.
  const bar = (n: number): string => '#'.repeat(n === 0 ? 0 : Math.max(1, Math.round((width * n) / top))).padEnd(width);
  return [title, ...table(bins.map((b) => [b.from === b.to ? String(b.from) : `${b.from}-${b.to}`, bar(b.count), b.count]), '  ')];
}

/** Lines of a report, and the sections they are made of: a header, then an aligned table (or `none`). */
class Report {
  readonly out: string[] = [];

  section(header: (string | number)[], rows: (string | number)[][], empty = 'none'): void {
    this.out.push('');
    if (rows.length === 0) this.out.push(`${header[0]}: ${empty}`);
    else this.out.push(...table([header, ...rows]));
  }
}

/** The head: what was read and counted, acceptance, validation, dialects. */
function overview(rep: Report, stats: Stats, source: string | undefined): void {
  const r = stats.rows;
  const head = source === undefined ? 'stats' : `stats of ${source}`;
  rep.out.push(stats.latest_per_id ? `${head} (run directory: the latest state of each id)` : head);
  const rowParts = [`${r.counted} counted`];
  if (r.read !== r.counted) rowParts.push(`of ${r.read} read (${r.superseded} earlier attempts superseded)`);
  if (r.bad) rowParts.push(`${r.bad} bad rows skipped`);
  rep.out.push(...table([
    ['rows', rowParts.join(', ')],
    ['accepted', stats.acceptance_rate === null ? '-' : `${stats.status.ok ?? 0} of ${r.counted} (${pct(stats.status.ok ?? 0, r.counted)})`],
    ['validation', `${stats.validation.passed} passed, ${stats.validation.failed} failed${stats.validation.validated_here ? ` (${stats.validation.validated_here} rows from other systems validated here)` : ''}`],
    ['dialects', Object.entries(stats.dialects).map(([k, n]) => `${k} ${n}`).join(', ') || '-'],
    // Every row read was paid for, earlier attempts included.
    ...(stats.cost === null ? [] : [['cost', `${costLine(stats.cost)} (every row read)`]]),
  ], '', true));
}

/** Status, reasons, the per-trajectory distributions, tools, repairs, rollbacks, citations, rules. */
function trajectories(rep: Report, stats: Stats): void {
  const counted = stats.rows.counted;
  rep.section(['status', 'count', 'share'], Object.entries(stats.status).map(([k, n]) => [k, n, pct(n, counted)]));
  rep.section(['reason', 'count', 'share'], Object.entries(stats.reasons).map(([k, n]) => [k, n, pct(n, counted)]));
  const d = stats.per_trajectory;
  const dist = (name: string, x: Distribution, digits: number): (string | number)[] => [name, x.count, num(x.mean, digits), `${x.quantiles_exact ? '' : '~'}${num(x.p50)}`, `${x.quantiles_exact ? '' : '~'}${num(x.p90)}`, num(x.max)];
  rep.section(['per trajectory', 'n', 'mean', 'p50', 'p90', 'max'], [dist('tool calls', d.tool_calls, 2), dist('turns', d.turns, 2), dist('tokens', d.tokens, 1)]);
  if (!d.tool_calls.quantiles_exact || !d.turns.quantiles_exact || !d.tokens.quantiles_exact) {
    rep.out.push('~ approximate: from log-spaced buckets, within 0.2% of the value');
  }
  rep.section(['tool', 'trajectories', 'calls', 'skipped', 'cached'], Object.entries(stats.tools).map(([k, x]) => [k, x.trajectories, x.calls, x.skipped, x.cached]));
  rep.section(['repair', 'count', 'trajectories'], Object.entries(stats.repairs).map(([k, x]) => [k, x.count, x.trajectories]));
  rep.section(['rollback', 'count', 'trajectories'], Object.entries(stats.rollbacks).map(([k, x]) => [k, x.count, x.trajectories]));
  const c = stats.citations;
  rep.section(['citations', 'ids'], [
    ['cited', c.cited],
    ['resolved', c.resolved],
    ['unresolved', `${c.unresolved}${c.unresolved ? ` (in ${c.trajectories_with_unresolved} trajectories)` : ''}`],
  ]);
  rep.section(['failed rule (error)', 'trajectories'], Object.entries(stats.failures_by_rule));
  if (Object.keys(stats.warnings_by_rule).length) rep.section(['warned rule', 'trajectories'], Object.entries(stats.warnings_by_rule));
}

/** Curation and grading, when the data has them: decontamination, judgements, pass@k. */
function curation(rep: Report, stats: Stats): void {
  const dc = stats.decontamination;
  if (dc.checked > 0) {
    rep.section(['decontamination', 'rows', 'share'], [
      ['checked', dc.checked, pct(dc.checked, stats.rows.counted)],
      ['flagged', dc.flagged, pct(dc.flagged, dc.checked)],
      ...Object.entries(dc.by_field).map(([f, n]): (string | number)[] => [`  in ${f}`, n, pct(n, dc.checked)]),
      ...Object.entries(dc.by_eval_file).map(([f, n]): (string | number)[] => [`  from ${f}`, n, pct(n, dc.checked)]),
    ]);
  }
  const j = stats.judgement;
  if (j !== null) {
    rep.section(['judged', 'rows', 'share'], [
      ...Object.entries(j.verdicts).map(([v, n]): (string | number)[] => [v, n, pct(n, j.judged)]),
      ...Object.entries(j.steps).map(([v, n]): (string | number)[] => [`  by ${v}`, n, pct(n, j.judged)]),
      ...(j.rubric.scored ? [['rubric scored', j.rubric.scored, `mean ${num(j.rubric.mean, 3)}`]] : []),
    ]);
  }
  const p = stats.pass_at_k;
  if (p !== null) {
    const row = (name: string, f: PassAtK['overall']): (string | number)[] => [name, f.questions, num(f.pass_at_1, 3), f.questions_at_k, num(f.pass_at_k, 3)];
    rep.section([`pass@k (k = ${p.k}, ${p.method === 'unbiased' ? 'unbiased estimator' : p.method === 'first_correct' ? 'first correct sample, --until-correct' : 'mixed'})`, 'questions', 'pass@1', 'questions', `pass@${p.k}`], [
      row('all', p.overall),
      ...Object.entries(p.by_split).map(([name, f]) => row(`  split ${name}`, f)),
    ]);
    if (p.unjudged_questions) rep.out.push(`${p.unjudged_questions} questions left out: a sample of theirs is unjudged (trajforge rerun RUN --reason unjudged)`);
  }
}

/** Runs with agents: sessions by agent, and the families. */
function agents(rep: Report, stats: Stats): void {
  const ba = stats.by_agent;
  if (ba !== null) {
    const top = (m: Record<string, number>): string => Object.entries(m).slice(0, 2).map(([k, n]) => `${k} ${n}`).join(', ') || '-';
    rep.section(['agent', 'sessions', 'accepted', 'share', 'tool calls', 'turns', 'tokens', 'reasons'], [
      ...Object.entries(ba.agents).map(([name, a]): (string | number)[] => {
        const ok = a.status.ok ?? 0;
        const p = a.per_trajectory;
        return [name, a.counted, ok, pct(ok, a.counted), num(p.tool_calls.mean, 2), num(p.turns.mean, 2), num(p.tokens.mean, 1), top(a.reasons)];
      }),
      ...(ba.without_agent ? [['(no agent)', ba.without_agent, '', '', '', '', '', '']] : []),
    ]);
    rep.out.push('(tool calls, turns, tokens: the mean per session)');
  }
  const f = stats.families;
  if (f !== null) {
    const distRow = (name: string, x: Distribution): (string | number)[] => [name, x.count, num(x.mean, 2), num(x.p50), num(x.p90), num(x.max)];
    rep.section(['families', 'n', 'mean', 'p50', 'p90', 'max'], [distRow('sessions per family', f.sessions_per_family), distRow('sub-agent calls per main', f.sub_agent_calls_per_main)]);
    rep.out.push(
      ...table([
        ['families', `${f.families}${f.without_root ? ` (${f.without_root} without their root session in this data)` : ''}`],
        ['sub-agent calls', `${f.sub_agent_calls}, ${f.sub_agent_calls_failed} of them failed (a tool error for the caller)`],
        ['sessions by depth', Object.entries(f.by_depth).map(([d, n]) => `${d}: ${n}`).join(', ')],
      ], '', true),
    );
  }
}

/** A readable report of `stats` for a terminal: aligned tables, then small histograms. */
export function formatStats(stats: Stats, source?: string): string {
  const rep = new Report();
  overview(rep, stats, source);
  trajectories(rep, stats);
  curation(rep, stats);
  agents(rep, stats);
  const h = stats.histograms;
  for (const [title, bins] of [
    ['tool calls per trajectory', h.tool_calls],
    ['turns per trajectory', h.turns],
    ['tokens per trajectory', h.tokens],
  ] as const) {
    const lines = histogramLines(title, bins);
    if (lines.length) rep.out.push('', ...lines);
  }
  return `${rep.out.join('\n')}\n`;
}
