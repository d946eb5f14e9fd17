/**
 * `rerun` of a run whose endpoint is gone (a demo's sim above all): it must say so, and how to
 * point it elsewhere, before it spends an attempt; the run is left exactly as it was.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startSim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

describe('trajforge rerun, the endpoint gone', () => {
  it('stops before any attempt with the reason and --base-url; with --base-url it reruns', async () => {
    // A run with one failure: the sim refuses the first question's prompt (a content filter).
    const first = await startSim({ port: 0, seed: 1, contentFilter: '-webkit-column-break-before' });
    const dir = tempDir('tf-rerun-gone-');
    const out = join(dir, 'run');
    const g = await runCli(['generate', '--config', writeConfig(dir, first.url), '--limit', '3', '--out', out]);
    await first.close();
    expect(g.code).toBe(0);
    const failures = readJsonl(join(out, 'failures.jsonl'));
    expect(failures.map((f) => f.reason)).toEqual(['endpoint_rejected']);
    const before = { failures: readFileSync(join(out, 'failures.jsonl')), manifest: readFileSync(join(out, 'manifest.json')) };

    // The sim is gone: its port is closed. The config comes from the manifest, as after a demo.
    const r = await runCli(['rerun', out]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`error: the model endpoint does not answer: connection refused at ${first.url}`);
    expect(r.stderr).toContain('Nothing was run.');
    expect(r.stderr).toContain('This run was made against the sim');
    expect(r.stderr).toContain('pass --base-url http://127.0.0.1:8000/v1');
    expect(r.stderr).not.toMatch(/\n\s+at /);
    // Not an attempt spent, not a session recorded.
    expect(readFileSync(join(out, 'failures.jsonl'))).toEqual(before.failures);
    expect(readFileSync(join(out, 'manifest.json'))).toEqual(before.manifest);

    const second = await startSim({ port: 0, seed: 1 });
    try {
      const again = await runCli(['rerun', out, '--base-url', second.url]);
      expect(again.code).toBe(0);
      expect(readJsonl(join(out, 'trajectories.jsonl')).map((t) => t.id)).toContain('bcd-q-0001');
    } finally {
      await second.close();
    }
  });
});
