/** Shared by the fault-injection suites: real processes, real files, a seeded RNG for the random moments. */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { expect } from 'vitest';
import { FailureRecord, RunManifest, Trajectory } from '../../schemas/index.js';
import { CLI } from '../helpers.js';

/** `TRAJFORGE_FULL_FAULTS=1` runs the heavy variants (20 SIGKILLs instead of 5, bigger runs). */
export const FULL = process.env.TRAJFORGE_FULL_FAULTS === '1';
/** The seed of every random moment; set TRAJFORGE_FAULT_SEED to replay a failure. */
export const FAULT_SEED = Number(process.env.TRAJFORGE_FAULT_SEED ?? 20260522);

/** mulberry32: small, seeded, the same everywhere. */
export function seededRng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function waitFor(cond: () => boolean, timeoutMs: number, stepMs = 20): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (cond()) return true;
    await sleep(stepMs);
  }
  return cond();
}

/** The complete lines of a file (a partial last line is left out), as text. */
export function completeLines(file: string): string[] {
  if (!existsSync(file)) return [];
  const text = readFileSync(file, 'utf8');
  const end = text.lastIndexOf('\n');
  return end < 0 ? [] : text.slice(0, end).split('\n');
}

/** Every line of the file, the last one included even if it does not end with a newline. */
export function allLines(file: string): string[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter((l) => l !== '');
}

export interface RunFiles {
  ok: Trajectory[];
  failed: FailureRecord[];
  manifest: RunManifest | undefined;
}

/**
 * The run directory's invariants: every line of both files is one complete record that
 * parses with its schema, the files end with a newline, and no id is accepted twice.
 */
export function checkRunDir(dir: string): RunFiles {
  const parse = <T>(file: string, schema: { parse(v: unknown): T }): T[] => {
    if (!existsSync(file)) return [];
    const text = readFileSync(file, 'utf8');
    if (text !== '') expect(text.endsWith('\n'), `${file} ends with a newline`).toBe(true);
    return allLines(file).map((l, i) => {
      let v: unknown;
      try {
        v = JSON.parse(l);
      } catch {
        throw new Error(`${file}:${i + 1} does not parse: ${l.slice(0, 120)}…`);
      }
      return schema.parse(v);
    });
  };
  const ok = parse(join(dir, 'trajectories.jsonl'), Trajectory);
  const failed = parse(join(dir, 'failures.jsonl'), FailureRecord);
  const ids = ok.map((t) => t.id);
  expect(new Set(ids).size, 'no id accepted twice').toBe(ids.length);
  for (const t of ok) expect(t.status).toBe('ok');
  const manifestFile = join(dir, 'manifest.json');
  const manifest = existsSync(manifestFile) ? RunManifest.parse(JSON.parse(readFileSync(manifestFile, 'utf8'))) : undefined;
  return { ok, failed, manifest };
}

/** The ids a run accounts for: accepted, or failed in every attempt. */
export function accountedIds(files: RunFiles): Set<string> {
  return new Set([...files.ok.map((t) => t.id), ...files.failed.map((t) => t.id)]);
}

export interface Spawned {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** The CLI in the background, so a test can signal it mid-run. */
export function spawnCli(args: string[], env: NodeJS.ProcessEnv = {}, command?: { file: string; args: string[] }): Spawned {
  const child = command
    ? spawn(command.file, command.args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal })),
  );
  return { child, stdout: () => out, stderr: () => err, exited };
}

/** A loopback HTTP server with a handler of the test's own, for endpoints the sim does not play. */
export async function loopbackServer(
  handler: (req: IncomingMessage, res: ServerResponse, body: string) => void,
): Promise<{ url: string; server: Server; requests: () => number; close(): Promise<void> }> {
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => handler(req, res, body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return {
    url,
    server,
    requests: () => requests,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** An OpenAI-shaped error response. */
export function openAiError(res: ServerResponse, status: number, message: string, code: string | null, type = 'invalid_request_error'): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { message, type, param: null, code } }));
}
