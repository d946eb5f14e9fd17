/**
 * The on-disk index of a JSONL corpus, built the first time a server asks for it
 * (`--engine sqlite`) and kept in the cache directory under the corpus's SHA-256, so the next
 * server opens it at once and an edited corpus gets an index of its own. The build goes to a
 * directory of this process's own and is renamed into place whole: a server never sees half an
 * index, and when two servers start at once each builds, one rename wins and the other server
 * uses the winner's index and removes its own.
 */
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { removeDeadTemps } from '../../pipeline/files.js';
import { buildIndex } from './build.js';
import { FTS_FORMAT, INDEX_FILE } from './fts.js';

async function fileSha256(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** The index directory for `corpusPath` under `cacheRoot`, built now when there is none. Throws TrajforgeError for a bad corpus. */
export async function indexAtFirstUse(corpusPath: string, cacheRoot: string): Promise<{ dir: string; built: boolean }> {
  const parent = join(cacheRoot, 'corpus-index');
  const key = createHash('sha256').update(`${FTS_FORMAT}\n${await fileSha256(corpusPath)}`).digest('hex').slice(0, 32);
  const dir = join(parent, key);
  if (existsSync(join(dir, INDEX_FILE))) return { dir, built: false };
  mkdirSync(parent, { recursive: true });
  // Builds of servers that were killed midway.
  removeDeadTemps(parent, /^[0-9a-f]{32}\.tmp-(\d+)-/);
  const tmp = mkdtempSync(join(parent, `${key}.tmp-${process.pid}-`));
  try {
    await buildIndex({ input: corpusPath, outDir: tmp });
    try {
      renameSync(tmp, dir);
    } catch (err) {
      // Another server renamed its build into place first: that one is as good.
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'ENOTEMPTY' && code !== 'EEXIST') || !existsSync(join(dir, INDEX_FILE))) throw err;
      return { dir, built: false };
    }
    return { dir, built: true };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}
