import type { DialectName } from '../../schemas/index.js';
import { mcpXml } from './mcp-xml.js';
import { native } from './native.js';
import { tulu } from './tulu.js';
import type { Dialect } from './types.js';

const DIALECTS: Record<DialectName, Dialect> = { tulu, 'mcp-xml': mcpXml, native };

/** Every dialect reads, validates and generates. */
export function getDialect(name: DialectName): Dialect {
  return DIALECTS[name];
}

export type { Dialect } from './types.js';
