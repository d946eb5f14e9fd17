/**
 * What a failed request means for the next one (pipeline/core/llm/retry.ts), and the client's
 * wrong-endpoint signal (#23 item 16): said for the first requests only, never once the
 * endpoint has answered.
 */
import { describe, expect, it } from 'vitest';
import { ConnectionError, EndpointError } from '../../../pipeline/core/llm/chat-http.js';
import { LlmClient, LlmError } from '../../../pipeline/core/llm/llm.js';
import { retryWait, wrongEndpoint } from '../../../pipeline/core/llm/retry.js';
import { EndpointConfig } from '../../../schemas/index.js';
import { loopbackServer, openAiError } from '../../faults/util.js';

const timing = { retry_base_ms: 100, retry_max_ms: 1_000 };

describe('retryWait', () => {
  it('waits what the endpoint asked, at most retry_max_ms, and says when it cut the wait', () => {
    expect(retryWait(timing, 1, 300)).toEqual({ ms: 300, asked: 300, capped: false });
    expect(retryWait(timing, 1, 3_600_000)).toEqual({ ms: 1_000, asked: 3_600_000, capped: true });
  });

  it('otherwise backs off: retry_base_ms doubled per failure, jittered between half and all of it, at most retry_max_ms', () => {
    expect(retryWait(timing, 1, undefined, () => 0).ms).toBe(50);
    expect(retryWait(timing, 3, undefined, () => 1).ms).toBe(400);
    expect(retryWait(timing, 40, undefined, () => 1).ms).toBe(1_000);
  });
});

describe('wrongEndpoint', () => {
  it('a refused connection, an unknown host, 404, 401 and 403 say the endpoint is wrong; trouble a busy endpoint gives does not', () => {
    expect(wrongEndpoint(new ConnectionError('connect ECONNREFUSED 127.0.0.1:1', 'ECONNREFUSED'))).toBe('refused the connection: nothing listens there (ECONNREFUSED)');
    expect(wrongEndpoint(new ConnectionError('getaddrinfo ENOTFOUND nope.invalid', 'ENOTFOUND'))).toBe('names a host that does not exist (DNS) (ENOTFOUND)');
    expect(wrongEndpoint(new ConnectionError('getaddrinfo EAI_AGAIN nope', 'EAI_AGAIN'))).toMatch(/DNS/);
    expect(wrongEndpoint(new EndpointError(404, 'Not Found', {}, {}))).toBe('has no such path or model: 404 Not Found');
    expect(wrongEndpoint(new EndpointError(401, 'bad key', {}, {}))).toBe('refused the key: 401 bad key');
    expect(wrongEndpoint(new EndpointError(403, 'no access', {}, {}))).toBe('refused the key: 403 no access');
    for (const busy of [new ConnectionError('socket hang up', 'ECONNRESET'), new ConnectionError('cut off'), new EndpointError(500, 'x', {}, {}), new EndpointError(429, 'x', {}, {}), new EndpointError(400, 'x', {}, {})]) {
      expect(wrongEndpoint(busy)).toBeUndefined();
    }
  });
});

describe('onWrongEndpoint', () => {
  it('is told of a 404 before any answer, with the URL and the model; once the endpoint has answered, a refused connection is retried as before', async () => {
    let served = 0;
    const server = await loopbackServer((_req, res) => {
      served++;
      if (served === 1) return openAiError(res, 404, 'The model `trajforge-sim` does not exist', 'model_not_found');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }] }));
    });
    const told: string[] = [];
    const llm = new LlmClient(EndpointConfig.parse({ base_url: server.url, model: 'trajforge-sim', retry_base_ms: 10, retry_max_ms: 20, max_retries: 2 }), {
      apiKey: 'EMPTY',
      onWrongEndpoint: (why) => void told.push(why),
    });
    const messages = [{ role: 'user' as const, content: 'hi' }];
    // Told, and (nobody stopping the run here) refused as a 404 always was.
    expect(((await llm.complete({ messages, stop: [] }).catch((e: unknown) => e)) as LlmError).kind).toBe('fatal');
    expect(told).toEqual([`${server.url}/chat/completions (model trajforge-sim) has no such path or model: 404 The model \`trajforge-sim\` does not exist`]);
    expect((await llm.complete({ messages, stop: [] })).text).toBe('ok');
    await server.close();
    const later = (await llm.complete({ messages, stop: [] }).catch((e: unknown) => e)) as LlmError;
    expect(later.kind).toBe('exhausted');
    expect(later.message).toMatch(/failed 3 times in a row; last: connection error: .*ECONNREFUSED/);
    expect(told).toHaveLength(1);
  });
});
