/**
 * A `fetch` for the OpenAI SDK over node:http with a keep-alive agent: the subset the SDK uses
 * for chat completions (method, headers, a string or byte body, signal; a Response whose body
 * streams). Node's global fetch (undici) spends about 40% more CPU per request on its WHATWG
 * machinery (bench/fetch-probe.ts; before and after in bench/BENCHMARKS.md).
 *
 * Unlike global fetch it does not ask for compressed responses (no Accept-Encoding is added),
 * so nothing needs decompressing.
 */
import { Agent, request } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { Readable } from 'node:stream';

const agent = new Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' });
const httpsAgent = new HttpsAgent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' });

export function httpFetch(input: string | URL, init: RequestInit = {}): Promise<Response> {
  const url = typeof input === 'string' ? new URL(input) : input;
  const secure = url.protocol === 'https:';
  const headers: Record<string, string> = {};
  new Headers(init.headers).forEach((v, k) => {
    headers[k] = v;
  });
  return new Promise<Response>((resolve, reject) => {
    const req = (secure ? httpsRequest : request)(url, { method: init.method ?? 'GET', headers, agent: secure ? httpsAgent : agent, signal: init.signal ?? undefined }, (res) => {
      const h = new Headers();
      for (let i = 0; i < res.rawHeaders.length; i += 2) h.append(res.rawHeaders[i]!, res.rawHeaders[i + 1]!);
      const status = res.statusCode ?? 0;
      const body = status === 204 || status === 304 ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>);
      resolve(new Response(body, { status, statusText: res.statusMessage ?? '', headers: h }));
    });
    req.on('error', reject);
    const body = init.body;
    if (body === undefined || body === null) req.end();
    else if (typeof body === 'string' || body instanceof Uint8Array) req.end(body);
    else {
      req.destroy();
      reject(new TypeError('httpFetch: only string and byte bodies are supported'));
    }
  });
}
