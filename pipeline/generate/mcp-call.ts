/**
 * One tool call on an MCP server, with its timeout (`timeout` of the server, else
 * executor.call_timeout_ms), told apart by what its failure says about the server: a server that
 * died under the call is replaced (within its restart budget) and the call tried once more; a
 * timeout, an error the tool or the client reported, or an oversized result fails this call
 * alone. One of the two files that talk MCP (with mcp-server.ts).
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { ServerDown, type ServerConnection } from './mcp-server.js';
import { RESULT_TOO_LARGE_CODE } from './stdio-lines.js';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../json-depth.js';

/** What a call came to: the server's result, or why there is none. */
export type Outcome = { raw: unknown } | { failure: string };

/** Whether a call succeeded: the server answered, and not with `isError`. */
export function succeeded(outcome: Outcome): outcome is { raw: unknown } {
  return 'raw' in outcome && (outcome.raw as { isError?: unknown } | null)?.isError !== true;
}

/** How a failed call is handled: by what its error says about the server. */
type FailureKind = 'down' | 'timeout' | 'too_large' | 'tool' | 'dead';

function failureKind(err: unknown): FailureKind {
  if (err instanceof ServerDown) return 'down';
  if (err instanceof McpError) {
    if (err.code === ErrorCode.RequestTimeout) return 'timeout';
    if (err.code === RESULT_TOO_LARGE_CODE) return 'too_large';
    if (err.code === ErrorCode.ConnectionClosed) return 'dead';
    // An error response from the server, or one the client raised itself (a tool that requires
    // MCP tasks, a result that breaks the tool's output schema): the call failed, not the server.
    return 'tool';
  }
  // The transport failed: the process is gone, the HTTP session expired, the connection was refused.
  return 'dead';
}

/** The SDK prefixes `MCP error CODE: ` on each side of the wire; the model needs the message. */
function withoutCode(message: string): string {
  return message.replace(/^(MCP error -?\d+: )+/, '');
}

/**
 * Calls `tool` on `server`. Never throws: a failure comes back as the message the model will see.
 * `onTimeout` counts a call that timed out.
 */
export async function callTool(server: ServerConnection, tool: string, args: Record<string, unknown>, onTimeout: () => void): Promise<Outcome> {
  /** Why the server died under this call, when it did: a retry that finds it down says both. */
  let died: string | undefined;
  for (let attempt = 0; ; attempt++) {
    let client: Client | undefined;
    try {
      client = await server.client();
      const res = await client.callTool({ name: tool, arguments: args }, undefined, { timeout: server.callTimeoutMs });
      server.healthy();
      // Nested past what any walk of it (the scrubber, the cache, the record) could take: this call fails, not the run.
      if (nestsDeeperThan(res)) return { failure: `${server.name}/${tool}: the result nests objects and arrays more than ${MAX_JSON_DEPTH} levels deep; not read` };
      return { raw: res };
    } catch (err) {
      const message = (err as Error).message ?? String(err);
      switch (failureKind(err)) {
        case 'down':
          return { failure: died === undefined ? message : `tool server ${server.name} failed: ${died}; it is down now (${(err as ServerDown).why})` };
        case 'timeout':
          // A slow call is not a dead server: other calls may be in flight on it.
          onTimeout();
          return { failure: `tool call timed out after ${server.callTimeoutMs} ms` };
        case 'too_large':
          return { failure: withoutCode(message) };
        case 'tool':
          return { failure: `${server.name}/${tool}: ${withoutCode(message)}` };
        case 'dead':
          await server.discard(client);
          died = message;
          if (attempt >= 1) return { failure: `tool server ${server.name} failed: ${message}` };
      }
    }
  }
}
