/**
 * A synthesis run directory: one line per seed, written once, whatever kills the run.
 *
 *   manifest.json     config (redacted), fingerprint, counts (kept, rejected by check), one `sessions` entry per invocation
 *   questions.jsonl   the kept questions (SynthesizedQuestion): a question bank `generate` reads
 *   rejected.jsonl    every rejected draft (RejectedDraft), with the check that rejected it
 *   solve/            the solvability rollouts: an ordinary run directory (solvable.ts)
 *
 * The run directory's machinery is the generate store's: the lock (one writer), a cut last line
 * moved aside on open (run-lines.ts), whole-line appends cut back when a write fails, the
 * manifest written atomically, a resume refused when the config's fingerprint differs. Memory
 * holds the seed ids on record (IdSet), never the rows.
 */
import { createReadStream, existsSync, statSync } from 'node:fs';
import { mkdir, open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { RejectedDraft, RunManifest, SynthesizedQuestion } from '../../schemas/index.js';
import { appendWhole } from '../core/jsonl.js';
import { releaseLock, takeLock } from '../core/run-dir/lock.js';
import { MANIFEST, SYNTH_QUESTIONS, SYNTH_REJECTED } from '../core/run-dir/names.js';
import { describeTailRepair, repairTail } from '../core/run-dir/run-lines.js';
import { Scrubber } from '../core/secrets.js';
import { inputError, TrajforgeError } from '../errors.js';
import { fsError } from '../files.js';
import { IdSet } from '../id-set.js';
import { PACKAGE_VERSION } from '../paths.js';
import { endLastInvocation, readRunManifest, resumeWith, writeManifestFile, type OpenRunOptions } from '../generate/store.js';

/** What a line of either file holds that the store reads back. */
interface SeedLine {
  readonly id?: string;
  readonly question?: string;
  readonly source?: { readonly seed?: unknown };
  readonly rejected_by?: string;
  readonly cost?: { readonly requests?: number; readonly prompt_tokens?: number; readonly completion_tokens?: number };
}

export interface SynthStoreOptions extends OpenRunOptions {
  /** Each kept question on record, as the run is read: what depends on them (the near-duplicate index) is rebuilt from it. */
  readonly onKept?: ((id: string, question: string) => void) | undefined;
}

export class SynthStore {
  readonly dir: string;
  readonly resumed: boolean;
  readonly notices: string[] = [];
  readonly #seeds = new IdSet();
  kept = 0;
  rejected = 0;
  readonly byCheck: Record<string, number> = {};
  /** Spent by the seeds on record: what the budgets count. */
  readonly spent = { requests: 0, tokens: 0 };
  #manifest: RunManifest;
  readonly #scrubber: Scrubber;
  readonly #lock: string;
  readonly #files: { kept?: FileHandle; rejected?: FileHandle } = {};
  readonly #bytes = { kept: 0, rejected: 0 };
  #chain: Promise<unknown> = Promise.resolve();
  #writeError: Error | undefined;

  private constructor(dir: string, manifest: RunManifest, resumed: boolean, lock: string, scrubber: Scrubber) {
    this.dir = dir;
    this.#manifest = manifest;
    this.resumed = resumed;
    this.#lock = lock;
    this.#scrubber = scrubber;
  }

  get manifest(): RunManifest {
    return this.#manifest;
  }

  static async open(opts: SynthStoreOptions): Promise<SynthStore> {
    try {
      await mkdir(opts.dir, { recursive: true });
    } catch (err) {
      throw fsError(opts.dir, err, 'cannot make the run directory');
    }
    const lock = takeLock(opts.dir);
    let opened: SynthStore | undefined;
    try {
      const manifestPath = join(opts.dir, MANIFEST);
      const resume = existsSync(manifestPath) ? resumeWith(await readRunManifest(manifestPath), opts, manifestPath) : undefined;
      const store = new SynthStore(opts.dir, resume?.manifest ?? opts.fresh(), resume !== undefined, lock, opts.scrubber ?? Scrubber.none);
      opened = store;
      store.notices.push(...(resume?.notices ?? []));
      const repairs = [SYNTH_QUESTIONS, SYNTH_REJECTED].flatMap((f) => repairTail(join(opts.dir, f)) ?? []);
      store.notices.push(...repairs.map(describeTailRepair));
      await store.#scan(SYNTH_QUESTIONS, opts.onKept);
      await store.#scan(SYNTH_REJECTED);
      for (const [key, name] of [['kept', SYNTH_QUESTIONS], ['rejected', SYNTH_REJECTED]] as const) {
        const file = join(opts.dir, name);
        store.#files[key] = await open(file, 'a');
        store.#bytes[key] = statSync(file).size;
      }
      const now = new Date().toISOString();
      const invocation = { started_at: now, trajforge_version: PACKAGE_VERSION, ...resume?.invocation, ...(repairs.length ? { tail_repairs: repairs } : {}) };
      store.#manifest = { ...store.#manifest, status: 'running', updated_at: now, sessions: [...store.#manifest.sessions, invocation] };
      store.writeManifest();
      return store;
    } catch (err) {
      // A store that could not open holds nothing: a caller that goes on keeps no file open.
      if (opened !== undefined) await Promise.all(Object.values(opened.#files).map((f) => f?.close())).catch(() => undefined);
      releaseLock(lock);
      throw err;
    }
  }

  /** Reads the seeds a file holds (ids only), and what they spent. */
  async #scan(name: string, onKept?: (id: string, question: string) => void): Promise<void> {
    const file = join(this.dir, name);
    if (!existsSync(file)) return;
    let line = 0;
    for await (const text of createInterface({ input: createReadStream(file, 'utf8'), crlfDelay: Infinity })) {
      line++;
      if (text.trim() === '') continue;
      let row: SeedLine;
      try {
        row = JSON.parse(text) as SeedLine;
      } catch {
        throw inputError(file, line, undefined, 'not valid JSON; the run directory was changed by hand?');
      }
      const seed = row?.source?.seed;
      if (typeof seed !== 'string') throw inputError(file, line, 'source.seed', 'missing; not a line synthesize wrote');
      if (!this.#seeds.add(seed)) throw inputError(file, line, 'source.seed', `seed ${seed} is on record twice; the run directory was changed by hand?`);
      this.#count(row, name === SYNTH_QUESTIONS);
      if (name === SYNTH_QUESTIONS && onKept && typeof row.id === 'string' && typeof row.question === 'string') onKept(row.id, row.question);
    }
  }

  #count(row: SeedLine, kept: boolean): void {
    if (kept) this.kept++;
    else {
      this.rejected++;
      const by = row.rejected_by ?? 'unknown';
      this.byCheck[by] = (this.byCheck[by] ?? 0) + 1;
    }
    this.spent.requests += row.cost?.requests ?? 0;
    this.spent.tokens += (row.cost?.prompt_tokens ?? 0) + (row.cost?.completion_tokens ?? 0);
  }

  isDone(seed: string): boolean {
    return this.#seeds.has(seed);
  }

  get done(): number {
    return this.#seeds.size;
  }

  /**
   * Appends the seed's one line to the file its outcome names; a seed on record is never written
   * again, nor a kept question `allow` refuses (the kept budget, decided in write order). A write
   * that fails is cut back, and every later one refused. Returns whether it was written.
   */
  append(row: SynthesizedQuestion | RejectedDraft, kept: boolean, allow: () => boolean = () => true): Promise<boolean> {
    const result = this.#chain.then(async () => {
      if (this.#writeError) throw this.#writeError;
      if (this.#seeds.has(row.source.seed) || (kept && !allow())) return false;
      const key = kept ? 'kept' : 'rejected';
      const line = Buffer.from(`${JSON.stringify(this.#scrubber.value(row))}\n`, 'utf8');
      try {
        appendWhole(this.#files[key]!.fd, line);
      } catch (err) {
        // A full disk can take part of a line: cut it off, so every line on disk stays whole.
        await this.#files[key]!.truncate(this.#bytes[key]).catch(() => undefined);
        this.#writeError = new TrajforgeError('WRITE_FAILED', `${this.dir}: cannot append a line: ${(err as Error).message}`, { file: this.dir, cause: err });
        throw this.#writeError;
      }
      this.#bytes[key] += line.length;
      this.#seeds.add(row.source.seed);
      this.#count(row as SeedLine, kept);
      return true;
    });
    this.#chain = result.catch(() => undefined);
    return result;
  }

  counts(): RunManifest['counts'] {
    return { accepted: this.kept, failed: this.rejected, by_reason: { ...this.byCheck } };
  }

  writeManifest(patch: Partial<RunManifest> = {}): void {
    this.#manifest = { ...this.#manifest, counts: this.counts(), ...patch, updated_at: new Date().toISOString() };
    writeManifestFile(join(this.dir, MANIFEST), this.#manifest, this.#scrubber);
  }

  /** Flushes and closes both files; the manifest records how the invocation ended. */
  async close(status: RunManifest['status'], exit: string): Promise<void> {
    await this.#chain;
    for (const fh of [this.#files.kept, this.#files.rejected]) {
      await fh?.sync().catch(() => undefined);
      await fh?.close().catch(() => undefined);
    }
    try {
      this.writeManifest({ status, sessions: endLastInvocation(this.#manifest.sessions, exit) });
    } finally {
      releaseLock(this.#lock);
    }
  }
}
