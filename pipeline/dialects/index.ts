import type { DialectName } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import { mcpXml } from './mcp-xml.js';
import { tulu } from './tulu.js';
import type { Dialect } from './types.js';

const DIALECTS: Partial<Record<DialectName, Dialect>> = { tulu, 'mcp-xml': mcpXml };
/** Dialects a run can generate in; the others can be read, validated and exported. */
const GENERATES: readonly DialectName[] = ['tulu'];

export function getDialect(name: DialectName): Dialect {
  const d = DIALECTS[name];
  if (!d) {
    throw new TrajforgeError('BAD_CONFIG', `dialect: ${name} is not available yet (available: ${Object.keys(DIALECTS).join(', ')})`, { field: 'dialect' });
  }
  return d;
}

/** The dialect for a generation run: refused, naming the field, when it can only be read. */
export function generationDialect(name: DialectName): Dialect {
  if (!GENERATES.includes(name)) {
    throw new TrajforgeError('BAD_CONFIG', `dialect: ${name} can be read and validated, not generated yet (generation: ${GENERATES.join(', ')})`, { field: 'dialect' });
  }
  return getDialect(name);
}

export type { Dialect } from './types.js';
