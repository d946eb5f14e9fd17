/**
 * Module-loader hooks for a sandbox process (registered by child.ts from this file's compiled
 * text, as a data: URL, since the sandbox may read no file of ours). Two jobs:
 *
 * - `ws` (the WebSocket package Pyodide loads to give Python sockets over the network) resolves
 *   to a stand-in whose constructor throws, so Python's `socket` module finds no network;
 * - once child.ts says `lock` (Pyodide has loaded), every further `import()` is refused, so no
 *   code path left in the interpreter (Pyodide's own socket layer imports `node:net` on demand)
 *   can load a module after the sandbox starts taking code.
 *
 * Self-contained on purpose: it is loaded as text, with nothing to import.
 */

interface InitData {
  readonly port: {
    on(event: 'message', listener: (message: unknown) => void): void;
    postMessage(message: unknown): void;
    unref(): void;
  };
}

interface ResolveResult {
  readonly url: string;
  readonly shortCircuit?: boolean;
}

const NO_NETWORK_WS =
  'export default class WebSocket { constructor() { throw new Error("this sandbox has no network"); } }\n' + 'export const WebSocketServer = WebSocket;\n';

let locked = false;

export async function initialize({ port }: InitData): Promise<void> {
  port.on('message', (message) => {
    if (message !== 'lock') return;
    locked = true;
    port.postMessage('locked');
  });
  port.unref();
}

export async function resolve(specifier: string, context: unknown, next: (specifier: string, context: unknown) => Promise<ResolveResult>): Promise<ResolveResult> {
  if (locked) throw new Error(`import of ${JSON.stringify(specifier)} refused: this sandbox loads no modules once it has started`);
  if (specifier === 'ws') return { url: `data:text/javascript,${encodeURIComponent(NO_NETWORK_WS)}`, shortCircuit: true };
  return next(specifier, context);
}
