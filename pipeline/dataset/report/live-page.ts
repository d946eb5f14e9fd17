/**
 * What a served report adds to the page (serve.ts): the live panel on top, the figures it was
 * drawn with, and the script that keeps both up to date.
 *
 * The script listens to the server's event stream (`events`: the figures, whenever they
 * change) and, when the figures say the run's files have grown past what the page holds,
 * fetches the rows it lacks (`rows?g=…&t=…&f=…`, the page's place in each file) and hands them
 * to the report's own list (`window.trajforgeReport.addRows`). Nothing is reloaded, so the
 * list keeps its scroll, filters and search, and the viewer its trajectory; only a run whose
 * files were replaced (the server says `reload`) loads the page anew, and the address keeps the
 * open trajectory (`#id=`). The charts are redrawn (`overview?…`, for the rows the page holds)
 * when asked, and once when the run stops.
 *
 * Like the page's own script: plain ES2017 in a string (no backticks or `${`), and data reaches
 * the DOM through textContent only.
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
#live-redraw{font:inherit;font-size:12px;padding:1px 8px;border:1px solid var(--line);border-radius:6px;background:#fff;cursor:pointer}
`;

const SCRIPT = String.raw`
(function () {
  'use strict';
  var R = window.trajforgeReport;
  var $ = function (id) { return document.getElementById(id); };
  var el = function (tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };
  var num = function (n) { return n === null || n === undefined ? '-' : Number(n).toLocaleString('en-US'); };
  var pct = function (n, of) { return of ? (100 * n / of).toFixed(1) + '%' : '-'; };
  var live = $('live');
  var latest = JSON.parse($('live-init').textContent);
  // The page's place in the run's files: what the rows it holds were read up to.
  var cursor = latest.cursor;

  function kpi(id, value, raw, label) {
    var k = $(id);
    k.querySelector('b').textContent = value;
    k.querySelector('span').textContent = label;
    k.setAttribute('data-value', raw === null || raw === undefined ? '' : String(raw));
  }
  function clock(iso) {
    var t = Date.parse(iso);
    return isNaN(t) ? '' : new Date(t).toLocaleTimeString();
  }
  function show(f) {
    var m = f.manifest, planned = m ? m.planned : null;
    var ok = f.status.ok || 0, failed = f.status.failed || 0;
    kpi('live-done', num(f.done) + (planned === null ? '' : ' / ' + num(planned)), f.done,
      planned === null ? 'samples done' : 'samples done / planned (' + pct(f.done, planned) + ')');
    kpi('live-accepted', num(ok), ok, 'accepted (' + (f.acceptance_rate === null ? '-' : (100 * f.acceptance_rate).toFixed(1) + '%') + ' of samples done)');
    kpi('live-failed', num(failed), failed, 'failed (latest attempt of each id)');
    kpi('live-rate', f.rate.per_min === null ? '-' : f.rate.per_min.toFixed(1), f.rate.per_min,
      f.rate.over === 'window' ? 'samples / min, last ' + f.rate.window_s + ' s' : 'samples / min, end of the last session');
    kpi('live-tokens', num(f.tokens.total), f.tokens.total, 'tokens, every attempt: ' + num(f.tokens.prompt) + ' prompt, ' + num(f.tokens.completion) + ' completion');
    if (f.spend_usd === null) kpi('live-spend', 'tokens only', null, 'no price set: --price-prompt and --price-completion (USD per million tokens)');
    else kpi('live-spend', '$' + f.spend_usd.toFixed(2), f.spend_usd, 'spend at $' + f.price.prompt + ' / $' + f.price.completion + ' per million prompt / completion tokens');

    var state = $('live-run');
    state.textContent = m ? 'run ' + (m.status || 'in an unknown state') + (m.model ? ' · ' + m.model : '') : 'waiting for the run to start (no manifest yet)';
    $('live-when').textContent = (m && m.updated_at ? 'manifest updated ' + clock(m.updated_at) + ' · ' : '') + 'figures at ' + clock(f.at) +
      (f.rows.bad ? ' · ' + num(f.rows.bad) + ' lines that are not records skipped' : '') + (f.manifest_error ? ' · ' + f.manifest_error : '') +
      (f.unreadable.length ? ' · cannot read ' + f.unreadable.join(' · ') : '');

    var table = $('live-reasons');
    table.textContent = '';
    var keys = Object.keys(f.reasons);
    if (!keys.length) table.appendChild(el('tr')).appendChild(el('td', 'none', 'none yet'));
    for (var i = 0; i < keys.length; i++) {
      var tr = el('tr');
      tr.setAttribute('data-reason', keys[i]);
      tr.appendChild(el('td', null, keys[i]));
      tr.appendChild(el('td', null, num(f.reasons[keys[i]])));
      tr.appendChild(el('td', null, pct(f.reasons[keys[i]], f.rows.counted)));
      table.appendChild(tr);
    }

    var list = $('live-newest');
    list.textContent = '';
    for (var j = 0; j < f.newest.length; j++) {
      var n = f.newest[j], li = el('li');
      li.setAttribute('data-id', n[0]);
      li.appendChild(el('span', 'badge ' + n[1], n[1]));
      li.appendChild(el('span', 'id', n[0]));
      if (n[2]) li.appendChild(el('span', 'tag', n[2]));
      li.appendChild(el('span', 'at', clock(n[3])));
      list.appendChild(li);
    }
    live.setAttribute('data-read', String(f.rows.read));
  }
  $('live-newest').addEventListener('click', function (e) {
    var t = e.target;
    while (t && t.tagName !== 'LI') t = t.parentNode;
    if (t && R) R.openId(t.getAttribute('data-id'));
  });
  function connected(on) {
    var s = $('live-state');
    s.className = on ? 'on' : 'off';
    s.textContent = on ? 'live' : 'not connected: the server stopped or is unreachable (retrying)';
    live.setAttribute('data-connected', on ? '1' : '0');
  }

  function behind() {
    var c = latest.cursor;
    return c.generation !== cursor.generation || c.trajectories > cursor.trajectories || c.failures > cursor.failures;
  }
  var busy = false;
  function pull() {
    if (busy || !behind()) return;
    if (latest.cursor.generation !== cursor.generation) { location.reload(); return; }
    busy = true;
    var q = 'rows?g=' + cursor.generation + '&t=' + cursor.trajectories + '&f=' + cursor.failures;
    fetch(q, { cache: 'no-store' }).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.json();
    }).then(function (d) {
      busy = false;
      if (d.reload) { location.reload(); return; }
      if (d.rows.length && R) R.addRows(d.rows);
      cursor = d.cursor;
      live.setAttribute('data-rows', String(R ? R.size() : 0));
      pull();
      redrawIfStopped();
    }, function () {
      busy = false;
      connected(false);
    });
  }

  // The charts are of the rows the page held when they were drawn; this says which.
  var key = function (c) { return c.generation + ':' + c.trajectories + ':' + c.failures; };
  var drawnAt = key(cursor), redrawing = false;
  function note(n, when) {
    $('live-note').textContent = 'The figures above follow the run as it writes, and new trajectories join the list below. ' +
      'The charts below are of the ' + num(n) + ' trajectories the page held at ' + when + '.';
  }
  function redraw() {
    if (redrawing) return;
    redrawing = true;
    var at = cursor, n = R ? R.size() : 0;
    fetch('overview?g=' + at.generation + '&t=' + at.trajectories + '&f=' + at.failures, { cache: 'no-store' }).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.text();
    }).then(function (html) {
      redrawing = false;
      // The server's own markup (every text escaped, as in the page it built), parsed inert and moved in.
      var fresh = new DOMParser().parseFromString(html, 'text/html').getElementById('overview'), old = $('overview');
      if (!fresh || !old) return;
      old.parentNode.replaceChild(document.importNode(fresh, true), old);
      drawnAt = key(at);
      note(n, new Date().toLocaleTimeString());
      live.setAttribute('data-charts', drawnAt);
    }, function () { redrawing = false; });
  }
  $('live-redraw').addEventListener('click', redraw);
  // A run that stopped gets its charts redrawn once, when the page holds all of it.
  function redrawIfStopped() {
    var m = latest.manifest;
    if (m && m.status && m.status !== 'running' && !behind() && key(cursor) !== drawnAt) redraw();
  }

  var loaded = R ? R.size() : 0;
  note(loaded, 'load');
  live.setAttribute('data-rows', String(loaded));
  live.setAttribute('data-charts', drawnAt);
  show(latest);
  var events = new EventSource('events');
  events.addEventListener('figures', function (e) {
    latest = JSON.parse(e.data);
    connected(true);
    show(latest);
    pull();
    redrawIfStopped();
  });
  // EventSource reconnects by itself; until then the panel says the figures may be stale.
  events.onerror = function () { connected(false); };
})();
`;

/** The live panel, the figures it starts from, and its style: written after the overview. */
export function liveHtml(figures: LiveFigures): string {
  const kpi = (id: string): string => `<div class="kpi" id="${id}" data-value=""><b>-</b><span></span></div>`;
  return `<section id="live" class="card" data-connected="0">
<style>${CSS}</style>
<div class="head"><h2>Live</h2><span id="live-state">connecting…</span><span id="live-run" class="when"></span><span id="live-when" class="when"></span></div>
<div class="kpis">${['live-done', 'live-accepted', 'live-failed', 'live-rate', 'live-tokens', 'live-spend'].map(kpi).join('')}</div>
<div class="cols">
<div><h3>Failed, by reason (latest attempt of each id)</h3><table class="t" id="live-reasons"></table></div>
<div><h3>Newest records, every attempt (click to open)</h3><ol id="live-newest"></ol></div>
</div>
<p class="none"><span id="live-note">${esc('The figures above follow the run as it writes.')}</span> <button id="live-redraw" type="button">Redraw the charts</button></p>
</section>
<script type="application/json" id="live-init">${scriptJson(figures)}</script>`;
}

/** The live panel's script: runs after the page's own, which it extends. */
export const LIVE_SCRIPT = SCRIPT;
