import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { compareFingerprints, expandVars, fingerprint, fingerprintFields, loadConfig, redactConfig, resolveConfig } from '../../pipeline/core/config.js';
import { TrajforgeError } from '../../pipeline/errors.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';

const dir = mkdtempSync(join(tmpdir(), 'tf-config-'));
function write(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}
function errorOf(fn: () => unknown): TrajforgeError {
  try {
    fn();
  } catch (err) {
    if (err instanceof TrajforgeError) return err;
    throw err;
  }
  throw new Error('expected a TrajforgeError');
}

describe('config', () => {
  it('fills defaults and keeps what the file says', () => {
    const cfg = resolveConfig({ endpoint: { model: 'm' } }, 'x.yaml');
    expect(cfg.endpoint.model).toBe('m');
    expect(cfg.concurrency).toBe(32);
    expect(cfg.dialect).toBe('tulu');
    expect(cfg.questions.fields.question).toContain('question');
    expect(cfg.budgets.max_turns).toBeGreaterThan(0);
  });

  it('names the path of a bad field', () => {
    const err = errorOf(() => resolveConfig({ endpoint: { model: 'm', temperature: 9 } }, 'run.yaml'));
    expect(err.code).toBe('BAD_CONFIG');
    expect(err.field).toBe('endpoint.temperature');
    expect(err.message).toContain('run.yaml: endpoint.temperature');
  });

  it('rejects an unknown dialect, naming the field', () => {
    const file = write('d.yaml', 'endpoint: {model: m}\ndialect: klingon\n');
    const err = errorOf(() => loadConfig(file));
    expect(err.field).toBe('dialect');
    // file:line:col, where the field is written.
    expect(err.message).toContain(`${file}:2:1: dialect`);
    expect(err.line).toBe(2);
  });

  it('suggests the key a typo meant, at the place it was written (did you mean …?)', () => {
    const file = write(
      'typos.yaml',
      ['endpoint:', '  model: m', '  max_token: 5', '  baseUrl: http://127.0.0.1:1/v1', 'mcp_servers: {}', 'budgets: {max_turn: 3, zzzzzzzz: 1}', 'questions:', '  pth: q.jsonl', ''].join('\n'),
    );
    const lines = errorOf(() => loadConfig(file)).message.split('\n');
    expect(lines).toContain(`${file}:3:3: endpoint.max_token: unknown key (did you mean max_tokens?)`);
    // Case, - and _ do not count as a slip: baseUrl is base_url, mcp_servers is mcpServers.
    expect(lines).toContain(`${file}:4:3: endpoint.baseUrl: unknown key (did you mean base_url?)`);
    expect(lines).toContain(`${file}:5:1: mcp_servers: unknown key (did you mean mcpServers?)`);
    expect(lines).toContain(`${file}:6:11: budgets.max_turn: unknown key (did you mean max_turns?)`);
    expect(lines).toContain(`${file}:8:3: questions.pth: unknown key (did you mean path?)`);
    // Nothing near: the keys that place takes, not a wild guess.
    expect(lines).toContain(`${file}:6:24: budgets.zzzzzzzz: unknown key (expected one of: max_turns, max_tool_calls, max_nudges, forced_answer_attempts, max_total_tokens, max_cost_usd)`);
  });

  it('explains an MCP server entry by the shape it came closest to, not "Invalid input"', () => {
    const file = write('servers.yaml', ['endpoint: {model: m}', 'mcpServers:', '  corpus:', '    comand: node', '  web:', '    url: not-a-url', ''].join('\n'));
    const message = errorOf(() => loadConfig(file)).message;
    expect(message).not.toContain('Invalid input\n');
    expect(message).toContain(`${file}:4:5: mcpServers.corpus.comand: unknown key (did you mean command?)`);
    // A missing field is placed at the entry that lacks it.
    expect(message).toContain(`${file}:3:3: mcpServers.corpus.command: missing (expected string)`);
    expect(message).toContain(`${file}:6:5: mcpServers.web.url: Invalid URL`);
  });

  it('places no line on a value a flag set: the file does not hold it', () => {
    const file = write('flag.yaml', 'endpoint: {model: m}\ndialect: tulu\n');
    const err = errorOf(() => loadConfig(file, { dialect: 'klingon' }));
    expect(err.message).toMatch(new RegExp(`^${file.replace(/[/.]/g, '\\$&')}: dialect: `));
    expect(err.line).toBeUndefined();
  });

  it('rejects unknown keys, so a typo does not pass silently', () => {
    const err = errorOf(() => resolveConfig({ endpoint: { model: 'm', temprature: 1 } }, 'x.yaml'));
    expect(err.message).toMatch(/temprature/);
  });

  it('takes an mcpServers object as other MCP clients write it (disabled, timeout, autoApprove, alwaysAllow, type: sse)', () => {
    // Keys Cline, Roo Code, Claude Desktop and Claude Code write beside command/url.
    const file = write(
      'clients.json',
      JSON.stringify({
        endpoint: { model: 'm' },
        mcpServers: {
          local: { command: 'node', args: ['server.js'], disabled: false, timeout: 90, autoApprove: ['search'], alwaysAllow: ['search'] },
          legacy: { type: 'sse', url: 'http://127.0.0.1:3001/sse', headers: { 'x-k': 'v' } },
          remote: { type: 'streamableHttp', url: 'http://127.0.0.1:3002/mcp', disabled: true },
        },
      }),
    );
    const cfg = loadConfig(file);
    expect(cfg.mcpServers.local).toMatchObject({ timeout: 90, disabled: false });
    expect(cfg.mcpServers.legacy).toMatchObject({ type: 'sse', url: 'http://127.0.0.1:3001/sse' });
    expect(cfg.mcpServers.remote).toMatchObject({ disabled: true });
    const err = errorOf(() => resolveConfig({ endpoint: { model: 'm' }, mcpServers: { s: { command: 'x', timeout: -1 } } }, 'run.yaml'));
    expect(err.message).toContain('run.yaml: mcpServers.s');
    // A stdio server with an SSE type is not one of the three shapes.
    expect(() => resolveConfig({ endpoint: { model: 'm' }, mcpServers: { s: { type: 'sse', command: 'x' } } }, 'run.yaml')).toThrow(/mcpServers\.s/);
  });

  it('reports a YAML syntax error with its line and column, said once', () => {
    const file = write('bad.yaml', 'endpoint:\n  model: m\n   x: [\n');
    const err = errorOf(() => loadConfig(file));
    expect(err.message).toBe(`${file}:2:10: not valid YAML: Nested mappings are not allowed in compact mappings`);
    expect(err.line).toBe(2);
  });

  it('expands ${VAR}, ${VAR:-default} and the built-in TRAJFORGE_ROOT', () => {
    const file = write('v.yaml', 'endpoint: {model: "${MODEL}", base_url: "${URL:-http://127.0.0.1:9/v1}"}\nquestions: {path: "${TRAJFORGE_ROOT}/q.jsonl"}\n');
    const cfg = loadConfig(file, {}, { MODEL: 'qwen' });
    expect(cfg.endpoint.model).toBe('qwen');
    expect(cfg.endpoint.base_url).toBe('http://127.0.0.1:9/v1');
    expect(cfg.questions.path).toBe(`${PACKAGE_ROOT}/q.jsonl`);
  });

  it('names a missing variable and where it is used', () => {
    const err = errorOf(() => expandVars({ mcpServers: { web: { env: { KEY: '${SERPER_KEY}' } } } }, {}, 'c.yaml'));
    expect(err.code).toBe('MISSING_ENV');
    expect(err.message).toContain('SERPER_KEY');
    expect(err.message).toContain('mcpServers.web.env.KEY');
  });

  it('lets flags override the file', () => {
    const cfg = resolveConfig({ endpoint: { model: 'm' }, concurrency: 4 }, 'x.yaml', { concurrency: 9, model: 'n', limit: 3, shard: '1/4', baseUrl: 'http://127.0.0.1:1/v1' });
    expect(cfg.concurrency).toBe(9);
    expect(cfg.endpoint.model).toBe('n');
    expect(cfg.questions.limit).toBe(3);
    expect(cfg.questions.shard).toBe('1/4');
    expect(cfg.endpoint.base_url).toBe('http://127.0.0.1:1/v1');
  });

  it('redacts secrets wherever expansion put them', () => {
    const secret = 'sk-test-1234567890abcdef';
    const env = { MY_API_KEY: secret, SERPER_API_KEY: 'serper-secret-value' };
    const file = write(
      's.yaml',
      [
        'endpoint: {model: m, api_key_env: MY_API_KEY}',
        'mcpServers:',
        '  web: {command: node, args: ["--key=${SERPER_API_KEY}"], env: {SERPER_API_KEY: "${SERPER_API_KEY}"}}',
        '  remote: {url: "http://127.0.0.1:1/mcp", headers: {Authorization: "Bearer ${MY_API_KEY}"}}',
      ].join('\n'),
    );
    const text = JSON.stringify(redactConfig(loadConfig(file, {}, env), env));
    expect(text).not.toContain(secret);
    expect(text).not.toContain('serper-secret-value');
    expect(text).toContain('MY_API_KEY');
  });

  it('fingerprints what changes a trajectory, not where it runs', () => {
    const a = resolveConfig({ endpoint: { model: 'm' } }, 'x');
    const b = resolveConfig({ endpoint: { model: 'm', base_url: 'http://127.0.0.1:2/v1' }, concurrency: 3, questions: { limit: 5 } }, 'x');
    const c = resolveConfig({ endpoint: { model: 'm', temperature: 0.1 } }, 'x');
    expect(fingerprint(fingerprintFields(a))).toBe(fingerprint(fingerprintFields(b)));
    expect(compareFingerprints(fingerprintFields(a), fingerprintFields(c))).toEqual({ changed: ['endpoint.temperature'], unknown: [] });
  });

  it('fingerprints how the servers start (env and header names, not values; secrets as [redacted:VAR]), the executor\'s cuts and the prompt templates, not timeouts', () => {
    const env = { CORPUS_API_KEY: 'sk-corpus-0123456789', DATA: '/data/v1' };
    const server = (patch: Record<string, unknown> = {}) => ({
      command: 'node',
      args: ['server.js', '--key', env.CORPUS_API_KEY, '--data', env.DATA],
      env: { CORPUS_API_KEY: env.CORPUS_API_KEY, LOG: 'debug' },
      ...patch,
    });
    const cfg = (servers: Record<string, unknown>, executor: Record<string, unknown> = {}) =>
      resolveConfig({ endpoint: { model: 'm' }, mcpServers: servers, executor }, 'x');
    const base = fingerprintFields(cfg({ corpus: server(), web: { url: 'https://mcp.example/x', headers: { Authorization: 'Bearer sk-web-0123456789' } } }), env);
    expect(base['mcpServers.launch']).toEqual({
      corpus: { command: 'node', args: ['server.js', '--key', '[redacted:CORPUS_API_KEY]', '--data', '/data/v1'], cwd: null, env: ['CORPUS_API_KEY', 'LOG'] },
      web: { type: null, headers: ['Authorization'] },
    });
    const text = JSON.stringify(base);
    expect(text).not.toContain('sk-corpus');
    expect(text).not.toContain('sk-web');
    expect(text).not.toContain('debug');
    const diff = (servers: Record<string, unknown>, executor: Record<string, unknown> = {}) =>
      compareFingerprints(fingerprintFields(cfg({ corpus: server() }), env), fingerprintFields(cfg(servers, executor), env)).changed;
    expect(diff({ corpus: server({ args: ['server.js', '--data', '/data/v2'] }) })).toEqual(['mcpServers.launch']);
    expect(diff({ corpus: server({ env: { CORPUS_API_KEY: 'another-key-value', LOG: 'info' } }) })).toEqual([]);
    expect(diff({ corpus: server({ env: { CORPUS_API_KEY: 'x', LOG: 'debug', EXTRA: '1' } }) })).toEqual(['mcpServers.launch']);
    expect(diff({ corpus: server() }, { max_snippet_chars: 500 })).toEqual(['executor']);
    expect(diff({ corpus: server() }, { call_timeout_ms: 5, max_restarts: 0, cache: false })).toEqual([]);
    // Each dialect's prompts and the shared ones, by the hash of their text; not the other dialects'.
    const prompts = base.prompts as Record<string, string>;
    expect(Object.keys(prompts)).toContain('tulu-system.txt');
    expect(Object.keys(prompts)).toContain('force-answer.txt');
    expect(Object.keys(prompts).filter((f) => f.startsWith('mcp-xml-') || f.startsWith('native-'))).toEqual([]);
    expect(prompts['tulu-system.txt']).toBe(createHash('sha256').update(readFileSync(join(PACKAGE_ROOT, 'prompts', 'tulu-system.txt'))).digest('hex').slice(0, 16));
  });
});
