/**
 * Waiting on events: the first of several (a drain or a close, a signal or another), and Ctrl-C,
 * which a command that serves until stopped (`trajforge sim`, `report --serve`) waits on before
 * it closes its server. Every listener is removed once one fires.
 */

/** Something that emits named events: a Node emitter (a stream, the process) or a DOM-style target (an AbortSignal). */
type Source = NodeJS.EventEmitter | EventTarget;

function listen(source: Source, name: string, fn: () => void): void {
  if ('on' in source) source.on(name, fn);
  else source.addEventListener(name, fn);
}

function unlisten(source: Source, name: string, fn: () => void): void {
  if ('off' in source) source.off(name, fn);
  else source.removeEventListener(name, fn);
}

/** Resolves at the first of `events` (each a source and an event name), and stops listening for all of them. */
export function firstEvent(...events: readonly (readonly [Source, string])[]): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      for (const [source, name] of events) unlisten(source, name, done);
      resolve();
    };
    for (const [source, name] of events) listen(source, name, done);
  });
}

/** Resolves at the first SIGINT or SIGTERM. */
export function untilStopped(): Promise<void> {
  return firstEvent([process, 'SIGINT'], [process, 'SIGTERM']);
}
