/**
 * A worker process for tests/generate/shared-limits.test.ts: opens the shared limits on a Redis and
 * sends model requests through the real LlmClient (dist/, so `npm run build` first), as a queue
 * worker's run does. Prints `held` once its first request is in flight, then one line of JSON
 * with what each request came to.
 *
 *   node tests/limits-worker.mjs REDIS_URL RUN BASE_URL REQUESTS LOCAL_MAX '{"endpoint_concurrency": 2, …}'
 */
import { LlmClient } from '../dist/pipeline/core/llm/llm.js';
import { openSharedLimits } from '../dist/pipeline/generate/shared-limits.js';
import { EndpointConfig } from '../dist/schemas/index.js';

const [url, run, baseUrl, requests, localMax, limitsJson] = process.argv.slice(2);
const limits = await openSharedLimits({ url, run, limits: JSON.parse(limitsJson ?? '{}') });
const endpoint = EndpointConfig.parse({ base_url: baseUrl, model: 'm', max_retries: 3, retry_base_ms: 10, stream: false });
const llm = new LlmClient(endpoint, { apiKey: 'EMPTY', gate: limits.requestGate(Number(localMax)) });
const results = await Promise.all(
  Array.from({ length: Number(requests) }, (_, i) =>
    llm.complete({ messages: [{ role: 'user', content: `request ${i} of ${process.pid}` }], stop: [] }).then(
      (c) => ({ ok: true, text: c.text, attempts: c.attempts }),
      (err) => ({ ok: false, error: String(err?.message ?? err) }),
    ),
  ),
);
process.stdout.write(`${JSON.stringify({ results, limit: llm.stats().concurrencyLimit })}\n`);
await limits.close();
