/**
 * The shared limits' calls on a worker's Redis connection (core/limits-redis.ts), against a real
 * Redis (tests/redis-server.ts): bounded by the limits' own call timeout, not by the connection's
 * per-command one (node-redis's, which the queue's commands keep).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { LimitsRedis } from '../../pipeline/core/limits-redis.js';
import { parseRedisUrl, RedisConnection } from '../../pipeline/core/redis.js';
import { startRedis } from '../redis-server.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => {});
});

/**
 * A connection with a 1 ms command timeout (no restart fits in it) to a Redis that is now
 * restarting: resolves once the connection has seen it go down; `back` once it is up again.
 */
async function restartingUnderConnection(): Promise<{ connection: RedisConnection; back: Promise<unknown> }> {
  const redis = await startRedis();
  cleanups.push(() => redis.stop());
  const connection = await RedisConnection.open(parseRedisUrl(redis.url, 'test', {}), { connectTimeoutMs: 5000, commandTimeoutMs: 1 });
  cleanups.push(() => connection.close());
  const down = new Promise((r) => connection.client.once('error', r));
  const back = redis.restart();
  await down;
  return { connection, back };
}

describe('a shared-limits call on a connection with a short command timeout', () => {
  it('made while Redis restarts, waits for it and is answered, within its own call timeout', async () => {
    const { connection, back } = await restartingUnderConnection();
    const limits = new LimitsRedis({ connection, callTimeoutMs: 20_000, warn: () => {} });
    const answer = limits.eval("return redis.call('INCR', KEYS[1])", ['k'], []);
    await back;
    expect(await answer).toBe(1);
  });
});

describe('what a failed Redis command says', () => {
  it("node-redis's command timeout, which has no text, is told as no answer in time, with what the socket said last", async () => {
    const { connection, back } = await restartingUnderConnection();
    // Sent while the connection is down: it waits to be written, and times out.
    const err = await connection.client.sendCommand(['PING']).then(
      () => undefined,
      (e: unknown) => e,
    );
    await back;
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toBe('');
    const said = connection.describe(err);
    expect(said).toMatch(/^no answer within 1 ms; last from the socket: \S/);
    expect(said).toContain(connection.lastError);
  });

  it('an error with text is told as it is, password hidden', async () => {
    const address = parseRedisUrl('redis://:s3cret-pw@127.0.0.1:1/0', 'test', {});
    const connection = new RedisConnection(address, { connectTimeoutMs: 100 });
    expect(connection.describe(new Error('WRONGPASS for s3cret-pw'))).toBe('WRONGPASS for ***');
  });
});
