/**
 * An async iterable fed as it goes: `push` adds an item, `end` ends it; the reader's `next()`
 * waits while it is empty. How the solvability check hands samples to a generate session that
 * is already running.
 */
export class Channel<T> implements AsyncIterable<T> {
  readonly #items: T[] = [];
  #waiting: ((r: IteratorResult<T>) => void) | undefined;
  #ended = false;

  push(item: T): void {
    if (this.#ended) throw new Error('push on an ended channel');
    const wake = this.#waiting;
    this.#waiting = undefined;
    if (wake) wake({ value: item, done: false });
    else this.#items.push(item);
  }

  end(): void {
    this.#ended = true;
    const wake = this.#waiting;
    this.#waiting = undefined;
    wake?.({ value: undefined, done: true });
  }

  get ended(): boolean {
    return this.#ended;
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: (): Promise<IteratorResult<T>> => {
        if (this.#items.length > 0) return Promise.resolve({ value: this.#items.shift()!, done: false });
        if (this.#ended) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.#waiting = resolve));
      },
    };
  }
}
