/**
 * One cheap request to learn whether the model endpoint is there before anything is spent on
 * it: `GET /models`. Any HTTP answer means a server is listening (a 404 from a server that
 * lists no models included); only a connection that fails, or no answer in time, does not.
 * `rerun` asks before it spends an attempt, `check` before its completions.
 */
import type { EndpointConfig, JudgeConfig } from '../../../schemas/index.js';
import { TrajforgeError } from '../../errors.js';
import { ConnectionError, EndpointError, getJson, RequestAborted } from './chat-http.js';

export type Reachability =
  | {
      readonly reachable: true;
      readonly ms: number;
      /** The HTTP status of `GET /models`. */
      readonly status: number;
      /** The model ids listed, when the answer was a models list. */
      readonly models?: readonly string[] | undefined;
      /** The server's message, for a non-2xx answer. */
      readonly message?: string | undefined;
    }
  | {
      readonly reachable: false;
      /** What failed, in a few words: `connection refused`, `no answer within 10000 ms`… */
      readonly why: string;
      /** The system's code (`ECONNREFUSED`, `ENOTFOUND`, …), or `timeout`. */
      readonly code: string | undefined;
    };

/** A models list is read up to this size (OpenRouter lists hundreds of models). */
const MAX_MODELS_BYTES = 8 * 1024 * 1024;

export async function probeEndpoint(baseUrl: string, apiKey: string, timeoutMs: number): Promise<Reachability> {
  const started = performance.now();
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    const body = await getJson(baseUrl, '/models', apiKey, controller.signal, MAX_MODELS_BYTES);
    const data = (body as { data?: unknown } | null | undefined)?.data;
    const models = Array.isArray(data) ? data.flatMap((m) => (typeof (m as { id?: unknown })?.id === 'string' ? [(m as { id: string }).id] : [])) : undefined;
    return { reachable: true, ms: performance.now() - started, status: 200, models };
  } catch (err) {
    if (err instanceof EndpointError) return { reachable: true, ms: performance.now() - started, status: err.status ?? 0, message: err.message };
    if (err instanceof RequestAborted) return { reachable: false, why: `no answer within ${timeoutMs} ms`, code: 'timeout' };
    if (err instanceof ConnectionError) return { reachable: false, why: connectionWhy(err), code: err.code };
    // A URL that cannot be requested at all (a bad scheme).
    return { reachable: false, why: (err as Error).message, code: undefined };
  } finally {
    clearTimeout(timer);
  }
}

function connectionWhy(err: ConnectionError): string {
  switch (err.code) {
    case 'ECONNREFUSED':
      return 'connection refused';
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'the host name does not resolve';
    case 'ECONNRESET':
      return 'the connection was reset';
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return 'the host is unreachable';
    default:
      return err.message;
  }
}

/** What to do about an endpoint that did not answer, said after `why … at URL — `. */
export function unreachableHint(baseUrl: string, code: string | undefined): string {
  let port = '8000';
  try {
    port = new URL(baseUrl).port || port;
  } catch {
    // The URL is checked elsewhere; the hint keeps its default port.
  }
  switch (code) {
    case 'ECONNREFUSED':
      return `is the server running? for vLLM: \`vllm serve MODEL --port ${port}\`; for the offline sim: \`trajforge sim --port ${port}\``;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'check the host in endpoint.base_url (or --base-url)';
    case 'timeout':
      return 'is the host reachable from here (a firewall, a VPN, a server still loading)? endpoint.probe_timeout_ms sets the wait';
    default:
      if (code?.includes('CERT') || code?.startsWith('ERR_TLS') || code?.startsWith('ERR_SSL')) return 'a TLS problem: a self-signed certificate, or https:// for a server that speaks http://?';
      return 'check endpoint.base_url (or --base-url)';
  }
}

/** The model name the sim answers to; a run made with it was made against the sim (the demo's, often). */
const SIM_MODEL = 'trajforge-sim';

/**
 * Throws ENDPOINT_UNREACHABLE, saying what to do, when the endpoint does not answer at all:
 * before a command spends attempts (`rerun`) that would only fail as `llm_error`. A server
 * that answers anything, an error included, is there.
 */
export async function assertReachable(endpoint: EndpointConfig, apiKey: string): Promise<void> {
  const r = await probeEndpoint(endpoint.base_url, apiKey, endpoint.probe_timeout_ms);
  if (r.reachable) return;
  const sim =
    endpoint.model === SIM_MODEL
      ? ` This run was made against the sim, which ends with the command that started it (\`npm run demo\` starts one of its own): start one with \`trajforge sim --port 8000\` and pass --base-url http://127.0.0.1:8000/v1.`
      : ' If it moved, pass --base-url URL.';
  throw new TrajforgeError(
    'ENDPOINT_UNREACHABLE',
    `the model endpoint does not answer: ${r.why} at ${endpoint.base_url} — ${unreachableHint(endpoint.base_url, r.code)}. Nothing was run.${sim}`,
    { field: 'endpoint.base_url' },
  );
}

/** The same for the judge (`rerun --reason unjudged` needs only it): exit 1 with the reason when it does not answer. */
export async function assertJudgeReachable(judge: JudgeConfig, apiKey: string, timeoutMs: number): Promise<void> {
  const r = await probeEndpoint(judge.base_url, apiKey, timeoutMs);
  if (r.reachable) return;
  throw new TrajforgeError(
    'ENDPOINT_UNREACHABLE',
    `the judge does not answer: ${r.why} at ${judge.base_url} — ${unreachableHint(judge.base_url, r.code)}. Nothing was run. If it moved, pass --config with validation.judge.base_url where it is now.`,
    { field: 'validation.judge.base_url' },
  );
}
