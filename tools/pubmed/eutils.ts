/**
 * A small NCBI E-utilities client: `esearch` (JSON) for the ranked PMIDs and the total, then
 * `efetch` (XML) for the records. Every request goes through one rate limiter and is retried
 * with backoff when NCBI is busy.
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { setTimeout as sleep } from 'node:timers/promises';
import { gunzipSync } from 'node:zlib';
import type { CorpusDoc, SearchPage } from '../corpus/search.js';
import { LimiterUnavailable, RateLimiter, type Limiter, type Slot } from './ratelimit.js';
import { parsePubmedXml, PubmedXmlError } from './xml.js';
import { WireError } from '../../pipeline/errors.js';

export const DEFAULT_EUTILS_BASE = 'https://eutils.ncbi.nlm.nih.gov/entrez/eutils';
/** esearch cannot page past the first 10,000 records of a query. */
export const MAX_RETRIEVABLE = 10_000;

export interface EutilsOptions {
  /** Default https://eutils.ncbi.nlm.nih.gov/entrez/eutils. */
  readonly base?: string | undefined;
  /** Raises NCBI's limit from 3 to 10 requests per second. */
  readonly apiKey?: string | undefined;
  /** Sent as `tool` and `email`, which NCBI asks every client to identify itself with. */
  readonly tool?: string | undefined;
  readonly email?: string | undefined;
  /** Default: one shared by the process, at NCBI's limit for the key (or its absence). */
  readonly limiter?: Limiter | undefined;
  /** Retries of 429, 5xx, network errors and bodies that are not what was asked for. Default 5. */
  readonly maxRetries?: number | undefined;
  /** First backoff; doubled each retry, with jitter, up to 30 s. Default 1000 ms. */
  readonly retryBaseMs?: number | undefined;
  /** Per request. Default 30000 ms. */
  readonly timeoutMs?: number | undefined;
}

/** A failure the caller should report, not retry: a bad query, a refused key, retries spent. */
export class EutilsError extends WireError {
  constructor(message: string) {
    super(message);
    this.name = 'EutilsError';
  }
}

/** Worth another try: NCBI was busy or sent something other than what was asked for. */
class Transient extends WireError {
  constructor(
    message: string,
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}

const limiters = new Map<number, RateLimiter>();

/** NCBI's limit for a key (or its absence), in requests per second. */
export function ncbiRate(apiKey: string | undefined): number {
  return apiKey ? 10 : 3;
}

/** The process's limiter for a rate: every server instance and call in this process shares it. */
export function sharedLimiter(apiKey: string | undefined): RateLimiter {
  const rate = ncbiRate(apiKey);
  let l = limiters.get(rate);
  if (!l) limiters.set(rate, (l = new RateLimiter(rate)));
  return l;
}

function snippet(body: string): string {
  const s = body.replace(/\s+/g, ' ').trim();
  return s.length > 200 ? `${s.slice(0, 200)}…` : s;
}

function retryAfter(headers: IncomingHttpHeaders): number | undefined {
  const v = headers['retry-after'];
  if (!v) return undefined;
  const s = Number(v);
  if (Number.isFinite(s)) return Math.max(0, s * 1000);
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : undefined;
}

// Connections are kept open: a new TLS handshake per request would cost more than the request.
const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/**
 * One GET with node:http rather than fetch, because the limiter needs to know when the request
 * actually left: on a reused connection at once, on a new one when it is connected (and, for
 * https, the handshake done).
 */
function get(url: string, headers: Record<string, string>, timeoutMs: number, slot: Slot): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const https = u.protocol === 'https:';
    const req = (https ? httpsRequest : httpRequest)(
      u,
      { headers: { ...headers, 'Accept-Encoding': 'gzip' }, agent: https ? agents.https : agents.http, signal: AbortSignal.timeout(timeoutMs) },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          try {
            let raw = Buffer.concat(chunks);
            if (String(res.headers['content-encoding'] ?? '').toLowerCase() === 'gzip') raw = gunzipSync(raw);
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: raw.toString('utf8') });
          } catch (err) {
            reject(err);
          }
        });
      },
    );
    req.on('socket', (socket) => {
      if (!socket.connecting) return slot.sent();
      socket.once(https ? 'secureConnect' : 'connect', () => slot.sent());
    });
    req.on('error', (err) => {
      slot.sent();
      reject(err);
    });
    req.end();
  });
}

export class EutilsClient {
  readonly #base: string;
  readonly #apiKey: string | undefined;
  readonly #tool: string;
  readonly #email: string | undefined;
  readonly #limiter: Limiter;
  readonly #maxRetries: number;
  readonly #retryBaseMs: number;
  readonly #timeoutMs: number;
  /** Requests sent, retries included. */
  requests = 0;

  constructor(opts: EutilsOptions = {}) {
    this.#base = (opts.base ?? DEFAULT_EUTILS_BASE).replace(/\/+$/, '');
    this.#apiKey = opts.apiKey || undefined;
    this.#tool = opts.tool ?? 'trajforge';
    this.#email = opts.email || undefined;
    this.#limiter = opts.limiter ?? sharedLimiter(this.#apiKey);
    this.#maxRetries = opts.maxRetries ?? 5;
    this.#retryBaseMs = opts.retryBaseMs ?? 1000;
    this.#timeoutMs = opts.timeoutMs ?? 30_000;
  }

  #url(util: string, params: Record<string, string>): string {
    const q = new URLSearchParams({ db: 'pubmed', ...params, tool: this.#tool });
    if (this.#email) q.set('email', this.#email);
    if (this.#apiKey) q.set('api_key', this.#apiKey);
    return `${this.#base}/${util}.fcgi?${q}`;
  }

  /** GETs a URL and hands the body to `read`, which throws Transient for bodies worth retrying. */
  async #request<T>(url: string, read: (body: string) => T): Promise<T> {
    let last = '';
    for (let attempt = 0; ; attempt++) {
      let wait: number | undefined;
      try {
        const slot = await this.#limiter.acquire();
        this.requests++;
        const res = await get(url, { 'User-Agent': `${this.#tool} (trajforge)` }, this.#timeoutMs, slot);
        const body = res.body;
        if (res.status === 429 || res.status >= 500) throw new Transient(`HTTP ${res.status}: ${snippet(body)}`, retryAfter(res.headers));
        if (res.status < 200 || res.status >= 300) {
          // 400 and friends: a bad key or a bad request; the same request will fail again.
          throw new EutilsError(`NCBI refused the request: HTTP ${res.status}: ${snippet(body)}`);
        }
        return read(body);
      } catch (err) {
        if (err instanceof EutilsError) throw err;
        // Nothing was sent; asking again at once would only wait as long again.
        if (err instanceof LimiterUnavailable) throw new EutilsError(`${err.message}; no request was sent`);
        const e = err as NodeJS.ErrnoException;
        last = err instanceof Transient ? err.message : e.name === 'AbortError' || e.name === 'TimeoutError' ? `timed out after ${this.#timeoutMs} ms` : (e.code ?? e.message);
        wait = err instanceof Transient ? err.retryAfterMs : undefined;
      }
      if (attempt >= this.#maxRetries) throw new EutilsError(`NCBI did not answer after ${attempt + 1} attempts; last: ${last}`);
      const backoff = Math.min(30_000, this.#retryBaseMs * 2 ** attempt);
      await sleep(wait ?? backoff / 2 + Math.random() * (backoff / 2));
    }
  }

  /** PMIDs in PubMed's relevance order, and how many records match. */
  async esearch(query: string, limit: number, offset: number): Promise<{ total: number; ids: string[] }> {
    const url = this.#url('esearch', { term: query, retmode: 'json', retmax: String(limit), retstart: String(offset), sort: 'relevance' });
    return this.#request(url, (body) => {
      let json: { error?: unknown; esearchresult?: { count?: unknown; idlist?: unknown; ERROR?: unknown } };
      try {
        json = JSON.parse(body);
      } catch {
        throw new Transient(`esearch sent a body that is not JSON: ${snippet(body)}`);
      }
      // `{"error":"API rate limit exceeded"}`, sometimes with status 200.
      if (json.error !== undefined) throw new Transient(`NCBI: ${String(json.error)}`);
      const r = json.esearchresult;
      if (!r) throw new Transient(`esearch sent JSON without esearchresult: ${snippet(body)}`);
      if (r.ERROR !== undefined) throw new EutilsError(`NCBI: ${String(r.ERROR)}`);
      const ids = Array.isArray(r.idlist) ? r.idlist.map(String) : [];
      const total = Number(r.count);
      return { total: Number.isFinite(total) ? total : ids.length, ids };
    });
  }

  /** The records of these PMIDs, in the order given; ids NCBI has no record for are left out. */
  async efetch(ids: readonly string[]): Promise<CorpusDoc[]> {
    if (ids.length === 0) return [];
    const url = this.#url('efetch', { id: ids.join(','), retmode: 'xml', rettype: 'abstract' });
    const docs = await this.#request(url, (body) => {
      const trimmed = body.trimStart();
      if (!trimmed.startsWith('<')) {
        let msg = snippet(body);
        try {
          const j = JSON.parse(body) as { error?: unknown };
          if (j.error !== undefined) msg = String(j.error);
        } catch {
          // Not JSON either: reported as it came.
        }
        throw new Transient(`efetch sent a body that is not XML: ${msg}`);
      }
      try {
        return parsePubmedXml(body);
      } catch (err) {
        if (err instanceof PubmedXmlError) {
          if (err.malformed) throw new Transient(err.message);
          throw new EutilsError(err.message);
        }
        throw err;
      }
    });
    const byId = new Map(docs.map((d) => [d.paperId, d]));
    return ids.map((id) => byId.get(id)).filter((d): d is CorpusDoc => d !== undefined);
  }

  /** esearch then efetch: one page in the corpus server's shape. */
  async search(query: string, limit: number, offset: number): Promise<SearchPage> {
    if (offset + limit > MAX_RETRIEVABLE) {
      throw new EutilsError(`PubMed returns only the first ${MAX_RETRIEVABLE} results of a query; offset + limit must be at most ${MAX_RETRIEVABLE}`);
    }
    const { total, ids } = await this.esearch(query, limit, offset);
    return { total, offset, data: await this.efetch(ids) };
  }
}
