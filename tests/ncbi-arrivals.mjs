/**
 * A stand-in for NCBI E-utilities in a process of its own, for tests/generate/shared-limits.test.ts:
 * answers esearch and efetch from tests/fixtures/replay and prints one line per request, the
 * moment it arrived on this process's monotonic clock. Doing nothing else, its stamps are not
 * held up by the test process's own work (a dozen MCP clients), as NCBI's are not by ours.
 *
 *   node tests/ncbi-arrivals.mjs      prints `port N`, then `arrived MS PATH` per request
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

const dir = new URL('./fixtures/replay/', import.meta.url);
const replies = {
  '/eutils/esearch.fcgi': { type: 'application/json; charset=UTF-8', body: readFileSync(new URL('esearch.json', dir)) },
  '/eutils/efetch.fcgi': { type: 'text/xml; charset=UTF-8', body: readFileSync(new URL('efetch.xml', dir)) },
};
const server = createServer((req, res) => {
  const at = performance.now();
  const path = new URL(req.url ?? '/', 'http://ncbi').pathname;
  process.stdout.write(`arrived ${at} ${path}\n`);
  const reply = replies[path];
  req.resume();
  req.on('end', () => {
    if (reply === undefined) return void res.writeHead(404).end();
    res.writeHead(200, { 'Content-Type': reply.type }).end(reply.body);
  });
});
server.listen(0, '127.0.0.1', () => process.stdout.write(`port ${server.address().port}\n`));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
