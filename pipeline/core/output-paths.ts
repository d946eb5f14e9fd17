/**
 * Where a command may write (`--out`, `--rejects`, `--clusters`, `--report`), decided before it
 * reads anything:
 *
 * - A regular file, or nothing yet, is replaced whole: a temporary file beside it is renamed
 *   over it at the end (core/jsonl.ts), so a failed or interrupted command leaves the old file.
 * - A FIFO, a character device (`/dev/null`, a terminal) or a process's descriptor
 *   (`/dev/fd/N`, `/proc/PID/fd/N`, whatever it points to) is written through: opened and
 *   written as it is. A rename would put a regular file in place of the device node or the link
 *   (run as root, `--out /dev/null` made the machine's /dev/null a file), and a FIFO's reader
 *   would get nothing. The process's own stdout by another name (`/dev/stdout`,
 *   `/proc/self/fd/1`) is written as `-` is, whatever it is (a pipe, a socket, a file).
 * - A directory, a socket or a block device is refused.
 * - No output may be a file the command reads: an input file, a file of an input run directory
 *   (trajectories.jsonl, failures.jsonl, manifest.json), or any other file it was given to read,
 *   however it is named (a symbolic link, a hard link, `a/../a`): files are compared by device
 *   and inode. Replacing it would destroy the data being read, so the command stops, exit 2.
 * - No two outputs may be the same place.
 */
import { lstatSync, readlinkSync, realpathSync, statSync, type Stats } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { TrajforgeError } from '../errors.js';
import { statPath } from '../files.js';
import { FAILURES, MANIFEST, TRAJECTORIES } from './run-dir/names.js';

/** How an output is written: `-` to stdout, `replace` through a temp file and a rename, `through` as it is. */
export type OutputWay = 'stdout' | 'replace' | 'through';

/** Symbolic links followed at most, looking for a process's descriptor (Linux's own limit). */
const MAX_LINK_HOPS = 40;

/**
 * Whether `path` reaches a file through a descriptor of a process (`/proc/PID/fd/N`, which
 * `/dev/stdout` and `/dev/fd/N` link to): writing it must write to what the descriptor holds,
 * never put a file in its place. `own`: the descriptor's number when it is one of this
 * process's (`/proc/self/fd/1` is this process's stdout, whatever it is: a pipe, a socket, a file).
 */
function viaDescriptor(path: string): { own: number | undefined } | undefined {
  let p = resolve(path);
  try {
    for (let hop = 0; hop < MAX_LINK_HOPS; hop++) {
      const dir = realpathSync(dirname(p));
      if (dir === '/proc' || dir.startsWith('/proc/')) {
        const fd = /^\/proc\/(\d+)\/fd$/.exec(dir);
        const own = fd && Number(fd[1]) === process.pid && /^\d+$/.test(basename(p)) ? Number(basename(p)) : undefined;
        return { own };
      }
      const here = join(dir, basename(p));
      if (!lstatSync(here).isSymbolicLink()) return undefined;
      p = resolve(dir, readlinkSync(here));
    }
  } catch {
    // A part of the path that cannot be looked at: not a descriptor as far as anyone can tell.
  }
  return undefined;
}

/** What a file that is not a regular one is, for a message. */
function kindOf(st: Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isSocket()) return 'a socket';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isCharacterDevice()) return 'a character device';
  return 'not a regular file';
}

/**
 * How `path` is written as an output, or a usage error saying why it cannot be. `where` names
 * it in messages (`filter: --out F`).
 */
export function outputWay(path: string, where: string): OutputWay {
  if (path === '-') return 'stdout';
  const descriptor = viaDescriptor(path);
  // This process's stdout by another name (`/dev/stdout`): written as `-` is, whatever it is.
  if (descriptor?.own === 1) return 'stdout';
  const st = statPath(path, where);
  if (st === undefined || st.isFile()) {
    if (st !== undefined && descriptor !== undefined) return 'through';
    const parent = dirname(path);
    const up = statPath(parent, where);
    if (!up) throw new TrajforgeError('BAD_USAGE', `${where}: no such directory: ${parent}`, { file: path });
    if (!up.isDirectory()) throw new TrajforgeError('BAD_USAGE', `${where}: ${parent} is a file, not a directory`, { file: path });
    return 'replace';
  }
  if (st.isFIFO() || st.isCharacterDevice()) return 'through';
  if (st.isDirectory()) throw new TrajforgeError('BAD_USAGE', `${where} is a directory; name a file`, { file: path });
  throw new TrajforgeError('BAD_USAGE', `${where} is ${kindOf(st)}; name a file, a FIFO or a character device`, { file: path });
}

/** Device and inode: one file under every name it has. */
function identity(st: Stats): string {
  return `${st.dev}:${st.ino}`;
}

/** The file at `path` (links followed), or undefined when nothing is there or it cannot be looked at. */
function fileAt(path: string): Stats | undefined {
  try {
    return statSync(path, { throwIfNoEntry: false });
  } catch {
    return undefined;
  }
}

/**
 * The files a command reads for each input, by identity, with how to name them: the input
 * itself, or for a run directory its records and manifest.
 */
function readFiles(inputs: readonly string[]): Map<string, string> {
  const files = new Map<string, string>();
  for (const input of inputs) {
    if (input === '-') continue;
    const st = fileAt(input);
    if (st === undefined) continue;
    if (!st.isDirectory()) {
      if (!files.has(identity(st))) files.set(identity(st), input);
      continue;
    }
    for (const name of [TRAJECTORIES, FAILURES, MANIFEST]) {
      const file = join(input, name);
      const f = fileAt(file);
      if (f !== undefined && !files.has(identity(f))) files.set(identity(f), `${file}, a file of the run directory ${input}`);
    }
  }
  return files;
}

/**
 * Checks every output of a command before it reads anything: each can be written (see the
 * header), no two are the same place, and none is a file it reads (`inputs`: the paths it was
 * given to read, run directories included). `outputs` pairs a flag with its path.
 */
export function checkOutputs(command: string, outputs: readonly (readonly [flag: string, path: string])[], inputs: readonly string[]): void {
  const places: { flag: string; path: string; key: string }[] = [];
  for (const [flag, path] of outputs) {
    const where = `${command}: --${flag} ${path}`;
    const way = outputWay(path, where);
    const st = way === 'stdout' ? undefined : fileAt(path);
    const key = way === 'stdout' ? '-' : st ? identity(st) : resolve(path);
    const same = places.find((p) => p.key === key || p.path === path);
    if (same) throw new TrajforgeError('BAD_USAGE', `${command}: --${same.flag} and --${flag} name the same place (${path})`, { file: path });
    places.push({ flag, path, key });
  }
  const read = readFiles(inputs);
  for (const { flag, path, key } of places) {
    if (key === '-') continue;
    const st = fileAt(path);
    const what = st === undefined ? undefined : read.get(identity(st));
    if (what !== undefined) {
      throw new TrajforgeError('BAD_USAGE', `${command}: --${flag} ${path} is also an input (${what}); writing it would destroy what ${command} reads. Name another file`, { file: path });
    }
  }
}
