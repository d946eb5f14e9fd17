/**
 * The executor against a third-party MCP server from the registry:
 * `@modelcontextprotocol/server-everything` (a devDependency, run from node_modules, no
 * network), over stdio, Streamable HTTP and the legacy SSE transport on loopback. It returns
 * images, embedded resources, resource links and structured content, has a tool that errors
 * and one that requires MCP tasks.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunConfig } from '../../schemas/index.js';
import { Executor } from '../../pipeline/generate/executor.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { freePort } from '../helpers.js';

const EVERYTHING = join(PACKAGE_ROOT, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js');

function start(mcpServers: unknown, executor: Record<string, unknown> = {}): Promise<Executor> {
  const cfg = RunConfig.parse({ endpoint: { model: 'm' }, mcpServers, executor: { cache: false, call_timeout_ms: 20_000, connect_timeout_ms: 20_000, ...executor } });
  return Executor.start({ servers: cfg.mcpServers, tools: cfg.tools, executor: cfg.executor });
}

/** A JSON-dialect call with typed arguments, as mcp-xml and native make them. */
const jsonCall = (toolName: string, args: Record<string, unknown> = {}) => ({ toolName, query: JSON.stringify(args), attributes: {}, arguments: args });

/** Resolves once `cond` holds; fails the test if it does not within 10 s. */
async function until(cond: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met within 10 s');
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface HttpEverything {
  readonly url: string;
  /** Everything it printed so far. */
  output(): string;
  stop(): Promise<void>;
}

/**
 * The server in one of its HTTP modes. It listens on $PORT and says so; a port taken between
 * our probe and its listen makes it exit, and another port is tried.
 */
async function startHttp(mode: 'streamableHttp' | 'sse'): Promise<HttpEverything> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const child: ChildProcess = spawn(process.execPath, [EVERYTHING, mode], { env: { PATH: process.env.PATH ?? '', PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const ready = await new Promise<boolean>((resolve) => {
      const onData = (d: Buffer): void => {
        out += d.toString('utf8');
        if (/listening on port|Server is running on port/.test(out)) resolve(true);
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', onData);
      child.once('exit', () => resolve(false));
    });
    if (!ready) continue;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    return {
      url: `http://127.0.0.1:${port}${mode === 'sse' ? '/sse' : '/mcp'}`,
      output: () => out,
      stop: async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill();
        await exited;
      },
    };
  }
  throw new Error(`server-everything (${mode}) did not start`);
}

describe('server-everything over stdio: every content kind', () => {
  let ex: Executor;
  beforeAll(async () => {
    ex = await start({ everything: { command: process.execPath, args: [EVERYTHING, 'stdio'] } });
  });
  afterAll(() => ex?.close());

  it('an image is a placeholder with its type and size, the image itself kept in the record', async () => {
    const r = await ex.call(jsonCall('get-tiny-image'), 'feed0001', new Map());
    expect(r.error).toBeUndefined();
    expect(r.view.text).toMatch(/^Here's the image you requested:\n\[image: image\/png, \d+\.\d kB\]\nThe image above is the MCP logo\.$/);
    const parts = (r.result as { content: { type: string; data?: string; mimeType?: string }[] }).content;
    const image = parts.find((p) => p.type === 'image')!;
    expect(image.mimeType).toBe('image/png');
    expect(image.data!.length).toBeGreaterThan(1000);
    expect(r.view.text).not.toContain(image.data!.slice(0, 32));
  });

  it('resource links are listed', async () => {
    const r = await ex.call(jsonCall('get-resource-links', { count: 2 }), 'feed0002', new Map());
    expect(r.view.text!.split('\n')).toEqual([
      'Here are 2 resource links to resources available in this server:',
      expect.stringMatching(/^\[link: Blob Resource 1 demo:\/\/resource\/dynamic\/blob\/1 \(.+\)\] Resource 1: /),
      expect.stringMatching(/^\[link: Text Resource 2 demo:\/\/resource\/dynamic\/text\/2 \(text\/plain\)\] Resource 2: /),
    ]);
  });

  it('an embedded text resource is shown as its text, a binary one as a placeholder', async () => {
    const text = await ex.call(jsonCall('get-resource-reference', { resourceType: 'Text', resourceId: 2 }), 'feed0003', new Map());
    expect(text.view.text).toMatch(/\[resource: demo:\/\/resource\/dynamic\/text\/2 \(text\/plain\)\]\nResource 2: This is a plaintext resource/);
    const blob = await ex.call(jsonCall('get-resource-reference', { resourceType: 'Blob', resourceId: 1 }), 'feed0004', new Map());
    expect(blob.view.text).toMatch(/\[resource: demo:\/\/resource\/dynamic\/blob\/1 \(.+, \d+ bytes\)\]/);
  });

  it('structured content with an output schema passes the client check and is shown', async () => {
    const r = await ex.call(jsonCall('get-structured-content', { location: 'Chicago' }), 'feed0005', new Map());
    expect(r.error).toBeUndefined();
    expect(JSON.parse(r.view.text!)).toEqual({ temperature: 36, conditions: 'Light rain / drizzle', humidity: 82 });
  });

  it('annotated text with an image keeps both', async () => {
    const r = await ex.call(jsonCall('get-annotated-message', { messageType: 'success', includeImage: true }), 'feed0006', new Map());
    expect(r.view.text).toMatch(/^Operation completed successfully\n\[image: image\/png, \d+\.\d kB\]$/);
  });

  it('a tool that errors is a tool error', async () => {
    const r = await ex.call(jsonCall('get-resource-reference', { resourceType: 'Text', resourceId: 0 }), 'feed0007', new Map());
    expect(r.error).toMatch(/Invalid resourceId: 0/);
    expect(r.skipped).toBe(false);
  });

  it('a tool that requires MCP tasks is a tool error raised in the client, not a dead server', async () => {
    const before = ex.stats().restarts;
    const r = await ex.call(jsonCall('simulate-research-query', { topic: 'gut microbiota' }), 'feed0008', new Map());
    expect(r.error).toMatch(/^everything\/simulate-research-query: .*requires task-based execution/);
    expect(ex.stats().restarts).toBe(before);
    // The same server answers the next call.
    expect((await ex.call(jsonCall('echo', { message: 'still here' }), 'feed0009', new Map())).view.text).toBe('Echo: still here');
    expect(ex.stats().restarts).toBe(before);
  });
});

describe('server-everything over Streamable HTTP', () => {
  it('works, deletes its session at the end, and a normal shutdown counts no junk', async () => {
    const server = await startHttp('streamableHttp');
    try {
      const ex = await start({ everything: { type: 'streamable-http', url: server.url } });
      const r = await ex.call(jsonCall('echo', { message: 'over http' }), 'feed0010', new Map());
      expect(r.view.text).toBe('Echo: over http');
      expect(server.output()).not.toMatch(/session termination request/);
      await ex.close();
      // Its log line comes through another pipe than the DELETE's answer: wait for it to arrive.
      await until(() => /Received session termination request for session [0-9a-f-]{36}/.test(server.output()));
      expect(ex.stats().protocolErrors).toBe(0);
      expect(ex.stats().lastProtocolError).toBeUndefined();
    } finally {
      await server.stop();
    }
  });
});

describe('server-everything over the legacy SSE transport (type: sse)', () => {
  it('lists and calls tools, and closes cleanly', async () => {
    const server = await startHttp('sse');
    try {
      const ex = await start({ everything: { type: 'sse', url: server.url, headers: { 'x-test': 'yes' } } });
      expect(ex.tools().map((t) => t.name)).toContain('get-tiny-image');
      const r = await ex.call(jsonCall('get-tiny-image'), 'feed0011', new Map());
      expect(r.view.text).toMatch(/\[image: image\/png, \d+\.\d kB\]/);
      await ex.close();
      expect(ex.stats().protocolErrors).toBe(0);
    } finally {
      await server.stop();
    }
  });
});
