/**
 * A served report's live script (serve.ts, live-page.ts): runs after the page's own, which it
 * extends. It listens to the server's event stream (`events`: the figures, whenever they change)
 * and, when the figures say the run's files have grown past what the page holds, fetches the rows
 * it lacks (`rows?g=…&t=…&f=…`, the page's place in each file) and hands them to the report's own
 * list (`window.trajforgeReport.addRows`). Nothing is reloaded, so the list keeps its scroll,
 * filters and search, and the viewer its trajectory; only a run whose files were replaced (the
 * server says `reload`) loads the page anew, and the address keeps the open trajectory (`#id=`).
 * The charts are redrawn (`overview?…`, for the rows the page holds) when asked, and once when
 * the run stops.
 */
// A namespace, not a module: the page inlines its scripts (scripts.ts), and their names stay out of each other's way.
namespace LivePanel {
  const R = window.trajforgeReport;
  const pct = (n: number, of: number | null): string => (of ? ((100 * n) / of).toFixed(1) + '%' : '-');
  const live = byId('live');
  let latest = JSON.parse(byId('live-init').textContent ?? '') as LiveFigures;
  // The page's place in the run's files: what the rows it holds were read up to.
  let cursor = latest.cursor;

  function kpi(id: string, value: string, raw: number | null | undefined, label: string): void {
    const k = byId(id);
    k.querySelector('b')!.textContent = value;
    k.querySelector('span')!.textContent = label;
    k.setAttribute('data-value', raw === null || raw === undefined ? '' : String(raw));
  }
  function clock(iso: string): string {
    const t = Date.parse(iso);
    return isNaN(t) ? '' : new Date(t).toLocaleTimeString();
  }
  function show(f: LiveFigures): void {
    showKpis(f);
    const m = f.manifest;
    const state = byId('live-run');
    state.textContent = m ? 'run ' + (m.status || 'in an unknown state') + (m.model ? ' · ' + m.model : '') : 'waiting for the run to start (no manifest yet)';
    byId('live-when').textContent =
      (m && m.updated_at ? 'manifest updated ' + clock(m.updated_at) + ' · ' : '') +
      'figures at ' +
      clock(f.at) +
      (f.rows.bad ? ' · ' + num(f.rows.bad) + ' lines that are not records skipped' : '') +
      (f.manifest_error ? ' · ' + f.manifest_error : '') +
      (f.unreadable.length ? ' · cannot read ' + f.unreadable.join(' · ') : '');

    const table = byId('live-reasons');
    table.textContent = '';
    const keys = Object.keys(f.reasons);
    if (!keys.length) table.appendChild(el('tr')).appendChild(el('td', 'none', 'none yet'));
    for (let i = 0; i < keys.length; i++) {
      const tr = el('tr');
      tr.setAttribute('data-reason', keys[i]!);
      tr.appendChild(el('td', null, keys[i]));
      tr.appendChild(el('td', null, num(f.reasons[keys[i]!])));
      tr.appendChild(el('td', null, pct(f.reasons[keys[i]!]!, f.rows.counted)));
      table.appendChild(tr);
    }

    const list = byId('live-newest');
    list.textContent = '';
    for (let j = 0; j < f.newest.length; j++) {
      const n = f.newest[j]!;
      const li = el('li');
      li.setAttribute('data-id', n[0]);
      li.appendChild(el('span', 'badge ' + n[1], n[1]));
      li.appendChild(el('span', 'id', n[0]));
      if (n[2]) li.appendChild(el('span', 'tag', n[2]));
      li.appendChild(el('span', 'at', clock(n[3])));
      list.appendChild(li);
    }
    live.setAttribute('data-read', String(f.rows.read));
  }
  function showKpis(f: LiveFigures): void {
    const m = f.manifest;
    const planned = m ? m.planned : null;
    const ok = f.status.ok || 0;
    const failed = f.status.failed || 0;
    kpi('live-done', num(f.done) + (planned === null ? '' : ' / ' + num(planned)), f.done, planned === null ? 'samples done' : 'samples done / planned (' + pct(f.done, planned) + ')');
    kpi('live-accepted', num(ok), ok, 'accepted (' + (f.acceptance_rate === null ? '-' : (100 * f.acceptance_rate).toFixed(1) + '%') + ' of samples done)');
    kpi('live-failed', num(failed), failed, 'failed (latest attempt of each id)');
    kpi(
      'live-rate',
      f.rate.per_min === null ? '-' : f.rate.per_min.toFixed(1),
      f.rate.per_min,
      f.rate.over === 'window' ? 'samples / min, last ' + f.rate.window_s + ' s' : 'samples / min, end of the last session',
    );
    kpi('live-tokens', num(f.tokens.total), f.tokens.total, 'tokens, every attempt: ' + num(f.tokens.prompt) + ' prompt, ' + num(f.tokens.completion) + ' completion');
    // A spend is made from a price: the one is set when the other is.
    if (f.spend_usd === null) kpi('live-spend', 'tokens only', null, 'no price set: --price-prompt and --price-completion (USD per million tokens)');
    else kpi('live-spend', '$' + f.spend_usd.toFixed(2), f.spend_usd, 'spend at $' + f.price!.prompt + ' / $' + f.price!.completion + ' per million prompt / completion tokens');
  }
  byId('live-newest').addEventListener('click', (e) => {
    let t = e.target as HTMLElement | null;
    while (t && t.tagName !== 'LI') t = t.parentNode as HTMLElement | null;
    if (t && R) R.openId(t.getAttribute('data-id')!);
  });
  function connected(on: boolean): void {
    const s = byId('live-state');
    s.className = on ? 'on' : 'off';
    s.textContent = on ? 'live' : 'not connected: the server stopped or is unreachable (retrying)';
    live.setAttribute('data-connected', on ? '1' : '0');
  }

  function behind(): boolean {
    const c = latest.cursor;
    return c.generation !== cursor.generation || c.trajectories > cursor.trajectories || c.failures > cursor.failures;
  }
  let busy = false;
  function pull(): void {
    if (busy || !behind()) return;
    if (latest.cursor.generation !== cursor.generation) {
      location.reload();
      return;
    }
    busy = true;
    const q = 'rows?g=' + cursor.generation + '&t=' + cursor.trajectories + '&f=' + cursor.failures;
    fetch(q, { cache: 'no-store' })
      .then((r) => {
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.json() as Promise<{ reload?: boolean; rows: string[]; cursor: Cursor }>;
      })
      .then(
        (d) => {
          busy = false;
          if (d.reload) {
            location.reload();
            return;
          }
          if (d.rows.length && R) R.addRows(d.rows);
          cursor = d.cursor;
          live.setAttribute('data-rows', String(R ? R.size() : 0));
          pull();
          redrawIfStopped();
        },
        () => {
          busy = false;
          connected(false);
        },
      );
  }

  // The charts are of the rows the page held when they were drawn; this says which.
  const key = (c: Cursor): string => c.generation + ':' + c.trajectories + ':' + c.failures;
  let drawnAt = key(cursor);
  let redrawing = false;
  function note(n: number, when: string): void {
    byId('live-note').textContent =
      'The figures above follow the run as it writes, and new trajectories join the list below. ' + 'The charts below are of the ' + num(n) + ' trajectories the page held at ' + when + '.';
  }
  function redraw(): void {
    if (redrawing) return;
    redrawing = true;
    const at = cursor;
    const n = R ? R.size() : 0;
    fetch('overview?g=' + at.generation + '&t=' + at.trajectories + '&f=' + at.failures, { cache: 'no-store' })
      .then((r) => {
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.text();
      })
      .then(
        (html) => {
          redrawing = false;
          // The server's own markup (every text escaped, as in the page it built), parsed inert and moved in.
          const fresh = new DOMParser().parseFromString(html, 'text/html').getElementById('overview');
          const old = document.getElementById('overview');
          if (!fresh || !old) return;
          old.parentNode!.replaceChild(document.importNode(fresh, true), old);
          drawnAt = key(at);
          note(n, new Date().toLocaleTimeString());
          live.setAttribute('data-charts', drawnAt);
        },
        () => {
          redrawing = false;
        },
      );
  }
  byId('live-redraw').addEventListener('click', redraw);
  // A run that stopped gets its charts redrawn once, when the page holds all of it.
  function redrawIfStopped(): void {
    const m = latest.manifest;
    if (m && m.status && m.status !== 'running' && !behind() && key(cursor) !== drawnAt) redraw();
  }

  const loaded = R ? R.size() : 0;
  note(loaded, 'load');
  live.setAttribute('data-rows', String(loaded));
  live.setAttribute('data-charts', drawnAt);
  show(latest);
  const events = new EventSource('events');
  events.addEventListener('figures', (e) => {
    latest = JSON.parse((e as MessageEvent<string>).data) as LiveFigures;
    connected(true);
    show(latest);
    pull();
    redrawIfStopped();
  });
  // EventSource reconnects by itself; until then the panel says the figures may be stale.
  events.onerror = () => {
    connected(false);
  };
}
