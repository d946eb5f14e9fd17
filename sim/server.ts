/**
 * An OpenAI-compatible `/v1/chat/completions` on loopback that plays a scripted model
 * (policy.ts) in the dialect each request speaks — DR Tulu, MiroThinker's mcp-xml or native
 * function calling (dialects.ts) — and in the role it plays, when it is a main agent or a
 * browsing sub-agent (roles.ts), and misbehaves at configured rates (misbehave.ts). It is
 * how the demo, the tests and the benchmarks run without a real model.
 *
 * Determinism: a request's draws come from the seed, a hash of its messages (and of the
 * request's own `seed` field, when it sends one) and how many times that exact message list
 * has been seen before. A client that resamples a prompt gets a fresh draw; samples that run
 * concurrently get the same text whatever order they arrive in.
 *
 * This file starts and stops the server and counts connections. A request goes through
 * routing.ts to chat.ts (one chat request, from its body to its answer) or the model list
 * (models.ts); options.ts holds the options and their defaults, stats.ts the counters.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiError } from './api-error.js';
import type { SimState } from './chat.js';
import { normaliseRates } from './misbehave.js';
import { resolveOptions, type SimOptions } from './options.js';
import { route } from './routing.js';
import { sendJson, sendRaw } from './send.js';
import { newStats, type SimStats } from './stats.js';
import { SynthRoles, type Planted } from './synth.js';

// The sim's public face: start it, its options and counters, and the figures tests check against.
export { estimateTokens } from './completion.js';
export { SIM_MODEL } from './models.js';
export { SIM_DEFAULTS, type SimOptions } from './options.js';
export { MAX_STOP_STRINGS } from './request.js';
export type { SimStats } from './stats.js';

export interface Sim {
  /** `http://127.0.0.1:PORT/v1`, the base URL an OpenAI client takes. */
  readonly url: string;
  readonly port: number;
  /** Stops listening and ends every open connection, stalled ones included. */
  close(): Promise<void>;
  /** A snapshot. */
  stats(): SimStats;
  /** Synthesis: what the writer and obfuscator planted, one entry per seed (sim/synth.ts). */
  planted(): Planted[];
}

export async function startSim(opts: SimOptions = {}): Promise<Sim> {
  const o = resolveOptions(opts);
  const synth = new SynthRoles({ seed: o.seed, plant: opts.plant, knowledge: opts.knowledge });
  const sim: SimState = { o, synth, rates: normaliseRates(opts.misbehave), stats: newStats(), seen: new Map() };
  const { stats } = sim;
  const open = new Set<AbortController>();

  const server = createServer((req, res) => {
    stats.requests++;
    stats.inFlight++;
    stats.peakConcurrent = Math.max(stats.peakConcurrent, stats.inFlight);
    const controller = new AbortController();
    open.add(controller);
    let dropped = false;
    const drop = (): void => {
      dropped = true;
      req.socket.destroy();
    };
    res.on('close', () => {
      stats.inFlight--;
      open.delete(controller);
      if (!res.writableFinished && !dropped) stats.clientAborts++;
      controller.abort();
    });
    route(sim, req, res, controller.signal, drop).catch((err: unknown) => {
      if (err instanceof ApiError && err.raw) return sendRaw(res, stats, err.status, err.raw.contentType, err.raw.text, err.headers);
      if (err instanceof ApiError) return sendJson(res, stats, err.status, err.json(), err.headers);
      sendJson(res, stats, 500, new ApiError(500, `trajforge-sim internal error: ${String(err)}`, 'server_error', null, null).json());
    });
  });

  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  let closing: Promise<void> | null = null;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    stats: () => structuredClone(stats),
    planted: () => synth.planted(),
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve) => {
        for (const c of open) c.abort();
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}
