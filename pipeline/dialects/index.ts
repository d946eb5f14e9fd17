import type { DialectName, DialectOptions } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import { mcpXml, mcpXmlDialect } from './mcp-xml.js';
import { native } from './native.js';
import { tulu } from './tulu.js';
import type { Dialect } from './types.js';

const DIALECTS: Record<DialectName, Dialect> = { tulu, 'mcp-xml': mcpXml, native };

/** Every dialect reads, validates and generates. */
export function getDialect(name: DialectName): Dialect {
  return DIALECTS[name];
}

/**
 * The dialect a run generates with: `getDialect(name)` itself when there are no options, else
 * mcp-xml in MiroThinker's form. `runCreatedAt` is the run's `manifest.created_at`: `today: run`
 * takes its UTC date, so every session of the run (a resume, a rerun) renders the same prompt.
 */
export function dialectFor(name: DialectName, options: DialectOptions | undefined, runCreatedAt: string): Dialect {
  if (options === undefined) return getDialect(name);
  if (name !== 'mcp-xml') {
    throw new TrajforgeError('BAD_CONFIG', `dialect_options: only the mcp-xml dialect takes options (today, tool_results); the dialect is ${name}`, {
      field: 'dialect_options',
    });
  }
  return mcpXmlDialect({ today: options.today === 'run' ? runDate(runCreatedAt) : options.today, toolResults: options.tool_results, layout: options.layout });
}

/** `YYYY-MM-DD` (UTC) of an ISO timestamp. */
export function runDate(createdAt: string): string {
  const t = Date.parse(createdAt);
  if (Number.isNaN(t)) throw new TrajforgeError('BAD_INPUT', `the run's created_at is not a timestamp: ${JSON.stringify(createdAt)}`);
  return new Date(t).toISOString().slice(0, 10);
}

export type { Dialect } from './types.js';
