/**
 * An MCP server for tests/generate/shared-limits.test.ts whose one tool, `env`, answers the environment
 * its process was started with: what a tool server sees of the worker's shared limits.
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';

const server = new McpServer({ name: 'env', version: '1.0.0' });
server.registerTool('env', { description: 'the environment this process sees' }, async () => ({ content: [{ type: 'text', text: JSON.stringify(process.env) }] }));
await server.connect(new StdioServerTransport());
