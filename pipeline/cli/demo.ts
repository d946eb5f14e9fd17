/**
 * `npm run demo`: the whole pipeline offline. Starts sim on a free loopback port, generates
 * trajectories for 50 bundled questions with the corpus server, prints where they are and a
 * summary. `npm run demo -- --misbehave all=0.2` makes the sim misbehave more;
 * `npm run demo -- --dialect mcp-xml` (or `native`) runs the same questions in another format.
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startSim } from '../../sim/server.js';
import { parseMisbehave } from '../../sim/cli.js';
import { main } from './main.js';
import { PACKAGE_ROOT } from '../paths.js';

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    misbehave: { type: 'string', multiple: true, default: ['all=0.05'] },
    seed: { type: 'string', default: '1' },
    limit: { type: 'string', default: '50' },
    out: { type: 'string' },
    dialect: { type: 'string', default: 'tulu' },
  },
});

const sim = await startSim({ port: 0, seed: Number(values.seed), misbehave: parseMisbehave(values.misbehave ?? []) });
process.stderr.write(`sim listening on ${sim.url} (misbehave ${(values.misbehave ?? []).join(' ')})\n`);
const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');
const out = values.out ?? join('runs', `demo-${stamp}`);
let code: number;
try {
  code = await main([
    'generate',
    '--config', join(PACKAGE_ROOT, 'data/configs/demo.yaml'),
    '--base-url', sim.url,
    '--out', out,
    '--limit', values.limit ?? '50',
    '--dialect', values.dialect ?? 'tulu',
  ]);
} finally {
  await sim.close();
}
process.exit(code);
