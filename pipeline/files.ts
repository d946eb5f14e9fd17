/**
 * Paths a user named (`--out`, an input, a run directory): a failed file-system call on one
 * becomes a message that names the path and says what is wrong with it, never a stack trace.
 * Also the sweep of temporary files that a killed process left behind, and the writing of a
 * small file in place of whatever is at its name (a symbolic link included).
 */
import { closeSync, fsyncSync, lstatSync, openSync, readdirSync, renameSync, rmSync, statSync, writeSync, type Stats } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import { TrajforgeError } from './errors.js';

/** Codes that mean the disk, not the path, failed: the run failed (exit 1) rather than the input was bad (exit 2). */
const DISK_CODES = new Set(['ENOSPC', 'EFBIG', 'EDQUOT', 'EIO', 'EROFS']);

const PLAIN: Record<string, string> = {
  ENOENT: 'no such file or directory',
  ENOTDIR: 'a part of the path is a file, not a directory',
  ELOOP: 'a loop of symbolic links',
  EISDIR: 'a directory, not a file',
  EEXIST: 'a file is in the way',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  ENAMETOOLONG: 'the name is too long',
  ENOSPC: 'no space left on the device',
  EFBIG: 'the file is too large (a file-size limit)',
  EDQUOT: 'the disk quota is used up',
  EROFS: 'a read-only file system',
  EIO: 'an input/output error',
};

/** A Node file-system error (it carries an errno code and, mostly, the path). */
export function isFsError(err: unknown): err is NodeJS.ErrnoException {
  return err instanceof Error && typeof (err as NodeJS.ErrnoException).code === 'string' && typeof (err as NodeJS.ErrnoException).syscall === 'string';
}

/** The error as words, with its code kept for searching: `a loop of symbolic links (ELOOP)`. */
export function fsReason(err: unknown): string {
  const code = (err as NodeJS.ErrnoException)?.code;
  return code && PLAIN[code] ? `${PLAIN[code]} (${code})` : (err as Error)?.message ?? String(err);
}

/** `PATH: DOING: REASON` as a typed error: WRITE_FAILED (exit 1) for a failing disk, else BAD_INPUT (exit 2). */
export function fsError(path: string, err: unknown, doing: string): TrajforgeError {
  const code = (err as NodeJS.ErrnoException)?.code ?? '';
  return new TrajforgeError(DISK_CODES.has(code) ? 'WRITE_FAILED' : 'BAD_INPUT', `${path}: ${doing}: ${fsReason(err)}`, { file: path, cause: err });
}

/**
 * `statSync`, undefined when nothing is there; any other failure (a loop, a file in the path)
 * is a user error: `PATH: cannot read: REASON`, or `WHERE: REASON` when the caller names the
 * place (`filter: --out F`).
 */
export function statPath(path: string, where?: string): Stats | undefined {
  try {
    return statSync(path, { throwIfNoEntry: false });
  } catch (err) {
    if (where === undefined) throw fsError(path, err, 'cannot read');
    const code = (err as NodeJS.ErrnoException).code ?? '';
    throw new TrajforgeError(DISK_CODES.has(code) ? 'WRITE_FAILED' : 'BAD_USAGE', `${where}: ${fsReason(err)}`, { file: path, cause: err });
  }
}

/**
 * Checks, before any row is read, that `path` can be an output file: not a directory, and in
 * a directory that exists. `-` (stdout) always can.
 */
export function checkOutputFile(command: string, flag: string, path: string): void {
  if (path === '-') return;
  const where = `${command}: --${flag} ${path}`;
  if (statPath(path, where)?.isDirectory()) throw new TrajforgeError('BAD_USAGE', `${command}: --${flag} ${path} is a directory; name a file`, { file: path });
  const parent = dirname(path);
  const st = statPath(parent, where);
  if (!st) throw new TrajforgeError('BAD_USAGE', `${command}: --${flag} ${path}: no such directory: ${parent}`, { file: path });
  if (!st.isDirectory()) throw new TrajforgeError('BAD_USAGE', `${command}: --${flag} ${path}: ${parent} is a file, not a directory`, { file: path });
}

/** Whether a process with this pid runs on this machine (EPERM: it does, as another user). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes the temporary files in `dir` whose names `pattern` matches with the writer's pid as
 * its first group, when that process is gone (killed before it could rename or remove them).
 * Pids are checked on this machine, as the run lock does. Returns the names removed.
 */
export function removeDeadTemps(dir: string, pattern: RegExp): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const name of names) {
    const pid = Number(pattern.exec(name)?.[1]);
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || pidAlive(pid)) continue;
    try {
      rmSync(join(dir, name), { recursive: true, force: true });
      removed.push(name);
    } catch {
      // someone else's to clear, or already gone
    }
  }
  return removed;
}

/** What is at `path` itself (a symbolic link is not followed), or undefined when nothing is. */
export function entryAt(path: string): Stats | undefined {
  return lstatSync(path, { throwIfNoEntry: false });
}

/**
 * Writes `data` as the file `path`: to a temporary file beside it, synced, then renamed over the
 * name. Whatever was at the name is replaced, a symbolic link included: the file it pointed to
 * (perhaps outside the folder the user named) is never written through.
 */
export function replaceFile(path: string, data: string | Uint8Array): void {
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  const fd = openSync(temp, 'wx');
  try {
    try {
      const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
      for (let at = 0; at < bytes.length; ) at += writeSync(fd, bytes, at);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, path);
  } catch (err) {
    rmSync(temp, { force: true });
    throw err;
  }
}
