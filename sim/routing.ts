/**
 * Which handler a request goes to: chat completions (POST), the model list and a model's card,
 * and the sim's own counters. As vLLM, only under `/v1` (a base URL without it meets FastAPI's
 * 404); lenient, both are taken, as clients differ on whether the base URL carries `/v1`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, modelNotFound, noRoute } from './api-error.js';
import { handleChat, type SimState } from './chat.js';
import { modelCard } from './models.js';
import { sendJson } from './send.js';

export async function route(sim: SimState, req: IncomingMessage, res: ServerResponse, signal: AbortSignal, drop: () => void): Promise<void> {
  const path = (req.url ?? '/').split('?')[0] ?? '/';
  const method = req.method ?? 'GET';
  if (method === 'GET' && (path === '/sim/stats' || path === '/v1/sim/stats')) return sendJson(res, sim.stats, 200, structuredClone(sim.stats));
  if (!path.startsWith('/v1/') && !sim.o.lenient) throw noRoute();
  const endpoint = path.startsWith('/v1/') ? path.slice(3) : path;
  if (endpoint === '/chat/completions') {
    if (method !== 'POST') throw new ApiError(405, `Method ${method} not allowed on ${path}; use POST.`, 'invalid_request_error', null, 'method_not_allowed');
    return handleChat(sim, req, res, signal, drop);
  }
  if (method === 'GET' && endpoint === '/models') {
    return sendJson(res, sim.stats, 200, { object: 'list', data: sim.o.models.map(modelCard) });
  }
  if (method === 'GET' && endpoint.startsWith('/models/')) {
    const id = decodeURIComponent(endpoint.slice('/models/'.length));
    if (!sim.o.lenient && !sim.o.models.includes(id)) throw modelNotFound(id);
    return sendJson(res, sim.stats, 200, modelCard(id));
  }
  throw new ApiError(404, `Unknown request URL: ${method} ${path}.`, 'invalid_request_error', null, 'unknown_url');
}
