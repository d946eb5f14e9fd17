/**
 * What a served report adds to the page (serve.ts): the live panel on top, its style, and the
 * figures it was drawn with; the script that keeps them up to date is browser/live.ts
 * (scripts.ts inlines it).
 */
import { esc } from './svg.js';
import type { LiveFigures } from './live.js';
import { scriptJson } from './rows.js';

const CSS = `
#live{order:0}
#live .head{display:flex;gap:12px;align-items:baseline;flex-wrap:wrap;margin-bottom:10px}
#live .head h2{margin:0}
#live-state{font-size:12px;font-weight:600;padding:1px 8px;border-radius:9px;background:#eef0f4}
#live-state.on{background:#e4f6ea;color:#1e6b3f}
#live-state.off{background:#fbe9e7;color:#a82315}
#live .when{color:var(--muted);font-size:12px}
#live .cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:16px;margin-top:12px}
#live-newest{list-style:none;margin:0;padding:0;font-size:13px}
#live-newest li{display:flex;gap:8px;align-items:center;padding:3px 0;border-bottom:1px solid var(--line);cursor:pointer;white-space:nowrap}
#live-newest li:hover{background:#f3f6fc}
#live-newest .id{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;overflow:hidden;text-overflow:ellipsis}
#live-newest .at{margin-left:auto;color:var(--muted);font-size:12px}
#live-series{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:16px}
#live-series svg{width:100%;height:90px;display:block}
#live-series .bar{fill:#3867d6}#live-series .acc{fill:none;stroke:#2e8b57;stroke-width:2}#live-series .dot{fill:#2e8b57}
#live-series svg{border-bottom:1px solid var(--line)}#live-series .now{font-size:12px;color:var(--muted)}
#live-redraw{font:inherit;font-size:12px;padding:1px 8px;border:1px solid var(--line);border-radius:6px;background:#fff;cursor:pointer}
`;

/** The live panel, the figures it starts from, and its style: written after the overview. */
export function liveHtml(figures: LiveFigures): string {
  const kpi = (id: string): string => `<div class="kpi" id="${id}" data-value=""><b>-</b><span></span></div>`;
  return `<section id="live" class="card" data-connected="0">
<style>${CSS}</style>
<div class="head"><h2>Live</h2><span id="live-state">connecting…</span><span id="live-run" class="when"></span><span id="live-endpoint" class="when"></span><span id="live-when" class="when"></span></div>
<div class="kpis">${['live-done', 'live-accepted', 'live-failed', 'live-rate', 'live-eta', 'live-tokens', 'live-spend', 'live-429', 'live-retries'].map(kpi).join('')}</div>
<div class="cols" id="live-series">
<div><h3>Throughput: attempts per minute</h3><div id="live-throughput" class="none">no attempt yet</div></div>
<div><h3>Acceptance: accepted share of each minute's attempts</h3><div id="live-acceptance" class="none">no attempt yet</div></div>
</div>
<div class="cols">
<div><h3>Failed, by reason (latest attempt of each id)</h3><table class="t" id="live-reasons"></table></div>
<div><h3>Newest records, every attempt (click to open)</h3><ol id="live-newest"></ol></div>
</div>
<p class="none"><span id="live-note">${esc('The figures above follow the run as it writes.')}</span> <button id="live-redraw" type="button">Redraw the charts</button></p>
</section>
<script type="application/json" id="live-init">${scriptJson(figures)}</script>`;
}
