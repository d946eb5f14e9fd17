/**
 * A real Redis on a loopback port of its own: Debian's `redis-server` (installed by .ci/run),
 * started in a directory of its own, so a benchmark or a test never shares state with another
 * or with a Redis the machine may run. The handle can restart it (its append-only file kept, as
 * an operator restarting it would), pause it with SIGSTOP and resume it, or stop it.
 *
 * The queue benchmark (bench/queue.ts) and the tests (tests/redis-server.ts) both start theirs
 * here; it lives under bench/ because bench/ is compiled to dist/ and tests/ is not.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';

export interface RedisServerOptions {
  /** Its working directory (the append-only file lives here). */
  readonly dir: string;
  /** The append-only file (default on). */
  readonly appendonly?: boolean | undefined;
  /** `always` (default: a SIGKILL loses no acknowledged write) or `everysec` (what docs/scale-out.md suggests for speed). */
  readonly appendfsync?: 'always' | 'everysec' | undefined;
  /** `requirepass`: clients must give it. */
  readonly password?: string | undefined;
  /** How long to wait for its first PING; default 10 s. */
  readonly startTimeoutMs?: number | undefined;
}

export interface RedisServer {
  readonly port: number;
  /** `redis://127.0.0.1:<port>/0`, without the password. */
  readonly url: string;
  readonly dir: string;
  /** The current process's id (a restart makes a new one). */
  readonly pid: number;
  /** Kills it (SIGKILL: nothing flushed beyond what the AOF wrote) and starts it again on the same port: `down()`, then `up()`. */
  restart(): Promise<void>;
  /** SIGKILL, resolved once the process has exited: nothing listens on the port until `up()`. */
  down(): Promise<void>;
  /** Starts it again on the same port, with its directory (and its AOF), after `down()`. */
  up(): Promise<void>;
  /** SIGSTOP: the process holds its port but answers nothing until resume(). */
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
}

/** A loopback port that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Resolves once the port accepts a connection and answers PING (`-NOAUTH` counts: it is up), or rejects after `ms`. */
async function waitForPing(port: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const sock = connect(port, '127.0.0.1');
      sock.once('error', () => resolve(false));
      sock.once('connect', () => sock.write('PING\r\n'));
      sock.once('data', (d) => {
        sock.destroy();
        resolve(/^(\+PONG|-NOAUTH)/.test(d.toString()));
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

export async function startRedisServer(opts: RedisServerOptions): Promise<RedisServer> {
  const port = await freePort();
  // prettier-ignore
  const args = [
    '--port', String(port),
    '--bind', '127.0.0.1',
    '--dir', opts.dir,
    '--save', '',
    '--appendonly', opts.appendonly === false ? 'no' : 'yes',
    '--appendfsync', opts.appendfsync ?? 'always',
    '--protected-mode', 'no',
    '--logfile', join(opts.dir, 'redis.log'),
    ...(opts.password === undefined ? [] : ['--requirepass', opts.password]),
  ];
  let child!: ChildProcess;
  const launch = async (): Promise<void> => {
    child = spawn('redis-server', args, { stdio: 'ignore' });
    const failed = new Promise<never>((_, reject) =>
      child.once('error', (err) => reject(new Error(`cannot start redis-server (is Debian's redis-server installed? .ci/run installs it): ${err.message}`))),
    );
    await Promise.race([waitForPing(port, opts.startTimeoutMs ?? 10_000), failed]);
  };
  const down = async (): Promise<void> => {
    child.kill('SIGKILL');
    await exited(child);
  };
  await launch();
  return {
    port,
    url: `redis://127.0.0.1:${port}/0`,
    dir: opts.dir,
    get pid() {
      return child.pid!;
    },
    async restart() {
      await down();
      await launch();
    },
    down,
    up: launch,
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
