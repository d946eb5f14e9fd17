/**
 * A measured CLI process's own CPU, as it tells it at exit: the queue benches preload
 * cpu-at-exit-preload.ts (`node --import`), which writes one last stderr line, `cpu-at-exit
 * MICROSECONDS` (all the process's threads, not its children's). Read from /proc while the
 * process ran, the figure missed whatever it did after the last reading (up to 100 ms: closing
 * the run, the last fsyncs), a few percent of a run's CPU, different from run to run.
 */
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../pipeline/paths.js';

export const CPU_AT_EXIT = 'cpu-at-exit';

/** The `--import` argument that makes a process tell its CPU at exit. */
export const CPU_AT_EXIT_PRELOAD = pathToFileURL(join(PACKAGE_ROOT, 'dist/bench/cpu-at-exit-preload.js')).href;

/** The CPU seconds the exit line of `stderr` tells, and stderr without that line; undefined when there is none (the process was killed). */
export function cpuAtExit(stderr: string): { cpu: number; stderr: string } | undefined {
  const m = new RegExp(`\\n${CPU_AT_EXIT} (\\d+)\\n$`).exec(stderr);
  return m ? { cpu: Number(m[1]) / 1e6, stderr: stderr.slice(0, m.index) } : undefined;
}
