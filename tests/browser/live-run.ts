/**
 * What the live browser tests share: a gate in front of the sim that holds chat requests once a
 * number have passed (so the middle of a run is a state to wait for, not a moment to hit), and
 * the CLI started as a child process whose output is kept.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser, type Page } from 'playwright-core';
import { expect } from 'vitest';
import { CLI } from '../helpers.js';

export const CHROMIUM = '/usr/bin/chromium';
export const HAVE_CHROMIUM = existsSync(CHROMIUM);

/** Debian's Chromium, headless, with nothing of its own reaching the network. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** `report --serve` started on `run` (with `flags`), once it says its address. */
export async function startServe(run: string, flags: string[] = []): Promise<{ serve: Child; url: string }> {
  const serve = start(['report', '--serve', run, '--port', '0', '--poll-ms', '100', ...flags]);
  const at = (): string | undefined => /at (http:\/\/127\.0\.0\.1:\d+\/)/.exec(serve.stdout)?.[1];
  await expect.poll(at, { timeout: 30_000 }).toBeTruthy();
  return { serve, url: at()! };
}

/** A page on `url`, connected to its live panel, and the errors it logs (a test expects none). */
export async function openLivePage(browser: Browser, url: string): Promise<{ page: Page; errors: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForSelector('#live[data-connected="1"]');
  return { page, errors };
}

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

/** Ends what a live test started, whichever of it was started: its children killed, then each thing closed in turn. */
export async function stopAll(children: readonly (Child | undefined)[], closers: readonly ({ close(): Promise<unknown> } | undefined)[]): Promise<void> {
  for (const c of children) if (c && c.proc.exitCode === null) c.proc.kill('SIGKILL');
  for (const x of closers) await x?.close();
}
