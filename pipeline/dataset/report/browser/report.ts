/**
 * The report page's script: the trajectory list (virtual: only the rows in sight are in the
 * DOM), its search and filters, and the viewer of one trajectory. The rows come from the page's
 * `rows` block (rows.ts: `SUMMARY <tab> DETAIL` per line; summaries parsed now, details when a
 * row is opened). A served page's live script (live.ts) hands it rows a run writes later, through
 * `window.trajforgeReport`.
 */
// A namespace, not a module: the page inlines its scripts (scripts.ts), and their names stay out of each other's way.
namespace ReportPage {
  const ROW = 46;
  const MAX_H = 8000000;
  const OVERSCAN = 6;
  const KINDS: Record<SegmentKind, string> = { t: 'text', k: 'think', c: 'call', o: 'tool output', a: 'answer' };

  const S: RowSummary[] = [];
  const D: string[] = [];
  const hay: string[] = [];
  readRows(byId('rows').textContent ?? '');

  /** Rows: "summary<TAB>detail" per line. */
  function readRows(raw: string): void {
    const lines = raw.split('\n');
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!;
      const tab = line.indexOf('\t');
      if (tab < 0) continue;
      const s = JSON.parse(line.slice(0, tab)) as RowSummary;
      S.push(s);
      D.push(line.slice(tab + 1));
      hay.push((s[0] + '\n' + s[4]).toLowerCase());
    }
  }

  const list = byId('list');
  const spacer = byId('spacer');
  const viewer = byId('viewer');
  const qEl = byId<HTMLInputElement>('q');
  const stEl = byId<HTMLSelectElement>('f-status');
  const rsEl = byId<HTMLSelectElement>('f-reason');
  const ruEl = byId<HTMLSelectElement>('f-rule');
  const agEl = byId<HTMLSelectElement>('f-agent');
  const vdEl = byId<HTMLSelectElement>('f-verdict');
  const grEl = byId<HTMLInputElement>('f-group');
  const rangeEl = byId('f-range');
  const countEl = byId('count');
  let view: number[] = [];
  let sel = -1;
  let byIdOf: Map<string, number> | null = null;
  /** A chart bar's range (a histogram's): [summary field, from, to], or none. */
  let range: [number, number, number] | null = null;

  // The list's order: each main session followed by its sub-agent sessions (by the call that
  // started them, at any depth), and with "by question" the k rollouts of a question together.
  // Made again only when rows arrive or the grouping changes, not on every filter.
  let order: number[] = [];
  const depth: number[] = [];
  const kids: number[] = [];
  const byQuestion = new Map<string, number[]>();
  function makeOrder(): void {
    const ids = indexIds();
    const children = new Map<number, number[]>();
    const roots: number[] = [];
    byQuestion.clear();
    for (let i = 0; i < S.length; i++) {
      const s = S[i]!;
      const p = s[11] ? ids.get(s[11]) : undefined;
      if (p === undefined || p === i) roots.push(i);
      else (children.get(p) ?? children.set(p, []).get(p)!).push(i);
      if (s[13] && !s[11]) (byQuestion.get(s[13]) ?? byQuestion.set(s[13], []).get(s[13])!).push(i);
    }
    if (grEl.checked) {
      const first = new Map<string, number>();
      for (let r = 0; r < roots.length; r++) if (!first.has(S[roots[r]!]![13])) first.set(S[roots[r]!]![13], r);
      const at = (i: number): number => first.get(S[i]![13])!;
      roots.sort((a, b) => at(a) - at(b) || (S[a]![16] ?? 0) - (S[b]![16] ?? 0) || a - b);
    }
    order = [];
    const walk = (i: number, d: number): void => {
      order.push(i);
      depth[i] = d;
      const c = children.get(i);
      kids[i] = c ? c.length : 0;
      if (!c) return;
      c.sort((a, b) => (S[a]![12] ?? 0) - (S[b]![12] ?? 0) || a - b);
      for (let k = 0; k < c.length; k++) walk(c[k]!, d + 1);
    };
    for (let r = 0; r < roots.length; r++) walk(roots[r]!, 0);
  }

  function fillSelect(select: HTMLSelectElement, counts: Record<string, number>): void {
    while (select.options.length > 1) select.remove(1);
    const keys = Object.keys(counts).sort((a, b) => counts[b]! - counts[a]! || (a < b ? -1 : 1));
    for (let k = 0; k < keys.length; k++) {
      const o = el('option', null, keys[k] + ' (' + num(counts[keys[k]!]) + ')');
      o.value = keys[k]!;
      select.appendChild(o);
    }
  }
  function fillFilters(): void {
    const cStatus: Record<string, number> = {};
    const cReason: Record<string, number> = {};
    const cRule: Record<string, number> = {};
    const cAgent: Record<string, number> = {};
    const cVerdict: Record<string, number> = {};
    for (let j = 0; j < S.length; j++) {
      const r = S[j]!;
      cStatus[r[1]] = (cStatus[r[1]] || 0) + 1;
      const reason = r[2] || 'none';
      cReason[reason] = (cReason[reason] || 0) + 1;
      for (let u = 0; u < r[3].length; u++) cRule[r[3][u]!] = (cRule[r[3][u]!] || 0) + 1;
      const agent = r[10] || 'none';
      cAgent[agent] = (cAgent[agent] || 0) + 1;
      const verdict = r[14] || 'none';
      cVerdict[verdict] = (cVerdict[verdict] || 0) + 1;
    }
    const selects: [HTMLSelectElement, Record<string, number>][] = [[stEl, cStatus], [rsEl, cReason], [ruEl, cRule], [agEl, cAgent], [vdEl, cVerdict]];
    for (let k = 0; k < selects.length; k++) {
      const [select, counts] = selects[k]!;
      const kept = select.value;
      fillSelect(select, counts);
      select.value = kept;
    }
    // Agents and verdicts are shown only when the rows have more than one of them to choose.
    agEl.hidden = Object.keys(cAgent).length < 2;
    vdEl.hidden = !Object.keys(cVerdict).some((v) => v !== 'none');
    let sampled = false;
    byQuestion.forEach((g) => (sampled = sampled || g.length > 1));
    grEl.parentElement!.hidden = !sampled;
  }
  makeOrder();
  fillFilters();

  function apply(): void {
    filter(false);
  }
  function filter(keepScroll: boolean): void {
    const q = qEl.value.trim().toLowerCase();
    const st = stEl.value;
    const rs = rsEl.value;
    const ru = ruEl.value;
    const ag = agEl.value;
    const vd = vdEl.value;
    view = [];
    for (let o = 0; o < order.length; o++) {
      const i = order[o]!;
      const s = S[i]!;
      if (st && s[1] !== st) continue;
      if (rs && (s[2] || 'none') !== rs) continue;
      if (ru && s[3].indexOf(ru) < 0) continue;
      if (ag && (s[10] || 'none') !== ag) continue;
      if (vd && (s[14] || 'none') !== vd) continue;
      if (range) {
        const v = s[range[0]] as number | null;
        // Histogram bins hold whole numbers, both ends in; a rubric score's bin ends before the next one starts.
        if (v === null || v < range[1] || (range[0] === 15 && range[2] < 1 ? v >= range[2] : v > range[2])) continue;
      }
      if (q && hay[i]!.indexOf(q) < 0) continue;
      view.push(i);
    }
    countEl.textContent = num(view.length) + ' of ' + num(S.length) + ' trajectories';
    spacer.style.height = Math.min(view.length * ROW, MAX_H) + 'px';
    if (!keepScroll) list.scrollTop = 0;
    render();
  }

  // Only the rows in sight (plus a few) are in the DOM. Past MAX_H pixels of rows the
  // scroll position maps to a row index proportionally, so a million rows still scroll.
  function firstExact(): number {
    const h = list.clientHeight;
    const max = spacer.offsetHeight - h;
    const fit = Math.max(0, view.length - h / ROW);
    return max > 0 ? (list.scrollTop / max) * fit : 0;
  }
  function render(): void {
    const top = list.scrollTop;
    const h = list.clientHeight;
    const f = firstExact();
    const first = Math.max(0, Math.floor(f) - OVERSCAN);
    const last = Math.min(view.length, Math.ceil(f + h / ROW) + OVERSCAN);
    // Rows already in the DOM stay where they are and are only restyled; new ones go in between,
    // so the DOM keeps the list's order. A row is never rebuilt or moved: a click whose press and
    // release straddle a re-render (a scroll, a filter, the search) still opens its row.
    const old: Record<string, HTMLElement> = {};
    let next: HTMLElement | null = null;
    for (let c = spacer.firstChild as HTMLElement | null; c; c = c.nextSibling as HTMLElement | null) old[c.getAttribute('data-i')!] = c;
    for (let p = last - 1; p >= first; p--) {
      const i = view[p]!;
      let row = old[i];
      if (row) delete old[i];
      else row = spacer.insertBefore(makeRow(i), next);
      row.className = 'row' + (i === sel ? ' sel' : '');
      row.style.top = top + (p - f) * ROW + 'px';
      next = row;
    }
    for (const k in old) spacer.removeChild(old[k]!);
  }
  function makeRow(i: number): HTMLElement {
    const s = S[i]!;
    const row = el('div', 'row');
    row.setAttribute('data-i', String(i));
    row.setAttribute('data-id', s[0]);
    const d = depth[i] || 0;
    row.setAttribute('data-depth', String(d));
    if (d) row.style.paddingLeft = 10 + 18 * d + 'px';
    const l1 = el('div', 'l1');
    if (d) l1.appendChild(el('span', 'nest', '\u21b3'));
    l1.appendChild(el('span', 'badge ' + s[1], s[1]));
    l1.appendChild(el('span', 'id', s[0]));
    if (s[2]) l1.appendChild(el('span', 'tag', s[2]));
    if (s[10] && s[10] !== 'main') l1.appendChild(el('span', 'tag agent', s[10]));
    if (kids[i]) l1.appendChild(el('span', 'tag', '+' + kids[i] + ' sub-agent session' + (kids[i] === 1 ? '' : 's')));
    if (s[14]) l1.appendChild(el('span', 'badge v-' + s[14], s[14]));
    if (grEl.checked && s[16] !== null && !s[11]) l1.appendChild(el('span', 'tag sample', 'sample ' + s[16]));
    l1.appendChild(el('span', 'n', num(s[5]) + ' calls · ' + num(s[6]) + ' turns'));
    row.appendChild(l1);
    row.appendChild(el('div', 'q', s[4]));
    return row;
  }

  function section(parent: HTMLElement, title: string): void {
    parent.appendChild(el('h4', null, title));
  }
  function open(i: number): void {
    sel = i;
    const s = S[i]!;
    const d = JSON.parse(D[i]!) as RowDetail;
    viewer.textContent = '';
    viewer.scrollTop = 0;
    const head = el('div', 'head');
    head.appendChild(el('span', 'badge ' + s[1], s[1]));
    head.appendChild(el('span', 'id', s[0]));
    if (s[2]) head.appendChild(el('span', 'tag', s[2]));
    viewer.appendChild(head);
    showFacts(s, d);
    section(viewer, 'question');
    viewer.appendChild(el('pre', 'box', s[4]));
    if (d.g !== undefined) {
      section(viewer, 'gold answer');
      viewer.appendChild(el('pre', 'box', d.g));
    }
    section(viewer, 'final answer');
    viewer.appendChild(el('pre', 'box', d.fa || '(none)'));
    const err = errorBox(s[1], s[2], d.e);
    if (err) viewer.appendChild(err);
    const judged = judgeBox(d.j);
    if (judged) {
      section(viewer, 'judge');
      viewer.appendChild(judged);
    }
    showRollouts(i);
    if (d.iss.length) {
      section(viewer, 'validation issues');
      const ul = el('ul', 'issues');
      for (let a = 0; a < d.iss.length; a++) {
        const issue = d.iss[a]!;
        ul.appendChild(el('li', issue[1], issue[0] + ' (' + issue[1] + '): ' + issue[2]));
      }
      viewer.appendChild(ul);
    }
    showSegments(d);
    const lists = [['repairs', d.rep], ['rollbacks', d.rb]] as const;
    for (let b = 0; b < lists.length; b++) {
      const [title, items] = lists[b]!;
      if (!items.length) continue;
      section(viewer, title);
      const ul2 = el('ul', 'issues');
      for (let c = 0; c < items.length; c++) {
        const x = items[c]!;
        ul2.appendChild(el('li', null, 'turn ' + x[0] + ': ' + x[1] + ' - ' + x[2]));
      }
      viewer.appendChild(ul2);
    }
    render();
    if (history.replaceState) history.replaceState(null, '', '#id=' + encodeURIComponent(s[0]));
  }
  /** The facts line, and for a session of a family where it sits and the way back to the call that started it. */
  function showFacts(s: RowSummary, d: RowDetail): void {
    const facts = el('div', 'facts');
    const f: [string, unknown][] = [['model', d.m], ['dialect', d.dl], ['attempt', d.at], ['tool calls', num(s[5])], ['turns', num(s[6])], ['tokens used', num(s[7])], ['repairs', s[8]], ['rollbacks', s[9]]];
    if (d.ci) f.push(['cited', d.ci[0] + ' (' + d.ci[1] + ' unresolved)']);
    if (d.ms !== null && d.ms !== undefined) f.push(['wall time', (d.ms / 1000).toFixed(1) + ' s']);
    for (let k = 0; k < f.length; k++) facts.appendChild(el('span', null, f[k]![0] + ': ' + (f[k]![1] === null || f[k]![1] === '' ? '-' : f[k]![1])));
    viewer.appendChild(facts);
    if (d.fam) {
      const fam = el('div', 'fam');
      fam.appendChild(el('span', null, 'agent: ' + (d.fam.ag || '-') + ' · depth ' + (d.fam.dp === null ? '-' : d.fam.dp) + ' · family ' + (d.fam.f || '-')));
      if (d.fam.p !== null) {
        fam.appendChild(document.createTextNode(' · '));
        fam.appendChild(sessionLink('to-parent', d.fam.p, d.fam.pc, '\u2190 called by ' + d.fam.p + ', call ' + d.fam.pc));
      }
      viewer.appendChild(fam);
    }
  }
  /** The trajectory: its legend, then each segment in its colour, a call linked to the session it started. */
  function showSegments(d: RowDetail): void {
    section(viewer, 'trajectory');
    const legend = el('div', 'legend');
    const order: SegmentKind[] = ['k', 'c', 'o', 'a', 't'];
    for (let g = 0; g < order.length; g++) {
      const it = el('span');
      it.appendChild(el('i', order[g]));
      it.appendChild(document.createTextNode(KINDS[order[g]!]));
      legend.appendChild(it);
    }
    viewer.appendChild(legend);
    if (!d.seg.length) viewer.appendChild(el('p', 'hint', '(empty: the model wrote nothing that entered the training view)'));
    // Repairs and rollbacks in place: a rollback before its turn's blocks (the kept turn
    // follows what it threw away), a repair after them; any left, after the last block.
    const fixes = inPlace(d);
    let f = 0;
    const flush = (upto: number): void => {
      for (; f < fixes.length && fixes[f]!.at < upto; f++) viewer.appendChild(fixes[f]!.box);
    };
    let callNo = 0;
    for (let n = 0; n < d.seg.length; n++) {
      const sg = d.seg[n]!;
      const turn = d.tu ? d.tu[n] : null;
      if (turn !== null && turn !== undefined) flush(2 * turn);
      const box = el('div', 'seg ' + sg[0]);
      box.setAttribute('data-kind', KINDS[sg[0]]);
      if (turn !== null && turn !== undefined) box.setAttribute('data-turn', String(turn));
      box.appendChild(el('div', 'lab', KINDS[sg[0]] + (turn === null || turn === undefined ? '' : ' · turn ' + turn)));
      box.appendChild(el('pre', null, sg[1]));
      if (sg[2]) box.appendChild(el('div', 'cut', '… ' + num(sg[2]) + ' more characters not shown in this report (the dataset has them all)'));
      if (sg[0] === 'c') {
        box.setAttribute('data-call', String(callNo));
        const child = d.ch ? d.ch[callNo] : null;
        if (child) box.appendChild(sessionLink('to-child', child, null, '\u2192 sub-agent session ' + child));
        const facts = callFacts(d.cl ? d.cl[callNo] : undefined);
        if (facts) box.appendChild(facts);
        callNo++;
      }
      viewer.appendChild(box);
      const next = d.tu ? d.tu[n + 1] : null;
      if (turn !== null && turn !== undefined && next !== turn) flush(2 * turn + 2);
    }
    flush(Infinity);
  }
  /** Each repair and rollback with its place: 2·turn before the turn's blocks (rollbacks), 2·turn+1 after them (repairs). */
  function inPlace(d: RowDetail): { at: number; box: HTMLElement }[] {
    const out: { at: number; box: HTMLElement }[] = [];
    const at = (t: number | null, after: number): number => (t === null ? Infinity : 2 * t + after);
    const kept = (t: number | null): boolean => t !== null && !!d.tu && d.tu.indexOf(t) >= 0;
    for (let r = 0; r < d.rb.length; r++) out.push({ at: at(d.rb[r]![0], 0) - 1, box: fixBox('rollback', d.rb[r]!, kept(d.rb[r]![0])) });
    const shown = new Set<string>();
    for (let r = 0; r < d.rep.length; r++) {
      const x = d.rep[r]!;
      const key = x[0] + '\n' + (x[3] ?? '');
      out.push({ at: at(x[0], 1), box: fixBox('repair', x, kept(x[0]), keptText(d, x[0]), x[3] !== undefined && shown.has(key)) });
      if (x[3] !== undefined) shown.add(key);
    }
    return out.sort((a, b) => a.at - b.at);
  }
  /** What the trajectory kept of a turn: its blocks but the tool outputs, one per line. */
  function keptText(d: RowDetail, turn: number | null): string {
    const parts: string[] = [];
    for (let n = 0; n < d.seg.length; n++) if (d.tu && d.tu[n] === turn && d.seg[n]![0] !== 'o') parts.push(d.seg[n]![1]);
    return parts.join('\n');
  }
  /** The k rollouts of this row's question: each with its verdict, linked, and the question's pass@1 and pass@k. */
  function showRollouts(i: number): void {
    const s = S[i]!;
    const group = s[13] && !s[11] ? byQuestion.get(s[13]) : undefined;
    if (!group || group.length < 2) return;
    let c = 0;
    for (let g = 0; g < group.length; g++) if (correct(S[group[g]!]!)) c++;
    const n = group.length;
    const pk = passAt(n, c, n);
    section(viewer, 'rollouts of this question');
    const box = el('div', 'rollouts');
    box.appendChild(el('div', 'facts', n + ' samples · ' + c + ' correct · pass@1 ' + (100 * (c / n)).toFixed(1) + '% · pass@' + n + ' ' + (pk === null ? '-' : (100 * pk).toFixed(0) + '%')));
    const ul = el('ul', 'issues');
    const sorted = group.slice().sort((a, b) => (S[a]![16] ?? 0) - (S[b]![16] ?? 0) || a - b);
    for (let g = 0; g < sorted.length; g++) {
      const o = S[sorted[g]!]!;
      const li = el('li', o[0] === s[0] ? 'here' : null);
      li.appendChild(el('span', null, 'sample ' + (o[16] === null ? '-' : o[16]) + ' · ' + o[1] + ' · ' + (o[14] || 'unjudged') + (o[15] === null ? '' : ' · score ' + o[15].toFixed(2)) + ' · '));
      li.appendChild(o[0] === s[0] ? el('b', null, o[0]) : sessionLink('to-sample', o[0], null, o[0]));
      ul.appendChild(li);
    }
    box.appendChild(ul);
    viewer.appendChild(box);
  }

  // A link to another session of the family: opens it (at the parent's call, going back up). A
  // session this report does not hold (filtered out, or failed elsewhere) is named, not linked.
  function sessionLink(cls: string, id: string, call: number | null, text: string): HTMLElement {
    if (indexIds().get(id) === undefined) return el('span', 'hint', text + ' (not in this report)');
    const a = el('a', cls, text);
    a.href = '#id=' + encodeURIComponent(id);
    a.setAttribute('data-target', id);
    a.addEventListener('click', (e) => {
      e.preventDefault();
      openId(id);
      if (call === null || call === undefined) return;
      const at = viewer.querySelector<HTMLElement>('.seg[data-call="' + call + '"]');
      if (!at) return;
      at.classList.add('hl');
      viewer.scrollTop = at.offsetTop - viewer.offsetTop - 40;
    });
    return a;
  }

  spacer.addEventListener('click', (e) => {
    let t = e.target as HTMLElement | null;
    while (t && t !== spacer && !t.hasAttribute('data-i')) t = t.parentNode as HTMLElement | null;
    if (t && t !== spacer) {
      open(Number(t.getAttribute('data-i')));
      list.focus();
    }
  });
  list.addEventListener('keydown', (e) => {
    if (e.key !== 'ArrowDown' && e.key !== 'ArrowUp') return;
    e.preventDefault();
    const p = view.indexOf(sel) + (e.key === 'ArrowDown' ? 1 : -1);
    if (p < 0 || p >= view.length) return;
    open(view[p]!);
    const f = firstExact();
    const h = list.clientHeight / ROW;
    if (p < f || p + 1 > f + h) scrollToPosition(p);
    render();
  });
  // The inverse of firstExact: puts list position p in the middle of the list.
  function scrollToPosition(p: number): void {
    const h = list.clientHeight;
    const max = spacer.offsetHeight - h;
    const fit = Math.max(0, view.length - h / ROW);
    const target = Math.max(0, Math.min(fit, p - h / ROW / 2));
    list.scrollTop = fit > 0 ? (target / fit) * max : 0;
  }
  let pending = false;
  list.addEventListener('scroll', () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      render();
    });
  });
  window.addEventListener('resize', render);
  let timer = 0;
  qEl.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(apply, 120);
  });
  stEl.addEventListener('change', apply);
  rsEl.addEventListener('change', apply);
  ruEl.addEventListener('change', apply);
  agEl.addEventListener('change', apply);
  vdEl.addEventListener('change', apply);
  grEl.addEventListener('change', () => {
    makeOrder();
    spacer.textContent = '';
    apply();
  });

  // A chart's bar filters the list: `data-filter` is `status:ok`, `reason:…`, `rule:…`,
  // `agent:…`, `verdict:…`, or a histogram bin's `calls|turns|tokens|rubric:from:to`. The
  // listener is on the document: a served page's charts are redrawn, not rebound.
  const SELECTS: Record<string, HTMLSelectElement> = { status: stEl, reason: rsEl, rule: ruEl, agent: agEl, verdict: vdEl };
  const FIELDS: Record<string, number> = { calls: 5, turns: 6, tokens: 7, rubric: 15 };
  document.addEventListener('click', (e) => {
    const bar = (e.target as Element | null)?.closest ? (e.target as Element).closest('#overview [data-filter]') : null;
    if (!bar) return;
    const f = bar.getAttribute('data-filter')!;
    const colon = f.indexOf(':');
    const key = f.slice(0, colon);
    const value = f.slice(colon + 1);
    const select = SELECTS[key];
    if (select) {
      select.value = value;
      if (select.value !== value) {
        // A value the list has none of (a figure over rows the list does not hold): an option for it.
        const o = el('option', null, value + ' (0)');
        o.value = value;
        select.appendChild(o);
        select.value = value;
      }
    } else if (FIELDS[key] !== undefined) {
      const [lo, hi] = value.split(':').map(Number) as [number, number];
      range = [FIELDS[key]!, lo, hi];
      rangeEl.hidden = false;
      rangeEl.querySelector('span')!.textContent = key + ' ' + (lo === hi ? num(lo) : num(lo) + '–' + num(hi));
    } else return;
    apply();
    byId('browse').scrollIntoView({ block: 'start' });
  });
  rangeEl.querySelector('button')!.addEventListener('click', () => {
    range = null;
    rangeEl.hidden = true;
    apply();
  });

  // A served report (serve.ts) hands the page the rows a run writes while it is open. A row whose
  // id is listed is that id's newer state and takes its place (an accepted row never gives way:
  // an id is accepted once, and a failed attempt after it does not count); a new id goes to the
  // end. The list keeps its scroll, filters and search; the open trajectory stays open.
  function indexIds(): Map<string, number> {
    if (byIdOf) return byIdOf;
    byIdOf = new Map();
    for (let i = 0; i < S.length; i++) byIdOf.set(S[i]![0], i);
    return byIdOf;
  }
  function addRows(lines: string[]): void {
    const ids = indexIds();
    let reopen = false;
    for (let k = 0; k < lines.length; k++) {
      const line = lines[k]!;
      const tab = line.indexOf('\t');
      if (tab < 0) continue;
      const s = JSON.parse(line.slice(0, tab)) as RowSummary;
      const at = ids.get(s[0]);
      if (at === undefined) {
        ids.set(s[0], S.length);
        S.push(s);
        D.push(line.slice(tab + 1));
        hay.push((s[0] + '\n' + s[4]).toLowerCase());
        continue;
      }
      if (S[at]![1] === 'ok') continue;
      S[at] = s;
      D[at] = line.slice(tab + 1);
      hay[at] = (s[0] + '\n' + s[4]).toLowerCase();
      // Its row in the DOM shows the old state: dropped, so the render makes it anew.
      const stale = spacer.querySelector('[data-i="' + at + '"]');
      if (stale) spacer.removeChild(stale);
      if (at === sel) reopen = true;
    }
    makeOrder();
    fillFilters();
    filter(true);
    if (reopen) {
      const top = viewer.scrollTop;
      open(sel);
      viewer.scrollTop = top;
    }
  }
  function openId(id: string): boolean {
    const i = indexIds().get(id);
    if (i === undefined) return false;
    open(i);
    const p = view.indexOf(i);
    if (p >= 0) {
      scrollToPosition(p);
      render();
    }
    return true;
  }
  /**
   * The overview's cards of the list's rows (those marked `data-kpi`): a served page calls this as
   * rows arrive, so the cards never lag the list. The same figures `stats` makes of the same rows
   * (means, and the median by nearest rank); the charts stay as drawn.
   */
  function refreshCards(): void {
    let ok = 0;
    let failed = 0;
    let calls = 0;
    let turns = 0;
    let turned = 0;
    const tokens: number[] = [];
    for (let i = 0; i < S.length; i++) {
      const s = S[i]!;
      if (s[1] === 'ok') ok++;
      else if (s[1] === 'failed') failed++;
      calls += s[5];
      if (s[6] !== null) {
        turns += s[6];
        turned++;
      }
      if (s[7] !== null) tokens.push(s[7]);
    }
    tokens.sort((a, b) => a - b);
    const n = S.length;
    const card = (name: string, value: string, label?: string): void => {
      const k = document.querySelector('#overview [data-kpi="' + name + '"]');
      if (!k) return;
      k.querySelector('b')!.textContent = value;
      if (label !== undefined) k.querySelector('span')!.textContent = label;
    };
    card('rows', num(n));
    card('accepted', n ? ((100 * ok) / n).toFixed(1) + '%' : '-', 'accepted (' + num(ok) + ')');
    card('failed', num(failed));
    card('calls', n ? (calls / n).toFixed(2) : '-');
    card('turns', turned ? (turns / turned).toFixed(2) : '-');
    card('tokens', tokens.length ? num(tokens[Math.max(1, Math.ceil(tokens.length / 2)) - 1]!) : '-');
  }
  window.trajforgeReport = { addRows, openId, size: () => S.length, refreshCards };

  apply();
  const m = /^#id=(.*)$/.exec(location.hash);
  if (m) {
    const want = decodeURIComponent(m[1]!);
    for (let w = 0; w < S.length; w++) {
      if (S[w]![0] === want) {
        open(w);
        scrollToPosition(view.indexOf(w));
        break;
      }
    }
  }
  document.body.setAttribute('data-ready', String(S.length));
}
