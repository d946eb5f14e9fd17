import type { DialectName } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import { tulu } from './tulu.js';
import type { Dialect } from './types.js';

const DIALECTS: Partial<Record<DialectName, Dialect>> = { tulu };

export function getDialect(name: DialectName): Dialect {
  const d = DIALECTS[name];
  if (!d) {
    throw new TrajforgeError('BAD_CONFIG', `dialect: ${name} is not available yet (available: ${Object.keys(DIALECTS).join(', ')})`, { field: 'dialect' });
  }
  return d;
}

export type { Dialect } from './types.js';
