/**
 * What the live browser tests share: a gate in front of the sim that holds chat requests once a
 * number have passed (so the middle of a run is a state to wait for, not a moment to hit), and
 * the CLI started as a child process whose output is kept.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CLI } from '../helpers.js';

/** A loopback proxy in front of the sim that holds chat requests past the first `letThrough` until `open()`. */
export class Gate {
  readonly #server: Server;
  #passed = 0;
  #open = false;
  readonly #held: (() => void)[] = [];

  constructor(target: URL, letThrough: number) {
    this.#server = createServer((req, res) => {
      const forward = (): void => {
        const up = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers);
          r.pipe(res);
        });
        up.on('error', () => res.destroy());
        res.on('close', () => up.destroy());
        req.pipe(up);
      };
      const chat = req.method === 'POST' && (req.url ?? '').includes('/chat/completions');
      if (!chat || this.#open) return forward();
      if (this.#passed < letThrough) {
        this.#passed++;
        return forward();
      }
      this.#held.push(forward);
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', () => r()));
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}/v1`;
  }

  get held(): number {
    return this.#held.length;
  }

  open(): void {
    this.#open = true;
    for (const go of this.#held.splice(0)) go();
  }

  async close(): Promise<void> {
    this.open();
    this.#server.closeAllConnections();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }
}

export interface Child {
  readonly proc: ChildProcess;
  stdout: string;
  stderr: string;
  readonly exited: Promise<number | null>;
}

export function start(args: string[]): Child {
  const proc = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const child: Child = {
    proc,
    stdout: '',
    stderr: '',
    exited: new Promise((resolve) => proc.once('exit', (code) => resolve(code))),
  };
  proc.stdout!.on('data', (d: Buffer) => (child.stdout += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (child.stderr += d.toString()));
  return child;
}

