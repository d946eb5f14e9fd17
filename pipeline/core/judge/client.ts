/**
 * The judge's one client: it asks one question of a kind (kinds.ts) about some material, and
 * gives back the answer read from the reply, or why there is none. Every use of the judge goes
 * through it, so every use has the same:
 *
 * - its own LlmClient (its retries, 429 backoff and limit of requests in flight never mix with
 *   the policy model's), with the judge's own timeouts and byte limit;
 * - a cache of replies on disk (`<cache_dir>/judge`, the tool cache's segment store), keyed by
 *   the endpoint (its URL without credentials or query: the same model name served elsewhere
 *   may be another model), the model, its temperature, the template's version, the kind and
 *   the material;
 * - replies with nothing readable at the fixed place asked again (`unreadable_retries`);
 * - refusals (401, 403, 404, 400: a wrong key or model) counted: `fail_fast_after` in a row make
 *   `fatal` say so, for the caller to stop;
 * - every reply and every error cleaned and scrubbed of the caller's secrets and the judge's own
 *   key as it arrives, before a record, an output or the cache sees it (a judge may quote its key).
 *
 * Failures of the judge become an error to report, never a throw; an aborted run's
 * LlmError('aborted') goes through.
 */
import { cleanText } from '../../text.js';
import { cacheKey, DirStore, MemoryStore, type ResultStore } from '../cache.js';
import { LlmClient, LlmError, type EndpointCounts } from '../llm/llm.js';
import { publicEndpoint, Scrubber } from '../secrets.js';
import type { QuestionKind } from './kinds.js';
import { renderGrading, templateTag } from './prompt.js';
import { clip } from './reply.js';
import { judgeEndpoint, type JudgeSettings } from './settings.js';

/** An answer read from a reply (or the cache), or why there is none (`raw`: the last reply, cut, when none was readable). */
export type Asked<T> = { readonly value: T; readonly cached: boolean } | { readonly error: string; readonly raw?: string | undefined };

export interface ClientOptions {
  readonly apiKey: string;
  /** The caller's secrets (a run's); the judge's own key is taken out besides. */
  readonly scrubber?: Scrubber | undefined;
  /** Where a cache that cannot be opened is said. Default stderr. */
  readonly warn?: ((message: string) => void) | undefined;
}

/**
 * What the judge's requests cost, charged to whoever asked (synthesis counts what each seed
 * cost): one call per request sent, with its tokens (0 for a request that failed).
 */
export interface Meter {
  charge(used: { readonly promptTokens: number; readonly completionTokens: number; readonly cachedTokens?: number | undefined; readonly estimated?: boolean | undefined }): void;
}

export interface ClientStats {
  /** Grading requests sent (retries of one request not counted twice), and answers served from the cache. */
  requests: number;
  cached: number;
}

export class JudgeClient {
  readonly #s: JudgeSettings;
  readonly #llm: LlmClient;
  readonly #cache: ResultStore | undefined;
  readonly #secrets: readonly Scrubber[];
  readonly #tags = new Map<string, string>();
  #refusals = 0;
  #fatal: string | undefined;
  readonly stats: ClientStats = { requests: 0, cached: 0 };

  constructor(settings: JudgeSettings, opts: ClientOptions) {
    this.#s = settings;
    this.#llm = new LlmClient(judgeEndpoint(settings), { apiKey: opts.apiKey, maxConcurrency: settings.concurrency });
    const own = new Scrubber(opts.apiKey === 'EMPTY' ? [] : [{ name: settings.api_key_env, value: opts.apiKey }]);
    this.#secrets = [opts.scrubber ?? Scrubber.none, own];
    this.#cache = settings.cache ? openCache(settings, opts) : undefined;
  }

  /** Set once the judge refused `fail_fast_after` requests in a row: the caller should stop, saying this. */
  get fatal(): string | undefined {
    return this.#fatal;
  }

  /** What the judge's endpoint answered, by class, and the retries it cost (llm/counts.ts). */
  endpointCounts(): EndpointCounts {
    return this.#llm.counts();
  }

  /** Text with the caller's secrets and the judge's key taken out. */
  scrub(text: string): string {
    return this.#secrets.reduce((t, s) => s.text(t), text);
  }

  async close(): Promise<void> {
    await this.#cache?.close();
  }

  /** `name@hash` of the kind's template: what the record says it was asked with. */
  tag(kind: QuestionKind<unknown>): string {
    let t = this.#tags.get(kind.prompt);
    if (t === undefined) this.#tags.set(kind.prompt, (t = templateTag(kind.prompt)));
    return t;
  }

  /** One question: from the cache, else asked (again while the reply is unreadable, up to `unreadable_retries` times). */
  async ask<T>(kind: QuestionKind<T>, material: Readonly<Record<string, string>>, signal?: AbortSignal, meter?: Meter): Promise<Asked<T>> {
    const key = cacheKey({ endpoint: publicEndpoint(this.#s.base_url).replace(/\/+$/, ''), judge: this.#s.model, template: this.tag(kind), temperature: this.#s.temperature }, kind.name, material);
    const hit = await this.#cache?.get(key).catch(() => undefined);
    if (typeof hit === 'string') {
      const value = kind.read(hit);
      if (value !== undefined) {
        this.stats.cached++;
        return { value, cached: true };
      }
    }
    const prompt = renderGrading(kind.prompt, material);
    let raw: string | undefined;
    for (let tries = 0; tries <= this.#s.unreadable_retries; tries++) {
      const reply = await this.#complete(prompt, signal, meter);
      if (typeof reply !== 'string') return reply;
      const value = kind.read(reply);
      if (value !== undefined) {
        await this.#cache?.set(key, reply).catch(() => undefined);
        return { value, cached: false };
      }
      raw = clip(reply, 300);
    }
    return { error: `no readable ${kind.wants} in ${this.#s.unreadable_retries + 1} replies`, raw };
  }

  /** One request: the reply, cleaned and scrubbed, or the error to record. */
  async #complete(prompt: string, signal: AbortSignal | undefined, meter: Meter | undefined): Promise<string | { error: string }> {
    try {
      this.stats.requests++;
      const c = await this.#llm.complete({ messages: [{ role: 'user', content: prompt }], stop: [], signal });
      meter?.charge(c);
      this.#refusals = 0;
      return this.scrub(cleanText(c.text));
    } catch (err) {
      if (!(err instanceof LlmError) || err.kind === 'aborted') throw err;
      meter?.charge({ promptTokens: 0, completionTokens: 0 });
      const message = this.scrub(
        // The model client names the endpoint's limit; the judge's own one governs here.
        err.kind === 'too_large' ? `the judge's reply passed ${this.#s.max_response_bytes} bytes (${this.#s.section}.max_response_bytes); dropped there` : err.message,
      );
      if (err.kind === 'fatal' && ++this.#refusals >= this.#s.fail_fast_after && this.#fatal === undefined) {
        this.#fatal = `the judge at ${this.#s.base_url} refused ${this.#refusals === 1 ? 'a grading request' : `${this.#refusals} grading requests in a row`} (model ${this.#s.model}): ${message}`;
      }
      return { error: `the judge request failed (${err.kind}): ${clip(message, 300)}` };
    }
  }
}

function openCache(s: JudgeSettings, opts: ClientOptions): ResultStore {
  const dir = `${s.cache_dir}/judge`;
  try {
    return DirStore.open({ dir, ttlS: s.cache_ttl_s, scrubber: opts.scrubber });
  } catch (err) {
    (opts.warn ?? ((m) => void process.stderr.write(`warning: ${m}\n`)))(`judge cache: cannot use ${dir} (${(err as Error).message}); caching verdicts in memory for this run only`);
    return new MemoryStore(s.cache_ttl_s);
  }
}
