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
    showEndpoint(f);
    showSeries(f);
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
    showEta(f);
    kpi('live-tokens', num(f.tokens.total), f.tokens.total, 'tokens, every attempt: ' + num(f.tokens.prompt) + ' prompt, ' + num(f.tokens.completion) + ' completion');
    // A spend is made from a price: the one is set when the other is.
    if (f.spend_usd === null) kpi('live-spend', 'tokens only', null, 'no price set: --price-prompt and --price-completion (USD per million tokens)');
    else kpi('live-spend', '$' + f.spend_usd.toFixed(2), f.spend_usd, 'spend at $' + f.price!.prompt + ' / $' + f.price!.completion + ' per million prompt / completion tokens');
  }
  /** Counters of the agents' client and the judge's added up (the judge's are said apart in the labels). */
  function both(f: LiveFigures, of: (c: EndpointCounts) => number): number {
    const e = f.endpoint!;
    return of(e.agents) + (e.judge ? of(e.judge) : 0);
  }
  /** 429s, retries and Retry-After waits, as the manifest's last checkpoint has them: two cards and a line in the head. */
  function showEndpoint(f: LiveFigures): void {
    const e = f.endpoint;
    const head = byId('live-endpoint');
    if (!e) {
      head.textContent = '';
      kpi('live-429', '-', null, 'rate-limited (429): the manifest records no endpoint counts yet');
      kpi('live-retries', '-', null, 'retries: the manifest records no endpoint counts yet');
      return;
    }
    const requests = both(f, (c) => c.requests);
    const limited = both(f, (c) => c.responses.rate_limited);
    const retries = both(f, (c) => c.retries);
    const waits = both(f, (c) => c.retry_after.waits);
    const waited = both(f, (c) => c.retry_after.seconds);
    const server = both(f, (c) => c.responses.server_error);
    const broken = both(f, (c) => c.responses.connection_error + c.responses.timeout);
    const judge = e.judge ? ' (judge: ' + num(e.judge.responses.rate_limited) + ')' : '';
    const workers = e.manifests > 1 ? ', ' + e.manifests + ' workers' : '';
    const limit = e.agents.concurrency_limit === undefined ? '' : ', ' + num(e.agents.concurrency_limit) + ' in flight allowed';
    kpi('live-429', num(limited), limited, 'rate-limited (429)' + judge + '; Retry-After: ' + num(waits) + ' waits, ' + waited.toFixed(1) + ' s' + workers);
    kpi('live-retries', num(retries), retries, 'retries of ' + num(requests) + ' requests: ' + num(server) + ' server errors (5xx), ' + num(broken) + ' connection errors or timeouts' + limit);
    head.textContent = 'endpoint: ' + num(requests) + ' requests · ' + num(limited) + ' × 429 · ' + num(retries) + ' retries · Retry-After ' + waited.toFixed(1) + ' s' + workers;
  }
  /** Time left at the current rate: the samples still planned over samples per minute. */
  function showEta(f: LiveFigures): void {
    const m = f.manifest;
    const planned = m ? m.planned : null;
    const running = !m || !m.status || m.status === 'running';
    if (!running) return kpi('live-eta', 'done', 0, 'the run is ' + (m && m.status ? m.status : 'stopped'));
    if (planned === null || f.rate.per_min === null || f.rate.per_min <= 0) return kpi('live-eta', '-', null, 'time left: needs a plan and a rate');
    const left = Math.max(0, planned - f.done);
    const min = left / f.rate.per_min;
    const end = new Date(Date.parse(f.at) + min * 60_000);
    kpi('live-eta', min < 1 ? '< 1 min' : min < 90 ? Math.round(min) + ' min' : (min / 60).toFixed(1) + ' h', Math.round(min * 60), 'time left for ' + num(left) + ' samples, ends about ' + end.toLocaleTimeString());
  }

  /** Attempts per minute (bars) and the accepted share of each minute (a line), from the figures' series. */
  function showSeries(f: LiveFigures): void {
    const s = f.series || [];
    const W = 600;
    const H = 90;
    const MIN = 60_000;
    const boxes = [byId('live-throughput'), byId('live-acceptance')];
    for (let b = 0; b < boxes.length; b++) {
      boxes[b]!.textContent = s.length ? '' : 'no attempt yet';
      boxes[b]!.setAttribute('data-points', String(s.length));
    }
    if (!s.length) return;
    const first = s[0]![0];
    const slots = Math.round((s[s.length - 1]![0] - first) / MIN) + 1;
    const bw = W / slots;
    const top = Math.max(...s.map((p) => p[1]), 1);
    const bars = svgEl('svg', { viewBox: '0 0 ' + W + ' ' + H, preserveAspectRatio: 'none', role: 'img', 'aria-label': 'attempts per minute' });
    const line = svgEl('svg', { viewBox: '0 0 ' + W + ' ' + H, preserveAspectRatio: 'none', role: 'img', 'aria-label': 'accepted share per minute' });
    const points: string[] = [];
    let total = 0;
    for (let i = 0; i < s.length; i++) {
      const [at, n, ok] = s[i]!;
      total += n;
      const x = ((at - first) / MIN) * bw;
      const h = Math.max(1, ((H - 4) * n) / top);
      const rect = svgEl('rect', { x: (x + bw * 0.1).toFixed(1), y: (H - h).toFixed(1), width: Math.max(1, bw * 0.8).toFixed(1), height: h.toFixed(1), class: 'bar' });
      const title = svgEl('title');
      title.textContent = new Date(at).toLocaleTimeString() + ': ' + n + ' attempts, ' + ok + ' accepted';
      rect.appendChild(title);
      bars.appendChild(rect);
      const y = (H - 2 - ((H - 4) * ok) / n).toFixed(1);
      points.push((x + bw / 2).toFixed(1) + ',' + y);
      const dot = svgEl('circle', { cx: (x + bw / 2).toFixed(1), cy: y, r: 3, class: 'dot' });
      const share = svgEl('title');
      share.textContent = new Date(at).toLocaleTimeString() + ': ' + pct(ok, n) + ' of ' + n + ' accepted';
      dot.appendChild(share);
      line.appendChild(dot);
    }
    line.insertBefore(svgEl('polyline', { points: points.join(' '), class: 'acc' }), line.firstChild);
    // The latest minute's figures, as words: a chart of one minute is a single bar and a single dot.
    const last = s[s.length - 1]!;
    boxes[0]!.appendChild(bars);
    boxes[0]!.setAttribute('data-total', String(total));
    boxes[1]!.appendChild(line);
    boxes[0]!.appendChild(el('div', 'now', 'latest minute: ' + num(last[1]) + ' attempts (peak ' + num(top) + ')'));
    boxes[1]!.appendChild(el('div', 'now', 'latest minute: ' + pct(last[2], last[1]) + ' accepted'));
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
          if (d.rows.length && R) {
            R.addRows(d.rows);
            R.refreshCards();
          }
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
      'The figures above follow the run as it writes; new trajectories join the list below and its cards. ' + 'The charts are of the ' + num(n) + ' trajectories the page held at ' + when + '.';
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
