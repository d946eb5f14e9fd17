/**
 * The helpers both page scripts use (scripts.ts puts this file before each of them, inside one
 * function, so nothing here becomes a global of the page). Data reaches the DOM through
 * textContent only, never innerHTML: tool outputs are web pages, and a report must not run them.
 */

/** The element with this id (the page's own markup has every id a script asks for). */
function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  return document.getElementById(id) as T;
}

/** A new element with a class and a text, either optional. */
function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string | null, text?: unknown): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

/** A count as people read it (`12,345`); `-` for none. */
function num(n: number | string | null | undefined): string {
  return n === null || n === undefined ? '-' : Number(n).toLocaleString('en-US');
}

/** A new SVG element with its attributes (numbers and strings only: never markup). */
function svgEl<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number> = {}): SVGElementTagNameMap[K] {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const k in attrs) e.setAttribute(k, String(attrs[k]));
  return e;
}
