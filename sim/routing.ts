/**
 * Which handler a request goes to: chat completions (POST), the model list and a model's card,
 * and the sim's own counters. Clients differ on whether the base URL carries `/v1`, so both are
 * taken. Anything else is OpenAI's 404.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError } from './api-error.js';
import { handleChat, type SimState } from './chat.js';
import { modelCard, SIM_MODEL } from './models.js';
import { sendJson } from './send.js';

export async function route(sim: SimState, req: IncomingMessage, res: ServerResponse, signal: AbortSignal, drop: () => void): Promise<void> {
  const path = (req.url ?? '/').split('?')[0] ?? '/';
  const method = req.method ?? 'GET';
  const endpoint = path.startsWith('/v1/') ? path.slice(3) : path;
  if (endpoint === '/chat/completions') {
    if (method !== 'POST') throw new ApiError(405, `Method ${method} not allowed on ${path}; use POST.`, 'invalid_request_error', null, 'method_not_allowed');
    return handleChat(sim, req, res, signal, drop);
  }
  if (method === 'GET' && endpoint === '/models') {
    return sendJson(res, sim.stats, 200, { object: 'list', data: [modelCard(SIM_MODEL)] });
  }
  if (method === 'GET' && endpoint.startsWith('/models/')) {
    return sendJson(res, sim.stats, 200, modelCard(decodeURIComponent(endpoint.slice('/models/'.length))));
  }
  if (method === 'GET' && (path === '/sim/stats' || path === '/v1/sim/stats')) return sendJson(res, sim.stats, 200, structuredClone(sim.stats));
  throw new ApiError(404, `Unknown request URL: ${method} ${path}.`, 'invalid_request_error', null, 'unknown_url');
}
