/**
 * The live page's endpoint figures: requests, 429s, retries and Retry-After waits, as the run's
 * manifest records them at each checkpoint (`endpoint`, the run's total over its invocations).
 * A queue run's directory (`generate --queue … --out OUT`) holds no run of its own but one per
 * worker, `OUT/worker-NAME`: their counts are added up. Each manifest is a file anyone may have
 * edited: counts that are not the schema's are left out, never guessed.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { RunEndpointCounts, type EndpointCounts } from '../../../schemas/index.js';
import { addCounts } from '../../core/llm/counts.js';
import { MANIFEST } from '../../core/run-dir/names.js';

/** The endpoint figures of the live page: the agents' client and the judge's, over the manifests that record them. */
export interface LiveEndpoint {
  readonly agents: EndpointCounts;
  readonly judge: EndpointCounts | null;
  /** Manifests added up: 1 for a run, the workers' for a queue run's directory. */
  readonly manifests: number;
}

/** A manifest's (parsed JSON) run total, when it records one the schema takes. */
export function endpointOf(manifest: unknown): RunEndpointCounts | undefined {
  const m = manifest !== null && typeof manifest === 'object' ? (manifest as { endpoint?: unknown }) : {};
  const parsed = RunEndpointCounts.safeParse(m.endpoint);
  return parsed.success ? parsed.data : undefined;
}

/** The counts added up; null when none. */
export function sumEndpoints(list: readonly RunEndpointCounts[]): LiveEndpoint | null {
  if (list.length === 0) return null;
  let agents = list[0]!.agents;
  let judge = list[0]!.judge ?? null;
  for (const e of list.slice(1)) {
    agents = addCounts(agents, e.agents);
    if (e.judge) judge = judge ? addCounts(judge, e.judge) : e.judge;
  }
  return { agents, judge, manifests: list.length };
}

/**
 * The workers' manifests below a queue run's directory, each read again only when it was
 * replaced (the store renames a new one into place). `look` returns whether any changed.
 */
export class WorkerManifests {
  readonly #dir: string;
  readonly #seen = new Map<string, { key: string; endpoint: RunEndpointCounts | undefined }>();

  constructor(dir: string) {
    this.#dir = dir;
  }

  /** The counts of the workers' manifests as last read. */
  get counts(): RunEndpointCounts[] {
    return [...this.#seen.values()].flatMap((w) => (w.endpoint ? [w.endpoint] : []));
  }

  async look(): Promise<boolean> {
    let names: string[];
    try {
      names = (await readdir(this.#dir, { withFileTypes: true })).filter((d) => d.isDirectory() && d.name.startsWith('worker-')).map((d) => d.name);
    } catch {
      names = []; // no directory yet: the run has not started
    }
    let changed = false;
    for (const name of [...this.#seen.keys()]) {
      if (!names.includes(name)) changed = this.#seen.delete(name);
    }
    for (const name of names) {
      const path = join(this.#dir, name, MANIFEST);
      const key = await stat(path).then((st) => `${st.ino}:${st.size}:${st.mtimeMs}`, () => '');
      if (key === this.#seen.get(name)?.key) continue;
      changed = true;
      const endpoint = key === '' ? undefined : await readFile(path, 'utf8').then((t) => endpointOf(JSON.parse(t)), () => undefined);
      this.#seen.set(name, { key, endpoint });
    }
    return changed;
  }
}
