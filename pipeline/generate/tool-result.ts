/**
 * What an MCP tool result becomes: the view the dialect renders for the model, and the raw
 * result the record keeps. Every content kind is rendered: text as text; images, audio and
 * binary resources as a placeholder naming their type and size (their bytes stay in the record,
 * never in the prompt); text resources as their text; resource links listed; structured content
 * as JSON when no part is text. Limits count every part, not only the text.
 */
import type { ToolDocument, ToolResultView } from '../dialects/types.js';

/** The parts of a `CallToolResult` this module reads; everything else passes through untouched. */
interface ContentPart {
  readonly type?: unknown;
  readonly text?: unknown;
  readonly data?: unknown;
  readonly mimeType?: unknown;
  readonly uri?: unknown;
  readonly name?: unknown;
  readonly title?: unknown;
  readonly description?: unknown;
  readonly size?: unknown;
  readonly resource?: { readonly uri?: unknown; readonly mimeType?: unknown; readonly text?: unknown; readonly blob?: unknown };
}

interface ResultLike {
  readonly content?: unknown;
  readonly structuredContent?: unknown;
  readonly isError?: unknown;
}

export interface ResultLimits {
  /** Characters of the raw result (as JSON, every part counted) kept in the record. */
  readonly maxResultChars: number;
  /** Characters of one snippet shown to the model; plain text gets four times this. */
  readonly maxSnippetChars: number;
}

export interface RenderedResult {
  /** What the dialect renders: documents, text, or the error the tool reported. */
  readonly view: ToolResultView;
  /** The raw result, cut to `maxResultChars` when it is larger. */
  readonly result: unknown;
  readonly truncated: boolean;
  /** The tool said `isError: true`; `view.error` holds its message. */
  readonly isError: boolean;
}

const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

function contentOf(raw: unknown): ContentPart[] {
  const content = (raw as ResultLike | null)?.content;
  return Array.isArray(content) ? content.filter((c): c is ContentPart => c !== null && typeof c === 'object') : [];
}

/** Bytes that a base64 string decodes to. */
export function base64Bytes(data: string): number {
  const s = data.replace(/\s+/g, '');
  const pad = s.endsWith('==') ? 2 : s.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((s.length * 3) / 4) - pad);
}

export function formatBytes(n: number): string {
  if (n < 1000) return `${n} bytes`;
  if (n < 1_000_000) return `${(n / 1000).toFixed(1)} kB`;
  return `${(n / 1_000_000).toFixed(1)} MB`;
}

/** One content part as the model sees it, or undefined for a part with nothing to show. */
function partText(c: ContentPart): string | undefined {
  const type = str(c.type) ?? 'unknown';
  const mime = str(c.mimeType);
  switch (type) {
    case 'text':
      return typeof c.text === 'string' ? c.text : undefined;
    case 'image':
    case 'audio': {
      const size = typeof c.data === 'string' ? `, ${formatBytes(base64Bytes(c.data))}` : '';
      return `[${type}: ${mime ?? 'unknown type'}${size}]`;
    }
    case 'resource': {
      const r = c.resource ?? {};
      const uri = str(r.uri) ?? '(no uri)';
      const rmime = str(r.mimeType);
      if (typeof r.text === 'string') return `[resource: ${uri}${rmime ? ` (${rmime})` : ''}]\n${r.text}`;
      const size = typeof r.blob === 'string' ? `, ${formatBytes(base64Bytes(r.blob))}` : '';
      return `[resource: ${uri} (${rmime ?? 'binary'}${size})]`;
    }
    case 'resource_link': {
      const label = str(c.title) ?? str(c.name);
      const facts = [mime, typeof c.size === 'number' ? formatBytes(c.size) : undefined].filter(Boolean).join(', ');
      const desc = str(c.description);
      return `[link: ${label ? `${label} ` : ''}${str(c.uri) ?? '(no uri)'}${facts ? ` (${facts})` : ''}]${desc ? ` ${desc}` : ''}`;
    }
    default:
      return `[${type} content]`;
  }
}

/** Whether a part carries text the model reads (not only a placeholder). */
function isTextual(c: ContentPart): boolean {
  return (c.type === 'text' && typeof c.text === 'string' && c.text.trim() !== '') || (c.type === 'resource' && typeof c.resource?.text === 'string');
}

/**
 * The whole result as text: every part in order, one per line, and the structured content as
 * JSON when no part is text (a tool may return only an image and the data it describes).
 */
export function resultText(raw: unknown): string {
  const parts = contentOf(raw);
  const lines = parts.map(partText).filter((t): t is string => t !== undefined);
  const structured = (raw as ResultLike | null)?.structuredContent;
  if (structured !== undefined && structured !== null && !parts.some(isTextual)) lines.push(JSON.stringify(structured));
  return lines.join('\n');
}

/**
 * An MCP result → the view for the model and the record's copy. The one place a result is
 * turned into what the model reads, for results from the server and from the cache alike.
 */
export function renderResult(raw: unknown, callId: string, limits: ResultLimits): RenderedResult {
  const { result, truncated } = limitResult(raw, limits.maxResultChars);
  const text = resultText(raw);
  if ((raw as ResultLike | null)?.isError === true) {
    const message = cutText(text.trim() || 'the tool reported an error', 2_000);
    return { view: { error: message }, result, truncated, isError: true };
  }
  return { view: toView(text, callId, limits.maxSnippetChars), result, truncated, isError: false };
}

const DOC_ID_FIELDS = ['paperId', 'pmid', 'PMID', 'doi', 'DOI', 'id', 'docid', 'url', 'link'] as const;
const DOC_TEXT_FIELDS = ['abstract', 'snippet', 'text', 'content', 'body', 'summary', 'description'] as const;

function firstString(o: Record<string, unknown>, keys: readonly string[]): string | undefined {
  for (const k of keys) {
    const v = o[k];
    if (typeof v === 'string' && v.trim() !== '') return v;
    if (typeof v === 'number') return String(v);
  }
  return undefined;
}

export function cutText(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max)} [...]`;
}

/**
 * Text → documents (search results: the document's own id, else `{call_id}-{i}`) or plain
 * text shown as one snippet `{call_id}-0`. A document with no text field of a known name
 * shows its JSON, so a list of records never renders as empty snippets.
 */
export function toView(text: string, callId: string, maxSnippetChars: number): ToolResultView {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const list = Array.isArray(parsed)
    ? parsed
    : parsed && typeof parsed === 'object'
      ? (['data', 'results', 'documents', 'organic', 'items'].map((k) => (parsed as Record<string, unknown>)[k]).find(Array.isArray) as unknown[] | undefined)
      : undefined;
  if (list && list.every((d) => d !== null && typeof d === 'object' && !Array.isArray(d))) {
    const seen = new Set<string>();
    const documents: ToolDocument[] = (list as Record<string, unknown>[]).map((d, i) => {
      let id = firstString(d, DOC_ID_FIELDS) ?? `${callId}-${i}`;
      // Ids the model writes in attributes: no whitespace, no quotes, unique within the call.
      id = id.replace(/[\s"'<>,;]+/g, '_');
      if (seen.has(id)) id = `${callId}-${i}`;
      seen.add(id);
      const authors = Array.isArray(d.authors) ? d.authors.map((a) => (typeof a === 'string' ? a : (a as { name?: string })?.name ?? '')).filter(Boolean) : [];
      const metaParts = [
        authors.length ? `Authors: ${authors.slice(0, 3).join(', ')}${authors.length > 3 ? ' et al.' : ''}` : '',
        d.year !== undefined ? `Year: ${String(d.year)}` : '',
        typeof d.venue === 'string' ? `Journal: ${d.venue}` : typeof d.journal === 'string' ? `Journal: ${d.journal}` : '',
      ].filter(Boolean);
      return {
        id,
        title: typeof d.title === 'string' ? d.title : undefined,
        meta: metaParts.length ? metaParts.join(' | ') : undefined,
        text: cutText(firstString(d, DOC_TEXT_FIELDS) ?? JSON.stringify(d), maxSnippetChars),
      };
    });
    const total = parsed && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as { total?: unknown }).total : undefined;
    const header = documents.length === 0 ? 'No results found.' : typeof total === 'number' ? `Found ${total} results. Showing top ${documents.length}:` : undefined;
    return { documents, header };
  }
  return { text: cutText(text, maxSnippetChars * 4), textId: `${callId}-0` };
}

/** The longest prefix of `s` whose JSON string form (quotes excluded) fits `room`, never half a surrogate pair. */
function fitJson(s: string, room: number): string {
  const fits = (n: number): boolean => JSON.stringify(s.slice(0, n)).length - 2 <= room;
  let lo = 0;
  let hi = Math.min(s.length, Math.max(0, room));
  if (fits(hi)) lo = hi;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  const last = s.charCodeAt(lo - 1);
  return s.slice(0, last >= 0xd800 && last <= 0xdbff ? lo - 1 : lo);
}

const jsonLength = (v: unknown): number => JSON.stringify(v)?.length ?? 0;

/** Containers deeper than this are not bounded: jsonFitsUnder says "not known" and the exact length is taken. */
const BOUND_DEPTH = 32;

/**
 * Whether `v`'s JSON is surely at most `max` characters, from a bound that builds nothing: a
 * string's JSON is at most six characters per unit (`\u001f`) and its quotes. False means "not
 * known" (over the bound, too deep, or a value JSON.stringify would turn some other way, such as
 * one with `toJSON`), and the caller measures exactly. A result is a few KB against a limit of
 * 200,000 characters by default, so the exact serialisation is nearly never needed.
 */
export function jsonFitsUnder(v: unknown, max: number): boolean {
  return jsonBound(v, max, 0) <= max;
}

/** An upper bound on `v`'s JSON length, or anything above `max` once the bound passes it. */
function jsonBound(v: unknown, max: number, depth: number): number {
  switch (typeof v) {
    case 'string':
      return v.length * 6 + 2;
    case 'number':
      return Number.isFinite(v) ? String(v).length : 4;
    case 'boolean':
      return 5;
    case 'undefined':
      return 4;
    case 'object':
      break;
    default:
      return Infinity;
  }
  if (v === null) return 4;
  if (depth >= BOUND_DEPTH) return Infinity;
  let n = 2;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length && n <= max; i++) n += jsonBound(v[i], max - n, depth + 1) + 1;
    return n;
  }
  const proto = Object.getPrototypeOf(v) as unknown;
  if ((proto !== Object.prototype && proto !== null) || typeof (v as { toJSON?: unknown }).toJSON === 'function') return Infinity;
  for (const k of Object.keys(v)) {
    n += k.length * 6 + 3 + jsonBound((v as Record<string, unknown>)[k], max - n, depth + 1) + 1;
    if (n > max) return n;
  }
  return n;
}

/**
 * The raw result, cut so that its JSON is at most `maxChars` long: parts are kept in order
 * while they fit; text is cut where the room ends; base64 data that does not fit is left
 * out, its type and size kept; structured content is kept only whole.
 */
export function limitResult(raw: unknown, maxChars: number): { result: unknown; truncated: boolean } {
  if (jsonFitsUnder(raw, maxChars)) return { result: raw, truncated: false };
  const total = jsonLength(raw);
  if (total <= maxChars) return { result: raw, truncated: false };
  const r = (raw ?? {}) as ResultLike;
  const out: Record<string, unknown> = { content: [], truncated_from_chars: total };
  if (r.isError === true) out.isError = true;
  let room = maxChars - jsonLength(out);
  const content = out.content as unknown[];
  for (const part of contentOf(raw)) {
    // The comma between parts, and the part's JSON without its payload.
    const cut = cutPart(part, room - 1);
    if (cut === undefined) break;
    content.push(cut);
    room -= jsonLength(cut) + 1;
  }
  const structured = r.structuredContent;
  if (structured !== undefined) {
    const entry = jsonLength({ structuredContent: structured });
    if (entry <= room) out.structuredContent = structured;
    else out.structuredContent_omitted_chars = entry;
  }
  return { result: shrinkToFit(out, maxChars), truncated: true };
}

/** A part cut to `room` characters of JSON, or undefined when not even its skeleton fits. */
function cutPart(part: ContentPart, room: number): unknown {
  const whole = jsonLength(part);
  if (whole <= room) return part;
  const omit = (obj: Record<string, unknown>, key: string, value: string): Record<string, unknown> | undefined => {
    const { [key]: _dropped, ...rest } = obj;
    const kept = { ...rest, [`${key}_omitted_bytes`]: base64Bytes(value) };
    return jsonLength(kept) <= room ? kept : undefined;
  };
  const p = part as Record<string, unknown>;
  if (part.type === 'text' && typeof part.text === 'string') return cutStringIn(p, 'text', room);
  if ((part.type === 'image' || part.type === 'audio') && typeof part.data === 'string') return omit(p, 'data', part.data);
  if (part.type === 'resource' && part.resource) {
    const res = part.resource as Record<string, unknown>;
    const skeleton = jsonLength({ ...p, resource: {} });
    if (typeof res.text === 'string') {
      const inner = cutStringIn(res, 'text', room - skeleton);
      return inner === undefined ? undefined : { ...p, resource: inner };
    }
    if (typeof res.blob === 'string') {
      const { blob: _b, ...rest } = res;
      const kept = { ...p, resource: { ...rest, blob_omitted_bytes: base64Bytes(res.blob) } };
      return jsonLength(kept) <= room ? kept : undefined;
    }
  }
  const skeleton = { type: part.type, omitted_chars: whole };
  return jsonLength(skeleton) <= room ? skeleton : undefined;
}

/** `obj` with its string `key` cut so the whole fits `room` characters of JSON. */
function cutStringIn(obj: Record<string, unknown>, key: string, room: number): Record<string, unknown> | undefined {
  const skeleton = jsonLength({ ...obj, [key]: '' });
  if (skeleton > room) return undefined;
  return { ...obj, [key]: fitJson(String(obj[key]), room - skeleton) };
}

/** Takes what the counters added from the last text part (or drops the last parts) until the JSON fits. */
function shrinkToFit(out: Record<string, unknown>, maxChars: number): Record<string, unknown> {
  let over = jsonLength(out) - maxChars;
  const content = out.content as Record<string, unknown>[];
  while (over > 0 && content.length > 0) {
    const last = content[content.length - 1]!;
    if (typeof last.text === 'string' && last.text.length > 0) {
      content[content.length - 1] = { ...last, text: fitJson(last.text, Math.max(0, JSON.stringify(last.text).length - 2 - over)) };
    } else content.pop();
    over = jsonLength(out) - maxChars;
  }
  return out;
}
