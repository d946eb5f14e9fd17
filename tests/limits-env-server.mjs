/**
 * An MCP server whose one tool, `env` (or the name given as its first argument), answers the
 * environment its process was started with: what a tool server sees of the worker's shared
 * limits (tests/generate/shared-limits.test.ts), and a tool that prints its environment into
 * the run (tests/faults/queue-secrets.test.ts). It takes an optional `query`, so a dialect's
 * search call can be aliased to it.
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

const server = new McpServer({ name: 'env', version: '1.0.0' });
server.registerTool(
  process.argv[2] ?? 'env',
  { description: 'the environment this process sees', inputSchema: { query: z.string().optional().describe('ignored') } },
  async () => ({ content: [{ type: 'text', text: JSON.stringify(process.env) }] }),
);
await server.connect(new StdioServerTransport());
