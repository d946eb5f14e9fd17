/** The bundled servers' flags: a bad or unknown flag stops the server at once, saying which. */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';

const server = (name: string) => join(PACKAGE_ROOT, `dist/tools/${name}/server.js`);
const start = (name: string, args: string[]) => spawnSync(process.execPath, [server(name), ...args], { encoding: 'utf8', timeout: 20_000, input: '' });

describe('bundled MCP servers: flags', () => {
  it.each([
    ['corpus', ['--crash-evry', '2'], /^corpus server: .*--crash-evry/],
    ['corpus', ['--crash-every', '0'], /^corpus server: --crash-every needs an integer >= 1, got "0"/],
    ['corpus', ['--delay-ms=fast'], /^corpus server: --delay-ms needs an integer >= 0, got "fast"/],
    ['pubmed', ['--max-retries=-1'], /^pubmed server: --max-retries needs an integer >= 0/],
    ['pubmed', ['--tool='], /^pubmed server: --tool needs a value/],
    ['web', ['--timeout-ms', '1.5'], /^web server: --timeout-ms needs an integer >= 1, got "1.5"/],
    ['web', ['stray'], /^web server: .*stray/],
  ])('%s %j exits 1 with a message naming the flag', (name, args, message) => {
    const r = start(name, args);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe('');
  });

  it('a good flag in either form is taken: --fail-start (a flag) stops the corpus server as asked, after the others parsed', () => {
    const r = start('corpus', ['--delay-ms=5', '--hang-every', '3', '--fail-start']);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('corpus server: failing at start as asked (--fail-start)');
  });
});
