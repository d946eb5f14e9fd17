/**
 * The report's run header: what a reader asks of a run before any figure — the model, the
 * endpoint, the dialect, how long it ran, what it cost, and what the endpoint answered
 * (requests, 429s, retries, Retry-After waits: the same phrase as generate's summary) — read from the run directory's
 * manifest. The manifest is a file anyone may have edited: every field is checked, and the
 * endpoint is shown without what could be a secret (a user and password in the URL, its query).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { dollars } from '../../core/cost.js';
import { MANIFEST } from '../../core/run-dir/names.js';
import { esc } from './svg.js';
import { publicEndpoint } from '../../core/secrets.js';
import { countsLine } from '../../core/llm/counts.js';
import type { RunEndpointCounts } from '../../../schemas/index.js';
import { endpointOf } from './live-endpoint.js';

export interface RunHeader {
  readonly runId: string;
  readonly status: string;
  readonly model: string;
  /** The endpoint's base URL, scheme, host and path only; '' when the manifest has none. */
  readonly endpoint: string;
  readonly dialect: string;
  /** The sessions' time added up (a stopped-and-resumed run does not count the pause). */
  readonly wallMs: number | null;
  readonly sessions: number;
  /** Dollars spent; null: some model of the run has no price; undefined: the manifest records no cost. */
  readonly usd: number | null | undefined;
  readonly costEstimated: boolean;
  /** Requests, 429s, retries and Retry-After waits over the run's invocations; undefined when the manifest records none. */
  readonly calls: RunEndpointCounts | undefined;
}

type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : {});
const str = (v: unknown): string => (typeof v === 'string' ? v : '');

/** The sessions' wall time: each from its start to its end (the manifest's last update for one still running). */
function wallOf(sessions: unknown[], updatedAt: string): number | null {
  let ms = 0;
  let any = false;
  for (const s of sessions) {
    const from = Date.parse(str(obj(s).started_at));
    const to = Date.parse(str(obj(s).finished_at) || updatedAt);
    if (Number.isFinite(from) && Number.isFinite(to) && to >= from) {
      ms += to - from;
      any = true;
    }
  }
  return any ? ms : null;
}

/** The header of a run directory; undefined for anything else, or a manifest that cannot be read. */
export function readRunHeader(dir: string): RunHeader | undefined {
  let m: Obj;
  try {
    m = obj(JSON.parse(readFileSync(join(dir, MANIFEST), 'utf8')));
  } catch {
    return undefined;
  }
  const config = obj(m.config);
  const sessions = Array.isArray(m.sessions) ? m.sessions : [];
  const cost = m.cost === undefined ? undefined : obj(m.cost);
  const usd = cost === undefined ? undefined : typeof cost.usd === 'number' && Number.isFinite(cost.usd) ? cost.usd : null;
  return {
    runId: str(m.run_id),
    status: str(m.status),
    model: str(m.model) || str(obj(config.endpoint).model),
    endpoint: publicEndpoint(str(obj(config.endpoint).base_url)),
    dialect: str(m.dialect),
    wallMs: wallOf(sessions, str(m.updated_at)),
    sessions: sessions.length,
    usd,
    costEstimated: cost?.estimated === true,
    calls: endpointOf(m),
  };
}

/** 3725000 → "1 h 2 min 5 s". */
export function duration(ms: number): string {
  const s = Math.round(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h ? `${h} h ${m} min ${s % 60} s` : m ? `${m} min ${s % 60} s` : `${s} s`;
}

/** The header's markup: one line of facts under the page's title. */
export function runHeaderHtml(h: RunHeader): string {
  const cost = h.usd === undefined ? '—' : h.usd === null ? '— (a model has no price)' : `${dollars(h.usd)}${h.costEstimated ? ' (est.)' : ''}`;
  const facts: [string, string, string][] = [
    ['model', 'model', h.model || '-'],
    ['endpoint', 'endpoint', h.endpoint || '-'],
    ['dialect', 'dialect', h.dialect || '-'],
    ['wall', 'wall time', h.wallMs === null ? '-' : `${duration(h.wallMs)}${h.sessions > 1 ? ` (${h.sessions} sessions)` : ''}`],
    ['cost', 'cost', cost],
    ...(h.calls ? [['calls', 'calls', `${countsLine(h.calls.agents)}${h.calls.judge ? `; judge ${countsLine(h.calls.judge)}` : ''}`] as [string, string, string]] : []),
    ['status', 'run', `${h.status || '-'}${h.runId ? ` · ${h.runId}` : ''}`],
  ];
  return `<div id="run-header" class="runhead">${facts.map(([k, label, v]) => `<span data-fact="${k}"><i>${esc(label)}</i> <b>${esc(v)}</b></span>`).join('')}</div>`;
}
