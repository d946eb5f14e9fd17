/**
 * `trajforge stats`: the shape of a dataset, in one streaming pass and constant memory.
 *
 * Every figure is a counter or a fixed-size sketch, so a row is forgotten once it is
 * counted. Quantiles come from `Sketch`: values below 1024 are counted exactly, larger
 * ones in log-spaced buckets no wider than 0.2% of their value (tool calls and turns are
 * exact in practice; token quantiles are approximate to that bound, and say so).
 *
 * A run directory is read for its latest state per id (an accepted id counts once, as
 * accepted; an id only in failures.jsonl counts once, by its latest attempt). That needs
 * to know, when a failed attempt is read, whether it is the last one: a first pass over
 * failures.jsonl keeps id → (attempt, line) of the winner, ids only, and the second pass
 * counts the rows that won.
 *
 * Records of a run with agents (README "Agents") are also counted by agent and by family.
 * The family figures need to know, per family, how many sessions it has and whether its root
 * was seen: a map of family keys to two small numbers, the one figure that grows with the
 * dataset (as the latest-state index does), and only for records that carry family fields.
 */
import { basename } from 'node:path';
import type { Trajectory } from '../../schemas/index.js';
import { statPath } from '../files.js';
import { inputFiles, readDataset, type DatasetRow, type ReadOptions, type ReadReport } from './readers.js';
import { ForeignCheck, validatedRows } from './foreign.js';
import type { TokenCounter } from '../core/tokens/count.js';
import { FAILURES } from '../core/run-dir/names.js';
import { PassCounter, type PassAtK } from './pass-at-k.js';
import { familyOf, isChild } from './families.js';

// ---------------------------------------------------------------------------------------
// Quantile sketch

/** Values below 2^SUB_BITS get a bucket each; above, buckets keep the top SUB_BITS bits. */
const SUB_BITS = 10;
const EXACT_BELOW = 1 << SUB_BITS;
const HALF = EXACT_BELOW >> 1;
/** Enough buckets for any double up to 2^53. */
const BUCKETS = EXACT_BELOW + (53 - SUB_BITS) * HALF;

function log2Floor(v: number): number {
  if (v < 2 ** 31) return 31 - Math.clz32(v);
  let e = Math.floor(Math.log2(v));
  // Math.log2 can round across a power of two.
  if (2 ** e > v) e--;
  else if (2 ** (e + 1) <= v) e++;
  return e;
}

function bucketOf(v: number): number {
  if (v < EXACT_BELOW) return v;
  const e = log2Floor(v);
  const shift = e - SUB_BITS + 1;
  const mant = Math.floor(v / 2 ** shift);
  return EXACT_BELOW + (e - SUB_BITS) * HALF + (mant - HALF);
}

/** The values a bucket holds, inclusive. */
function bucketRange(i: number): [number, number] {
  if (i < EXACT_BELOW) return [i, i];
  const j = i - EXACT_BELOW;
  const shift = Math.floor(j / HALF) + 1;
  const mant = HALF + (j % HALF);
  return [mant * 2 ** shift, (mant + 1) * 2 ** shift - 1];
}

/** Counts of non-negative integers: exact below 1024, within 0.2% above. Fixed size (~180 KB). */
export class Sketch {
  readonly #counts = new Float64Array(BUCKETS);
  #n = 0;
  #sum = 0;
  #min = Infinity;
  #max = -Infinity;

  /** Non-finite and negative values are ignored; fractions are rounded for bucketing (the mean keeps them). */
  add(value: number): void {
    if (!(value >= 0) || value === Infinity) return;
    this.#counts[bucketOf(Math.min(Math.round(value), 2 ** 53 - 1))]!++;
    this.#n++;
    this.#sum += value;
    if (value < this.#min) this.#min = value;
    if (value > this.#max) this.#max = value;
  }

  get count(): number {
    return this.#n;
  }

  /** Nearest rank: the smallest value with at least ⌈q·n⌉ values at or below it. */
  quantile(q: number): { value: number; exact: boolean } | null {
    if (this.#n === 0) return null;
    const rank = Math.max(1, Math.ceil(q * this.#n));
    // The ends are known exactly whatever their bucket.
    if (rank === 1) return { value: this.#min, exact: true };
    if (rank === this.#n) return { value: this.#max, exact: true };
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.#counts[i]!;
      if (seen >= rank) {
        const [lo, hi] = bucketRange(i);
        if (lo === hi) return { value: lo, exact: true };
        // A bucket's values are unknown: its midpoint, never outside what was seen.
        const from = Math.max(lo, this.#min);
        const to = Math.min(hi, this.#max);
        return { value: Math.round((from + to) / 2), exact: from === to };
      }
    }
    return { value: this.#max, exact: true };
  }

  summary(): Distribution {
    const p50 = this.quantile(0.5);
    const p90 = this.quantile(0.9);
    return {
      count: this.#n,
      mean: this.#n ? this.#sum / this.#n : null,
      min: this.#n ? this.#min : null,
      p50: p50?.value ?? null,
      p90: p90?.value ?? null,
      max: this.#n ? this.#max : null,
      quantiles_exact: (p50?.exact ?? true) && (p90?.exact ?? true),
    };
  }

  /** At most `maxBins` bins of equal, round width (1, 2, 5 × 10^k) covering min..max. */
  histogram(maxBins = 10): HistogramBin[] {
    if (this.#n === 0) return [];
    const min = Math.floor(this.#min);
    const max = Math.floor(this.#max);
    let width = 1;
    for (let k = 1; (max - min + 1) / width > maxBins; ) {
      for (const m of [2, 5, 10]) {
        width = m * k;
        if ((max - min + 1) / width <= maxBins) break;
      }
      k *= 10;
    }
    const start = Math.floor(min / width) * width;
    const bins: HistogramBin[] = [];
    for (let lo = start; lo <= max; lo += width) bins.push({ from: lo, to: lo + width - 1, count: 0 });
    for (let i = 0; i < BUCKETS; i++) {
      const c = this.#counts[i]!;
      if (c === 0) continue;
      const [lo, hi] = bucketRange(i);
      const v = Math.min(max, Math.max(min, lo === hi ? lo : Math.round((lo + hi) / 2)));
      bins[Math.min(bins.length - 1, Math.floor((v - start) / width))]!.count += c;
    }
    return bins;
  }
}

// ---------------------------------------------------------------------------------------
// The figures

export interface Distribution {
  /** Trajectories that had the value. */
  count: number;
  mean: number | null;
  min: number | null;
  p50: number | null;
  p90: number | null;
  max: number | null;
  /** false when p50 or p90 fell in a bucket wider than one value (only above 1024): then within 0.2%. */
  quantiles_exact: boolean;
}

export interface HistogramBin {
  from: number;
  to: number;
  count: number;
}

export interface Stats {
  /** Run directory read for its latest state per id, or every row counted. */
  latest_per_id: boolean;
  rows: {
    /** Rows read (bad rows not included). */
    read: number;
    /** Rows in the figures below. */
    counted: number;
    /** Rows of a run directory left out: earlier failed attempts of an id, failed attempts of an accepted id. */
    superseded: number;
    /** Rows that could not be read and were skipped (`--on-bad-row skip`). */
    bad: number;
  };
  status: Record<string, number>;
  /** ok / counted; null with no rows. */
  acceptance_rate: number | null;
  /** Failure reasons of the counted rows; a failed row without one counts as `(none)`. */
  reasons: Record<string, number>;
  dialects: Record<string, number>;
  /** `validated_here`: rows from other systems whose verdict these figures made (foreign.ts). */
  validation: { passed: number; failed: number; validated_here?: number };
  per_trajectory: { tool_calls: Distribution; turns: Distribution; tokens: Distribution };
  /**
   * Per tool name: trajectories that used it (`tools_used`), calls made, calls that never reached
   * a server, calls served from the tool-result cache.
   */
  tools: Record<string, { trajectories: number; calls: number; skipped: number; cached: number }>;
  repairs: Record<string, { count: number; trajectories: number }>;
  rollbacks: Record<string, { count: number; trajectories: number }>;
  citations: { cited: number; resolved: number; unresolved: number; trajectories_with_unresolved: number };
  /** Rule → trajectories with an issue of that rule at severity `error`. */
  failures_by_rule: Record<string, number>;
  /** Rule → trajectories with an issue of that rule at severity `warn`. */
  warnings_by_rule: Record<string, number>;
  /**
   * Rows that carry the `decontamination` field `trajforge decontaminate` writes: how many it
   * checked, how many overlap an eval item, and those by field and by eval file.
   */
  decontamination: { checked: number; flagged: number; by_field: Record<string, number>; by_eval_file: Record<string, number> };
  /**
   * Rows the judge in the loop judged (`judgement`): by verdict and by the step that decided,
   * and the rubric scores; null when no row carries a judgement.
   */
  judgement: { judged: number; verdicts: Record<string, number>; steps: Record<string, number>; rubric: { scored: number; mean: number | null } } | null;
  /** pass@1 and pass@k per run and per split (pass-at-k.ts); null when no row carries a judgement. */
  pass_at_k: PassAtK | null;
  /** The main figures per agent (the records' `agent`), and how many rows name none; null when no row names an agent. */
  by_agent: { agents: Record<string, AgentFigures>; without_agent: number } | null;
  /** Families of a run with agents; null when no row carries family fields. */
  families: FamilyFigures | null;
  /** For the terminal only; `statsToJson` leaves them out. */
  histograms: { tool_calls: HistogramBin[]; turns: HistogramBin[]; tokens: HistogramBin[] };
}

export interface AgentFigures {
  /** Sessions of this agent counted. */
  counted: number;
  status: Record<string, number>;
  acceptance_rate: number | null;
  reasons: Record<string, number>;
  validation: { passed: number; failed: number };
  per_trajectory: { tool_calls: Distribution; turns: Distribution; tokens: Distribution };
  /** Calls per tool name. */
  tool_calls: Record<string, number>;
}

export interface FamilyFigures {
  /** Families (a root and its sessions, one attempt) with at least one session counted. */
  families: number;
  /** Families whose root session is not among the counted rows (a cut or filtered dataset). */
  without_root: number;
  /** Sessions per family, the root included. */
  sessions_per_family: Distribution;
  /** Calls to sub-agents per main (root) session. */
  sub_agent_calls_per_main: Distribution;
  /** Calls to a sub-agent (a call with `child_id`), at any depth. */
  sub_agent_calls: number;
  /** Of those, calls whose sub-agent failed on its own: the caller saw a tool error and went on. */
  sub_agent_calls_failed: number;
  /** Sessions by depth (0 = main). */
  by_depth: Record<string, number>;
}

/**
 * Which failed attempt of each id counts: id → attempt·2^32 + line of the winner, so the
 * highest attempt wins and, among equal attempts, the later line.
 */
export interface LatestIndex {
  /** The failures file, as `DatasetRow.file` names it. */
  readonly failuresFile: string;
  readonly winners: Map<string, number>;
}

const LINE_SPAN = 2 ** 32;

/** The first pass over a run's failures.jsonl: ids only, never records. */
export async function indexLatestFailures(rows: AsyncIterable<DatasetRow>, failuresFile: string): Promise<LatestIndex> {
  const winners = new Map<string, number>();
  for await (const row of rows) {
    const t = row.trajectory as Partial<Trajectory>;
    if (typeof t.id !== 'string') continue;
    const attempt = typeof t.attempt === 'number' && t.attempt >= 0 ? Math.floor(t.attempt) : 0;
    const key = attempt * LINE_SPAN + row.line;
    const prev = winners.get(t.id);
    if (prev === undefined || key > prev) winners.set(t.id, key);
  }
  return { failuresFile, winners };
}

export interface StatsOptions {
  /** Count a run directory's latest state per id; built by `indexLatestFailures`. Rows from `failuresFile` count only when they won; other rows are accepted ones, counted once per id. */
  readonly latest?: LatestIndex | undefined;
  /** The reader's report, for the bad rows it skipped. */
  readonly report?: ReadReport | undefined;
}

type Counts = Map<string, number>;
const inc = (m: Counts, k: string, by = 1): void => void m.set(k, (m.get(k) ?? 0) + by);

class Accumulator {
  read = 0;
  counted = 0;
  superseded = 0;
  readonly status: Counts = new Map();
  readonly reasons: Counts = new Map();
  readonly dialects: Counts = new Map();
  passed = 0;
  failedValidation = 0;
  readonly toolCalls = new Sketch();
  readonly turns = new Sketch();
  readonly tokens = new Sketch();
  readonly toolTrajectories: Counts = new Map();
  readonly toolCallCounts: Counts = new Map();
  readonly toolSkipped: Counts = new Map();
  readonly toolCached: Counts = new Map();
  readonly repairCount: Counts = new Map();
  readonly repairTrajectories: Counts = new Map();
  readonly rollbackCount: Counts = new Map();
  readonly rollbackTrajectories: Counts = new Map();
  cited = 0;
  unresolved = 0;
  withUnresolved = 0;
  readonly errorRules: Counts = new Map();
  readonly warnRules: Counts = new Map();
  decontaminationChecked = 0;
  decontaminationFlagged = 0;
  readonly contaminatedFields: Counts = new Map();
  readonly contaminatedBy: Counts = new Map();
  readonly pass = new PassCounter();
  judged = 0;
  readonly verdicts: Counts = new Map();
  readonly steps: Counts = new Map();
  rubricScored = 0;
  rubricSum = 0;
  // Reused per row: the distinct kinds of one trajectory.
  readonly #seen = new Set<string>();

  /** Rows come from any reader, so every field is checked rather than trusted. */
  add(t: Partial<Trajectory>): void {
    this.counted++;
    const status = typeof t.status === 'string' ? t.status : 'unknown';
    inc(this.status, status);
    if (typeof t.reason === 'string') inc(this.reasons, t.reason);
    else if (status === 'failed') inc(this.reasons, '(none)');
    if (typeof t.dialect === 'string') inc(this.dialects, t.dialect);

    const calls = Array.isArray(t.tool_calls) ? t.tool_calls : [];
    const nCalls = typeof t.total_tool_calls === 'number' ? t.total_tool_calls : Array.isArray(t.tool_calls) ? calls.length : undefined;
    if (nCalls !== undefined) this.toolCalls.add(nCalls);
    if (typeof t.turns === 'number') this.turns.add(t.turns);
    const tokens = t.usage?.total_tokens;
    if (typeof tokens === 'number') this.tokens.add(tokens);

    const seen = this.#seen;
    seen.clear();
    if (Array.isArray(t.tools_used)) for (const name of t.tools_used) if (typeof name === 'string') seen.add(name);
    for (const name of seen) inc(this.toolTrajectories, name);
    for (const c of calls) {
      const name = typeof c?.tool_name === 'string' ? c.tool_name : '(unnamed)';
      inc(this.toolCallCounts, name);
      if (c.skipped === true) inc(this.toolSkipped, name);
      if (c.cached === true) inc(this.toolCached, name);
    }

    this.#kinds(t.repairs, 'kind', this.repairCount, this.repairTrajectories);
    this.#kinds(t.rollbacks, 'condition', this.rollbackCount, this.rollbackTrajectories);

    const cited = Array.isArray(t.cited_ids) ? t.cited_ids.length : 0;
    const unresolved = Array.isArray(t.unresolved_cited_ids) ? t.unresolved_cited_ids.length : 0;
    this.cited += cited;
    this.unresolved += unresolved;
    if (unresolved > 0) this.withUnresolved++;

    const v = t.validation;
    if (v && typeof v.passed === 'boolean') {
      if (v.passed) this.passed++;
      else this.failedValidation++;
    }
    if (v && Array.isArray(v.issues)) {
      seen.clear();
      const warned = new Set<string>();
      for (const issue of v.issues) {
        if (typeof issue?.rule !== 'string') continue;
        if (issue.severity === 'error') seen.add(issue.rule);
        else if (issue.severity === 'warn') warned.add(issue.rule);
      }
      for (const r of seen) inc(this.errorRules, r);
      for (const r of warned) inc(this.warnRules, r);
    }
    this.#decontamination((t as { decontamination?: unknown }).decontamination);
    this.pass.add(t);
    const j = t.judgement as { verdict?: unknown; step?: unknown; rubric_score?: unknown } | null | undefined;
    if (j && typeof j.verdict === 'string') {
      this.judged++;
      inc(this.verdicts, j.verdict);
      if (typeof j.step === 'string') inc(this.steps, j.step);
      if (typeof j.rubric_score === 'number' && Number.isFinite(j.rubric_score)) {
        this.rubricScored++;
        this.rubricSum += j.rubric_score;
      }
    }
  }

  #decontamination(d: unknown): void {
    const matches = (d as { matches?: unknown } | null | undefined)?.matches;
    if (!Array.isArray(matches)) return;
    this.decontaminationChecked++;
    if (matches.length === 0) return;
    this.decontaminationFlagged++;
    const fields = new Set<string>();
    const files = new Set<string>();
    for (const m of matches as { field?: unknown; eval_file?: unknown }[]) {
      if (typeof m?.field === 'string') fields.add(m.field);
      if (typeof m?.eval_file === 'string') files.add(m.eval_file);
    }
    for (const f of fields) inc(this.contaminatedFields, f);
    for (const f of files) inc(this.contaminatedBy, f);
  }

  #kinds(list: unknown, key: 'kind' | 'condition', count: Counts, trajectories: Counts): void {
    if (!Array.isArray(list) || list.length === 0) return;
    const seen = this.#seen;
    seen.clear();
    for (const item of list) {
      const k = (item as Record<string, unknown> | null)?.[key];
      if (typeof k !== 'string') continue;
      inc(count, k);
      seen.add(k);
    }
    for (const k of seen) inc(trajectories, k);
  }
}

/** The family figures, fed every counted row that carries family fields. */
class FamilyTracker {
  /** Family key → sessions counted·2 + (1 when its root was counted). */
  readonly #families = new Map<string, number>();
  readonly #perMain = new Sketch();
  readonly #depth: Counts = new Map();
  #calls = 0;
  #failed = 0;

  add(t: Partial<Trajectory>): void {
    const key = familyOf(t);
    if (key === undefined) return;
    const root = !isChild(t);
    this.#families.set(key, (this.#families.get(key) ?? 0) + 2 + (root ? 1 : 0));
    inc(this.#depth, typeof t.depth === 'number' ? String(t.depth) : root ? '0' : '(none)');
    let calls = 0;
    if (Array.isArray(t.tool_calls)) {
      for (const c of t.tool_calls) {
        if (typeof c?.child_id !== 'string') continue;
        calls++;
        if (typeof c.error === 'string') this.#failed++;
      }
    }
    this.#calls += calls;
    if (root) this.#perMain.add(calls);
  }

  result(): FamilyFigures | null {
    if (this.#families.size === 0) return null;
    const sessions = new Sketch();
    let withoutRoot = 0;
    for (const v of this.#families.values()) {
      sessions.add(Math.floor(v / 2));
      if (v % 2 === 0) withoutRoot++;
    }
    const depth = Object.fromEntries([...this.#depth].sort((a, b) => (a[0] < b[0] ? -1 : 1)));
    return {
      families: this.#families.size,
      without_root: withoutRoot,
      sessions_per_family: sessions.summary(),
      sub_agent_calls_per_main: this.#perMain.summary(),
      sub_agent_calls: this.#calls,
      sub_agent_calls_failed: this.#failed,
      by_depth: depth,
    };
  }
}

function agentFigures(acc: Accumulator): AgentFigures {
  const ok = acc.status.get('ok') ?? 0;
  return {
    counted: acc.counted,
    status: sorted(acc.status),
    acceptance_rate: acc.counted ? ok / acc.counted : null,
    reasons: sorted(acc.reasons),
    validation: { passed: acc.passed, failed: acc.failedValidation },
    per_trajectory: { tool_calls: acc.toolCalls.summary(), turns: acc.turns.summary(), tokens: acc.tokens.summary() },
    tool_calls: sorted(acc.toolCallCounts),
  };
}

/** Sorted by count, largest first, then by name: the order a table and a JSON object show. */
function sorted(m: Counts): Record<string, number> {
  return Object.fromEntries([...m].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)));
}

function pairs(count: Counts, trajectories: Counts): Record<string, { count: number; trajectories: number }> {
  return Object.fromEntries(Object.entries(sorted(count)).map(([k, n]) => [k, { count: n, trajectories: trajectories.get(k) ?? 0 }]));
}

/**
 * Every figure of `trajforge stats` over `rows`, in one pass. Without `opts.latest` every row
 * counts; with it, a run directory's latest state per id (see `statsForInput`).
 */
export async function computeStats(rows: AsyncIterable<DatasetRow>, opts: StatsOptions = {}): Promise<Stats> {
  const acc = new Accumulator();
  const families = new FamilyTracker();
  const byAgent = new Map<string, Accumulator>();
  let withoutAgent = 0;
  const latest = opts.latest;
  // Accepted ids seen, so failures of an accepted id (and a duplicate acceptance) are left out.
  const accepted = latest ? new Set<string>() : undefined;
  for await (const row of rows) {
    acc.read++;
    const t = row.trajectory as Partial<Trajectory>;
    if (latest && accepted && typeof t.id === 'string') {
      if (row.file === latest.failuresFile) {
        const key = latest.winners.get(t.id);
        if (accepted.has(t.id) || key === undefined || key % LINE_SPAN !== row.line) {
          acc.superseded++;
          continue;
        }
      } else {
        if (accepted.has(t.id)) {
          acc.superseded++;
          continue;
        }
        accepted.add(t.id);
      }
    }
    acc.add(t);
    families.add(t);
    if (typeof t.agent === 'string' && t.agent !== '') {
      let a = byAgent.get(t.agent);
      if (a === undefined) byAgent.set(t.agent, (a = new Accumulator()));
      a.add(t);
    } else withoutAgent++;
  }
  const toolNames = new Set([...acc.toolTrajectories.keys(), ...acc.toolCallCounts.keys()]);
  const tools = [...toolNames]
    .map((name) => [name, { trajectories: acc.toolTrajectories.get(name) ?? 0, calls: acc.toolCallCounts.get(name) ?? 0, skipped: acc.toolSkipped.get(name) ?? 0, cached: acc.toolCached.get(name) ?? 0 }] as const)
    .sort((a, b) => b[1].trajectories - a[1].trajectories || b[1].calls - a[1].calls || (a[0] < b[0] ? -1 : 1));
  const ok = acc.status.get('ok') ?? 0;
  return {
    latest_per_id: latest !== undefined,
    rows: { read: acc.read, counted: acc.counted, superseded: acc.superseded, bad: opts.report?.bad.length ?? 0 },
    status: sorted(acc.status),
    acceptance_rate: acc.counted ? ok / acc.counted : null,
    reasons: sorted(acc.reasons),
    dialects: sorted(acc.dialects),
    validation: { passed: acc.passed, failed: acc.failedValidation },
    per_trajectory: { tool_calls: acc.toolCalls.summary(), turns: acc.turns.summary(), tokens: acc.tokens.summary() },
    tools: Object.fromEntries(tools),
    repairs: pairs(acc.repairCount, acc.repairTrajectories),
    rollbacks: pairs(acc.rollbackCount, acc.rollbackTrajectories),
    citations: { cited: acc.cited, resolved: Math.max(0, acc.cited - acc.unresolved), unresolved: acc.unresolved, trajectories_with_unresolved: acc.withUnresolved },
    failures_by_rule: sorted(acc.errorRules),
    warnings_by_rule: sorted(acc.warnRules),
    decontamination: { checked: acc.decontaminationChecked, flagged: acc.decontaminationFlagged, by_field: sorted(acc.contaminatedFields), by_eval_file: sorted(acc.contaminatedBy) },
    judgement: acc.judged === 0 ? null : { judged: acc.judged, verdicts: sorted(acc.verdicts), steps: sorted(acc.steps), rubric: { scored: acc.rubricScored, mean: acc.rubricScored ? acc.rubricSum / acc.rubricScored : null } },
    pass_at_k: acc.pass.result(),
    by_agent:
      byAgent.size === 0
        ? null
        : { agents: Object.fromEntries([...byAgent].sort((a, b) => b[1].counted - a[1].counted || (a[0] < b[0] ? -1 : 1)).map(([k, a]) => [k, agentFigures(a)])), without_agent: withoutAgent },
    families: families.result(),
    histograms: { tool_calls: acc.toolCalls.histogram(), turns: acc.turns.histogram(), tokens: acc.tokens.histogram() },
  };
}

/**
 * Stats of a file, `-` (stdin) or a run directory. A run directory is read twice: its
 * failures.jsonl for the latest attempt of each id, then both files for the figures.
 */
export async function statsForInput(input: string, opts: ReadOptions = {}, counter?: TokenCounter): Promise<Stats> {
  const isRun = input !== '-' && statPath(input)?.isDirectory() === true;
  let latest: LatestIndex | undefined;
  if (isRun) {
    const files = inputFiles(input);
    const failures = files.find((f) => basename(f) === FAILURES);
    latest = { failuresFile: '', winners: new Map() };
    if (failures !== undefined) latest = await indexLatestFailures(readDataset(failures, opts).rows, failures);
  }
  const { rows, report } = readDataset(input, opts);
  // Rows from other systems carry no verdict and no token count of their own: both are made here.
  const foreign = new ForeignCheck({ counter, countTokens: true });
  const stats = await computeStats(validatedRows(rows, foreign), { latest, report });
  stats.validation.validated_here = foreign.validated;
  return stats;
}

/** The figures as `--json` prints them: everything but the histograms. */
export function statsToJson(stats: Stats): Omit<Stats, 'histograms'> {
  const { histograms: _histograms, ...rest } = stats;
  return rest;
}

// ---------------------------------------------------------------------------------------
// The terminal view

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

/** A readable report of `stats` for a terminal: aligned tables, then small histograms. */
export function formatStats(stats: Stats, source?: string): string {
  const out: string[] = [];
  const r = stats.rows;
  const head = source === undefined ? 'stats' : `stats of ${source}`;
  out.push(stats.latest_per_id ? `${head} (run directory: the latest state of each id)` : head);
  const rowParts = [`${r.counted} counted`];
  if (r.read !== r.counted) rowParts.push(`of ${r.read} read (${r.superseded} earlier attempts superseded)`);
  if (r.bad) rowParts.push(`${r.bad} bad rows skipped`);
  out.push(...table([
    ['rows', rowParts.join(', ')],
    ['accepted', stats.acceptance_rate === null ? '-' : `${stats.status.ok ?? 0} of ${r.counted} (${pct(stats.status.ok ?? 0, r.counted)})`],
    ['validation', `${stats.validation.passed} passed, ${stats.validation.failed} failed${stats.validation.validated_here ? ` (${stats.validation.validated_here} rows from other systems validated here)` : ''}`],
    ['dialects', Object.entries(stats.dialects).map(([k, n]) => `${k} ${n}`).join(', ') || '-'],
  ], '', true));

  const section = (header: (string | number)[], rows: (string | number)[][], empty = 'none'): void => {
    out.push('');
    if (rows.length === 0) out.push(`${header[0]}: ${empty}`);
    else out.push(...table([header, ...rows]));
  };

  section(['status', 'count', 'share'], Object.entries(stats.status).map(([k, n]) => [k, n, pct(n, r.counted)]));
  section(['reason', 'count', 'share'], Object.entries(stats.reasons).map(([k, n]) => [k, n, pct(n, r.counted)]));

  const d = stats.per_trajectory;
  const dist = (name: string, x: Distribution, digits: number): (string | number)[] => [name, x.count, num(x.mean, digits), `${x.quantiles_exact ? '' : '~'}${num(x.p50)}`, `${x.quantiles_exact ? '' : '~'}${num(x.p90)}`, num(x.max)];
  section(['per trajectory', 'n', 'mean', 'p50', 'p90', 'max'], [dist('tool calls', d.tool_calls, 2), dist('turns', d.turns, 2), dist('tokens', d.tokens, 1)]);
  if (!d.tool_calls.quantiles_exact || !d.turns.quantiles_exact || !d.tokens.quantiles_exact) {
    out.push('~ approximate: from log-spaced buckets, within 0.2% of the value');
  }

  section(['tool', 'trajectories', 'calls', 'skipped', 'cached'], Object.entries(stats.tools).map(([k, x]) => [k, x.trajectories, x.calls, x.skipped, x.cached]));
  section(['repair', 'count', 'trajectories'], Object.entries(stats.repairs).map(([k, x]) => [k, x.count, x.trajectories]));
  section(['rollback', 'count', 'trajectories'], Object.entries(stats.rollbacks).map(([k, x]) => [k, x.count, x.trajectories]));
  const c = stats.citations;
  section(['citations', 'ids'], [
    ['cited', c.cited],
    ['resolved', c.resolved],
    ['unresolved', `${c.unresolved}${c.unresolved ? ` (in ${c.trajectories_with_unresolved} trajectories)` : ''}`],
  ]);
  section(['failed rule (error)', 'trajectories'], Object.entries(stats.failures_by_rule));
  if (Object.keys(stats.warnings_by_rule).length) section(['warned rule', 'trajectories'], Object.entries(stats.warnings_by_rule));
  const dc = stats.decontamination;
  if (dc.checked > 0) {
    section(['decontamination', 'rows', 'share'], [
      ['checked', dc.checked, pct(dc.checked, r.counted)],
      ['flagged', dc.flagged, pct(dc.flagged, dc.checked)],
      ...Object.entries(dc.by_field).map(([f, n]): (string | number)[] => [`  in ${f}`, n, pct(n, dc.checked)]),
      ...Object.entries(dc.by_eval_file).map(([f, n]): (string | number)[] => [`  from ${f}`, n, pct(n, dc.checked)]),
    ]);
  }

  const j = stats.judgement;
  if (j !== null) {
    section(['judged', 'rows', 'share'], [
      ...Object.entries(j.verdicts).map(([v, n]): (string | number)[] => [v, n, pct(n, j.judged)]),
      ...Object.entries(j.steps).map(([v, n]): (string | number)[] => [`  by ${v}`, n, pct(n, j.judged)]),
      ...(j.rubric.scored ? [['rubric scored', j.rubric.scored, `mean ${num(j.rubric.mean, 3)}`]] : []),
    ]);
  }
  const p = stats.pass_at_k;
  if (p !== null) {
    const row = (name: string, f: PassAtK['overall']): (string | number)[] => [name, f.questions, num(f.pass_at_1, 3), f.questions_at_k, num(f.pass_at_k, 3)];
    section([`pass@k (k = ${p.k}, ${p.method === 'unbiased' ? 'unbiased estimator' : p.method === 'first_correct' ? 'first correct sample, --until-correct' : 'mixed'})`, 'questions', 'pass@1', 'questions', `pass@${p.k}`], [
      row('all', p.overall),
      ...Object.entries(p.by_split).map(([name, f]) => row(`  split ${name}`, f)),
    ]);
    if (p.unjudged_questions) out.push(`${p.unjudged_questions} questions left out: a sample of theirs is unjudged (trajforge rerun RUN --reason unjudged)`);
  }

  const ba = stats.by_agent;
  if (ba !== null) {
    const top = (m: Record<string, number>): string => Object.entries(m).slice(0, 2).map(([k, n]) => `${k} ${n}`).join(', ') || '-';
    section(['agent', 'sessions', 'accepted', 'share', 'tool calls', 'turns', 'tokens', 'reasons'], [
      ...Object.entries(ba.agents).map(([name, a]): (string | number)[] => {
        const ok = a.status.ok ?? 0;
        const p = a.per_trajectory;
        return [name, a.counted, ok, pct(ok, a.counted), num(p.tool_calls.mean, 2), num(p.turns.mean, 2), num(p.tokens.mean, 1), top(a.reasons)];
      }),
      ...(ba.without_agent ? [['(no agent)', ba.without_agent, '', '', '', '', '', '']] : []),
    ]);
    out.push('(tool calls, turns, tokens: the mean per session)');
  }
  const f = stats.families;
  if (f !== null) {
    const distRow = (name: string, x: Distribution): (string | number)[] => [name, x.count, num(x.mean, 2), num(x.p50), num(x.p90), num(x.max)];
    section(['families', 'n', 'mean', 'p50', 'p90', 'max'], [distRow('sessions per family', f.sessions_per_family), distRow('sub-agent calls per main', f.sub_agent_calls_per_main)]);
    out.push(
      ...table([
        ['families', `${f.families}${f.without_root ? ` (${f.without_root} without their root session in this data)` : ''}`],
        ['sub-agent calls', `${f.sub_agent_calls}, ${f.sub_agent_calls_failed} of them failed (a tool error for the caller)`],
        ['sessions by depth', Object.entries(f.by_depth).map(([d, n]) => `${d}: ${n}`).join(', ')],
      ], '', true),
    );
  }

  const h = stats.histograms;
  for (const [title, bins] of [
    ['tool calls per trajectory', h.tool_calls],
    ['turns per trajectory', h.turns],
    ['tokens per trajectory', h.tokens],
  ] as const) {
    const lines = histogramLines(title, bins);
    if (lines.length) out.push('', ...lines);
  }
  return `${out.join('\n')}\n`;
}
