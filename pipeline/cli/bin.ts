#!/usr/bin/env node
import { main } from './main.js';

main(process.argv.slice(2)).then(
  // Exit at once: keep-alive sockets and timers of finished work must not hold the process.
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`trajforge: internal error: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  },
);
