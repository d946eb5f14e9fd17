/**
 * A package registry on loopback for the install test: `npm install -g` of trajforge's tarball
 * must run as a user's does, yet nothing may leave the machine. It serves, over the registry
 * protocol npm speaks (a packument per name, tarballs at the URLs the packument gives), the
 * packages package-lock.json pins, with the tarball bytes that `npm ci` left in the local npm
 * cache (content-addressed by the lockfile's integrity, which npm checks again on download).
 *
 * A package the lockfile does not hold is a 404, so a dependency trajforge uses but does not
 * declare fails the install here as it would for a user.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

interface LockEntry {
  version?: string;
  integrity?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, unknown>;
  bin?: Record<string, string>;
  engines?: Record<string, string>;
  os?: string[];
  cpu?: string[];
  link?: boolean;
}

export interface LocalRegistry {
  readonly url: string;
  /** Tarballs asked for that the cache did not hold (the install then fails). */
  readonly missing: string[];
  /** Tarballs served: the dependencies npm fetched from here. */
  readonly served: string[];
  close(): Promise<void>;
}

/** Where npm keeps its cache: `npm config get cache` (npm test sets npm_config_cache for its scripts). */
function npmCacheDir(): string {
  return process.env.npm_config_cache || execFileSync('npm', ['config', 'get', 'cache'], { encoding: 'utf8' }).trim();
}

/** The cached bytes of a tarball with this integrity (cacache's content-v2 layout), or undefined. */
function cachedTarball(cache: string, integrity: string): Buffer | undefined {
  const [algorithm, digest] = integrity.split(' ')[0]!.split('-', 2) as [string, string];
  const hex = Buffer.from(digest, 'base64').toString('hex');
  const file = join(cache, '_cacache', 'content-v2', algorithm, hex.slice(0, 2), hex.slice(2, 4), hex.slice(4));
  return existsSync(file) ? readFileSync(file) : undefined;
}

export async function startLocalRegistry(lockfile: string): Promise<LocalRegistry> {
  const lock = JSON.parse(readFileSync(lockfile, 'utf8')) as { packages: Record<string, LockEntry> };
  const cache = npmCacheDir();
  // name → version → entry; a name can be pinned at several versions (nested node_modules).
  const byName = new Map<string, Map<string, LockEntry>>();
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (path === '' || entry.link || !entry.version || !entry.integrity) continue;
    const name = path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length);
    if (!byName.has(name)) byName.set(name, new Map());
    byName.get(name)!.set(entry.version, entry);
  }
  const missing: string[] = [];
  const served: string[] = [];
  let base = '';
  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent((req.url ?? '/').split('?')[0]!);
    const tarball = /^\/-\/tarball\/(.+)\/([^/]+)\.tgz$/.exec(path);
    if (tarball) {
      const entry = byName.get(tarball[1]!)?.get(tarball[2]!);
      const bytes = entry?.integrity ? cachedTarball(cache, entry.integrity) : undefined;
      if (!bytes) {
        missing.push(`${tarball[1]}@${tarball[2]}`);
        res.writeHead(404).end();
        return;
      }
      served.push(`${tarball[1]}@${tarball[2]}`);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': bytes.length }).end(bytes);
      return;
    }
    const versions = byName.get(path.slice(1));
    if (!versions) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
      return;
    }
    const name = path.slice(1);
    const packument = {
      name,
      'dist-tags': { latest: [...versions.keys()].at(-1) },
      versions: Object.fromEntries(
        [...versions].map(([version, e]) => [
          version,
          {
            name,
            version,
            dependencies: e.dependencies ?? {},
            optionalDependencies: e.optionalDependencies ?? {},
            peerDependencies: e.peerDependencies ?? {},
            peerDependenciesMeta: e.peerDependenciesMeta ?? {},
            ...(e.bin ? { bin: e.bin } : {}),
            ...(e.engines ? { engines: e.engines } : {}),
            ...(e.os ? { os: e.os } : {}),
            ...(e.cpu ? { cpu: e.cpu } : {}),
            dist: { tarball: `${base}/-/tarball/${encodeURIComponent(name)}/${version}.tgz`, integrity: e.integrity },
          },
        ]),
      ),
    };
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(packument));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: `${base}/`,
    missing,
    served,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
