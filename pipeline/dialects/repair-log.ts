/**
 * What the per-turn repairers of the XML dialects (tulu, mcp-xml) share: the log of what a
 * turn's repair fixed, one entry per kind, and how a piece of model text is quoted in a detail.
 */
import type { RepairKind } from '../../schemas/index.js';
import { clip } from '../text.js';
import type { TurnAction, TurnRepair } from './types.js';

/** One entry per kind and turn, details joined: counts per kind stay meaningful. */
export class RepairLog {
  private readonly byKind = new Map<RepairKind, string[]>();
  add(kind: RepairKind, detail: string): void {
    const list = this.byKind.get(kind);
    if (list) list.push(detail);
    else this.byKind.set(kind, [detail]);
  }
  list(): TurnRepair[] {
    return [...this.byKind].map(([kind, details]) => ({ kind, detail: details.join('; ') }));
  }
}

/** A turn with neither call nor answer. */
export const NONE: TurnAction = { kind: 'none' };

/** Model text in a detail (tags, mostly): its first 120 characters, on one line, no JSON escaping of their quotes. */
export function excerpt(s: string, max = 120): string {
  return clip(s, max).replace(/\s+/g, ' ');
}

/** Model text in a detail as a JSON string: `excerpt`, quoted. */
export function quote(s: string, max = 120): string {
  return JSON.stringify(excerpt(s, max));
}

/** `1 call`, `2 calls`. */
export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}
