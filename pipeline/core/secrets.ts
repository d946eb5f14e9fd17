/**
 * The values a run must never write down or send on, and the Scrubber that takes them out.
 *
 * A run's secrets are the values it was configured with (see `runSecrets`): the endpoint's
 * API key and the judge's, every env value handed to a tool server under a name that looks secret, every
 * header value under such a name, and every variable that `${VAR}` expansion put into a tool
 * server's `args`, `url` or `headers`. A value shorter than MIN_SECRET_CHARS is not treated
 * as one: it would match ordinary words in tool text.
 *
 * A queue worker adds one more: the password of the queue's Redis (core/redis.ts), which it
 * hands to the tool servers that share their rate limits through Redis (`Scrubber.with`).
 *
 * Where they show up: an upstream error body that echoes the key (`invalid api_key=…`), a
 * server that prints its URL, a result that quotes a header. Tool output is scrubbed as it
 * comes back from MCP, before the model, the cache or a record sees it; the run store, the
 * cache and the manifest scrub again what they write, as the last line of defence.
 */
import { createHash } from 'node:crypto';
import type { McpServerConfig } from '../../schemas/index.js';

/** Names (env variables, header and config keys) whose values are secrets. */
export const SECRET_NAME = /(key|token|secret|password|passwd|authorization|cookie|credential)/i;

/** Shorter values are never scrubbed: `abc` in every tool output would be mangled. */
export const MIN_SECRET_CHARS = 6;

export interface Secret {
  /** What the marker says instead: the variable, env key or header it came from. Never secret itself. */
  readonly name: string;
  readonly value: string;
}

/** A `${VAR}` that expansion filled from the environment, and where (`mcpServers.web.args[1]`). */
export interface Expansion {
  readonly path: string;
  readonly name: string;
  readonly value: string;
}

/** Variables trajforge sets itself (package and config paths): never secrets. */
export const BUILT_IN_VARS = new Set(['TRAJFORGE_ROOT', 'CONFIG_DIR']);

/** Paths of a tool server's args, url and headers, the fields where any expanded variable counts as a secret. */
const SERVER_FIELD = /^mcpServers\..+\.(args\[\d+\]|url|headers\..+)$/;

/** What a config gives a run to keep secret. `env` is where `api_key_env` is read from. */
export function runSecrets(
  cfg: {
    readonly endpoint: { readonly api_key_env: string };
    readonly mcpServers: Readonly<Record<string, McpServerConfig>>;
    readonly validation?: { readonly judge?: { readonly api_key_env: string } | undefined } | undefined;
    readonly synthesis?: { readonly writer?: { readonly api_key_env: string } | undefined } | undefined;
  },
  env: NodeJS.ProcessEnv,
  expansions: readonly Expansion[],
): Secret[] {
  const out: Secret[] = [];
  // The endpoint's key, the judge's (validation.judge) and synthesis's writer's, which may be other providers'.
  for (const keyName of [cfg.endpoint.api_key_env, cfg.validation?.judge?.api_key_env, cfg.synthesis?.writer?.api_key_env]) {
    const key = keyName === undefined || keyName === 'none' ? undefined : env[keyName];
    if (key && !out.some((s) => s.value === key)) out.push({ name: keyName!, value: key });
  }
  for (const e of expansions) if (SERVER_FIELD.test(e.path) && !BUILT_IN_VARS.has(e.name)) out.push({ name: e.name, value: e.value });
  for (const server of Object.values(cfg.mcpServers)) {
    const named = 'url' in server ? server.headers : server.env;
    for (const [name, value] of Object.entries(named ?? {})) {
      if (!SECRET_NAME.test(name)) continue;
      out.push({ name, value });
      // `Bearer TOKEN`: the token alone is what an echo shows.
      const scheme = /^[A-Za-z][\w-]*\s+(\S+)$/.exec(value.trim());
      if (scheme) out.push({ name, value: scheme[1]! });
    }
  }
  return out;
}

function escapeRegExp(s: string): string {
  return s.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
}

/** The forms a value travels in: as is, inside a JSON string, URL-encoded (path and form). */
function formsOf(value: string): string[] {
  const form = new URLSearchParams([['', value]]).toString().slice(1);
  return [...new Set([value, JSON.stringify(value).slice(1, -1), encodeURIComponent(value), form])];
}

/**
 * Replaces secret values, in every form formsOf knows, with `[redacted:NAME]`. Scrubbing a
 * value that holds no secret returns it unchanged (the same object), so it costs a scan.
 */
export class Scrubber {
  static readonly none = new Scrubber([]);

  /** What it was made from, for `with`. */
  readonly #secrets: readonly Secret[];
  /** Every form of every secret, longest first, so a longer secret wins over one inside it. */
  readonly #pattern: RegExp | undefined;
  /** Form → the secret it is a form of. */
  readonly #owner = new Map<string, Secret>();

  constructor(secrets: Iterable<Secret>) {
    this.#secrets = [...secrets];
    for (const s of this.#secrets) {
      if (s.value.length < MIN_SECRET_CHARS) continue;
      const secret = { name: s.name.replace(/[^\w.-]/g, '_') || 'secret', value: s.value };
      for (const f of formsOf(s.value)) if (!this.#owner.has(f)) this.#owner.set(f, secret);
    }
    const forms = [...this.#owner.keys()].sort((a, b) => b.length - a.length);
    this.#pattern = forms.length ? new RegExp(forms.map(escapeRegExp).join('|'), 'g') : undefined;
  }

  /** A scrubber that takes out `more` secrets besides these. */
  with(more: Iterable<Secret>): Scrubber {
    const extra = [...more];
    return extra.length === 0 ? this : new Scrubber([...this.#secrets, ...extra]);
  }

  /** How many distinct secret values it looks for. */
  get size(): number {
    return new Set([...this.#owner.values()].map((s) => s.value)).size;
  }

  /** Whether the text holds a secret. */
  finds(text: string): boolean {
    if (!this.#pattern) return false;
    this.#pattern.lastIndex = 0;
    return this.#pattern.test(text);
  }

  text(s: string): string {
    return this.#pattern ? s.replace(this.#pattern, (m) => `[redacted:${this.#owner.get(m)!.name}]`) : s;
  }

  /**
   * `JSON.stringify(this.value(v))`, serialised once: a record's line is scanned for the
   * secrets' JSON forms (formsOf holds them: JSON escapes each character on its own, so a secret
   * inside any string or key shows in the text as that form), and only a line that holds one is
   * walked and serialised again. The common case, no secret, costs one scan instead of a walk
   * that copies and a second serialisation.
   */
  json(v: unknown): string {
    const text = JSON.stringify(v);
    return this.finds(text) ? JSON.stringify(this.#walk(v)) : text;
  }

  /** A copy of a JSON-like value with every string (and key) scrubbed; the value itself when nothing was found. */
  value<T>(v: T): T {
    return this.#pattern ? (this.#walk(v) as T) : v;
  }

  #walk(v: unknown): unknown {
    if (typeof v === 'string') return this.text(v);
    if (Array.isArray(v)) {
      let out: unknown[] | undefined;
      for (let i = 0; i < v.length; i++) {
        const x = this.#walk(v[i]);
        if (x !== v[i]) (out ??= v.slice())[i] = x;
      }
      return out ?? v;
    }
    if (v !== null && typeof v === 'object' && [Object.prototype, null].includes(Object.getPrototypeOf(v))) {
      let changed = false;
      const entries = Object.entries(v).map(([k, x]) => {
        const k2 = this.text(k);
        const x2 = this.#walk(x);
        if (k2 !== k || x2 !== x) changed = true;
        return [k2, x2] as const;
      });
      return changed ? Object.fromEntries(entries) : v;
    }
    return v;
  }

  /**
   * For identities (cache keys): each secret replaced by a hash of its value, so another key
   * is another identity, and the value itself is never stored.
   */
  hashed(s: string): string {
    if (!this.#pattern) return s;
    return s.replace(this.#pattern, (m) => `[secret:${createHash('sha256').update(`trajforge-secret\u0000${this.#owner.get(m)!.value}`).digest('hex').slice(0, 16)}]`);
  }
}

/** A URL with no user, password, query or fragment; '' for text that is not a URL (it may be anything, a key included). */
export function publicEndpoint(raw: string): string {
  try {
    const u = new URL(raw);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return '';
  }
}
