/**
 * `trajforge stats`: the shape of a dataset, in one streaming pass and constant memory.
 *
 * Every figure is a counter or a fixed-size sketch (sketch.ts), so a row is forgotten once it
 * is counted. A run directory is counted by its latest state per id (latest.ts). The terminal
 * view of the figures is stats-format.ts.
 *
 * Records of a run with agents (README "Agents") are also counted by agent and by family.
 * The family figures need to know, per family, how many sessions it has and whether its root
 * was seen: a map of family keys to two small numbers, the one figure that grows with the
 * dataset (as the latest-state index does), and only for records that carry family fields.
 */
import type { RunConfig, Trajectory } from '../../schemas/index.js';
import { runCost, SpendTally, type RunCost } from '../core/cost.js';
import { recordedPrices } from './run-prices.js';
import { readDataset, type DatasetRow, type ReadOptions, type ReadReport } from './readers.js';
import { ForeignCheck, validatedRows } from './foreign.js';
import type { TokenCounter } from '../core/tokens/count.js';
import { PassCounter, type PassAtK } from './pass-at-k.js';
import { familyOf, isChild } from './families.js';
import { Sketch, type Distribution, type HistogramBin } from './sketch.js';
import { latestFilter, latestIndexFor, type LatestIndex } from './latest.js';

export type { Distribution, HistogramBin } from './sketch.js';



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
  /**
   * What every row read spent (earlier attempts included: they were paid for), the main agent's,
   * the sub-agents' and the judge's apart; priced at a run directory's recorded `prices`, else
   * null dollars. Null when no row carries `usage`.
   */
  cost: RunCost | null;
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

export interface StatsOptions {
  /** Count a run directory's latest state per id; built by `indexLatestFailures`. Rows from `failuresFile` count only when they won; other rows are accepted ones, counted once per id. */
  readonly latest?: LatestIndex | undefined;
  /** The reader's report, for the bad rows it skipped. */
  readonly report?: ReadReport | undefined;
  /** Prices the spend: a run's recorded `prices` and the models of its parts. Default: tokens only. */
  readonly prices?: { readonly prices: RunConfig['prices']; readonly models: Parameters<typeof runCost>[2] } | undefined;
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
  // A run directory: only each id's latest state counts (latest.ts).
  const latest = opts.latest === undefined ? undefined : latestFilter(opts.latest);
  const spent = new SpendTally();
  for await (const row of rows) {
    acc.read++;
    const t = row.trajectory as Partial<Trajectory>;
    spent.add(t);
    if (latest && !latest(row)) {
      acc.superseded++;
      continue;
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
    latest_per_id: opts.latest !== undefined,
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
    cost: spent.tokens === 0 ? null : runCost(spent, opts.prices?.prices ?? {}, opts.prices?.models ?? { main: undefined, sub_agents: undefined, judge: undefined }),
    histograms: { tool_calls: acc.toolCalls.histogram(), turns: acc.turns.histogram(), tokens: acc.tokens.histogram() },
  };
}

/**
 * Stats of a file, `-` (stdin) or a run directory. A run directory is read twice: its
 * failures.jsonl for the latest attempt of each id, then both files for the figures.
 */
export async function statsForInput(input: string, opts: ReadOptions = {}, counter?: TokenCounter): Promise<Stats> {
  const latest = await latestIndexFor(input, opts);
  const { rows, report } = readDataset(input, opts);
  // Rows from other systems carry no verdict and no token count of their own: both are made here.
  const foreign = new ForeignCheck({ counter, countTokens: true });
  const stats = await computeStats(validatedRows(rows, foreign), { latest, report, prices: latest === undefined ? undefined : recordedPrices(input) });
  stats.validation.validated_here = foreign.validated;
  return stats;
}

/** The figures as `--json` prints them: everything but the histograms. */
export function statsToJson(stats: Stats): Omit<Stats, 'histograms'> {
  const { histograms: _histograms, ...rest } = stats;
  return rest;
}
