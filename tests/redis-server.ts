/**
 * A real Redis for tests: Debian's `redis-server` (installed by .ci/run), started on a loopback
 * port of its own in a temporary directory, so tests never share state with each other or with
 * a Redis the machine may run. The handle can restart it (its append-only file kept, as an
 * operator restarting it would), pause it with SIGSTOP and resume it, or stop it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { connect } from 'node:net';
import { join } from 'node:path';
import { freePort, tempDir } from './helpers.js';

export interface RedisHandle {
  readonly port: number;
  /** `redis://127.0.0.1:<port>/0`. */
  readonly url: string;
  /** Its working directory (the append-only file lives here). */
  readonly dir: string;
  /** Kills it (SIGKILL: nothing flushed beyond what `appendfsync always` wrote) and starts it again on the same port. */
  restart(): Promise<void>;
  /** SIGSTOP: the process holds its port but answers nothing until resume(). */
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
}

/** Resolves once the port accepts a connection and answers PING, or rejects after `ms`. */
async function waitForPing(port: number, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const sock = connect(port, '127.0.0.1');
      sock.once('error', () => resolve(false));
      sock.once('connect', () => sock.write('PING\r\n'));
      sock.once('data', (d) => {
        sock.destroy();
        resolve(d.toString().startsWith('+PONG'));
      });
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`redis-server on ${port} did not answer PING within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((r) => child.once('exit', () => r()));
}

/**
 * Starts a redis-server. `appendonly` (default true) turns on the AOF with `appendfsync always`,
 * so a SIGKILL loses no acknowledged write: the restart test checks our recovery, not Redis's.
 */
export async function startRedis(opts: { appendonly?: boolean } = {}): Promise<RedisHandle> {
  const port = await freePort();
  const dir = tempDir('tf-redis-');
  const args = [
    '--port', String(port),
    '--bind', '127.0.0.1',
    '--dir', dir,
    '--save', '',
    '--appendonly', opts.appendonly === false ? 'no' : 'yes',
    '--appendfsync', 'always',
    '--protected-mode', 'no',
    '--logfile', join(dir, 'redis.log'),
  ];
  let child: ChildProcess;
  const launch = async () => {
    child = spawn('redis-server', args, { stdio: 'ignore' });
    const failed = new Promise<never>((_, reject) =>
      child.once('error', (err) =>
        reject(new Error(`cannot start redis-server (is Debian's redis-server installed? .ci/run installs it): ${err.message}`)),
      ),
    );
    await Promise.race([waitForPing(port), failed]);
  };
  await launch();
  return {
    port,
    url: `redis://127.0.0.1:${port}/0`,
    dir,
    async restart() {
      child.kill('SIGKILL');
      await exited(child);
      await launch();
    },
    pause() {
      child.kill('SIGSTOP');
    },
    resume() {
      child.kill('SIGCONT');
    },
    async stop() {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
      await exited(child);
    },
  };
}
