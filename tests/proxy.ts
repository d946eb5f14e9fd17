/**
 * A logging proxy for tests: a real HTTP server on 127.0.0.1 that forwards every request to a
 * target (the sim) and records each chat request's body and the reply the endpoint gave, in
 * order. It is the ground truth for "exported = sent": what the model was shown is what went
 * over the wire, not what the record says it was.
 */
import { createServer, request as httpRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface SentMessage {
  role: string;
  content: string | null;
  reasoning_content?: string;
  reasoning?: string;
  tool_calls?: { id?: string; type?: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export interface Exchange {
  readonly path: string;
  readonly body: { messages?: SentMessage[]; [k: string]: unknown };
  readonly status: number;
  /** The reply's assistant message, rebuilt from a JSON body or an SSE stream. */
  readonly reply: SentMessage | undefined;
}

export interface Proxy {
  readonly url: string;
  readonly exchanges: Exchange[];
  close(): Promise<void>;
}

function readAll(s: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    s.on('data', (c: Buffer) => parts.push(c));
    s.on('end', () => resolve(Buffer.concat(parts)));
    s.on('error', reject);
  });
}

/** The assistant message of a chat-completions reply, streamed (SSE deltas merged) or not. */
export function replyMessage(text: string): SentMessage | undefined {
  const trimmed = text.trimStart();
  if (trimmed.startsWith('{')) {
    const body = JSON.parse(trimmed) as { choices?: { message?: SentMessage }[] };
    return body.choices?.[0]?.message;
  }
  const msg: SentMessage = { role: 'assistant', content: '' };
  const calls: NonNullable<SentMessage['tool_calls']> = [];
  let seen = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data:')) continue;
    const data = line.slice(5).trim();
    if (data === '[DONE]' || data === '') continue;
    const delta = (JSON.parse(data) as { choices?: { delta?: Record<string, any> }[] }).choices?.[0]?.delta;
    if (delta === undefined) continue;
    seen = true;
    if (typeof delta.content === 'string') msg.content += delta.content;
    for (const f of ['reasoning_content', 'reasoning'] as const) if (typeof delta[f] === 'string') msg[f] = (msg[f] ?? '') + delta[f];
    for (const tc of (delta.tool_calls ?? []) as { index: number; id?: string; type?: string; function?: { name?: string; arguments?: string } }[]) {
      const c = (calls[tc.index] ??= { function: { name: '', arguments: '' } });
      if (tc.id !== undefined) c.id = tc.id;
      if (tc.type !== undefined) c.type = tc.type;
      if (tc.function?.name) c.function.name += tc.function.name;
      if (tc.function?.arguments) c.function.arguments += tc.function.arguments;
    }
  }
  if (calls.length > 0) msg.tool_calls = calls;
  return seen ? msg : undefined;
}

/** Starts a proxy to `target` (a base URL such as `http://127.0.0.1:PORT/v1`); its `url` has the same path. */
export async function startProxy(target: string): Promise<Proxy> {
  const to = new URL(target);
  const exchanges: Exchange[] = [];
  const server = createServer((req, res) => {
    void (async () => {
      const body = await readAll(req);
      const up = httpRequest({ host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        const parts: Buffer[] = [];
        upRes.on('data', (c: Buffer) => {
          parts.push(c);
          res.write(c);
        });
        upRes.on('end', () => {
          if (req.method === 'POST' && req.url?.endsWith('/chat/completions')) {
            const text = Buffer.concat(parts).toString('utf8');
            let reply: SentMessage | undefined;
            try {
              reply = (upRes.statusCode ?? 0) < 300 ? replyMessage(text) : undefined;
            } catch {
              reply = undefined;
            }
            exchanges.push({ path: req.url, body: JSON.parse(body.toString('utf8')), status: upRes.statusCode ?? 0, reply });
          }
          res.end();
        });
      });
      up.on('error', () => res.destroy());
      // The client went away before the reply ended: so does the upstream request.
      res.on('close', () => {
        if (!res.writableEnded) up.destroy();
      });
      up.end(body);
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}${to.pathname}`,
    exchanges,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
