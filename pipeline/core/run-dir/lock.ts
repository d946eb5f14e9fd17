/**
 * The run directory's lock: one writer per run, also when two processes find a dead holder's
 * lock at the same moment (both would otherwise "take it over" and accept the same ids twice).
 *
 * `.lock/` holds numbered entries (`1`, `2`, …), each naming its holder (pid, host, a random
 * token). Taking the lock means creating the entry one past the highest, after reading that
 * highest one and finding its holder dead. Creation is atomic and never overwrites: the entry
 * is written whole under a name of our own, then link(2)ed to its number, which fails when
 * the number exists. Two processes that found the same dead holder race for the same number,
 * and exactly one wins; the other reads the winner's entry and is refused.
 *
 * Why that is enough: an entry is removed only by its own holder, when it releases the lock,
 * so a dead holder's entry stays where it is. Whoever creates entry n+1 read entry n and found
 * its holder dead; so no live holder can sit below a newer entry, and only the entry with the
 * highest number can be held. (A crashed session leaves one small file behind for good.)
 *
 * A holder is "dead" when no process with its pid runs on this machine, or when the pid is our
 * own but the token is not one this process holds (a container that restarted with the same
 * pid). Liveness by pid means nothing across machines: docs/run-directory.md, "The lock, and what holds on a
 * shared filesystem".
 */
import { randomBytes } from 'node:crypto';
import { existsSync, linkSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { TrajforgeError } from '../../errors.js';
import { pidAlive, removeDeadTemps } from '../../files.js';

export const LOCK = '.lock';

/**
 * Test hook: with this set to a path, a process that is about to create its entry first
 * creates `<path>.<pid>` and waits until `<path>` exists. A test starts two processes, waits
 * for both markers and then lets them go, so both are inside the race window at once.
 */
const PAUSE_ENV = 'TRAJFORGE_TEST_LOCK_PAUSE';
const PAUSE_MAX_MS = 60_000;
/** Rounds of "read the highest entry, try the next number" before giving up: each lost round means another process won one. */
const MAX_ROUNDS = 50;

interface Entry {
  readonly pid: number;
  readonly host: string;
  readonly token: string;
}

/** Entries this process holds (path → token), so a same-pid entry can be told from a restarted container's. */
const held = new Map<string, string>();

function readEntry(file: string): Entry | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    const e = JSON.parse(text) as Partial<Entry>;
    return { pid: Number(e.pid), host: String(e.host ?? ''), token: String(e.token ?? '') };
  } catch {
    // Entries are linked in whole, so this is no torn write: someone edited it. Nobody holds it.
    return { pid: Number.NaN, host: '', token: '' };
  }
}

function alive(file: string, e: Entry): boolean {
  if (!Number.isInteger(e.pid) || e.pid <= 0) return false;
  if (e.pid === process.pid) return held.get(file) === e.token;
  return pidAlive(e.pid);
}

/** The lock of earlier versions, a file holding a pid: refused while its pid lives, else removed. */
function clearLegacy(dir: string, path: string): void {
  let st;
  try {
    st = lstatSync(path);
  } catch {
    return;
  }
  if (st.isDirectory()) return;
  let pid: number;
  try {
    pid = Number.parseInt(readFileSync(path, 'utf8').trim(), 10);
  } catch {
    // Another process cleared it (and maybe made `.lock/`) since we looked.
    return;
  }
  if (Number.isInteger(pid) && pid !== process.pid && pidAlive(pid)) {
    throw new TrajforgeError('RUN_LOCKED', `${dir}: another trajforge process (pid ${pid}) is writing this run`, { file: path });
  }
  rmSync(path, { force: true });
}

function pauseForTest(): void {
  const go = process.env[PAUSE_ENV];
  if (!go) return;
  writeFileSync(`${go}.${process.pid}`, '');
  const tick = new Int32Array(new SharedArrayBuffer(4));
  const deadline = Date.now() + PAUSE_MAX_MS;
  while (!existsSync(go) && Date.now() < deadline) Atomics.wait(tick, 0, 0, 5);
}

function highest(lockDir: string): number {
  let max = 0;
  for (const name of readdirSync(lockDir)) if (/^[1-9][0-9]*$/.test(name)) max = Math.max(max, Number(name));
  return max;
}

/** Writes our entry under its temporary name inside `.lock/`, which then cannot be removed under us. */
function writeTemp(lockDir: string, mine: Entry): string {
  const temp = join(lockDir, `${mine.pid}-${mine.token}.tmp`);
  for (let i = 0; ; i++) {
    mkdirSync(lockDir, { recursive: true });
    try {
      writeFileSync(temp, JSON.stringify(mine), { flag: 'wx' });
      return temp;
    } catch (err) {
      // A release removed the empty directory between the two calls.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || i >= MAX_ROUNDS) throw err;
    }
  }
}

/** Takes the run's lock or throws RUN_LOCKED naming the holder. Returns the entry to release. */
export function takeLock(dir: string): string {
  const lockDir = join(dir, LOCK);
  clearLegacy(dir, lockDir);
  const mine: Entry = { pid: process.pid, host: hostname(), token: randomBytes(8).toString('hex') };
  const temp = writeTemp(lockDir, mine);
  try {
    // Temporary names left by a process killed while it took the lock.
    removeDeadTemps(lockDir, /^(\d+)-[0-9a-f]+\.tmp$/);
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const top = highest(lockDir);
      if (top > 0) {
        const file = join(lockDir, String(top));
        const holder = readEntry(file);
        // Released between the listing and the read: look again.
        if (!holder) continue;
        if (alive(file, holder)) {
          const where = holder.host && holder.host !== mine.host ? ` on ${holder.host}` : '';
          throw new TrajforgeError('RUN_LOCKED', `${dir}: another trajforge process (pid ${holder.pid}${where}) is writing this run`, { file });
        }
      }
      if (round === 0) pauseForTest();
      const entry = join(lockDir, String(top + 1));
      try {
        linkSync(temp, entry);
      } catch (err) {
        // NFS can lose the reply to a link that was made: then our file has two names (open(2)).
        const made = (err as NodeJS.ErrnoException).code === 'EEXIST' && statSync(temp).nlink === 2;
        // Otherwise someone else took this number: look again.
        if (!made && (err as NodeJS.ErrnoException).code === 'EEXIST') continue;
        if (!made) throw err;
      }
      held.set(entry, mine.token);
      return entry;
    }
    throw new TrajforgeError('RUN_LOCKED', `${dir}: could not take the run's lock: other processes kept taking it (${MAX_ROUNDS} tries)`, { file: lockDir });
  } finally {
    rmSync(temp, { force: true });
  }
}

/**
 * Releases an entry taken by `takeLock`, if it still is ours. Synchronous: the CLI exits right
 * after closing the run. The empty `.lock/` goes too; it only empties when no crashed session
 * left an entry behind.
 */
export function releaseLock(entry: string): void {
  const token = held.get(entry);
  if (token === undefined) return;
  held.delete(entry);
  try {
    if (readEntry(entry)?.token === token) unlinkSync(entry);
    rmdirSync(join(entry, '..'));
  } catch {
    // already gone, or other entries remain
  }
}

/** Who holds a run's lock now, if anyone: for a reader (merge) that says a run is still being written. */
export function lockHolder(dir: string): { readonly pid: number; readonly host: string } | undefined {
  const lockDir = join(dir, LOCK);
  try {
    if (!lstatSync(lockDir).isDirectory()) {
      const pid = Number.parseInt(readFileSync(lockDir, 'utf8').trim(), 10);
      return Number.isInteger(pid) && pid !== process.pid && pidAlive(pid) ? { pid, host: '' } : undefined;
    }
    const top = highest(lockDir);
    if (top === 0) return undefined;
    const file = join(lockDir, String(top));
    const holder = readEntry(file);
    return holder && alive(file, holder) ? holder : undefined;
  } catch {
    // no lock, or one we cannot read: nothing to say
    return undefined;
  }
}
