/** `browse_webpage`: fetch under the policy, decode, extract readable text, cut to a size. */
import { fetchPage, FetchError, type FetchOptions } from './fetch-page.js';
import { htmlToText } from './extract.js';

/** Characters of page text returned; the executor cuts again for the model. */
export const DEFAULT_MAX_CHARS = 50_000;

export interface BrowseOptions extends FetchOptions {
  readonly maxChars?: number | undefined;
}

export interface BrowseResult {
  readonly url: string;
  readonly title: string;
  readonly text: string;
  /** The body or the text was cut at a limit. */
  readonly truncated: boolean;
}

function charsetOf(contentType: string): string | undefined {
  return /charset\s*=\s*["']?([\w.:-]+)/i.exec(contentType)?.[1];
}

/** `<meta charset>` or `<meta http-equiv content="…charset=…">` in the first bytes, as browsers look for it. */
function sniffMetaCharset(body: Buffer): string | undefined {
  const head = body.subarray(0, 4096).toString('latin1');
  return /<meta[^>]+charset\s*=\s*["']?([\w.:-]+)/i.exec(head)?.[1];
}

function decode(body: Buffer, label: string | undefined): string {
  if (body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf) return new TextDecoder('utf-8').decode(body.subarray(3));
  if (body[0] === 0xff && body[1] === 0xfe) return new TextDecoder('utf-16le').decode(body.subarray(2));
  if (body[0] === 0xfe && body[1] === 0xff) return new TextDecoder('utf-16be').decode(body.subarray(2));
  try {
    return new TextDecoder(label ?? 'utf-8').decode(body);
  } catch {
    // An unknown label: browsers fall back too.
    return new TextDecoder('utf-8').decode(body);
  }
}

type Kind = 'html' | 'text' | undefined;

function kindOf(contentType: string, body: Buffer): Kind {
  const mime = contentType.split(';')[0]!.trim().toLowerCase();
  if (mime === 'text/html' || mime === 'application/xhtml+xml') return 'html';
  if (mime.startsWith('text/') || mime === 'application/json' || mime === 'application/xml' || mime.endsWith('+xml') || mime.endsWith('+json')) return 'text';
  if (mime === '' || mime === 'application/octet-stream') {
    // No type, or a lazy one: look at the bytes, as browsers do.
    const start = body.subarray(0, 512).toString('latin1').trimStart().toLowerCase();
    if (start.startsWith('<!doctype html') || start.startsWith('<html') || /<(head|body|p|div|title)[\s>]/.test(start)) return 'html';
    if (!body.subarray(0, 512).includes(0)) return 'text';
  }
  return undefined;
}

export async function browse(url: string, opts: BrowseOptions = {}): Promise<BrowseResult> {
  const page = await fetchPage(url, opts);
  const kind = kindOf(page.contentType, page.body);
  if (!kind) throw new FetchError(`cannot read ${page.url}: content type ${page.contentType.split(';')[0] || 'unknown'} is not a web page or text`);
  const maxChars = opts.maxChars ?? DEFAULT_MAX_CHARS;
  let title = '';
  let text: string;
  if (kind === 'html') {
    const html = decode(page.body, charsetOf(page.contentType) ?? sniffMetaCharset(page.body));
    ({ title, text } = htmlToText(html));
  } else {
    text = decode(page.body, charsetOf(page.contentType)).trim();
  }
  let truncated = page.truncated;
  if (text.length > maxChars) {
    text = text.slice(0, maxChars);
    truncated = true;
  }
  return { url: page.url, title, text, truncated };
}

/** The tool's answer: title and final URL on top, then the text. */
export function formatBrowse(r: BrowseResult): string {
  const lines = [`Title: ${r.title || '(none)'}`, `URL: ${r.url}`, '', r.text || '(the page has no readable text)'];
  if (r.truncated) lines.push('', '[page cut at the size limit]');
  return lines.join('\n');
}
