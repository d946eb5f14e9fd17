/**
 * The executor against MCP servers it did not ship: over Streamable HTTP on loopback (stateless,
 * and with sessions), started here with the SDK; over stdio, one whose environment is
 * inspected and one that breaks its own output schema and sends what other servers may.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { RunConfig } from '../../schemas/index.js';
import { Executor } from '../../pipeline/generate/executor.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { tempDir } from '../helpers.js';

function options(mcpServers: unknown) {
  const cfg = RunConfig.parse({ endpoint: { model: 'm' }, mcpServers, executor: { call_timeout_ms: 10_000, connect_timeout_ms: 15_000 } });
  return { servers: cfg.mcpServers, tools: cfg.tools, executor: cfg.executor };
}

/** What the HTTP server saw: the headers of every request, and the arguments of every echo call. */
interface Seen {
  requests: { method: string; headers: IncomingHttpHeaders; rpc: string[] }[];
  echoArgs: unknown[];
}

/** A stateless Streamable HTTP MCP server: a fresh McpServer and transport per POST, as the SDK requires. */
function echoServer(seen: Seen): McpServer {
  const server = new McpServer({ name: 'echo-http', version: '1.0.0' });
  server.registerTool(
    'echo',
    {
      description: 'Repeats the text',
      inputSchema: { text: z.string().describe('what to repeat'), times: z.number().int().optional().describe('how many times') },
    },
    async (args) => {
      seen.echoArgs.push(args);
      return { content: [{ type: 'text', text: args.text.repeat(args.times ?? 1) }] };
    },
  );
  return server;
}

async function startHttpMcp(seen: Seen): Promise<{ http: Server; url: string }> {
  const http = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = text ? JSON.parse(text) : undefined;
      } catch {
        body = undefined;
      }
      const msgs = Array.isArray(body) ? body : body ? [body] : [];
      seen.requests.push({ method: req.method ?? '', headers: req.headers, rpc: msgs.map((m: { method?: string }) => m.method ?? '(response)') });
      if (req.method !== 'POST' || req.url !== '/mcp') {
        res.writeHead(405, { 'content-type': 'application/json', allow: 'POST' });
        res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed.' }, id: null }));
        return;
      }
      const server = echoServer(seen);
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      res.on('close', () => {
        void transport.close();
        void server.close();
      });
      server
        .connect(transport)
        .then(() => transport.handleRequest(req, res, body))
        .catch((err: unknown) => {
          if (!res.headersSent) res.writeHead(500).end(String(err));
        });
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  return { http, url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp` };
}

describe('executor: MCP over Streamable HTTP', () => {
  const seen: Seen = { requests: [], echoArgs: [] };
  let http: Server;
  let ex: Executor;

  beforeAll(async () => {
    const started = await startHttpMcp(seen);
    http = started.http;
    ex = await Executor.start(options({ remote: { url: started.url, headers: { 'x-test': 'yes' } } }));
  });
  afterAll(async () => {
    await ex?.close();
    http?.closeAllConnections();
    await new Promise((r) => http?.close(r));
  });

  it('lists the remote tool, with the body going to its required string parameter', () => {
    const specs = ex.tools();
    expect(specs.map((s) => s.name)).toEqual(['echo']);
    expect(specs[0]!.bodyParam).toBe('text');
    const props = specs[0]!.inputSchema.properties as Record<string, { type?: string }>;
    expect(props.times?.type).toBe('integer');
    expect(ex.hasTool('echo')).toBe(true);
  });

  it('sends the body and a typed attribute: times="3" arrives as the number 3', async () => {
    const before = seen.echoArgs.length;
    const r = await ex.call({ toolName: 'echo', query: 'hi', attributes: { times: '3' } }, 'feedf00d', new Map());
    expect(r.error).toBeUndefined();
    expect(r.skipped).toBe(false);
    expect([r.server, r.mcpTool]).toEqual(['remote', 'echo']);
    expect(seen.echoArgs.slice(before)).toEqual([{ text: 'hi', times: 3 }]);
    expect(typeof (seen.echoArgs.at(-1) as { times: unknown }).times).toBe('number');
    expect(r.arguments).toEqual({ text: 'hi', times: 3 });
    expect(r.parameters).toEqual({ times: 3 });
    // Plain text comes back as one snippet with id {call_id}-0.
    expect(r.view.text).toBe('hihihi');
    expect(r.view.textId).toBe('feedf00d-0');
  });

  it('sends the configured headers with every request, the tool call included', () => {
    expect(seen.requests.length).toBeGreaterThan(0);
    const call = seen.requests.find((q) => q.rpc.includes('tools/call'));
    expect(call?.headers['x-test']).toBe('yes');
    for (const q of seen.requests) expect(q.headers['x-test'], `${q.method} ${q.rpc.join(',')}`).toBe('yes');
    expect(seen.requests.some((q) => q.rpc.includes('initialize'))).toBe(true);
  });

  it('an attribute that does not fit the schema never reaches the server', async () => {
    const before = seen.echoArgs.length;
    const r = await ex.call({ toolName: 'echo', query: 'hi', attributes: { times: 'three' } }, 'c', new Map());
    expect(r.skipped).toBe(true);
    expect(r.error).toMatch(/times must be an integer, got "three"/);
    expect(seen.echoArgs.length).toBe(before);
  });
});

describe('executor: the environment of a stdio server', () => {
  it('gets the safe defaults plus its own env, and none of the parent environment', async () => {
    const dir = tempDir('tf-env-');
    const sdk = (p: string): string => pathToFileURL(join(PACKAGE_ROOT, 'node_modules/@modelcontextprotocol/sdk/dist/esm', p)).href;
    const file = join(dir, 'env-server.mjs');
    writeFileSync(
      file,
      [
        `import { McpServer } from ${JSON.stringify(sdk('server/mcp.js'))};`,
        `import { StdioServerTransport } from ${JSON.stringify(sdk('server/stdio.js'))};`,
        `const server = new McpServer({ name: 'env', version: '1.0.0' });`,
        `server.registerTool('env', { description: 'the environment this process sees' }, async () => ({ content: [{ type: 'text', text: JSON.stringify(process.env) }] }));`,
        `await server.connect(new StdioServerTransport());`,
      ].join('\n'),
    );
    process.env.TF_PLANTED_SECRET = 'sk-planted';
    let ex: Executor | undefined;
    try {
      ex = await Executor.start(options({ envsrv: { command: process.execPath, args: [file], env: { ONLY_THIS: '1' } } }));
      const r = await ex.call({ toolName: 'env', query: '', attributes: {} }, 'e1', new Map());
      expect(r.error).toBeUndefined();
      const content = (r.result as { content: { type: string; text: string }[] }).content;
      const env = JSON.parse(content[0]!.text) as Record<string, string>;
      expect(env.ONLY_THIS).toBe('1');
      expect(env.PATH).toBe(process.env.PATH);
      expect(env.TF_PLANTED_SECRET).toBeUndefined();
      expect(JSON.stringify(env)).not.toContain('sk-planted');
      // Nothing beyond the SDK's safe list (POSIX) and the configured variable.
      const allowed = new Set(['HOME', 'LOGNAME', 'PATH', 'SHELL', 'TERM', 'USER', 'ONLY_THIS']);
      expect(Object.keys(env).filter((k) => !allowed.has(k))).toEqual([]);
    } finally {
      delete process.env.TF_PLANTED_SECRET;
      await ex?.close();
    }
  });
});

describe('executor: a Streamable HTTP server with sessions', () => {
  it('deletes its session when the run ends, and counts no junk at a normal shutdown', async () => {
    const requests: { method: string; session: string | undefined }[] = [];
    const sessions = new Map<string, StreamableHTTPServerTransport>();
    const http = createServer((req, res) => {
      const session = req.headers['mcp-session-id'] as string | undefined;
      // Recorded before the answer is sent: by the time the client has its answer, the test sees the request.
      requests.push({ method: req.method ?? '', session });
      const known = session === undefined ? undefined : sessions.get(session);
      if (known) {
        void known.handleRequest(req, res);
        return;
      }
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => void sessions.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) sessions.delete(transport.sessionId);
      };
      const server = new McpServer({ name: 'sessions', version: '1.0.0' });
      server.registerTool('ping', { description: 'answers pong' }, async () => ({ content: [{ type: 'text', text: 'pong' }] }));
      void server.connect(transport).then(() => transport.handleRequest(req, res));
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    try {
      const ex = await Executor.start(options({ remote: { url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp` } }));
      expect((await ex.call({ toolName: 'ping', query: '', attributes: {} }, 'p1', new Map())).view.text).toBe('pong');
      const session = requests.find((r) => r.session !== undefined)!.session;
      expect(requests.some((r) => r.method === 'DELETE')).toBe(false);
      await ex.close();
      expect(requests.filter((r) => r.method === 'DELETE')).toEqual([{ method: 'DELETE', session }]);
      expect(sessions.size).toBe(0);
      expect(ex.stats().protocolErrors).toBe(0);
    } finally {
      http.closeAllConnections();
      await new Promise((r) => http.close(r));
    }
  });
});

describe('executor: errors raised inside the MCP client, and content a server may send', () => {
  let ex: Executor;
  beforeAll(async () => {
    const dir = tempDir('tf-hostile-');
    const sdk = (p: string): string => pathToFileURL(join(PACKAGE_ROOT, 'node_modules/@modelcontextprotocol/sdk/dist/esm', p)).href;
    const file = join(dir, 'hostile-server.mjs');
    // The low-level Server: unlike McpServer it checks nothing, so it can break the tool's own output schema.
    writeFileSync(
      file,
      [
        `import { Server } from ${JSON.stringify(sdk('server/index.js'))};`,
        `import { StdioServerTransport } from ${JSON.stringify(sdk('server/stdio.js'))};`,
        `import { CallToolRequestSchema, ListToolsRequestSchema, McpError } from ${JSON.stringify(sdk('types.js'))};`,
        `const server = new Server({ name: 'hostile', version: '1.0.0' }, { capabilities: { tools: {} } });`,
        `const input = { type: 'object', properties: { query: { type: 'string' } } };`,
        `const output = { type: 'object', properties: { temperature: { type: 'number' } }, required: ['temperature'] };`,
        `server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [`,
        `  { name: 'weather', inputSchema: input, outputSchema: output },`,
        `  { name: 'unstructured', inputSchema: input, outputSchema: output },`,
        `  { name: 'refuse', inputSchema: input },`,
        `  { name: 'records', inputSchema: input },`,
        `  { name: 'audio', inputSchema: input },`,
        `] }));`,
        `server.setRequestHandler(CallToolRequestSchema, async (req) => {`,
        `  switch (req.params.name) {`,
        `    case 'weather': return req.params.arguments?.query === 'good'`,
        `      ? { content: [{ type: 'text', text: 'warm' }], structuredContent: { temperature: 21 } }`,
        `      : { content: [{ type: 'text', text: 'hot' }], structuredContent: { temperature: 'hot' } };`,
        `    case 'unstructured': return { content: [{ type: 'text', text: 'no data' }] };`,
        `    case 'refuse': throw new McpError(-32602, 'query is not allowed here');`,
        `    case 'records': return { content: [{ type: 'text', text: JSON.stringify([{ id: 'a', value: 1 }, { id: 'b', value: 2 }]) }] };`,
        `    case 'audio': return { content: [{ type: 'audio', data: Buffer.alloc(48000).toString('base64'), mimeType: 'audio/wav' }] };`,
        `  }`,
        `});`,
        `await server.connect(new StdioServerTransport());`,
      ].join('\n'),
    );
    ex = await Executor.start(options({ hostile: { command: process.execPath, args: [file] } }));
  });
  afterAll(() => ex?.close());
  const q = (toolName: string, query = 'x') => ({ toolName, query, attributes: {} });

  it('a result that breaks the tool output schema is a tool error, and the server is not restarted', async () => {
    expect((await ex.call(q('weather', 'good'), 'w1', new Map())).view.text).toBe('warm');
    const bad = await ex.call(q('weather'), 'w2', new Map());
    expect(bad.error).toMatch(/^hostile\/weather: Structured content does not match the tool's output schema/);
    expect(bad.skipped).toBe(false);
    const missing = await ex.call(q('unstructured'), 'w3', new Map());
    expect(missing.error).toMatch(/^hostile\/unstructured: .*has an output schema but did not return structured content/);
    // An error the server answers with is the call's, not the server's.
    expect((await ex.call(q('refuse'), 'w4', new Map())).error).toBe('hostile/refuse: query is not allowed here');
    expect(ex.stats().restarts).toBe(0);
    expect((await ex.call(q('weather', 'good'), 'w5', new Map())).error).toBeUndefined();
    expect(ex.stats().restarts).toBe(0);
  });

  it('a list of records shows each as JSON; audio is a placeholder with its type and size', async () => {
    const records = await ex.call(q('records'), 'r1', new Map());
    expect(records.view.documents?.map((d) => [d.id, d.text])).toEqual([
      ['a', '{"id":"a","value":1}'],
      ['b', '{"id":"b","value":2}'],
    ]);
    expect((await ex.call(q('audio'), 'a1', new Map())).view.text).toBe('[audio: audio/wav, 48.0 kB]');
  });
});
