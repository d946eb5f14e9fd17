/**
 * Fetching a page the model asked for, safely: http(s) only, redirects followed by hand and
 * each hop checked again, a byte limit (after decompression) and a time limit for the whole
 * chain.
 *
 * The host is resolved here, every address it resolves to is checked, and the connection is
 * made to one of those checked addresses: the request's `lookup` hands the socket the list
 * already checked instead of asking DNS again. Checking a name and then letting the HTTP
 * client resolve it a second time would leave a window in which a DNS server with a short TTL
 * answers "public" to the check and "127.0.0.1" to the connection (DNS rebinding). TLS still
 * verifies the certificate against the host name, and SNI carries it.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import { request as httpRequest, type IncomingMessage, type RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import { isIP } from 'node:net';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import type { Readable } from 'node:stream';
import { HostPolicy, type ResolvedAddress } from './policy.js';
import { WireError } from '../../pipeline/errors.js';

export const DEFAULT_MAX_BYTES = 2 * 1024 * 1024;
export const DEFAULT_TIMEOUT_MS = 20_000;
export const DEFAULT_MAX_REDIRECTS = 5;
const USER_AGENT = 'Mozilla/5.0 (compatible; trajforge-browse/1.0)';

/** A fetch that was refused or failed; the message is meant for the model. */
export class FetchError extends WireError {
  constructor(
    message: string,
    /** true when the policy refused the target (not a network or HTTP failure). */
    readonly refused = false,
  ) {
    super(message);
    this.name = 'FetchError';
  }
}

export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

export const systemResolver: Resolver = async (hostname) => {
  const found = await dnsLookup(hostname, { all: true, verbatim: true });
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

export interface FetchOptions {
  readonly policy?: HostPolicy | undefined;
  /** Bytes of body kept (after decompression); the rest is not read. Default 2 MiB. */
  readonly maxBytes?: number | undefined;
  /** For the whole redirect chain. Default 20000 ms. */
  readonly timeoutMs?: number | undefined;
  readonly maxRedirects?: number | undefined;
  /** Name → addresses. Default: the system resolver (dns.lookup, all addresses). */
  readonly resolve?: Resolver | undefined;
}

export interface FetchedPage {
  /** The URL of the last hop. */
  readonly url: string;
  readonly status: number;
  readonly contentType: string;
  readonly body: Buffer;
  /** The body was longer than maxBytes and was cut. */
  readonly truncated: boolean;
  readonly redirects: readonly string[];
}

/** Checks scheme and host, resolves the host, checks every address. Returns the addresses to connect to. */
export async function resolveChecked(url: URL, policy: HostPolicy, resolve: Resolver): Promise<ResolvedAddress[]> {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new FetchError(`refused: only http and https URLs can be browsed, not ${url.protocol}`, true);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const byName = policy.checkName(host);
  if (byName) throw new FetchError(`refused: ${byName}`, true);
  let addresses: ResolvedAddress[];
  if (isIP(host)) {
    addresses = [{ address: host, family: isIP(host) === 6 ? 6 : 4 }];
  } else {
    try {
      addresses = await resolve(host);
    } catch (err) {
      throw new FetchError(`cannot resolve ${host}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }
  const reason = policy.checkAddresses(host, addresses);
  if (reason) throw new FetchError(`refused: ${reason}`, true);
  return addresses;
}

/**
 * A `lookup` that answers with addresses checked beforehand and never asks DNS. It answers on a
 * later tick, as DNS does: answered at once, a connect that fails at once (EINVAL for a
 * link-local address without a zone, ENETUNREACH) raises its error on the socket before the
 * HTTP request has put its listener there, and the unhandled 'error' kills the process.
 */
function pinnedLookup(addresses: readonly ResolvedAddress[]): LookupFunction {
  return ((_host: string, opts: { all?: boolean; family?: number | string }, done: (...args: unknown[]) => void) => {
    const cb = (...args: unknown[]): void => void setImmediate(() => done(...args));
    const fam = opts?.family === 6 || opts?.family === 'IPv6' ? 6 : opts?.family === 4 || opts?.family === 'IPv4' ? 4 : 0;
    const usable = fam ? addresses.filter((a) => a.family === fam) : addresses;
    if (usable.length === 0) {
      cb(Object.assign(new Error(`no checked address of family ${fam}`), { code: 'ENOTFOUND' }));
      return;
    }
    if (opts?.all) cb(null, usable.map((a) => ({ address: a.address, family: a.family })));
    else cb(null, usable[0]!.address, usable[0]!.family);
  }) as unknown as LookupFunction;
}

function once(url: URL, addresses: readonly ResolvedAddress[], signal: AbortSignal): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const opts: RequestOptions = {
      method: 'GET',
      headers: {
        'User-Agent': USER_AGENT,
        Accept: 'text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5',
        'Accept-Encoding': 'gzip, deflate, br',
        'Accept-Language': 'en',
      },
      lookup: pinnedLookup(addresses),
      // A pooled socket may have been opened for another hop's checks; each hop gets its own.
      agent: false,
      signal,
    };
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, opts, resolve);
    req.on('error', reject);
    req.end();
  });
}

function decoded(res: IncomingMessage): Readable {
  const enc = String(res.headers['content-encoding'] ?? '').trim().toLowerCase();
  if (enc === 'gzip' || enc === 'x-gzip') return res.pipe(createGunzip());
  if (enc === 'deflate') return res.pipe(createInflate());
  if (enc === 'br') return res.pipe(createBrotliDecompress());
  return res;
}

/** Reads at most maxBytes of the decompressed body: a small gzip cannot inflate into gigabytes here. */
async function readLimited(res: IncomingMessage, maxBytes: number): Promise<{ body: Buffer; truncated: boolean }> {
  const stream = decoded(res);
  const chunks: Buffer[] = [];
  let size = 0;
  let truncated = false;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      const room = maxBytes - size;
      if (chunk.length >= room) {
        if (room > 0) chunks.push(chunk.subarray(0, room));
        size = maxBytes;
        truncated = chunk.length > room;
        break;
      }
      chunks.push(chunk);
      size += chunk.length;
    }
  } catch (err) {
    // A body cut short by the server still has a useful beginning.
    if (size === 0) throw err;
    truncated = true;
  } finally {
    res.destroy();
    if (stream !== res) stream.destroy();
  }
  return { body: Buffer.concat(chunks, size), truncated };
}

/** GETs a URL under the policy, following redirects; 4xx and 5xx are FetchErrors. */
export async function fetchPage(input: string, opts: FetchOptions = {}): Promise<FetchedPage> {
  const policy = opts.policy ?? new HostPolicy();
  const resolve = opts.resolve ?? systemResolver;
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_BYTES;
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const maxRedirects = opts.maxRedirects ?? DEFAULT_MAX_REDIRECTS;
  let url: URL;
  let text = input.trim();
  // Models often write "example.com/page": a bare host is taken as https.
  if (!/^[a-z][a-z0-9+.-]*:/i.test(text)) text = `https://${text.replace(/^\/\//, '')}`;
  try {
    url = new URL(text);
  } catch {
    throw new FetchError(`not a URL: ${JSON.stringify(input.slice(0, 200))}`);
  }
  const signal = AbortSignal.timeout(timeoutMs);
  const redirects: string[] = [];
  try {
    for (;;) {
      url.hash = '';
      const addresses = await resolveChecked(url, policy, resolve);
      const res = await once(url, addresses, signal);
      const status = res.statusCode ?? 0;
      const location = res.headers.location;
      if (status >= 300 && status < 400 && location) {
        res.destroy();
        if (redirects.length >= maxRedirects) throw new FetchError(`too many redirects (more than ${maxRedirects})`);
        let next: URL;
        try {
          next = new URL(location, url);
        } catch {
          throw new FetchError(`redirect to something that is not a URL: ${JSON.stringify(location.slice(0, 200))}`);
        }
        redirects.push(next.href);
        url = next;
        continue;
      }
      if (status >= 400) {
        res.destroy();
        throw new FetchError(`HTTP ${status}${res.statusMessage ? ` ${res.statusMessage}` : ''} from ${url.href}`);
      }
      const { body, truncated } = await readLimited(res, maxBytes);
      return { url: url.href, status, contentType: String(res.headers['content-type'] ?? ''), body, truncated, redirects };
    }
  } catch (err) {
    if (err instanceof FetchError) throw err;
    if (signal.aborted) throw new FetchError(`timed out after ${timeoutMs} ms fetching ${url.href}`);
    const e = err as NodeJS.ErrnoException;
    throw new FetchError(`cannot fetch ${url.href}: ${e.code ?? e.message}`);
  }
}

