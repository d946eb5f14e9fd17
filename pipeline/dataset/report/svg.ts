/**
 * The report's charts: inline SVG strings drawn here, at build time, from the figures of
 * `stats`. No chart library and no script: the overview reads the same with JavaScript off.
 * Sizes are in viewBox units and the SVG scales to its box, so one drawing fits any width.
 */
import type { HistogramBin } from '../stats.js';

export function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => (c === '&' ? '&amp;' : c === '<' ? '&lt;' : c === '>' ? '&gt;' : c === '"' ? '&quot;' : '&#39;'));
}

/** 1234567 → "1,234,567"; 12345.6 → "12,346". */
export function fmt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** Short axis labels: 12000 → "12k", 1500000 → "1.5M". */
function short(n: number): string {
  if (n >= 1e6) return `${+(n / 1e6).toFixed(n >= 1e7 ? 0 : 1)}M`;
  if (n >= 1e3) return `${+(n / 1e3).toFixed(n >= 1e4 ? 0 : 1)}k`;
  return String(n);
}

export interface Bar {
  readonly label: string;
  readonly value: number;
  /** Shown after the value, e.g. a share. */
  readonly note?: string;
  readonly color?: string;
  /** What a click on the bar filters the list by (`status:ok`, `reason:truncated`): the page's script reads it. */
  readonly filter?: string;
}

/** Horizontal bars, one per item, labels on the left; empty when there are no items. */
export function hbars(items: readonly Bar[], opts: { color?: string; label?: string } = {}): string {
  if (items.length === 0) return '<p class="none">none</p>';
  // About the width of a grid card, so text stays near its nominal size.
  const rowH = 22;
  const labelW = 160;
  const barW = 170;
  const W = labelW + barW + 110;
  const H = items.length * rowH + 4;
  const top = Math.max(...items.map((i) => i.value), 1);
  const rows = items.map((it, k) => {
    const y = k * rowH + 2;
    const w = it.value === 0 ? 0 : Math.max(2, (barW * it.value) / top);
    const label = it.label.length > 25 ? `${it.label.slice(0, 24)}…` : it.label;
    return (
      `<g${it.filter === undefined ? '' : ` class="pick" data-filter="${esc(it.filter)}"`}><title>${esc(it.label)}: ${fmt(it.value)}${it.note ? ` (${esc(it.note)})` : ''}</title>` +
      `<text x="${labelW - 8}" y="${y + 15}" text-anchor="end" class="lbl">${esc(label)}</text>` +
      `<rect x="${labelW}" y="${y + 3}" width="${w.toFixed(1)}" height="${rowH - 6}" rx="2" fill="${it.color ?? opts.color ?? '#4c78a8'}"/>` +
      `<text x="${labelW + w + 6}" y="${y + 15}" class="val">${fmt(it.value)}${it.note ? ` · ${esc(it.note)}` : ''}</text></g>`
    );
  });
  const aria = opts.label ? ` aria-label="${esc(opts.label)}"` : '';
  return `<svg class="chart hbars" viewBox="0 0 ${W} ${H}" role="img"${aria} preserveAspectRatio="xMinYMin meet">${rows.join('')}</svg>`;
}

/** A histogram of `stats`' bins: vertical bars, count above each, range below. */
export function histogram(bins: readonly HistogramBin[], opts: { color?: string; label?: string; filter?: string } = {}): string {
  if (bins.length === 0) return '<p class="none">no values</p>';
  const W = 420;
  const H = 190;
  const padL = 8;
  const padB = 34;
  const padT = 18;
  const plotH = H - padB - padT;
  const slot = (W - padL * 2) / bins.length;
  const top = Math.max(...bins.map((b) => b.count), 1);
  const parts: string[] = [];
  parts.push(`<line x1="${padL}" y1="${H - padB}" x2="${W - padL}" y2="${H - padB}" class="axis"/>`);
  bins.forEach((b, k) => {
    const x = padL + k * slot;
    const h = b.count === 0 ? 0 : Math.max(1.5, (plotH * b.count) / top);
    // Ticks name a bin by where it starts (ranges do not fit under ten bars); the title has the range.
    const range = b.from === b.to ? fmt(b.from) : `${fmt(b.from)}–${fmt(b.to)}`;
    const tick = b.from === b.to ? short(b.from) : `${short(b.from)}+`;
    parts.push(
      `<g${opts.filter === undefined || b.count === 0 ? '' : ` class="pick" data-filter="${esc(`${opts.filter}:${b.from}:${b.to}`)}"`}><title>${esc(range)}: ${fmt(b.count)}</title>` +
        `<rect x="${(x + slot * 0.1).toFixed(1)}" y="${(H - padB - h).toFixed(1)}" width="${(slot * 0.8).toFixed(1)}" height="${h.toFixed(1)}" rx="2" fill="${opts.color ?? '#4c78a8'}"/>` +
        (b.count > 0 ? `<text x="${(x + slot / 2).toFixed(1)}" y="${(H - padB - h - 4).toFixed(1)}" text-anchor="middle" class="val">${fmt(b.count)}</text>` : '') +
        `<text x="${(x + slot / 2).toFixed(1)}" y="${H - padB + 14}" text-anchor="middle" class="tick">${esc(tick)}</text></g>`,
    );
  });
  const width = bins[0]!.to - bins[0]!.from + 1;
  if (width > 1) parts.push(`<text x="${W - padL}" y="${H - 4}" text-anchor="end" class="tick">each bar: ${esc(fmt(width))} values (hover for its range)</text>`);
  const aria = opts.label ? ` aria-label="${esc(opts.label)}"` : '';
  return `<svg class="chart hist" viewBox="0 0 ${W} ${H}" role="img"${aria} preserveAspectRatio="xMinYMin meet">${parts.join('')}</svg>`;
}

/** One stacked bar of shares (accepted vs failed), with a legend under it. */
export function stacked(parts: readonly Bar[]): string {
  const total = parts.reduce((a, p) => a + p.value, 0);
  if (total === 0) return '<p class="none">no rows</p>';
  const W = 600;
  let x = 0;
  const rects = parts.map((p) => {
    const w = (W * p.value) / total;
    const r = `<rect x="${x.toFixed(1)}" y="0" width="${w.toFixed(1)}" height="18" fill="${p.color ?? '#888'}"><title>${esc(p.label)}: ${fmt(p.value)}</title></rect>`;
    x += w;
    return r;
  });
  return `<svg class="chart stacked" viewBox="0 0 ${W} 18" preserveAspectRatio="none" role="img" aria-label="status shares">${rects.join('')}</svg>`;
}
