/**
 * `trajforge generate --dry-run` shows what a run would send, and sends and writes nothing: the
 * sim counts no request, the output directory, its lock and the tool-result cache are not made
 * (a run already there is left byte for byte as it was), and the request it prints is the one
 * the run really sends first, as a loopback server in front of the sim records it, for the tulu
 * and native dialects and for MiroVerse's agents config.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim, type Sim } from '../../sim/server.js';
import { runCli, tempDir, writeConfig } from '../helpers.js';

let sim: Sim;
let recorder: Server;
let recorderUrl: string;
/** Every chat request the recorder passed on to the sim, in arrival order. */
const recorded: { headers: IncomingHttpHeaders; body: Record<string, unknown> }[] = [];

beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 4 });
  // Records each request and passes it on to the sim, so that the run it records completes.
  recorder = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      if (req.method === 'POST') recorded.push({ headers: req.headers, body: JSON.parse(text) as Record<string, unknown> });
      const target = `${sim.url.replace(/\/v1$/, '')}${req.url ?? '/'}`;
      fetch(target, { method: req.method, headers: { 'content-type': 'application/json' }, ...(req.method === 'POST' ? { body: text } : {}) })
        .then(async (r) => {
          res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
          res.end(Buffer.from(await r.arrayBuffer()));
        })
        .catch(() => res.destroy());
    });
  });
  await new Promise<void>((r) => recorder.listen(0, '127.0.0.1', r));
  recorderUrl = `http://127.0.0.1:${(recorder.address() as AddressInfo).port}/v1`;
});
afterAll(async () => {
  await sim.close();
  await new Promise((r) => recorder.close(r));
});

interface Shown {
  model: string;
  samples: number | null;
  sample: { id: string; question: string } | null;
  with_agents: boolean;
  agents: { name: string; dialect: string; system_prompt: string; tools: { name: string; server: string | null }[]; tool_listing?: string; request_tools?: unknown[] }[];
  request: { agent: string; url: string; headers: Record<string, string>; body: Record<string, unknown> & { messages: { role: string; content: string }[] } } | null;
  notes: string[];
}

async function dryRun(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Shown> {
  const r = await runCli(['generate', ...args, '--dry-run', '--json'], { env });
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Shown;
}

/** Every file under `dir`, with its bytes: what "nothing written" compares. */
function snapshot(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    const path = join(e.parentPath, e.name);
    out.set(path, e.isFile() ? readFileSync(path, 'base64') : 'dir');
  }
  return out;
}

const MIROVERSE = join(PACKAGE_ROOT, 'data/configs/miroverse.yaml');

/** The three configs: where the config is, and the flags that point it at `url` and `out`. */
const cases: { name: string; config: (dir: string, url: string) => string[] }[] = [
  { name: 'tulu', config: (dir, url) => ['--config', writeConfig(dir, url)] },
  { name: 'native', config: (dir, url) => ['--config', writeConfig(dir, url, { dialect: 'native' })] },
  { name: 'mcp-xml with agents (miroverse.yaml)', config: (dir, url) => ['--config', MIROVERSE, '--base-url', url, '--out', join(dir, 'run')] },
];

describe.each(cases)('generate --dry-run, $name', ({ name, config }) => {
  it('sends nothing, writes nothing, and shows the request the run then really sends first', async () => {
    const dir = tempDir('tf-dry-');
    const cache = join(dir, 'cache');
    const flags = [...config(dir, sim.url), '--cache-dir', cache, '--limit', '1'];
    const before = sim.stats().requests;
    const shown = await dryRun(flags);
    expect(sim.stats().requests).toBe(before);
    expect(existsSync(join(dir, 'run'))).toBe(false);
    expect(existsSync(cache)).toBe(false);

    // What the model is shown: each agent's prompt and tools, a sub-agent among its caller's tools.
    expect(shown.sample?.id).toBeDefined();
    const main = shown.agents[0]!;
    expect(main.name).toBe('main');
    if (name === 'native') {
      expect(main.tool_listing).toBeUndefined();
      expect(main.request_tools).toEqual([{ type: 'function', function: expect.objectContaining({ name: 'pubmed_search' }) }]);
      expect(shown.request!.body.tools).toEqual(main.request_tools);
      expect(shown.request!.body.stop).toBeUndefined();
    } else {
      expect(main.request_tools).toBeUndefined();
      expect(main.system_prompt).toContain(main.tool_listing);
      for (const t of main.tools) expect(main.tool_listing).toContain(t.name);
    }
    if (name.includes('agents')) {
      expect(shown.agents.map((a) => [a.name, a.tools.map((t) => t.name)])).toEqual([
        ['main', ['search_and_browse']],
        ['browsing', ['pubmed_search', 'read_document']],
      ]);
      expect(main.tools[0]!.server).toBe('browsing-agent');
      expect(shown.agents[1]!.system_prompt).toContain('read_document');
    }
    expect(shown.request!.body.messages.map((m) => m.role)).toEqual(['system', 'user']);
    expect(shown.request!.body.messages[0]!.content).toBe(main.system_prompt);
    const firstUser = shown.request!.body.messages[1]!.content as string;
    // MiroVerse's layout wraps the question in its first user turn (prompts/mcp-xml-miroverse-question.txt).
    if (name.includes('miroverse')) {
      expect(firstUser).toContain(shown.sample!.question);
      expect(firstUser).toContain('\\boxed{}');
    } else expect(firstUser).toBe(shown.sample!.question);

    // The run, through the recorder: its first request is the one shown.
    const from = recorded.length;
    const runFlags = [...config(dir, recorderUrl), '--cache-dir', cache, '--limit', '1', '--concurrency', '1'];
    const run = await runCli(['generate', ...runFlags], { timeoutMs: 120_000 });
    expect(run.code, run.stderr).toBe(0);
    const first = recorded[from]!;
    if (name.includes('agents')) {
      // `today: run` writes the run's creation date: the same day, unless the run crossed midnight.
      const { messages: shownMessages, ...shownRest } = shown.request!.body;
      const { messages: sentMessages, ...sentRest } = first.body as typeof shown.request.body;
      expect(sentRest).toEqual(shownRest);
      expect(sentMessages[1]).toEqual(shownMessages[1]);
    } else {
      expect(first.body).toEqual(shown.request!.body);
    }
    for (const [k, v] of Object.entries(shown.request!.headers)) expect(first.headers[k], k).toBe(v);

    // Against the run it made: the dry run reads it and leaves every byte as it was, lock
    // included; with agents, the prompt carries the run's date, so the request is the sent one exactly.
    const files = snapshot(join(dir, 'run'));
    const again = await dryRun(runFlags);
    expect(snapshot(join(dir, 'run'))).toEqual(files);
    expect(again.request!.body).toEqual(first.body);
    expect(again.notes.join('\n')).toContain('holds a run');
  });
});

describe('generate --dry-run, for a person', () => {
  it('prints each agent\'s system prompt, its tools and the first request under section headers; no key, even one expanded into the body', async () => {
    const dir = tempDir('tf-dry-');
    const key = 'sk-dry-run-secret-0123456789';
    const cfg = writeConfig(dir, sim.url, { endpoint: { base_url: sim.url, model: 'trajforge-sim', max_tokens: 1024, api_key_env: 'DRY_KEY', extra_body: { user: '${DRY_KEY}' } } });
    const before = sim.stats().requests;
    const r = await runCli(['generate', '--config', cfg, '--dry-run'], { env: { DRY_KEY: key } });
    expect(r.code, r.stderr).toBe(0);
    expect(sim.stats().requests).toBe(before);
    expect(r.stdout + r.stderr).not.toContain(key);
    expect(r.stdout).toMatch(/^======== system prompt ========$/m);
    expect(r.stdout).toMatch(/^======== tools: 1, listed in the system prompt as ========\n### pubmed_search$/m);
    expect(r.stdout).toMatch(/^======== first request \(sample \S+\) ========\nPOST http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions$/m);
    expect(r.stdout).toContain('authorization: Bearer [DRY_KEY, redacted]');
    expect(r.stdout).toContain('"max_tokens": 1024');
    expect(r.stdout).toContain('"user": "[redacted:DRY_KEY]"');

    const agents = await runCli(['generate', '--config', MIROVERSE, '--base-url', sim.url, '--out', join(dir, 'agents'), '--dry-run']);
    expect(agents.code, agents.stderr).toBe(0);
    for (const header of ['agent main (mcp-xml): system prompt', 'agent main (mcp-xml): tools: 1', 'agent browsing (mcp-xml): system prompt', 'agent browsing (mcp-xml): tools: 2', 'first request (sample bcd-q-0001, agent main)']) {
      expect(agents.stdout).toContain(`======== ${header}`);
    }
    expect(readdirSync(dir).sort()).toEqual(['config.yaml']);
  });

  it('a key not set for a remote endpoint is a note, not a stop: nothing is sent either way', async () => {
    const dir = tempDir('tf-dry-');
    const cfg = writeConfig(dir, 'https://api.openai.com/v1', { endpoint: { base_url: 'https://api.openai.com/v1', model: 'gpt-4.1-mini', api_key_env: 'DRY_UNSET_KEY' } });
    const shown = await dryRun(['--config', cfg], { DRY_UNSET_KEY: undefined });
    expect(shown.notes[0]).toMatch(/^DRY_UNSET_KEY is not set: a run would stop/);
    expect(shown.request!.headers.authorization).toBe('Bearer [DRY_UNSET_KEY, redacted]');
    expect(shown.request!.url).toBe('https://api.openai.com/v1/chat/completions');
  });

  it('a bad config is the usual error, exit 2, and nothing starts; --json alone is a usage error', async () => {
    const dir = tempDir('tf-dry-');
    const cfg = writeConfig(dir, sim.url, { endpoint: { base_url: sim.url, model: 'trajforge-sim', temperature: 7 } });
    const before = sim.stats().requests;
    const bad = await runCli(['generate', '--config', cfg, '--dry-run']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^error: .*config\.yaml:\d+:\d+: endpoint\.temperature: /);
    expect(bad.stderr).not.toMatch(/\n\s+at /);
    expect(bad.stdout).toBe('');
    const json = await runCli(['generate', '--config', writeConfig(dir, sim.url), '--json']);
    expect(json.code).toBe(2);
    expect(json.stderr).toBe('error: generate: --json goes with --dry-run (a run prints its progress and summary)\n');
    expect(sim.stats().requests).toBe(before);
    expect(readdirSync(dir).sort()).toEqual(['config.yaml']);
  });
});
