/**
 * A real Redis for tests (bench/redis-server.ts starts it): Debian's `redis-server` on a
 * loopback port of its own, in a temporary directory, so tests never share state with each
 * other or with a Redis the machine may run. `appendfsync always`: a SIGKILL loses no
 * acknowledged write, so the restart tests check our recovery, not Redis's.
 */
import { startRedisServer, type RedisServer } from '../bench/redis-server.js';
import { tempDir } from './helpers.js';

export type RedisHandle = RedisServer;

/** Starts a redis-server; `appendonly` (default true) keeps its data across restart(), `password` sets requirepass. */
export function startRedis(opts: { appendonly?: boolean; password?: string } = {}): Promise<RedisHandle> {
  return startRedisServer({ dir: tempDir('tf-redis-'), appendonly: opts.appendonly, password: opts.password });
}
