/**
 * Citations in the tulu grammar (native answers use it too): `<cite id="a,b">`, read leniently
 * (`ids=`, single quotes, no quotes, ids split by commas, semicolons or spaces) and written
 * canonically; the snippet ids a `<snippet>` tag declares.
 */
import { DQ, equalsCI, isSpace, scanTags, SQ, tagAttributes, type Attribute, type Tag } from './tags.js';

/** Splits an id list on `,` `;` and whitespace, dropping stray quotes. */
function pushIds(into: string[], list: string): void {
  let cur = '';
  for (let i = 0; i < list.length; i++) {
    const c = list.charCodeAt(i);
    if (c === 44 || c === 59 || isSpace(c)) {
      if (cur) into.push(cur);
      cur = '';
    } else if (c !== DQ && c !== SQ) {
      cur += list[i];
    }
  }
  if (cur) into.push(cur);
}

/** Ids of one `<cite>` tag: `id=` or `ids=`, quoted or not; `<cite ids=a b c>` keeps `b` and `c`. */
export function citeTagIds(attrs: readonly Attribute[]): string[] {
  const ids: string[] = [];
  for (let i = 0; i < attrs.length; i++) {
    const a = attrs[i]!;
    if ((!equalsCI(a.name, 'id') && !equalsCI(a.name, 'ids')) || a.value === null) continue;
    pushIds(ids, a.value);
    if (!a.quoted) {
      while (i + 1 < attrs.length && attrs[i + 1]!.value === null) {
        i++;
        pushIds(ids, attrs[i]!.name);
      }
    }
  }
  return dedupe(ids);
}

export function dedupe(ids: readonly string[]): string[] {
  return [...new Set(ids)];
}

export function snippetId(text: string, tag: Tag): string | undefined {
  for (const a of tagAttributes(text, tag)) {
    if (equalsCI(a.name, 'id') && a.value !== null) {
      const id = a.value.trim();
      if (id) return id;
    }
  }
  return undefined;
}

/** Ids cited in an answer text, in order of first appearance. */
export function citedIds(answer: string): string[] {
  const ids: string[] = [];
  for (const t of scanTags(answer)) {
    if (t.name === 'cite' && !t.close) ids.push(...citeTagIds(tagAttributes(answer, t)));
  }
  return dedupe(ids);
}

/** The answer text `raw[start, end)` with each of its `<cite>` tags (from `tags[from]` on) written canonically: `<cite id="a,b">`. */
export function rewriteCites(raw: string, tags: readonly Tag[], from: number, start: number, end: number): { text: string; rewritten: number } {
  let out = '';
  let pos = start;
  let rewritten = 0;
  for (let k = from; k < tags.length; k++) {
    const t = tags[k]!;
    if (t.start >= end) break;
    if (t.name !== 'cite' || t.close || t.end > end) continue;
    const ids = citeTagIds(tagAttributes(raw, t));
    if (ids.length === 0) continue;
    const canonical = `<cite id="${ids.join(',')}"${t.selfClosing ? '/' : ''}>`;
    if (raw.slice(t.start, t.end) === canonical) continue;
    out += raw.slice(pos, t.start) + canonical;
    pos = t.end;
    rewritten++;
  }
  return { text: out + raw.slice(pos, end), rewritten };
}
