/**
 * Waiting for Ctrl-C: what a command that serves until stopped (`trajforge sim`, `report
 * --serve`) waits on before it closes its server.
 */

/** Resolves at the first SIGINT or SIGTERM, and stops listening for both. */
export function untilStopped(): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = (): void => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
