/**
 * The model client over HTTPS (as OpenAI and OpenRouter are reached): the sim behind a TLS
 * proxy on loopback with a self-signed certificate, trusted through NODE_EXTRA_CA_CERTS in a
 * child process (the variable is read only at start-up). Streamed and whole completions.
 */
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../pipeline/paths.js';
import { startSim, type Sim } from '../../../sim/server.js';
import { runNode } from '../../helpers.js';

const TLS = join(PACKAGE_ROOT, 'tests/fixtures/tls');

let sim: Sim;
let proxy: Server;
let httpsUrl: string;

beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 1 });
  const target = new URL(sim.url);
  proxy = createServer({ cert: readFileSync(join(TLS, 'cert.pem')), key: readFileSync(join(TLS, 'key.pem')) }, (req, res) => {
    const up = request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  httpsUrl = `https://127.0.0.1:${(proxy.address() as AddressInfo).port}/v1`;
});
afterAll(async () => {
  await new Promise<void>((resolve) => proxy.close(() => resolve()));
  await sim.close();
});

/** Runs an ES module script in a fresh node; `trust`: with the test certificate trusted. */
const inChild = (script: string, trust = true) =>
  runNode(['--input-type=module', '-e', script], { env: { NODE_EXTRA_CA_CERTS: trust ? join(TLS, 'cert.pem') : undefined } });

describe('llm over https', () => {
  it('gets streamed and whole completions through a TLS endpoint', async () => {
    const llm = pathToFileURL(join(PACKAGE_ROOT, 'dist/pipeline/core/llm/llm.js')).href;
    const schemas = pathToFileURL(join(PACKAGE_ROOT, 'dist/schemas/index.js')).href;
    const script = `
      import { LlmClient } from ${JSON.stringify(llm)};
      import { EndpointConfig } from ${JSON.stringify(schemas)};
      const messages = [{ role: 'system', content: 'You have the tool pubmed_search.' }, { role: 'user', content: 'In which version of Firefox was the CSS property grid first supported?' }];
      const out = [];
      for (const stream of [true, false]) {
        const c = new LlmClient(EndpointConfig.parse({ base_url: ${JSON.stringify(httpsUrl)}, model: 'trajforge-sim', stream, max_retries: 0 }), { apiKey: 'EMPTY' });
        const r = await c.complete({ messages, stop: ['</call_tool>'] });
        out.push({ stream, text: r.text, finish: r.finishReason, prompt: r.promptTokens });
      }
      process.stdout.write(JSON.stringify(out));
    `;
    const r = await inChild(script);
    expect(r.code, r.stderr).toBe(0);
    const results = JSON.parse(r.stdout) as { stream: boolean; text: string; finish: string; prompt: number }[];
    expect(results.map((x) => x.stream)).toEqual([true, false]);
    for (const x of results) {
      expect(x.text).toContain('<call_tool name="pubmed_search"');
      expect(x.finish).toBe('stop');
      expect(x.prompt).toBeGreaterThan(0);
    }
    // Both went through the TLS proxy to the sim.
    expect(sim.stats().chatRequests).toBeGreaterThanOrEqual(2);
  });

  it('refuses a certificate it does not trust, as a connection error', async () => {
    const llm = pathToFileURL(join(PACKAGE_ROOT, 'dist/pipeline/core/llm/llm.js')).href;
    const schemas = pathToFileURL(join(PACKAGE_ROOT, 'dist/schemas/index.js')).href;
    const script = `
      import { LlmClient } from ${JSON.stringify(llm)};
      import { EndpointConfig } from ${JSON.stringify(schemas)};
      const c = new LlmClient(EndpointConfig.parse({ base_url: ${JSON.stringify(httpsUrl)}, model: 'trajforge-sim', max_retries: 0 }), { apiKey: 'EMPTY' });
      try { await c.complete({ messages: [{ role: 'user', content: 'q?' }], stop: [] }); process.stdout.write('accepted'); }
      catch (e) { process.stdout.write(String(e.message)); }
    `;
    const r = await inChild(script, false);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).not.toBe('accepted');
    expect(r.stdout).toMatch(/connection error|certificate/i);
  });
});
