/**
 * Google search through Serper (`POST {base}/search`, `X-API-KEY`). Results come back as
 * documents whose id is the link, in the `{data: [...]}` shape the executor reads.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { WireError } from '../../pipeline/errors.js';

export const DEFAULT_SERPER_BASE = 'https://google.serper.dev';

export interface SearchDoc {
  /** The result's link: what the model cites and what browse_webpage takes. */
  readonly id: string;
  readonly url: string;
  readonly title: string;
  readonly snippet: string;
  readonly position: number;
  readonly date?: string | undefined;
}

export interface WebSearchPage {
  readonly query: string;
  readonly data: SearchDoc[];
}

export interface SerperOptions {
  readonly apiKey: string | undefined;
  /** Default https://google.serper.dev. */
  readonly base?: string | undefined;
  /** Retries of 429, 5xx and network errors. Default 3. */
  readonly maxRetries?: number | undefined;
  /** First backoff, doubled each retry. Default 1000 ms. */
  readonly retryBaseMs?: number | undefined;
  /** Per request. Default 30000 ms. */
  readonly timeoutMs?: number | undefined;
  readonly fetch?: typeof fetch | undefined;
}

export class SerperError extends WireError {
  constructor(message: string) {
    super(message);
    this.name = 'SerperError';
  }
}

export interface SearchParams {
  readonly query: string;
  readonly num: number;
  readonly gl?: string | undefined;
  readonly hl?: string | undefined;
}

function brief(body: string): string {
  try {
    const j = JSON.parse(body) as { message?: unknown };
    if (typeof j.message === 'string') return j.message;
  } catch {
    // Not JSON: shown as it came.
  }
  const s = body.replace(/\s+/g, ' ').trim();
  return s.length > 200 ? `${s.slice(0, 200)}…` : s;
}

export async function serperSearch(params: SearchParams, opts: SerperOptions): Promise<WebSearchPage> {
  if (!opts.apiKey) throw new SerperError('SERPER_API_KEY is not set: google_search needs a Serper key (https://serper.dev)');
  const base = (opts.base ?? DEFAULT_SERPER_BASE).replace(/\/+$/, '');
  const doFetch = opts.fetch ?? fetch;
  const maxRetries = opts.maxRetries ?? 3;
  const retryBaseMs = opts.retryBaseMs ?? 1000;
  const body = JSON.stringify({ q: params.query, num: params.num, ...(params.gl ? { gl: params.gl } : {}), ...(params.hl ? { hl: params.hl } : {}) });
  let last = '';
  for (let attempt = 0; ; attempt++) {
    let wait: number | undefined;
    try {
      const res = await doFetch(`${base}/search`, {
        method: 'POST',
        headers: { 'X-API-KEY': opts.apiKey, 'Content-Type': 'application/json' },
        body,
        signal: AbortSignal.timeout(opts.timeoutMs ?? 30_000),
      });
      const text = await res.text();
      if (res.status === 429 || res.status >= 500) {
        last = `HTTP ${res.status}: ${brief(text)}`;
        const ra = Number(res.headers.get('retry-after'));
        wait = Number.isFinite(ra) && ra > 0 ? ra * 1000 : undefined;
      } else if (!res.ok) {
        // A bad key, no credits left, a bad parameter: the same request fails again.
        throw new SerperError(`Serper refused the search: HTTP ${res.status}: ${brief(text)}`);
      } else {
        let json: { organic?: unknown };
        try {
          json = JSON.parse(text);
        } catch {
          throw new SerperError(`Serper sent a body that is not JSON: ${brief(text)}`);
        }
        const organic = Array.isArray(json.organic) ? (json.organic as Record<string, unknown>[]) : [];
        const data: SearchDoc[] = [];
        for (const [i, r] of organic.entries()) {
          if (typeof r?.link !== 'string' || r.link === '') continue;
          data.push({
            id: r.link,
            url: r.link,
            title: typeof r.title === 'string' ? r.title : '',
            snippet: typeof r.snippet === 'string' ? r.snippet : '',
            position: typeof r.position === 'number' ? r.position : i + 1,
            ...(typeof r.date === 'string' ? { date: r.date } : {}),
          });
          if (data.length >= params.num) break;
        }
        return { query: params.query, data };
      }
    } catch (err) {
      if (err instanceof SerperError) throw err;
      last = (err as Error).name === 'TimeoutError' ? 'timed out' : (err as Error).message;
    }
    if (attempt >= maxRetries) throw new SerperError(`Serper did not answer after ${attempt + 1} attempts; last: ${last}`);
    const backoff = Math.min(30_000, retryBaseMs * 2 ** attempt);
    await sleep(wait ?? backoff / 2 + Math.random() * (backoff / 2));
  }
}
