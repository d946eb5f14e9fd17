/**
 * The files a run lets the model copy into a sandbox: those inside the directories given with
 * `--inputs`, found by their real path (a symlink that leads out is refused as the place it
 * leads to), regular files only, up to a size. Anything else is refused with a message naming
 * the path, which the model sees.
 */
import { constants } from 'node:fs';
import { open, realpath } from 'node:fs/promises';
import { basename, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { UserError } from '../../pipeline/errors.js';

/** An upload the run's allowed inputs do not hold: the model is told why. */
export class InputRefused extends UserError {}

export class AllowedInputs {
  readonly #dirs: readonly string[];
  readonly #maxBytes: number;

  private constructor(dirs: readonly string[], maxBytes: number) {
    this.#dirs = dirs;
    this.#maxBytes = maxBytes;
  }

  /** The directories by their real paths; one that does not exist is a start-up error. */
  static async open(dirs: readonly string[], maxBytes: number): Promise<AllowedInputs> {
    const real = await Promise.all(dirs.map((d) => realpath(d).catch(() => Promise.reject(new Error(`--inputs ${d}: no such directory`)))));
    return new AllowedInputs(real, maxBytes);
  }

  get dirs(): readonly string[] {
    return this.#dirs;
  }

  /** The file's name and bytes; `path` is absolute, or relative to one of the directories (the first that holds it). */
  async read(path: string): Promise<{ name: string; bytes: Uint8Array }> {
    if (this.#dirs.length === 0) throw new InputRefused('no input files are allowed in this run (the server was started without --inputs)');
    const candidates = isAbsolute(path) ? [path] : this.#dirs.map((d) => join(d, path));
    for (const candidate of candidates) {
      const real = await realpath(candidate).catch(() => undefined);
      if (real === undefined) continue;
      if (!this.#dirs.some((d) => inside(d, real))) throw new InputRefused(`${path} is outside the files this run allows`);
      return { name: basename(real), bytes: await this.#readFile(real, path) };
    }
    throw new InputRefused(`Local file does not exist: ${path}`);
  }

  async #readFile(real: string, asked: string): Promise<Uint8Array> {
    const handle = await open(real, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const stat = await handle.stat();
      if (!stat.isFile()) throw new InputRefused(`Path is not a file: ${asked}`);
      if (stat.size > this.#maxBytes) throw new InputRefused(`${asked} is ${stat.size} bytes, more than the ${this.#maxBytes} a sandbox takes`);
      return await handle.readFile();
    } finally {
      await handle.close();
    }
  }
}

function inside(dir: string, path: string): boolean {
  const rel = relative(dir, resolve(path));
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
}
