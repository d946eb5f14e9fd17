/**
 * pipeline/dataset/report/run-header.ts: the report's run header from a manifest anyone may have
 * edited. The endpoint never shows what could be a secret; a missing cost is "—"; a manifest
 * with wrong types or none at all gives what can be read, never a crash.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildReport } from '../../../pipeline/dataset/report/build.js';
import { duration, readRunHeader, runHeaderHtml } from '../../../pipeline/dataset/report/run-header.js';
import { publicEndpoint } from '../../../pipeline/core/secrets.js';
import { tempDir } from '../../helpers.js';
import { EVIL, writeGlanceRun } from '../../browser/glance-run.js';

function manifestDir(manifest: unknown): string {
  const dir = tempDir('tf-header-');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'manifest.json'), typeof manifest === 'string' ? manifest : JSON.stringify(manifest));
  return dir;
}

describe('the run header', () => {
  it('shows an endpoint without user, password, query or fragment, and nothing of a value that is not a URL', () => {
    expect(publicEndpoint('https://me:hunter22@api.example.com:8443/v1?api_key=hunter22#x')).toBe('https://api.example.com:8443/v1');
    expect(publicEndpoint('http://127.0.0.1:8000/v1')).toBe('http://127.0.0.1:8000/v1');
    expect(publicEndpoint('sk-live-not-a-url')).toBe('');
    expect(publicEndpoint('')).toBe('');
  });

  it('says — for a run whose manifest records no cost, and names an unpriced model', () => {
    const none = readRunHeader(manifestDir({ model: 'm', dialect: 'tulu', sessions: [] }))!;
    expect(none.usd).toBeUndefined();
    expect(runHeaderHtml(none)).toContain('<i>cost</i> <b>—</b>');
    const unpriced = readRunHeader(manifestDir({ model: 'm', cost: { usd: null, estimated: false } }))!;
    expect(runHeaderHtml(unpriced)).toContain('— (a model has no price)');
    const priced = readRunHeader(manifestDir({ model: 'm', cost: { usd: 0.004, estimated: true } }))!;
    expect(runHeaderHtml(priced)).toContain('$0.0040 (est.)');
  });

  it('adds up the sessions for the wall time; a session still running ends at the last update', () => {
    const h = readRunHeader(
      manifestDir({ updated_at: '2026-01-01T12:00:30Z', sessions: [{ started_at: '2026-01-01T10:00:00Z', finished_at: '2026-01-01T11:00:00Z' }, { started_at: '2026-01-01T12:00:00Z' }] }),
    )!;
    expect(h.wallMs).toBe(3_630_000);
    expect(duration(h.wallMs!)).toBe('1 h 0 min 30 s');
    expect(h.sessions).toBe(2);
  });

  it('reads a manifest of the wrong shapes without a crash, and none from one that is not JSON or absent', () => {
    const h = readRunHeader(manifestDir({ model: 7, dialect: ['x'], sessions: 'no', config: { endpoint: 'x' }, cost: 'free' }))!;
    expect(h).toMatchObject({ model: '', dialect: '', endpoint: '', wallMs: null, sessions: 0, usd: null });
    expect(readRunHeader(manifestDir('{not json'))).toBeUndefined();
    expect(readRunHeader(tempDir('tf-header-none-'))).toBeUndefined();
    expect(readRunHeader(manifestDir(null))).toMatchObject({ model: '' });
  });

  it("says what the endpoint answered over the run, as generate's summary says it, and nothing of counts that are not counts", () => {
    const agents = {
      requests: 40,
      responses: { ok: 33, rate_limited: 5, server_error: 2, client_error: 0, connection_error: 0, timeout: 0, malformed: 0, aborted: 0 },
      retries: 7,
      retry_after: { waits: 5, seconds: 2.5 },
      length_retries: 0,
      repetition_resamples: 0,
    };
    const html = runHeaderHtml(readRunHeader(manifestDir({ model: 'm', endpoint: { agents } }))!);
    expect(html).toContain('<span data-fact="calls"><i>calls</i> <b>40 requests, 7 retries, 5 rate-limited (429), 2 server errors (5xx), Retry-After 5 waits 2.5 s</b></span>');
    const bad = runHeaderHtml(readRunHeader(manifestDir({ model: 'm', endpoint: { agents: { ...agents, retries: 'many' } } }))!);
    expect(bad).not.toContain('data-fact="calls"');
    expect(runHeaderHtml(readRunHeader(manifestDir({ model: 'm' }))!)).not.toContain('data-fact="calls"');
  });

  it('escapes every manifest field it shows', () => {
    const html = runHeaderHtml(readRunHeader(manifestDir({ model: EVIL, run_id: EVIL, status: EVIL, dialect: EVIL }))!);
    expect(html).not.toContain('<script');
    expect(html).not.toContain('<img');
    expect(html).toContain('&lt;/script&gt;');
  });

  it('is on the page of a run directory, and not on the page of a file', async () => {
    const dir = tempDir('tf-header-page-');
    writeGlanceRun(join(dir, 'run'));
    await buildReport(join(dir, 'run'), join(dir, 'run.html'));
    const page = readFileSync(join(dir, 'run.html'), 'utf8');
    expect(page).toContain('<div id="run-header"');
    expect(page).toContain('<span data-fact="cost"><i>cost</i> <b>—</b></span>');
    await buildReport(join(dir, 'run', 'trajectories.jsonl'), join(dir, 'file.html'));
    expect(readFileSync(join(dir, 'file.html'), 'utf8')).not.toContain('id="run-header"');
  });
});
