/**
 * The report page: its style, its overview (from `stats`) and its script, as strings.
 *
 * The page is written in the order it is built: the head and the list's frame first, then
 * the rows as they stream in, then the overview (known only when the last row is counted),
 * then the script. CSS `order` puts the overview back on top. Nothing is fetched: no font,
 * no CDN, no image; the page works from a file with no network.
 *
 * The script is plain ES2017 in a string (no backticks or `${` in it, so it can sit in this
 * template). Every piece of data reaches the DOM through textContent or an attribute, never
 * innerHTML: tool outputs are web pages, and a report must not run them.
 */
import type { Distribution, Stats } from '../stats.js';
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
@media (max-width:900px){.split{grid-template-columns:1fr}}
`;

const APP = String.raw`
(function () {
  'use strict';
  var ROW = 46, MAX_H = 8000000, OVERSCAN = 6;
  var KINDS = { t: 'text', k: 'think', c: 'call', o: 'tool output', a: 'answer' };
  var $ = function (id) { return document.getElementById(id); };
  var el = function (tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };
  var num = function (n) { return n === null || n === undefined ? '-' : Number(n).toLocaleString('en-US'); };

  // Rows: "summary<TAB>detail" per line; summaries parsed now, details when opened.
  var raw = $('rows').textContent;
  var S = [], D = [], hay = [];
  var lines = raw.split('\n');
  for (var i = 0; i < lines.length; i++) {
    var line = lines[i];
    var tab = line.indexOf('\t');
    if (tab < 0) continue;
    var s = JSON.parse(line.slice(0, tab));
    S.push(s);
    D.push(line.slice(tab + 1));
    hay.push((s[0] + '\n' + s[4]).toLowerCase());
  }
  lines = null; raw = null;

  var list = $('list'), spacer = $('spacer'), viewer = $('viewer');
  var qEl = $('q'), stEl = $('f-status'), rsEl = $('f-reason'), ruEl = $('f-rule'), countEl = $('count');
  var view = [], sel = -1;

  function fillSelect(select, counts, label) {
    while (select.options.length > 1) select.remove(1);
    var keys = Object.keys(counts).sort(function (a, b) { return counts[b] - counts[a] || (a < b ? -1 : 1); });
    for (var k = 0; k < keys.length; k++) {
      var o = el('option', null, (label ? label(keys[k]) : keys[k]) + ' (' + num(counts[keys[k]]) + ')');
      o.value = keys[k];
      select.appendChild(o);
    }
  }
  function fillFilters() {
    var cStatus = {}, cReason = {}, cRule = {};
    for (var j = 0; j < S.length; j++) {
      var r = S[j];
      cStatus[r[1]] = (cStatus[r[1]] || 0) + 1;
      var reason = r[2] || 'none';
      cReason[reason] = (cReason[reason] || 0) + 1;
      for (var u = 0; u < r[3].length; u++) cRule[r[3][u]] = (cRule[r[3][u]] || 0) + 1;
    }
    var kept = [stEl.value, rsEl.value, ruEl.value];
    fillSelect(stEl, cStatus);
    fillSelect(rsEl, cReason);
    fillSelect(ruEl, cRule);
    stEl.value = kept[0]; rsEl.value = kept[1]; ruEl.value = kept[2];
  }
  fillFilters();

  function apply() { filter(false); }
  function filter(keepScroll) {
    var q = qEl.value.trim().toLowerCase(), st = stEl.value, rs = rsEl.value, ru = ruEl.value;
    view = [];
    for (var i = 0; i < S.length; i++) {
      var s = S[i];
      if (st && s[1] !== st) continue;
      if (rs && (s[2] || 'none') !== rs) continue;
      if (ru && s[3].indexOf(ru) < 0) continue;
      if (q && hay[i].indexOf(q) < 0) continue;
      view.push(i);
    }
    countEl.textContent = num(view.length) + ' of ' + num(S.length) + ' trajectories';
    spacer.style.height = Math.min(view.length * ROW, MAX_H) + 'px';
    if (!keepScroll) list.scrollTop = 0;
    render();
  }

  // Only the rows in sight (plus a few) are in the DOM. Past MAX_H pixels of rows the
  // scroll position maps to a row index proportionally, so a million rows still scroll.
  function firstExact() {
    var h = list.clientHeight, max = spacer.offsetHeight - h;
    var fit = Math.max(0, view.length - h / ROW);
    return max > 0 ? (list.scrollTop / max) * fit : 0;
  }
  function render() {
    var top = list.scrollTop, h = list.clientHeight, f = firstExact();
    var first = Math.max(0, Math.floor(f) - OVERSCAN);
    var last = Math.min(view.length, Math.ceil(f + h / ROW) + OVERSCAN);
    // Rows already in the DOM stay where they are and are only restyled; new ones go in between,
    // so the DOM keeps the list's order. A row is never rebuilt or moved: a click whose press and
    // release straddle a re-render (a scroll, a filter, the search) still opens its row.
    var old = {}, next = null;
    for (var c = spacer.firstChild; c; c = c.nextSibling) old[c.getAttribute('data-i')] = c;
    for (var p = last - 1; p >= first; p--) {
      var i = view[p], row = old[i];
      if (row) delete old[i];
      else row = spacer.insertBefore(makeRow(i), next);
      row.className = 'row' + (i === sel ? ' sel' : '');
      row.style.top = (top + (p - f) * ROW) + 'px';
      next = row;
    }
    for (var k in old) spacer.removeChild(old[k]);
  }
  function makeRow(i) {
    var s = S[i], row = el('div', 'row');
    row.setAttribute('data-i', String(i));
    row.setAttribute('data-id', s[0]);
    var l1 = el('div', 'l1');
    l1.appendChild(el('span', 'badge ' + s[1], s[1]));
    l1.appendChild(el('span', 'id', s[0]));
    if (s[2]) l1.appendChild(el('span', 'tag', s[2]));
    if (s[10] && s[10] !== 'main') l1.appendChild(el('span', 'tag', s[10]));
    l1.appendChild(el('span', 'n', num(s[5]) + ' calls · ' + num(s[6]) + ' turns'));
    row.appendChild(l1);
    row.appendChild(el('div', 'q', s[4]));
    return row;
  }

  function section(parent, title) {
    parent.appendChild(el('h4', null, title));
  }
  function open(i) {
    sel = i;
    var s = S[i], d = JSON.parse(D[i]);
    viewer.textContent = '';
    viewer.scrollTop = 0;
    var head = el('div', 'head');
    head.appendChild(el('span', 'badge ' + s[1], s[1]));
    head.appendChild(el('span', 'id', s[0]));
    if (s[2]) head.appendChild(el('span', 'tag', s[2]));
    viewer.appendChild(head);
    var facts = el('div', 'facts');
    var f = [['model', d.m], ['dialect', d.dl], ['attempt', d.at], ['tool calls', num(s[5])], ['turns', num(s[6])], ['tokens used', num(s[7])], ['repairs', s[8]], ['rollbacks', s[9]]];
    if (d.ci) f.push(['cited', d.ci[0] + ' (' + d.ci[1] + ' unresolved)']);
    for (var k = 0; k < f.length; k++) facts.appendChild(el('span', null, f[k][0] + ': ' + (f[k][1] === null || f[k][1] === '' ? '-' : f[k][1])));
    viewer.appendChild(facts);
    if (d.fam) {
      // Runs with agents: where this session sits in its family, and the way back to the call that started it.
      var fam = el('div', 'fam');
      fam.appendChild(el('span', null, 'agent: ' + (d.fam.ag || '-') + ' · depth ' + (d.fam.dp === null ? '-' : d.fam.dp) + ' · family ' + (d.fam.f || '-')));
      if (d.fam.p !== null) {
        fam.appendChild(document.createTextNode(' · '));
        fam.appendChild(sessionLink('to-parent', d.fam.p, d.fam.pc, '\u2190 called by ' + d.fam.p + ', call ' + d.fam.pc));
      }
      viewer.appendChild(fam);
    }
    section(viewer, 'question');
    viewer.appendChild(el('pre', 'box', s[4]));
    if (d.g !== undefined) { section(viewer, 'gold answer'); viewer.appendChild(el('pre', 'box', d.g)); }
    section(viewer, 'final answer');
    viewer.appendChild(el('pre', 'box', d.fa || '(none)'));
    if (d.e) { section(viewer, 'error'); viewer.appendChild(el('pre', 'box', d.e)); }
    if (d.iss.length) {
      section(viewer, 'validation issues');
      var ul = el('ul', 'issues');
      for (var a = 0; a < d.iss.length; a++) ul.appendChild(el('li', d.iss[a][1], d.iss[a][0] + ' (' + d.iss[a][1] + '): ' + d.iss[a][2]));
      viewer.appendChild(ul);
    }
    section(viewer, 'trajectory');
    var legend = el('div', 'legend');
    var order = ['k', 'c', 'o', 'a', 't'];
    for (var g = 0; g < order.length; g++) { var it = el('span'); it.appendChild(el('i', order[g])); it.appendChild(document.createTextNode(KINDS[order[g]])); legend.appendChild(it); }
    viewer.appendChild(legend);
    if (!d.seg.length) viewer.appendChild(el('p', 'hint', '(empty: the model wrote nothing that entered the training view)'));
    var callNo = 0;
    for (var n = 0; n < d.seg.length; n++) {
      var sg = d.seg[n];
      var box = el('div', 'seg ' + sg[0]);
      box.setAttribute('data-kind', KINDS[sg[0]]);
      box.appendChild(el('div', 'lab', KINDS[sg[0]]));
      box.appendChild(el('pre', null, sg[1]));
      if (sg[0] === 'c') {
        box.setAttribute('data-call', String(callNo));
        var child = d.ch ? d.ch[callNo] : null;
        if (child) box.appendChild(sessionLink('to-child', child, null, '\u2192 sub-agent session ' + child));
        callNo++;
      }
      if (sg[2]) box.appendChild(el('div', 'cut', '… ' + num(sg[2]) + ' more characters not shown in this report (the dataset has them all)'));
      viewer.appendChild(box);
    }
    var lists = [['repairs', d.rep], ['rollbacks', d.rb]];
    for (var b = 0; b < lists.length; b++) {
      if (!lists[b][1].length) continue;
      section(viewer, lists[b][0]);
      var ul2 = el('ul', 'issues');
      for (var c = 0; c < lists[b][1].length; c++) { var x = lists[b][1][c]; ul2.appendChild(el('li', null, 'turn ' + x[0] + ': ' + x[1] + ' - ' + x[2])); }
      viewer.appendChild(ul2);
    }
    render();
    if (history.replaceState) history.replaceState(null, '', '#id=' + encodeURIComponent(s[0]));
  }

  // A link to another session of the family: opens it (at the parent's call, going back up). A
  // session this report does not hold (filtered out, or failed elsewhere) is named, not linked.
  function sessionLink(cls, id, call, text) {
    if (indexIds().get(id) === undefined) return el('span', 'hint', text + ' (not in this report)');
    var a = el('a', cls, text);
    a.href = '#id=' + encodeURIComponent(id);
    a.setAttribute('data-target', id);
    a.addEventListener('click', function (e) {
      e.preventDefault();
      openId(id);
      if (call === null || call === undefined) return;
      var at = viewer.querySelector('.seg[data-call="' + call + '"]');
      if (!at) return;
      at.classList.add('hl');
      viewer.scrollTop = at.offsetTop - viewer.offsetTop - 40;
    });
    return a;
  }

  spacer.addEventListener('click', function (e) {
    var t = e.target;
    while (t && t !== spacer && !t.hasAttribute('data-i')) t = t.parentNode;
    if (t && t !== spacer) { open(Number(t.getAttribute('data-i'))); list.focus(); }
  });
  list.addEventListener('keydown', function (e) {
    if (e.key !== 'ArrowDown' && e.key !== 'ArrowUp') return;
    e.preventDefault();
    var p = view.indexOf(sel) + (e.key === 'ArrowDown' ? 1 : -1);
    if (p < 0 || p >= view.length) return;
    open(view[p]);
    var f = firstExact(), h = list.clientHeight / ROW;
    if (p < f || p + 1 > f + h) scrollToPosition(p);
    render();
  });
  // The inverse of firstExact: puts list position p in the middle of the list.
  function scrollToPosition(p) {
    var h = list.clientHeight, max = spacer.offsetHeight - h;
    var fit = Math.max(0, view.length - h / ROW);
    var target = Math.max(0, Math.min(fit, p - h / ROW / 2));
    list.scrollTop = fit > 0 ? (target / fit) * max : 0;
  }
  var pending = false;
  list.addEventListener('scroll', function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; render(); });
  });
  window.addEventListener('resize', render);
  var timer = 0;
  qEl.addEventListener('input', function () { clearTimeout(timer); timer = setTimeout(apply, 120); });
  stEl.addEventListener('change', apply);
  rsEl.addEventListener('change', apply);
  ruEl.addEventListener('change', apply);

  // A served report (serve.ts) hands the page the rows a run writes while it is open. A row whose
  // id is listed is that id's newer state and takes its place (an accepted row never gives way:
  // an id is accepted once, and a failed attempt after it does not count); a new id goes to the
  // end. The list keeps its scroll, filters and search; the open trajectory stays open.
  var byId = null;
  function indexIds() {
    if (byId) return byId;
    byId = new Map();
    for (var i = 0; i < S.length; i++) byId.set(S[i][0], i);
    return byId;
  }
  function addRows(lines) {
    var ids = indexIds(), reopen = false;
    for (var k = 0; k < lines.length; k++) {
      var line = lines[k], tab = line.indexOf('\t');
      if (tab < 0) continue;
      var s = JSON.parse(line.slice(0, tab)), at = ids.get(s[0]);
      if (at === undefined) {
        ids.set(s[0], S.length);
        S.push(s);
        D.push(line.slice(tab + 1));
        hay.push((s[0] + '\n' + s[4]).toLowerCase());
        continue;
      }
      if (S[at][1] === 'ok') continue;
      S[at] = s;
      D[at] = line.slice(tab + 1);
      hay[at] = (s[0] + '\n' + s[4]).toLowerCase();
      // Its row in the DOM shows the old state: dropped, so the render makes it anew.
      var stale = spacer.querySelector('[data-i="' + at + '"]');
      if (stale) spacer.removeChild(stale);
      if (at === sel) reopen = true;
    }
    fillFilters();
    filter(true);
    if (reopen) { var top = viewer.scrollTop; open(sel); viewer.scrollTop = top; }
  }
  function openId(id) {
    var i = indexIds().get(id);
    if (i === undefined) return false;
    open(i);
    var p = view.indexOf(i);
    if (p >= 0) { scrollToPosition(p); render(); }
    return true;
  }
  window.trajforgeReport = { addRows: addRows, openId: openId, size: function () { return S.length; } };

  apply();
  var m = /^#id=(.*)$/.exec(location.hash);
  if (m) {
    var want = decodeURIComponent(m[1]);
    for (var w = 0; w < S.length; w++) if (S[w][0] === want) { open(w); scrollToPosition(view.indexOf(w)); break; }
  }
  document.body.setAttribute('data-ready', String(S.length));
})();
`;

export interface PageInfo {
  readonly title: string;
  readonly source: string;
  readonly generatedAt: string;
  readonly version: string;
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
<div class="page">
<section id="browse" class="card">
<h2>Trajectories</h2>
<div class="toolbar">
<input id="q" type="search" placeholder="Search by id or question text" aria-label="search">
<select id="f-status" aria-label="status"><option value="">every status</option></select>
<select id="f-reason" aria-label="reason"><option value="">every reason</option></select>
<select id="f-rule" aria-label="rule"><option value="">every rule</option></select>
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

/** The overview: figures and charts, all from `stats`. */
export function overview(stats: Stats, listed: number, cut: { outputChars: number }): string {
  const r = stats.rows;
  const ok = stats.status.ok ?? 0;
  const failed = stats.status.failed ?? 0;
  const d = stats.per_trajectory;
  const kpi = (v: string, label: string): string => `<div class="kpi"><b>${esc(v)}</b><span>${esc(label)}</span></div>`;
  const kpis = [
    kpi(fmt(r.counted), stats.latest_per_id ? 'trajectories (latest per id)' : 'trajectories'),
    kpi(stats.acceptance_rate === null ? '-' : `${(100 * stats.acceptance_rate).toFixed(1)}%`, `accepted (${fmt(ok)})`),
    kpi(fmt(failed), 'failed'),
    kpi(`${fmt(stats.validation.passed)} / ${fmt(stats.validation.failed)}`, 'validation passed / failed'),
    kpi(d.tool_calls.mean === null ? '-' : d.tool_calls.mean.toFixed(2), 'tool calls per trajectory'),
    kpi(d.turns.mean === null ? '-' : d.turns.mean.toFixed(2), 'turns per trajectory'),
    kpi(d.tokens.p50 === null ? '-' : fmt(d.tokens.p50), 'tokens used, median'),
  ];
  const p = stats.pass_at_k;
  const share = (v: number | null): string => (v === null ? '-' : `${(100 * v).toFixed(1)}%`);
  if (p !== null) kpis.push(kpi(share(p.overall.pass_at_1), `pass@1 (${fmt(p.overall.questions)} questions)`), kpi(share(p.overall.pass_at_k), `pass@${p.k} (${fmt(p.overall.questions_at_k)} questions)`));
  const notes: string[] = [];
  if (r.superseded) notes.push(`${fmt(r.superseded)} earlier attempts superseded by a later state of their id`);
  if (r.bad) notes.push(`${fmt(r.bad)} unreadable rows skipped`);
  notes.push(`tool outputs longer than ${fmt(cut.outputChars)} characters are cut in the viewer`);

  const statusBars: Bar[] = Object.entries(stats.status).map(([k, n]) => ({ label: k, value: n, note: shareOf(n, r.counted), color: STATUS_COLORS[k] ?? '#888' }));
  const reasonBars: Bar[] = Object.entries(stats.reasons).map(([k, n]) => ({ label: k, value: n, note: shareOf(n, r.counted), color: '#c0392b' }));
  const toolBars: Bar[] = Object.entries(stats.tools).map(([k, x]) => ({ label: k, value: x.calls, note: `in ${fmt(x.trajectories)}${x.skipped ? `, ${fmt(x.skipped)} skipped` : ''}` }));
  const kindBars = (m: Record<string, { count: number; trajectories: number }>, color: string): Bar[] =>
    Object.entries(m).map(([k, x]) => ({ label: k, value: x.count, note: `in ${fmt(x.trajectories)}`, color }));
  const ruleBars = (m: Record<string, number>, color: string): Bar[] => Object.entries(m).map(([k, n]) => ({ label: k, value: n, color }));
  const c = stats.citations;

  return `<section id="overview">
<div class="kpis">${kpis.join('')}</div>
<p class="none">${esc(notes.join(' · '))}</p>
<div class="grid">
${card('Status', `${stacked(statusBars)}${hbars(statusBars, { label: 'status' })}`, ' id="chart-status"')}
${card('Failure reasons', hbars(reasonBars, { label: 'failure reasons' }), ' id="chart-reasons"')}
${card('Tool calls per trajectory', histogram(stats.histograms.tool_calls, { label: 'tool calls per trajectory', color: '#3867d6' }), ' id="chart-tool-calls"')}
${card('Turns per trajectory', histogram(stats.histograms.turns, { label: 'turns per trajectory', color: '#8e6bd6' }), ' id="chart-turns"')}
${card('Tokens used per trajectory (prompt + completion, all calls)', histogram(stats.histograms.tokens, { label: 'tokens per trajectory', color: '#d99a1e' }), ' id="chart-tokens"')}
${card('Per trajectory', `<table class="t"><tr><th></th><th>n</th><th>mean</th><th>p50</th><th>p90</th><th>max</th></tr>${distRow('tool calls', d.tool_calls)}${distRow('turns', d.turns)}${distRow('tokens used', d.tokens)}</table>${
    !d.tool_calls.quantiles_exact || !d.turns.quantiles_exact || !d.tokens.quantiles_exact ? '<p class="none">~ approximate, within 0.2%</p>' : ''
  }<h3 style="margin-top:12px">Citations</h3><table class="t"><tr><td>cited ids</td><td>${fmt(c.cited)}</td></tr><tr><td>resolved</td><td>${fmt(c.resolved)}</td></tr><tr><td>unresolved</td><td>${fmt(c.unresolved)} (in ${fmt(c.trajectories_with_unresolved)} trajectories)</td></tr></table>`)}
${card('Repairs by kind (count · in N trajectories)', hbars(kindBars(stats.repairs, '#d35400'), { label: 'repairs' }), ' id="chart-repairs"')}
${card('Rollbacks by condition (count · in N trajectories)', hbars(kindBars(stats.rollbacks, '#7f8c8d'), { label: 'rollbacks' }), ' id="chart-rollbacks"')}
${card('Tools used (calls · in N trajectories)', hbars(toolBars, { label: 'tools' }), ' id="chart-tools"')}
${card('Failed validation rules (trajectories)', hbars(ruleBars(stats.failures_by_rule, '#a82315'), { label: 'failed rules' }), ' id="chart-rules"')}
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
<script>${APP}</script>${after === undefined ? '' : `\n<script>${after}</script>`}
</body>
</html>`;
}
