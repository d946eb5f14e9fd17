/**
 * An MCP server over stdio, written by hand (no SDK: its own JSON.stringify would overflow on
 * what this sends), for tests/generate/deep-nesting.test.ts. Its one tool, `pubmed_search`,
 * answers every odd call with a result whose `structuredContent` nests DEPTH objects (the first
 * argument; default 6000) and every even call with one ordinary document.
 *
 *   node tests/deep-result-server.mjs [DEPTH]
 */
import { createInterface } from 'node:readline';

const depth = Number(process.argv[2] ?? 6000);
let calls = 0;
const send = (text) => process.stdout.write(`${text}\n`);
const reply = (id, result) => send(JSON.stringify({ jsonrpc: '2.0', id, result }));

function deepResult(id) {
  const nested = `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
  return `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[{"type":"text","text":"deep"}],"structuredContent":${nested}}}`;
}

const doc = { data: [{ paperId: 'plain-1', title: 'Aspirin and its uses', abstract: 'Aspirin was first supported in version 52.', year: 2020, venue: 'J' }] };

createInterface({ input: process.stdin }).on('line', (line) => {
  const msg = JSON.parse(line);
  if (msg.id === undefined) return;
  if (msg.method === 'initialize') {
    reply(msg.id, { protocolVersion: msg.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'deep', version: '1.0.0' } });
  } else if (msg.method === 'tools/list') {
    reply(msg.id, { tools: [{ name: 'pubmed_search', description: 'search', inputSchema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } }] });
  } else if (msg.method === 'tools/call') {
    calls++;
    if (calls % 2 === 1) send(deepResult(msg.id));
    else reply(msg.id, { content: [{ type: 'text', text: JSON.stringify(doc) }] });
  } else {
    send(JSON.stringify({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'no such method' } }));
  }
});
