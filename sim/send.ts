/**
 * Sending a whole response (JSON, or a raw body such as a proxy's HTML page) and counting it by
 * status. Nothing is sent to a client that is gone or to a response already under way.
 */
import type { ServerResponse } from 'node:http';
import { bump, type SimStats } from './stats.js';

export function sendRaw(res: ServerResponse, stats: SimStats, status: number, contentType: string, text: string, headers: Record<string, string> = {}): void {
  if (res.destroyed || res.headersSent) return;
  res.writeHead(status, { 'Content-Type': contentType, 'Content-Length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
  bump(stats.responsesByStatus, status);
}

export function sendJson(res: ServerResponse, stats: SimStats, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.destroyed || res.headersSent) return;
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': String(Buffer.byteLength(payload)),
    ...headers,
  });
  res.end(payload);
  bump(stats.responsesByStatus, status);
}
