/** Preloaded into a measured CLI process: its own CPU, at exit, as the last line on stderr (cpu-at-exit.ts). */
import { writeSync } from 'node:fs';
import { CPU_AT_EXIT } from './cpu-at-exit.js';

process.on('exit', () => {
  const { user, system } = process.cpuUsage();
  writeSync(2, `\n${CPU_AT_EXIT} ${user + system}\n`);
});
