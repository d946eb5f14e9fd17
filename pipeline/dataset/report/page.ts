/**
 * The report page: its style, its frame and its overview (from `stats`), as strings; its script
 * is browser/report.ts (scripts.ts inlines it).
 *
 * The page is written in the order it is built: the head and the list's frame first, then
 * the rows as they stream in, then the overview (known only when the last row is counted),
 * then the script. CSS `order` puts the overview back on top. Nothing is fetched: no font,
 * no CDN, no image; the page works from a file with no network.
 *
 * Every piece of data reaches the DOM through textContent or an attribute, never innerHTML:
 * tool outputs are web pages, and a report must not run them.
 */
import { dollars } from '../../core/cost.js';
import type { Distribution, Stats } from '../stats.js';
import { reportScript } from './scripts.js';
import { esc, fmt, hbars, histogram, stacked, type Bar } from './svg.js';

export const STATUS_COLORS: Record<string, string> = { ok: '#2e8b57', failed: '#c0392b' };

const CSS = `
:root{--fg:#1d2433;--muted:#5b6478;--line:#dde2ea;--bg:#f5f7fa;--card:#fff;--accent:#3867d6;
--think:#efe9fb;--think-b:#8e6bd6;--call:#e6f0ff;--call-b:#3867d6;--output:#fff5e0;--output-b:#d99a1e;--answer:#e4f6ea;--answer-b:#2e8b57;--text:#f1f2f5;--text-b:#9aa3b5}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header.top{padding:14px 22px;background:#1d2433;color:#fff;display:flex;gap:16px;align-items:baseline;flex-wrap:wrap}
header.top h1{font-size:18px;margin:0}
header.top .src{color:#c5cbd8;font-size:13px}
.page{display:flex;flex-direction:column;gap:16px;padding:16px 22px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 16px}
h2{font-size:15px;margin:0 0 10px}
h3{font-size:13px;margin:0 0 6px;color:var(--muted);font-weight:600;text-transform:uppercase;letter-spacing:.03em}
#overview{order:1;display:flex;flex-direction:column;gap:16px}
#browse{order:2}
.kpis{display:flex;flex-wrap:wrap;gap:10px}
.kpi{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:130px}
.kpi b{display:block;font-size:20px}
.kpi span{color:var(--muted);font-size:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(360px,1fr));gap:16px}
.chart{width:100%;height:auto;display:block}
.chart.stacked{height:18px;border-radius:4px;margin:6px 0}
.chart text{font-size:12px;fill:var(--fg)}
.chart .tick{font-size:11px;fill:var(--muted)}
.chart .val{font-size:11px;fill:var(--muted)}
.chart .axis{stroke:var(--line)}
.none{color:var(--muted);margin:4px 0}
table.t{border-collapse:collapse;width:100%;font-size:13px}
table.t th,table.t td{padding:4px 8px;border-bottom:1px solid var(--line);text-align:right}
table.t th:first-child,table.t td:first-child{text-align:left}
.legend{display:flex;gap:12px;flex-wrap:wrap;font-size:12px;color:var(--muted);margin:4px 0}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.toolbar{display:flex;gap:8px;flex-wrap:wrap;align-items:center;margin-bottom:10px}
.toolbar input,.toolbar select{font:inherit;padding:5px 8px;border:1px solid var(--line);border-radius:6px;background:#fff}
.toolbar input{flex:1 1 260px}
#count{color:var(--muted);font-size:13px;margin-left:auto}
.split{display:grid;grid-template-columns:minmax(300px,2fr) 3fr;gap:14px}
.list{position:relative;height:70vh;min-height:360px;overflow-y:auto;border:1px solid var(--line);border-radius:6px;outline:none}
.spacer{position:relative;width:100%}
.row{position:absolute;left:0;right:0;height:46px;padding:4px 10px;border-bottom:1px solid var(--line);cursor:pointer;overflow:hidden}
.row:hover{background:#f3f6fc}
.row.sel{background:#e3ebfb}
.row .l1{display:flex;gap:8px;align-items:center;white-space:nowrap;font-size:13px}
.row .id{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;overflow:hidden;text-overflow:ellipsis;max-width:55%}
.row .n{margin-left:auto;color:var(--muted);font-size:12px}
.row .q{white-space:nowrap;overflow:hidden;text-overflow:ellipsis;color:var(--muted);font-size:12px}
.badge{display:inline-block;padding:0 6px;border-radius:9px;font-size:11px;font-weight:600;color:#fff;background:#888;line-height:17px}
.badge.ok{background:#2e8b57}.badge.failed{background:#c0392b}
.tag{display:inline-block;padding:0 6px;border-radius:9px;font-size:11px;background:#eef0f4;color:var(--fg);line-height:17px}
.viewer{height:70vh;min-height:360px;overflow-y:auto;border:1px solid var(--line);border-radius:6px;padding:12px 14px}
.viewer .hint{color:var(--muted)}
.viewer h4{margin:12px 0 4px;font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
.viewer .head{display:flex;gap:8px;align-items:center;flex-wrap:wrap}
.viewer .head .id{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-weight:600}
.facts{display:flex;gap:14px;flex-wrap:wrap;color:var(--muted);font-size:12px;margin:6px 0}
.box{white-space:pre-wrap;word-break:break-word;background:#f8f9fb;border:1px solid var(--line);border-radius:6px;padding:6px 8px;margin:0}
ul.issues{margin:0;padding-left:18px}
ul.issues li.error{color:#a82315}
ul.issues li.warn{color:#8a5a00}
.seg{border-left:4px solid var(--text-b);background:var(--text);border-radius:4px;margin:6px 0;padding:4px 8px}
.seg .lab{font-size:11px;font-weight:700;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.seg pre{margin:2px 0 0;white-space:pre-wrap;word-break:break-word;font:12px/1.45 ui-monospace,SFMono-Regular,Menlo,monospace}
.seg.k{background:var(--think);border-color:var(--think-b)}
.seg.c{background:var(--call);border-color:var(--call-b)}
.seg.o{background:var(--output);border-color:var(--output-b)}
.seg.a{background:var(--answer);border-color:var(--answer-b)}
.seg .cut{font-size:11px;color:#8a5a00;margin-top:2px}
.seg.hl{outline:2px solid #d08b00;outline-offset:1px}
.fam{margin:4px 0;font-size:12px}
a.to-child,a.to-parent{color:#1a56c4;cursor:pointer;text-decoration:underline}
.seg a.to-child{display:inline-block;margin-top:3px;font-size:12px}
i.k{background:var(--think-b)}i.c{background:var(--call-b)}i.o{background:var(--output-b)}i.a{background:var(--answer-b)}i.t{background:var(--text-b)}
.runhead{display:flex;flex-wrap:wrap;gap:6px 18px;padding:8px 22px;background:#273046;color:#fff;font-size:13px}
.runhead i{font-style:normal;color:#aab3c5;margin-right:2px}
.pick{cursor:pointer}.pick:hover rect{opacity:.75}
.row .nest{color:var(--muted)}
.badge.v-correct{background:#2e8b57}.badge.v-incorrect{background:#c0392b}.badge.v-not_attempted{background:#b7950b}.badge.v-unjudged{background:#7f8c8d}
#f-range{display:inline-flex;gap:4px;align-items:center;font-size:12px;background:#e3ebfb;border-radius:9px;padding:1px 4px 1px 8px}
#f-range[hidden]{display:none}
#f-range button{border:0;background:none;cursor:pointer;font:inherit}
.toolbar label{font-size:13px;color:var(--muted)}
.errbox{border:1px solid #e3a59d;background:#fdecea;border-radius:6px;padding:6px 10px;margin:8px 0}
.errbox b{color:#a82315}.errbox .why{font-size:12px;color:#7a2a20;margin:2px 0}
.errbox pre{margin:4px 0 0;white-space:pre-wrap;word-break:break-word;font:12px/1.45 ui-monospace,SFMono-Regular,Menlo,monospace}
.callx{margin-top:4px;font-size:12px}.callx .facts{margin:2px 0}.callx .cerr{color:#a82315}
.callx summary{cursor:pointer;color:var(--muted)}.callx pre.args{margin:2px 0;white-space:pre-wrap;word-break:break-all}
.cerr{color:#a82315;font-size:12px}
.fix{border:1px dashed #d35400;background:#fff4ec;border-radius:4px;margin:6px 0 6px 18px;padding:4px 8px;font-size:12px}
.fix.rollback{border-color:#7f8c8d;background:#f3f4f5}
.fix .lab{font-weight:700;text-transform:uppercase;font-size:11px;color:#a04000}
.fix.rollback .lab{color:#566}
.fix pre{margin:2px 0;white-space:pre-wrap;word-break:break-word;font:12px/1.45 ui-monospace,SFMono-Regular,Menlo,monospace;background:#fff;border:1px solid var(--line);padding:3px 6px}
.fix .bef,.fix .aft{color:var(--muted);margin-top:2px}
.fix details.ba{margin-top:3px}.fix details.ba summary{cursor:pointer;color:#a04000}
.fix .ba2{display:grid;grid-template-columns:1fr 1fr;gap:8px}.fix .ba2 .side{min-width:0}
.fix pre.before,.fix pre.after{max-height:320px;overflow:auto}
.fix del{background:#fadbd8;color:#922b21}.fix ins{background:#d5f5e3;color:#196f3d;text-decoration:none;border-bottom:1px solid #27ae60}
.judge{font-size:13px}.judge table{margin-top:6px}
.rollouts li.here{font-weight:600}
@media (max-width:900px){.split{grid-template-columns:1fr}}
`;

export interface PageInfo {
  readonly title: string;
  readonly source: string;
  readonly generatedAt: string;
  readonly version: string;
  /** A run directory's header (run-header.ts), as markup. */
  readonly header?: string | undefined;
}

/** Everything before the rows: the head, the list's frame, and the opening of the rows block. */
export function pageHead(info: PageInfo): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="trajforge ${esc(info.version)}">
<title>${esc(info.title)}</title>
<style>${CSS}</style>
</head>
<body>
<header class="top"><h1>${esc(info.title)}</h1><span class="src">${esc(info.source)} · built ${esc(info.generatedAt)} · trajforge ${esc(info.version)}</span></header>
${info.header ?? ''}
<div class="page">
<section id="browse" class="card">
<h2>Trajectories</h2>
<div class="toolbar">
<input id="q" type="search" placeholder="Search by id or question text" aria-label="search">
<select id="f-status" aria-label="status"><option value="">every status</option></select>
<select id="f-reason" aria-label="reason"><option value="">every reason</option></select>
<select id="f-rule" aria-label="rule"><option value="">every rule</option></select>
<select id="f-agent" aria-label="agent" hidden><option value="">every agent</option></select>
<select id="f-verdict" aria-label="verdict" hidden><option value="">every verdict</option></select>
<label hidden><input id="f-group" type="checkbox"> rollouts by question</label>
<span id="f-range" hidden><span></span><button type="button" aria-label="clear the chart filter">×</button></span>
<span id="count"></span>
</div>
<div class="split">
<div id="list" class="list" tabindex="0"><div id="spacer" class="spacer"></div></div>
<div id="viewer" class="viewer"><p class="hint">Pick a trajectory on the left (↑/↓ move through the list). Think, calls, tool outputs and the answer are shown in their own colours.</p></div>
</div>
<noscript><p>The list needs JavaScript; the overview above does not.</p></noscript>
</section>
<script type="application/x-ndjson" id="rows">`;
}

/** Closes the rows block. */
export const ROWS_END = '</script>';

function shareOf(n: number, of: number): string {
  return of ? `${((100 * n) / of).toFixed(1)}%` : '-';
}

function distRow(name: string, d: Distribution): string {
  const v = (x: number | null, digits = 0): string => (x === null ? '-' : digits ? x.toFixed(digits) : fmt(x));
  const approx = d.quantiles_exact ? '' : '~';
  return `<tr><td>${esc(name)}</td><td>${fmt(d.count)}</td><td>${v(d.mean, 2)}</td><td>${approx}${v(d.p50)}</td><td>${approx}${v(d.p90)}</td><td>${v(d.max)}</td></tr>`;
}

export function card(title: string, body: string, extra = ''): string {
  return `<div class="card"${extra}><h3>${esc(title)}</h3>${body}</div>`;
}

/** The judge's verdicts (from `stats`) and rubric scores (figures.ts), each bar a filter of the list; '' with no judge. */
function judgeCards(stats: Stats, rubric: readonly number[]): string {
  const j = stats.judgement;
  if (j === null) return '';
  const VERDICT: Record<string, string> = { correct: '#2e8b57', incorrect: '#c0392b', not_attempted: '#b7950b', unjudged: '#7f8c8d' };
  const verdicts: Bar[] = Object.entries(j.verdicts).map(([k, n]) => ({ label: k, value: n, note: shareOf(n, j.judged), color: VERDICT[k] ?? '#888', filter: `verdict:${k}` }));
  const scored = rubric.reduce((a, n) => a + n, 0);
  const bins: Bar[] = rubric.map((n, k) => {
    const lo = (k / rubric.length).toFixed(1);
    const hi = ((k + 1) / rubric.length).toFixed(1);
    return { label: `${lo}–${hi}`, value: n, note: shareOf(n, scored), color: '#16a085', ...(n ? { filter: `rubric:${lo}:${hi}` } : {}) };
  });
  return (
    card(`Judge verdicts (${fmt(j.judged)} judged)`, hbars(verdicts, { label: 'judge verdicts' }), ' id="chart-verdicts"') +
    (scored ? card(`Rubric scores (${fmt(scored)} scored, mean ${j.rubric.mean === null ? '-' : j.rubric.mean.toFixed(2)})`, hbars(bins, { label: 'rubric scores' }), ' id="chart-rubric"') : '')
  );
}

/** The overview: figures and charts, all from `stats` (and the rubric scores' bins, figures.ts). */
export function overview(stats: Stats, listed: number, cut: { outputChars: number }, rubric: readonly number[] = []): string {
  const r = stats.rows;
  const ok = stats.status.ok ?? 0;
  const failed = stats.status.failed ?? 0;
  const d = stats.per_trajectory;
  // `data-kpi`: the cards the page's script makes again from the list when a served page's list grows (browser/report.ts refreshCards).
  const kpi = (v: string, label: string, name?: string): string => `<div class="kpi"${name ? ` data-kpi="${name}"` : ''}><b>${esc(v)}</b><span>${esc(label)}</span></div>`;
  const kpis = [
    kpi(fmt(r.counted), stats.latest_per_id ? 'trajectories (latest per id)' : 'trajectories', 'rows'),
    kpi(stats.acceptance_rate === null ? '-' : `${(100 * stats.acceptance_rate).toFixed(1)}%`, `accepted (${fmt(ok)})`, 'accepted'),
    kpi(fmt(failed), 'failed', 'failed'),
    kpi(`${fmt(stats.validation.passed)} / ${fmt(stats.validation.failed)}`, 'validation passed / failed'),
    kpi(d.tool_calls.mean === null ? '-' : d.tool_calls.mean.toFixed(2), 'tool calls per trajectory', 'calls'),
    kpi(d.turns.mean === null ? '-' : d.turns.mean.toFixed(2), 'turns per trajectory', 'turns'),
    kpi(d.tokens.p50 === null ? '-' : fmt(d.tokens.p50), 'tokens used, median', 'tokens'),
  ];
  // What every row read cost, at the run's recorded prices (stats.ts `cost`).
  if (stats.cost) kpis.push(kpi(stats.cost.usd === null ? 'no price' : `${dollars(stats.cost.usd)}${stats.cost.estimated ? ' (est.)' : ''}`, 'spent (model, sub-agents, judge)'));
  const p = stats.pass_at_k;
  const share = (v: number | null): string => (v === null ? '-' : `${(100 * v).toFixed(1)}%`);
  if (p !== null) kpis.push(kpi(share(p.overall.pass_at_1), `pass@1 (${fmt(p.overall.questions)} questions)`), kpi(share(p.overall.pass_at_k), `pass@${p.k} (${fmt(p.overall.questions_at_k)} questions)`));
  const notes: string[] = [];
  if (r.superseded) notes.push(`${fmt(r.superseded)} earlier attempts superseded by a later state of their id`);
  if (r.bad) notes.push(`${fmt(r.bad)} unreadable rows skipped`);
  notes.push(`tool outputs longer than ${fmt(cut.outputChars)} characters are cut in the viewer`);

  const statusBars: Bar[] = Object.entries(stats.status).map(([k, n]) => ({ label: k, value: n, note: shareOf(n, r.counted), color: STATUS_COLORS[k] ?? '#888', filter: `status:${k}` }));
  // stats names a failed row without a reason `(none)`; the list's filter calls it `none`.
  const reasonBars: Bar[] = Object.entries(stats.reasons).map(([k, n]) => ({ label: k, value: n, note: shareOf(n, r.counted), color: '#c0392b', filter: `reason:${k === '(none)' ? 'none' : k}` }));
  const toolBars: Bar[] = Object.entries(stats.tools).map(([k, x]) => ({ label: k, value: x.calls, note: `in ${fmt(x.trajectories)}${x.skipped ? `, ${fmt(x.skipped)} skipped` : ''}` }));
  const kindBars = (m: Record<string, { count: number; trajectories: number }>, color: string): Bar[] =>
    Object.entries(m).map(([k, x]) => ({ label: k, value: x.count, note: `in ${fmt(x.trajectories)}`, color }));
  const ruleBars = (m: Record<string, number>, color: string): Bar[] => Object.entries(m).map(([k, n]) => ({ label: k, value: n, color, filter: `rule:${k}` }));
  const c = stats.citations;

  return `<section id="overview">
<div class="kpis">${kpis.join('')}</div>
<p class="none">${esc(notes.join(' · '))}</p>
<div class="grid">
${card('Status', `${stacked(statusBars)}${hbars(statusBars, { label: 'status' })}`, ' id="chart-status"')}
${card('Failure reasons', hbars(reasonBars, { label: 'failure reasons' }), ' id="chart-reasons"')}
${card('Tool calls per trajectory', histogram(stats.histograms.tool_calls, { label: 'tool calls per trajectory', color: '#3867d6', filter: 'calls' }), ' id="chart-tool-calls"')}
${card('Turns per trajectory', histogram(stats.histograms.turns, { label: 'turns per trajectory', color: '#8e6bd6', filter: 'turns' }), ' id="chart-turns"')}
${card('Tokens used per trajectory (prompt + completion, all calls)', histogram(stats.histograms.tokens, { label: 'tokens per trajectory', color: '#d99a1e', filter: 'tokens' }), ' id="chart-tokens"')}
${card('Per trajectory', `<table class="t"><tr><th></th><th>n</th><th>mean</th><th>p50</th><th>p90</th><th>max</th></tr>${distRow('tool calls', d.tool_calls)}${distRow('turns', d.turns)}${distRow('tokens used', d.tokens)}</table>${
    !d.tool_calls.quantiles_exact || !d.turns.quantiles_exact || !d.tokens.quantiles_exact ? '<p class="none">~ approximate, within 0.2%</p>' : ''
  }<h3 style="margin-top:12px">Citations</h3><table class="t"><tr><td>cited ids</td><td>${fmt(c.cited)}</td></tr><tr><td>resolved</td><td>${fmt(c.resolved)}</td></tr><tr><td>unresolved</td><td>${fmt(c.unresolved)} (in ${fmt(c.trajectories_with_unresolved)} trajectories)</td></tr></table>`)}
${card('Repairs by kind (count · in N trajectories)', hbars(kindBars(stats.repairs, '#d35400'), { label: 'repairs' }), ' id="chart-repairs"')}
${card('Rollbacks by condition (count · in N trajectories)', hbars(kindBars(stats.rollbacks, '#7f8c8d'), { label: 'rollbacks' }), ' id="chart-rollbacks"')}
${card('Tools used (calls · in N trajectories)', hbars(toolBars, { label: 'tools' }), ' id="chart-tools"')}
${card('Failed validation rules (trajectories)', hbars(ruleBars(stats.failures_by_rule, '#a82315'), { label: 'failed rules' }), ' id="chart-rules"')}
${judgeCards(stats, rubric)}
${Object.keys(stats.warnings_by_rule).length ? card('Warnings by rule (trajectories)', hbars(ruleBars(stats.warnings_by_rule, '#b7950b'), { label: 'warned rules' })) : ''}
${p === null ? '' : card(`pass@1 and pass@${p.k} (${p.method === 'unbiased' ? 'unbiased estimator' : p.method === 'first_correct' ? 'first correct sample, --until-correct' : 'mixed'})`, `<table class="t"><tr><th></th><th>questions</th><th>pass@1</th><th>questions</th><th>pass@${p.k}</th></tr>${[['all', p.overall] as const, ...Object.entries(p.by_split).map(([k, f]) => [`split ${k}`, f] as const)]
    .map(([name, f]) => `<tr><td>${esc(name)}</td><td>${fmt(f.questions)}</td><td>${share(f.pass_at_1)}</td><td>${fmt(f.questions_at_k)}</td><td>${share(f.pass_at_k)}</td></tr>`)
    .join('')}</table>${p.unjudged_questions ? `<p class="none">${fmt(p.unjudged_questions)} questions left out: a sample of theirs is unjudged</p>` : ''}`, ' id="chart-pass-at-k"')}
</div>
<p class="none">${fmt(listed)} trajectories in the list below.</p>
</section>`;
}

/** Everything after the overview; `after`: a script that runs once the page's own has (a served page's live view). */
export function pageTail(after?: string): string {
  return `</div>
<script>${reportScript()}</script>${after === undefined ? '' : `\n<script>${after}</script>`}
</body>
</html>`;
}
