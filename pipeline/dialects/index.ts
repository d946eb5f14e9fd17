import type { DialectName } from '../../schemas/index.js';
import { mcpXml } from './mcp-xml.js';
import { native } from './native.js';
import { tulu } from './tulu.js';
import type { Dialect } from './types.js';

const DIALECTS: Record<DialectName, Dialect> = { tulu, 'mcp-xml': mcpXml, native };

export function getDialect(name: DialectName): Dialect {
  return DIALECTS[name];
}

/** The dialect for a generation run (every dialect generates). */
export function generationDialect(name: DialectName): Dialect {
  return getDialect(name);
}

export type { Dialect } from './types.js';
