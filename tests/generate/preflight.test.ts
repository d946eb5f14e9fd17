/**
 * `trajforge check` as a user runs it (the CLI from dist/), against the real sim, real MCP
 * servers and small loopback servers that play an endpoint the sim does not (one that echoes
 * the key, one that serves another model). Each failure must come out as its own FAIL line
 * with what to do, and the whole check must stay a handful of requests.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startSim, type Sim, type SimOptions } from '../../sim/server.js';
import { CORPUS_SERVER, runCli, tempDir, writeConfig } from '../helpers.js';

const sims: Sim[] = [];
const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.close()));
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

async function sim(opts: SimOptions = {}): Promise<Sim> {
  const s = await startSim({ port: 0, seed: 3, ...opts });
  sims.push(s);
  return s;
}

/** A loopback HTTP server answering with `handle`; its base URL. */
async function endpoint(handle: (method: string, path: string, headers: Record<string, string | string[] | undefined>) => { status: number; body: unknown }): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const { status, body } = handle(req.method ?? 'GET', req.url ?? '/', req.headers);
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

/** A port nothing listens on: one the system gave out and took back. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

/** The check lines by name: `{ endpoint: ['ok', 'http://… answered …'] }` (the last line of a name wins). */
function linesOf(stdout: string): Map<string, { status: string; detail: string }> {
  const out = new Map<string, { status: string; detail: string }>();
  for (const l of stdout.split('\n')) {
    const m = /^(ok|warn|FAIL|skip) +(server \S+|\S+) +(.*)$/.exec(l);
    if (m) out.set(m[2]!, { status: m[1]!, detail: m[3]! });
  }
  return out;
}

const check = (config: string, args: string[] = [], env: NodeJS.ProcessEnv = {}) => runCli(['check', '--config', config, ...args], { env });

describe('trajforge check', () => {
  it('suggests the run with the env prefix the config was filled from (VLLM_BASE_URL=…), never a secret one', async () => {
    const s = await sim();
    const dir = tempDir('tf-check-env-');
    const config = writeConfig(dir, '${VLLM_BASE_URL:-http://127.0.0.1:9/v1}', {
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER], env: { CORPUS_API_KEY: '${CORPUS_TOKEN}' } } },
    });
    const r = await check(config, [], { VLLM_BASE_URL: s.url, CORPUS_TOKEN: 's3cret-corpus-token' });
    expect(r.code, r.stdout).toBe(0);
    const hint = r.stdout.split('\n').find((l) => l.startsWith('a run can start'));
    expect(hint).toMatch(new RegExp(`: VLLM_BASE_URL=${s.url.replace(/[.:/]/g, '\\$&')} (npx )?trajforge generate --config `));
    expect(r.stdout).not.toContain('s3cret-corpus-token');
  });

  it('passes against the sim: every line ok, in 3 requests (GET /models, 8 tokens, one turn)', async () => {
    const s = await sim();
    const dir = tempDir('tf-check-');
    const r = await check(writeConfig(dir, s.url));
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = linesOf(r.stdout);
    for (const name of ['key', 'questions', 'output', 'server corpus', 'tools', 'endpoint', 'model', 'max_tokens', 'stop', 'turn', 'stream']) {
      expect(lines.get(name)?.status, `${name}: ${r.stdout}`).toBe('ok');
    }
    expect(lines.get('server corpus')!.detail).toMatch(/2 tools: pubmed_search, read_document/);
    expect(lines.get('tools')!.detail).toContain('pubmed_search');
    expect(lines.get('max_tokens')!.detail).toMatch(/^honoured: asked for 8 tokens in max_tokens, got [1-8] \(finish: length\)/);
    expect(lines.get('stop')!.detail).toBe('honoured: the endpoint ended the turn at `</call_tool>`');
    expect(lines.get('turn')!.detail).toMatch(/calls pubmed_search in the tulu dialect/);
    expect(lines.get('stream')!.detail).toMatch(/^whole answers/);
    // The first questions as parsed, under the questions line.
    expect(r.stdout).toMatch(/questions +.*questions\.jsonl: 255 samples; the first as parsed:\n +bcd-q-0001 +"In which version/);
    expect(r.stdout).toContain('a run can start');
    const stats = s.stats();
    expect(stats.requests).toBe(3);
    expect(stats.chatRequests).toBe(2);
    // Nothing written: no run directory.
    expect(() => mkdirSync(join(dir, 'run'))).not.toThrow();
  });

  it('rehearses what vLLM refuses, against the strict sim: a misspelt model and a base URL without /v1 each FAIL with what to do', async () => {
    const s = await sim();
    const dir = tempDir('tf-check-');
    const config = writeConfig(dir, s.url);
    const typo = await check(config, ['--model', 'trajforge-simm']);
    expect(typo.code).toBe(1);
    expect(linesOf(typo.stdout).get('model')).toEqual({
      status: 'FAIL',
      detail: `trajforge-simm is not served at ${s.url} (404: ${s.url} answered 404: The model \`trajforge-simm\` does not exist.); it serves: trajforge-sim. Set endpoint.model (or --model)`,
    });
    const root = s.url.replace(/\/v1$/, '');
    const bare = await check(config, ['--base-url', root]);
    expect(bare.code).toBe(1);
    const lines = linesOf(bare.stdout);
    expect(lines.get('endpoint')).toEqual({
      status: 'FAIL',
      detail: `${root} answered GET /models with 404, ${s.url}/models answers: OpenAI-compatible servers (vLLM, SGLang, the sim) serve under /v1. Set endpoint.base_url (or --base-url) to ${s.url}`,
    });
    for (const name of ['model', 'max_tokens', 'stop', 'turn', 'stream']) expect(lines.get(name)?.status).toBe('skip');
    // Neither sent a completion the sim answered.
    expect(s.stats().completionsByFinishReason).toEqual({});
  });

  it('a closed port: FAIL endpoint, "connection refused", how to start a server; exit 1', async () => {
    const port = await closedPort();
    const r = await check(writeConfig(tempDir('tf-check-'), `http://127.0.0.1:${port}/v1`));
    expect(r.code).toBe(1);
    const lines = linesOf(r.stdout);
    expect(lines.get('endpoint')).toEqual({
      status: 'FAIL',
      detail: `connection refused at http://127.0.0.1:${port}/v1 — is the server running? for vLLM: \`vllm serve MODEL --port ${port}\`; for the offline sim: \`trajforge sim --port ${port}\``,
    });
    for (const name of ['model', 'max_tokens', 'stop', 'turn', 'stream']) expect(lines.get(name)?.status).toBe('skip');
    // What does not depend on the endpoint is still checked.
    for (const name of ['key', 'questions', 'output', 'server corpus', 'tools']) expect(lines.get(name)?.status).toBe('ok');
    expect(r.stdout).toContain('1 check failed');
  });

  it('a missing key: FAIL key naming the variable, and nothing is sent without it', async () => {
    const s = await sim();
    // 0.0.0.0 reaches this machine, but is not a loopback name: a key is required there.
    const config = writeConfig(tempDir('tf-check-'), `http://0.0.0.0:${s.port}/v1`, {
      endpoint: { base_url: `http://0.0.0.0:${s.port}/v1`, model: 'trajforge-sim', api_key_env: 'TF_CHECK_MISSING_KEY' },
    });
    const r = await check(config, [], { TF_CHECK_MISSING_KEY: undefined });
    expect(r.code).toBe(1);
    const key = linesOf(r.stdout).get('key')!;
    expect(key.status).toBe('FAIL');
    expect(key.detail).toContain('TF_CHECK_MISSING_KEY is not set');
    expect(key.detail).toContain('`export TF_CHECK_MISSING_KEY=…`');
    expect(linesOf(r.stdout).get('endpoint')?.status).toBe('skip');
    expect(s.stats().requests).toBe(0);
  });

  it('a key the endpoint refuses and echoes back: FAIL key, and the key is printed nowhere', async () => {
    const secret = 'sk-check-0123456789abcdef';
    const url = await endpoint((_m, _p, headers) => ({ status: 401, body: { error: { message: `Incorrect API key provided: ${String(headers.authorization).slice(7)}`, code: 'invalid_api_key' } } }));
    const config = writeConfig(tempDir('tf-check-'), url, { endpoint: { base_url: url, model: 'gpt-4.1-mini', api_key_env: 'TF_CHECK_KEY' } });
    const r = await check(config, [], { TF_CHECK_KEY: secret });
    expect(r.code).toBe(1);
    const lines = linesOf(r.stdout);
    expect(lines.get('key')).toEqual({ status: 'FAIL', detail: 'the endpoint refused the key (401: Incorrect API key provided: [redacted:TF_CHECK_KEY]): check TF_CHECK_KEY' });
    expect(r.stdout + r.stderr).not.toContain(secret);
    expect(r.stdout + r.stderr).not.toContain(secret.slice(0, 12));
  });

  it('a server that fails to start: FAIL on its line with its stderr and the command to try; the others ok', async () => {
    const s = await sim();
    const config = writeConfig(tempDir('tf-check-'), s.url, {
      mcpServers: {
        corpus: { command: process.execPath, args: [CORPUS_SERVER] },
        broken: { command: process.execPath, args: ['-e', "console.error('cannot open the index: ENOENT'); process.exit(3)"] },
      },
    });
    const r = await check(config);
    expect(r.code).toBe(1);
    const lines = linesOf(r.stdout);
    expect(lines.get('server corpus')?.status).toBe('ok');
    const broken = lines.get('server broken')!;
    expect(broken.status).toBe('FAIL');
    expect(broken.detail).toContain('mcpServers.broken: the server did not start');
    expect(broken.detail).toContain(`try it yourself: \`${process.execPath} -e 'console.error('\\''cannot open the index: ENOENT'\\''); process.exit(3)'\``);
    expect(r.stdout).toMatch(/server broken[^\n]*\n +--- stderr of broken ---\n +cannot open the index: ENOENT/);
    expect(lines.get('tools')?.status).toBe('skip');
    // The endpoint is still checked (without the tools).
    expect(lines.get('endpoint')?.status).toBe('ok');
    expect(lines.get('turn')?.detail).toContain('sent without tools');
  });

  it('a tool name two servers offer: FAIL tools naming both and the alias that settles it', async () => {
    const s = await sim();
    const corpus = { command: process.execPath, args: [CORPUS_SERVER] };
    const config = writeConfig(tempDir('tf-check-'), s.url, { mcpServers: { corpus, mirror: corpus }, tools: {} });
    const r = await check(config);
    expect(r.code).toBe(1);
    const lines = linesOf(r.stdout);
    expect(lines.get('server corpus')?.status).toBe('ok');
    expect(lines.get('server mirror')?.status).toBe('ok');
    expect(lines.get('tools')).toEqual({
      status: 'FAIL',
      detail: 'tools: servers corpus and mirror both offer a tool named pubmed_search; choose one with an alias (tools.aliases.pubmed_search: {server: corpus, tool: pubmed_search})',
    });
  });

  it('with agents: each agent\'s tools on a line of its own; a sub-agent named like one of its caller\'s tools is FAIL tools', async () => {
    const s = await sim();
    const dir = tempDir('tf-check-');
    const agents = { main: { servers: [] }, browsing: {} };
    const ok = await check(writeConfig(dir, s.url, { agents }));
    expect(ok.stdout).toMatch(/^ok +tools main +1 offered to agent main: search_and_browse$/m);
    expect(ok.stdout).toMatch(/^ok +tools browsing +1 offered to agent browsing: pubmed_search$/m);
    // The turn is the main agent's first request as a run sends it: its one tool is the sub-agent.
    expect(ok.stdout).toMatch(/^ok +turn +the model's first turn calls search_and_browse in the tulu dialect/m);
    expect(ok.stdout).toMatch(/^ok +tools +1 listed by the servers, no name offered twice: pubmed_search$/m);
    const clash = await check(writeConfig(dir, s.url, { agents: { browsing: { as_tool: { name: 'pubmed_search' } } } }));
    expect(clash.code).toBe(1);
    expect(linesOf(clash.stdout).get('tools')).toEqual({
      status: 'FAIL',
      detail: 'agents.browsing.as_tool.name: browsing is offered to main as pubmed_search, a name its server corpus also has; give the sub-agent another name (agents.main.sub_agents[0])',
    });
  });

  it('an endpoint that rejects stop and max_tokens: warn and ok lines saying what trajforge does instead, in 5 requests at most', async () => {
    const s = await sim({ rejectStop: true, rejectMaxTokens: true });
    const r = await check(writeConfig(tempDir('tf-check-'), s.url));
    expect(r.code).toBe(0);
    const lines = linesOf(r.stdout);
    expect(lines.get('max_tokens')?.detail).toMatch(/^honoured: asked for 8 tokens in max_completion_tokens \(the model refused max_tokens/);
    expect(lines.get('stop')).toEqual({ status: 'warn', detail: 'the endpoint rejects `stop` (400 unsupported_parameter): trajforge enforces `</call_tool>` itself, cutting each turn there as it streams' });
    expect(lines.get('stream')?.detail).toBe('turns will be streamed, since it rejects stop (endpoint.stream: auto)');
    expect(lines.get('turn')?.status).toBe('ok');
    expect(s.stats().requests).toBeLessThanOrEqual(5);
    expect(s.stats().responsesByStatus['400']).toBe(2);
  });

  it('an endpoint that answers past the stop string: warn stop "ignored", and turns will stream', async () => {
    const s = await sim({ burst: { ignore_stop: 10 } });
    const r = await check(writeConfig(tempDir('tf-check-'), s.url));
    expect(r.code).toBe(0);
    const lines = linesOf(r.stdout);
    expect(lines.get('stop')?.status).toBe('warn');
    expect(lines.get('stop')?.detail).toMatch(/^ignored: the endpoint answered past `<\/call_tool>`/);
    expect(lines.get('stream')?.detail).toBe('turns will be streamed, since it answered past a stop string (endpoint.stream: auto)');
  });

  it('a model the endpoint does not serve: FAIL model with the models it does serve', async () => {
    const url = await endpoint((method, path) =>
      method === 'GET' && path === '/v1/models'
        ? { status: 200, body: { object: 'list', data: [{ id: 'Qwen/Qwen3-8B' }, { id: 'rl-research/DR-Tulu-8B' }] } }
        : { status: 404, body: { error: { message: 'The model `dr-tulu` does not exist.', code: 'model_not_found' } } },
    );
    const config = writeConfig(tempDir('tf-check-'), url, { endpoint: { base_url: url, model: 'dr-tulu', api_key_env: 'none', max_tokens: 4096 } });
    const r = await check(config);
    expect(r.code).toBe(1);
    const model = linesOf(r.stdout).get('model')!;
    expect(model.status).toBe('FAIL');
    expect(model.detail).toContain(`dr-tulu is not served at ${url}`);
    expect(model.detail).toContain('it serves: Qwen/Qwen3-8B, rl-research/DR-Tulu-8B. Set endpoint.model (or --model)');
  });

  it('an output directory holding a run: ok when this config resumes it, FAIL when generate would refuse it', async () => {
    const s = await sim();
    const dir = tempDir('tf-check-');
    const config = writeConfig(dir, s.url);
    expect((await runCli(['generate', '--config', config, '--limit', '2'])).code).toBe(0);
    const same = await check(config);
    expect(linesOf(same.stdout).get('output')).toEqual({ status: 'ok', detail: `${join(dir, 'run')} holds a run this config resumes (2 accepted, 0 failed)` });

    const changed = writeConfig(dir, s.url, { endpoint: { base_url: s.url, model: 'trajforge-sim', api_key_env: 'none', max_tokens: 1024, temperature: 0.2 } });
    const r = await check(changed);
    expect(r.code).toBe(1);
    const out = linesOf(r.stdout).get('output')!;
    expect(out.status).toBe('FAIL');
    expect(out.detail).toContain('holds a run made with another config (endpoint.temperature differ)');
    expect(out.detail).toContain('--allow-config-change');

    // A manifest that is not one: refused as the run store refuses it, not a crash.
    writeFileSync(join(dir, 'run', 'manifest.json'), 'null');
    const broken = await check(config);
    expect(broken.stderr).toBe('');
    expect(linesOf(broken.stdout).get('output')?.detail).toMatch(/manifest\.json: not a trajforge run manifest/);
  });

  it('a questions file with a broken row: FAIL questions naming the file and line', async () => {
    const s = await sim();
    const dir = tempDir('tf-check-');
    const questions = join(dir, 'q.jsonl');
    writeFileSync(questions, '{"id": "a", "question": "What is HTTP/2?"}\n{"id": "b", "question": \n');
    const r = await check(writeConfig(dir, s.url), ['--questions', questions]);
    expect(r.code).toBe(1);
    const q = linesOf(r.stdout).get('questions')!;
    expect(q.status).toBe('FAIL');
    expect(q.detail).toContain(`${questions}:2`);
  });

  it('warns, without failing, of no tools offered and a small max_tokens for a thinking model; generate says the same', async () => {
    const s = await sim({ models: ['Qwen/Qwen3-8B'] });
    const dir = tempDir('tf-check-');
    const config = writeConfig(dir, s.url, {
      endpoint: { base_url: s.url, model: 'Qwen/Qwen3-8B', api_key_env: 'none', max_tokens: 1024 },
      mcpServers: {},
      tools: {},
    });
    const r = await check(config);
    expect(r.code).toBe(0);
    const lines = linesOf(r.stdout);
    expect(lines.get('no_tools')?.status).toBe('warn');
    expect(lines.get('no_tools')?.detail).toMatch(/^no tools offered: the config lists no mcpServers/);
    expect(lines.get('thinking_max_tokens')?.detail).toMatch(/^endpoint.max_tokens is 1024 and Qwen\/Qwen3-8B looks like a thinking model/);
    expect(r.stdout).toMatch(/a run can start \(\d warnings\)/);

    const g = await runCli(['generate', '--config', config, '--limit', '1']);
    expect(g.stderr).toMatch(/^warning: no tools offered: the config lists no mcpServers/m);
    expect(g.stderr).toMatch(/^warning: endpoint.max_tokens is 1024 and Qwen\/Qwen3-8B looks like a thinking model/m);
  });
});
