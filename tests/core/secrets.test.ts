/**
 * Which values a run keeps secret (runSecrets, from a real config file), how the Scrubber
 * takes them out, and the identities and resumes built on it. The end-to-end proof (planted
 * values, real servers, every file a run writes) is tests/faults/secrets.test.ts.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SCHEMA_VERSION, type RunManifest } from '../../schemas/index.js';
import { expansionsOf, loadConfig, redactConfig, scrubberFor } from '../../pipeline/core/config.js';
import { serverIdentity } from '../../pipeline/core/cache.js';
import { RunStore } from '../../pipeline/generate/store.js';
import { runSecrets, Scrubber } from '../../pipeline/core/secrets.js';
import { tempDir } from '../helpers.js';

const dir = tempDir('tf-secrets-unit-');

function configFile(lines: string[]): string {
  const file = join(dir, `c${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(file, lines.join('\n'));
  return file;
}

const ENV = {
  OPENAI_KEY_VAR: 'sk-endpoint-0123456789',
  SERPER_VAR: 'serper-value-0123456789',
  ROUTE: 'route-value-0123456789',
  TENANT: 'tenant-value-0123456789',
  DB_PASS: 'db-pass-value-0123456789',
  EMAIL: 'someone@example.org',
  MODEL_NAME: 'model-from-env',
};

const FULL = [
  'endpoint: {model: "${MODEL_NAME}", api_key_env: OPENAI_KEY_VAR}',
  'mcpServers:',
  '  web:',
  '    command: node',
  '    args: ["${TRAJFORGE_ROOT}/dist/tools/web/server.js", "--db", "postgres://u:${DB_PASS}@db/x"]',
  '    env: {SERPER_API_KEY: "${SERPER_VAR}", NCBI_EMAIL: "${EMAIL}", LITERAL_TOKEN: "literal-token-value", SHORT_KEY: "abc"}',
  '  remote:',
  '    url: "http://127.0.0.1:1/mcp/${ROUTE}"',
  '    headers: {Authorization: "Bearer header-token-value", X-Tenant: "${TENANT}"}',
];

describe('runSecrets: what a config gives a run to keep secret', () => {
  const cfg = loadConfig(configFile(FULL), {}, ENV);
  const secrets = runSecrets(cfg, ENV, expansionsOf(cfg));
  const byValue = new Map(secrets.map((s) => [s.value, s.name]));

  it('the endpoint key, secret-named env values (expanded or literal) and secret-named headers, with the token after a scheme', () => {
    expect(byValue.get(ENV.OPENAI_KEY_VAR)).toBe('OPENAI_KEY_VAR');
    expect(byValue.get(ENV.SERPER_VAR)).toBe('SERPER_API_KEY');
    expect(byValue.get('literal-token-value')).toBe('LITERAL_TOKEN');
    expect(byValue.get('Bearer header-token-value')).toBe('Authorization');
    expect(byValue.get('header-token-value')).toBe('Authorization');
  });

  it('every variable expanded into args, url or headers, whatever its name', () => {
    expect(byValue.get(ENV.DB_PASS)).toBe('DB_PASS');
    expect(byValue.get(ENV.ROUTE)).toBe('ROUTE');
    expect(byValue.get(ENV.TENANT)).toBe('TENANT');
  });

  it('not: trajforge’s own path variables, an env value under a plain name, a variable elsewhere in the config', () => {
    expect(expansionsOf(cfg).map((e) => e.name)).toEqual(expect.arrayContaining(['TRAJFORGE_ROOT', 'EMAIL', 'MODEL_NAME']));
    const values = secrets.map((s) => s.value);
    expect(values.some((v) => v.includes('/dist/tools/'))).toBe(false);
    expect(values).not.toContain(ENV.EMAIL);
    expect(values).not.toContain(ENV.MODEL_NAME);
  });

  it('no key from the environment when api_key_env is none', () => {
    const none = loadConfig(configFile(['endpoint: {model: m, api_key_env: none}']), {}, { none: 'would-be-a-key' });
    expect(runSecrets(none, { none: 'would-be-a-key' }, expansionsOf(none))).toEqual([]);
  });

  it('the expansions travel with the config through a spread, and never into its JSON', () => {
    expect(expansionsOf({ ...cfg, output: { ...cfg.output, dir: '/x' } })).toBe(expansionsOf(cfg));
    expect(JSON.stringify(cfg)).not.toContain('"path":"mcpServers');
    expect(expansionsOf(JSON.parse(JSON.stringify(cfg)))).toEqual([]);
  });

  it('the manifest’s config: whole values under secret names become [redacted], secrets inside others [redacted:NAME]', () => {
    const text = JSON.stringify(redactConfig(cfg, ENV));
    for (const v of [ENV.OPENAI_KEY_VAR, ENV.SERPER_VAR, ENV.ROUTE, ENV.TENANT, ENV.DB_PASS, 'literal-token-value', 'header-token-value']) expect(text).not.toContain(v);
    expect(text).toContain('postgres://u:[redacted:DB_PASS]@db/x');
    expect(text).toContain('http://127.0.0.1:1/mcp/[redacted:ROUTE]');
    expect(text).toContain('"X-Tenant":"[redacted:TENANT]"');
    expect(text).toContain('"SERPER_API_KEY":"[redacted]"');
    // Not secrets: kept, so the manifest still says what ran.
    expect(text).toContain(ENV.EMAIL);
    expect(text).toContain('"SHORT_KEY":"[redacted]"');
  });
});

describe('Scrubber', () => {
  const s = new Scrubber([
    { name: 'NCBI_API_KEY', value: 'ab+cd/ef=gh"ij' },
    { name: 'LONG', value: 'sk-outer-INNER-1234' },
    { name: 'INNER', value: 'INNER-1234' },
    { name: 'SHORT', value: 'abc12' },
  ]);

  it('takes a value out as it is, URL-encoded (path and form) and JSON-escaped', () => {
    expect(s.text('k=ab+cd/ef=gh"ij.')).toBe('k=[redacted:NCBI_API_KEY].');
    expect(s.text(`k=${encodeURIComponent('ab+cd/ef=gh"ij')}&x`)).toBe('k=[redacted:NCBI_API_KEY]&x');
    expect(s.text(`?${new URLSearchParams({ api_key: 'ab+cd/ef=gh"ij' })}`)).toBe('?api_key=[redacted:NCBI_API_KEY]');
    expect(s.text(JSON.stringify({ error: 'bad key ab+cd/ef=gh"ij' }))).toBe('{"error":"bad key [redacted:NCBI_API_KEY]"}');
  });

  it('the longer secret wins over one inside it; each occurrence goes', () => {
    expect(s.text('sk-outer-INNER-1234 and INNER-1234 and INNER-1234')).toBe('[redacted:LONG] and [redacted:INNER] and [redacted:INNER]');
  });

  it('leaves values shorter than 6 characters alone: they would match ordinary text', () => {
    expect(s.text('abc12 abc123')).toBe('abc12 abc123');
    expect(s.size).toBe(3);
  });

  it('scrubs a record deeply, keys included, without touching the original; a clean record comes back as the same object', () => {
    const rec = { a: ['x', { 'INNER-1234': 'v INNER-1234' }], n: 1, b: null, c: true };
    const frozen = JSON.stringify(rec);
    const out = s.value(rec);
    expect(out).toEqual({ a: ['x', { '[redacted:INNER]': 'v [redacted:INNER]' }], n: 1, b: null, c: true });
    expect(JSON.stringify(rec)).toBe(frozen);
    const clean = { a: ['x', { y: 'z' }] };
    expect(s.value(clean)).toBe(clean);
    expect(Scrubber.none.value(rec)).toBe(rec);
    expect(Scrubber.none.text('INNER-1234')).toBe('INNER-1234');
  });

  it('hashed: the same value gives the same stand-in, another value another; the value is not in it', () => {
    const a = new Scrubber([{ name: 'ROUTE', value: 'route-one-123' }]);
    const b = new Scrubber([{ name: 'OTHER_NAME', value: 'route-one-123' }]);
    const c = new Scrubber([{ name: 'ROUTE', value: 'route-two-456' }]);
    const h = a.hashed('http://h/mcp/route-one-123');
    expect(h).toMatch(/^http:\/\/h\/mcp\/\[secret:[0-9a-f]{16}\]$/);
    expect(b.hashed('http://h/mcp/route-one-123')).toBe(h);
    expect(c.hashed('http://h/mcp/route-two-456')).not.toBe(h);
  });
});

describe('cache identity of a server with secrets', () => {
  const identity = (route: string, pass: string): string => {
    const cfg = loadConfig(configFile(FULL), {}, { ...ENV, ROUTE: route, DB_PASS: pass });
    const env = { ...ENV, ROUTE: route, DB_PASS: pass };
    const scrubber = scrubberFor(cfg, env);
    return JSON.stringify([serverIdentity(cfg.mcpServers.web!, scrubber), serverIdentity(cfg.mcpServers.remote!, scrubber)]);
  };

  it('holds no secret value, changes when one in args or url changes, and stays when a credential in env or headers does', () => {
    const base = identity(ENV.ROUTE, ENV.DB_PASS);
    for (const v of Object.values(ENV).filter((v) => v !== ENV.EMAIL)) expect(base).not.toContain(v);
    expect(identity('route-rotated-987654', ENV.DB_PASS)).not.toBe(base);
    expect(identity(ENV.ROUTE, 'db-pass-rotated-987654')).not.toBe(base);
    const rotatedKey = loadConfig(configFile(FULL), {}, { ...ENV, SERPER_VAR: 'serper-rotated-987654' });
    expect(JSON.stringify(serverIdentity(rotatedKey.mcpServers.web!, scrubberFor(rotatedKey, ENV)))).toBe(JSON.stringify(JSON.parse(base)[0]));
  });
});

describe('the run store with secrets', () => {
  const scrubber = new Scrubber([{ name: 'DATA', value: '/secret-data-dir-123' }]);
  const fields = { 'questions.path': '/secret-data-dir-123/q.jsonl' };
  const manifest = (): RunManifest => ({
    schema_version: SCHEMA_VERSION,
    run_id: 'r',
    created_at: '2026-01-01T00:00:00.000Z',
    updated_at: '2026-01-01T00:00:00.000Z',
    status: 'running',
    trajforge_version: '0',
    node_version: process.version,
    model: 'm',
    dialect: 'tulu',
    config: { note: 'reads /secret-data-dir-123/q.jsonl' },
    config_fingerprint: 'f',
    fingerprint_fields: fields,
    questions: { path: '/secret-data-dir-123/q.jsonl', total: 1 },
    counts: { accepted: 0, failed: 0, by_reason: {} },
    sessions: [],
  });

  it('writes the manifest without them, and resumes a run whose fingerprint holds one', async () => {
    const run = join(tempDir('tf-secrets-store-'), 'run');
    const first = await RunStore.open({ dir: run, fresh: manifest, fingerprintFields: fields, scrubber });
    await first.close('completed', 'done');
    const written = readFileSync(join(run, 'manifest.json'), 'utf8');
    expect(written).not.toContain('/secret-data-dir-123');
    expect(written).toContain('[redacted:DATA]/q.jsonl');
    const again = await RunStore.open({ dir: run, fresh: manifest, fingerprintFields: fields, scrubber });
    expect(again.resumed).toBe(true);
    await again.close('completed', 'done');
  });
});

describe('Scrubber.json: one serialisation', () => {
  const s = new Scrubber([
    { name: 'QUOTED', value: 'pa"ss\\word\u0001-42' },
    { name: 'ACROSS', value: 'abc","def' },
    { name: 'PLAIN', value: 'plain-secret-77' },
  ]);
  const cases: [string, unknown][] = [
    ['clean', { a: ['x', { y: 'ünï 🚀' }], n: 1.5, b: null }],
    ['a secret with a quote, a backslash and a control character, in a value', { e: 'key pa"ss\\word\u0001-42 refused' }],
    ['a secret in a key', { 'plain-secret-77': 1 }],
    ['a secret as the only text of an array item', ['plain-secret-77']],
    ['text across a JSON boundary that looks like a secret', { x: 'abc', def: 'y', z: ['abc', 'def'] }],
    ['a secret made of JSON punctuation, inside a string', { x: 'abc","def' }],
  ];
  for (const [label, v] of cases) {
    it(`${label}: the text of the scrubbed copy`, () => {
      expect(s.json(v)).toBe(JSON.stringify(s.value(v)));
    });
  }

  it('no secret survives in the text', () => {
    const text = s.json({ a: 'pa"ss\\word\u0001-42', 'plain-secret-77': ['abc","def'] });
    for (const secret of ['pa"ss\\word\u0001-42', JSON.stringify('pa"ss\\word\u0001-42').slice(1, -1), 'plain-secret-77', 'abc","def', 'abc\\",\\"def']) expect(text).not.toContain(secret);
  });
});
