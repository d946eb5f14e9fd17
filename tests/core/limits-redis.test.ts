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
 * A connection with a 1 ms command timeout (no restart fits in it) to a Redis that is down: it
 * has exited, and the connection has since been refused, so a command sent now waits unwritten
 * (one sent while the old socket was dying could be written to it and fail with ECONNRESET, as
 * it would in a run: the callers retry that). `up` starts Redis again.
 */
async function downUnderConnection(): Promise<{ connection: RedisConnection; up: () => Promise<void> }> {
  const redis = await startRedis();
  cleanups.push(() => redis.stop());
  const connection = await RedisConnection.open(parseRedisUrl(redis.url, 'test', {}), { connectTimeoutMs: 5000, commandTimeoutMs: 1 });
  cleanups.push(() => connection.close());
  const refused = new Promise<void>((resolve) => {
    const seen = (err: Error): void => {
      if (!/ECONNREFUSED/.test(err.message)) return;
      connection.client.off('error', seen);
      resolve();
    };
    connection.client.on('error', seen);
  });
  await redis.down();
  await refused;
  return { connection, up: () => redis.up() };
}

describe('a shared-limits call on a connection with a short command timeout', () => {
  it('made while Redis is down, waits for it to restart and is answered, within its own call timeout', async () => {
    const { connection, up } = await downUnderConnection();
    const limits = new LimitsRedis({ connection, callTimeoutMs: 20_000, warn: () => {} });
    const [answer] = await Promise.all([limits.eval("return redis.call('INCR', KEYS[1])", ['k'], []), up()]);
    expect(answer).toBe(1);
  });
});

describe('what a failed Redis command says', () => {
  it("node-redis's command timeout, which has no text, is told as no answer in time, with what the socket said last", async () => {
    const { connection, up } = await downUnderConnection();
    // Sent while the connection is down: it waits to be written, and times out.
    const err = await connection.client.sendCommand(['PING']).then(
      () => undefined,
      (e: unknown) => e,
    );
    await up();
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
