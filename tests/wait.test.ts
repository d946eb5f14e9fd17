/**
 * pipeline/wait.ts: the first of several events, from Node emitters and from an AbortSignal,
 * leaves no listener behind on any of them.
 */
import { EventEmitter, getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { firstEvent } from '../pipeline/wait.js';

describe('firstEvent', () => {
  it('resolves at the first event, and stops listening on every source', async () => {
    const stream = new EventEmitter();
    const controller = new AbortController();
    let resolved = false;
    const waiting = firstEvent([stream, 'drain'], [stream, 'close'], [controller.signal, 'abort']).then(() => (resolved = true));
    expect(stream.listenerCount('drain')).toBe(1);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    await Promise.resolve();
    expect(resolved).toBe(false);
    stream.emit('close');
    await waiting;
    expect(resolved).toBe(true);
    expect(stream.listenerCount('drain') + stream.listenerCount('close')).toBe(0);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
  });

  it('an abort ends the wait as well as an emitter does', async () => {
    const stream = new EventEmitter();
    const controller = new AbortController();
    const waiting = firstEvent([stream, 'drain'], [controller.signal, 'abort']);
    controller.abort();
    await waiting;
    expect(stream.listenerCount('drain')).toBe(0);
  });
});
