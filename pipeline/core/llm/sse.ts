/**
 * Server-sent events as a chat-completions stream sends them, split as the text arrives: lines
 * end in \n, \r\n or a lone \r; `data:` lines gather into an event that a blank line ends;
 * `event:` names it; `:` lines are comments. One linear pass however the text is cut into
 * pieces: where the next \r and \n are is looked up only once the scan has passed them.
 */

/** An event's data lines joined, and its name ('' when it had none). */
export type SseEvent = { readonly data: string; readonly event: string };

export class SseLines {
  #buf = '';
  #data: string[] = [];
  #event = '';
  /** Called with each complete event; returns true when the reader wants no more. */
  readonly #onEvent: (e: SseEvent) => boolean;
  #stopped = false;

  constructor(onEvent: (e: SseEvent) => boolean) {
    this.#onEvent = onEvent;
  }

  /** True once `onEvent` asked to stop: later text is ignored. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** More text. At the end of the body (`final`), an event without its closing blank line is dropped, as the SSE spec says: it may be cut short. */
  push(text: string, final = false): void {
    if (this.#stopped) return;
    this.#buf += text;
    const buf = this.#buf;
    let start = 0;
    let cr = buf.indexOf('\r');
    let nl = buf.indexOf('\n');
    while (!this.#stopped) {
      if (cr >= 0 && cr < start) cr = buf.indexOf('\r', start);
      if (nl >= 0 && nl < start) nl = buf.indexOf('\n', start);
      let end: number;
      let next: number;
      if (cr >= 0 && (nl < 0 || cr < nl)) {
        // A \r at the end of a piece may be half of \r\n.
        if (cr === buf.length - 1 && !final) break;
        end = cr;
        next = nl === cr + 1 ? cr + 2 : cr + 1;
      } else if (nl >= 0) {
        end = nl;
        next = nl + 1;
      } else {
        break;
      }
      const line = buf.slice(start, end);
      start = next;
      this.#line(line);
    }
    this.#buf = final || this.#stopped ? '' : buf.slice(start);
  }

  #line(line: string): void {
    if (line === '') return this.#dispatch();
    if (line.charCodeAt(0) === 58 /* ':' comment */) return;
    const colon = line.indexOf(':');
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (name === 'data') this.#data.push(value);
    else if (name === 'event') this.#event = value;
  }

  #dispatch(): void {
    if (this.#data.length === 0) return;
    const data = this.#data.length === 1 ? this.#data[0]! : this.#data.join('\n');
    const event = this.#event;
    this.#data = [];
    this.#event = '';
    if (this.#onEvent({ data, event })) this.#stopped = true;
  }
}
