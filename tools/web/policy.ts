/**
 * Which hosts `browse_webpage` may reach. A model decides what to fetch, and a page or a
 * search result can ask it to fetch anything, so requests to this machine, the private network
 * and the cloud's metadata service are refused — by name, by address literal, by every address
 * the name resolves to, and again at every redirect.
 */
import { isIP } from 'node:net';

/** Names that reach a metadata service or this machine without DNS saying so. Always refused. */
const METADATA_NAMES = new Set(['metadata.google.internal', 'metadata.goog', 'metadata', 'instance-data', 'instance-data.ec2.internal', 'metadata.azure.internal']);
/** Metadata services on addresses a CIDR allowlist might otherwise let through. Always refused. */
const METADATA_ADDRESSES = ['169.254.169.254', '169.254.170.2', '100.100.100.200', 'fd00:ec2::254'].map((text) => ({ text, bytes: (v4Bytes(text) ?? v6Bytes(text))! }));

type Bytes = number[];

function v4Bytes(s: string): Bytes | undefined {
  const parts = s.split('.');
  if (parts.length !== 4) return undefined;
  const b = parts.map((p) => (/^\d{1,3}$/.test(p) ? Number(p) : NaN));
  return b.every((n) => n >= 0 && n <= 255) ? b : undefined;
}

/** 16 bytes of an IPv6 address, a dotted IPv4 tail included; a zone (`%eth0`) is dropped. */
function v6Bytes(input: string): Bytes | undefined {
  let s = input.replace(/^\[|\]$/g, '').split('%')[0]!.toLowerCase();
  let tail: Bytes = [];
  const lastColon = s.lastIndexOf(':');
  if (s.slice(lastColon + 1).includes('.')) {
    const v4 = v4Bytes(s.slice(lastColon + 1));
    if (!v4) return undefined;
    tail = v4;
    s = `${s.slice(0, lastColon + 1)}0:0`;
  }
  const halves = s.split('::');
  if (halves.length > 2) return undefined;
  const groups = (h: string): number[] => (h === '' ? [] : h.split(':').map((g) => (/^[0-9a-f]{1,4}$/.test(g) ? parseInt(g, 16) : NaN)));
  const head = groups(halves[0]!);
  const rest = halves.length === 2 ? groups(halves[1]!) : [];
  const fill = 8 - head.length - rest.length;
  if ((halves.length === 1 && fill !== 0) || fill < 0) return undefined;
  const words = [...head, ...Array<number>(halves.length === 2 ? fill : 0).fill(0), ...rest];
  if (words.length !== 8 || words.some((w) => Number.isNaN(w))) return undefined;
  const bytes = words.flatMap((w) => [w >> 8, w & 0xff]);
  if (tail.length) bytes.splice(12, 4, ...tail);
  return bytes;
}

interface Cidr {
  readonly bytes: Bytes;
  readonly bits: number;
}

function parseCidr(s: string): Cidr | undefined {
  const [addr, len] = s.split('/');
  const bytes = v4Bytes(addr!) ?? v6Bytes(addr!);
  if (!bytes) return undefined;
  const bits = len === undefined ? bytes.length * 8 : Number(len);
  if (!Number.isInteger(bits) || bits < 0 || bits > bytes.length * 8) return undefined;
  return { bytes, bits };
}

function sameBytes(a: Bytes, b: Bytes): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function inCidr(bytes: Bytes, c: Cidr): boolean {
  if (bytes.length !== c.bytes.length) return false;
  for (let i = 0; i < c.bits; i++) {
    const bit = (b: Bytes): number => (b[i >> 3]! >> (7 - (i & 7))) & 1;
    if (bit(bytes) !== bit(c.bytes)) return false;
  }
  return true;
}

const cidrs = (list: string[]): Cidr[] => list.map((s) => parseCidr(s)!);

const BLOCKED_V4 = cidrs([
  '0.0.0.0/8', // "this network"; 0.0.0.0 reaches localhost on Linux
  '10.0.0.0/8',
  '100.64.0.0/10', // carrier-grade NAT; Alibaba's metadata service
  '127.0.0.0/8',
  '169.254.0.0/16', // link-local; AWS, GCP and Azure metadata
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.0.2.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '198.51.100.0/24',
  '203.0.113.0/24',
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, broadcast
]);

const BLOCKED_V6 = cidrs([
  '::/128',
  '::1/128',
  '100::/64', // discard
  '2001:db8::/32', // documentation
  'fc00::/7', // unique local; AWS's metadata at fd00:ec2::254
  'fe80::/10', // link-local
  'fec0::/10', // site-local, deprecated but routed by some stacks
  'ff00::/8', // multicast
]);

/** IPv4 addresses carried inside IPv6 ones: mapped, compatible, NAT64, 6to4. Each is judged as IPv4. */
function embeddedV4(b: Bytes): Bytes | undefined {
  const zero = (from: number, to: number): boolean => b.slice(from, to).every((x) => x === 0);
  if (zero(0, 10) && b[10] === 0xff && b[11] === 0xff) return b.slice(12);
  if (zero(0, 12) && !zero(12, 16)) return b.slice(12);
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zero(4, 12)) return b.slice(12);
  if (b[0] === 0x20 && b[1] === 0x02) return b.slice(2, 6);
  return undefined;
}

/** Teredo (2001::/32) hides an IPv4 address XOR-ed; refused outright rather than decoded. */
const TEREDO = parseCidr('2001::/32')!;

/**
 * The metadata address an address reaches, or undefined. Compared as bytes, so every spelling
 * counts (`fd00:ec2:0::254`, `::ffff:169.254.169.254`, `::ffff:a9fe:a9fe`), and an IPv4 address
 * carried in an IPv6 one counts as that IPv4 address. No allowlist lifts this.
 */
function metadataTarget(bare: string): string | undefined {
  const bytes = v4Bytes(bare) ?? v6Bytes(bare);
  if (!bytes) return undefined;
  const found = METADATA_ADDRESSES.find((m) => sameBytes(m.bytes, bytes));
  if (found) return found.text;
  const v4 = bytes.length === 16 ? embeddedV4(bytes) : undefined;
  return v4 ? METADATA_ADDRESSES.find((m) => sameBytes(m.bytes, v4))?.text : undefined;
}

/** Why an address may not be reached, or undefined when it may. */
export function blockedReason(address: string): string | undefined {
  const bare = address.replace(/^\[|\]$/g, '').split('%')[0]!;
  const family = isIP(bare);
  if (family === 0) return `${address} is not an IP address`;
  const metadata = metadataTarget(bare);
  if (metadata) return metadata === bare.toLowerCase() ? `${bare} is a cloud metadata address` : `${bare} carries ${metadata}, a cloud metadata address`;
  let bytes = family === 4 ? v4Bytes(bare)! : v6Bytes(bare);
  if (!bytes) return `${address} is not an IP address`;
  if (bytes.length === 16) {
    if (BLOCKED_V6.some((c) => inCidr(bytes!, c))) return `${bare} is a loopback, private, link-local or reserved address`;
    if (inCidr(bytes, TEREDO)) return `${bare} is a Teredo address`;
    const v4 = embeddedV4(bytes);
    if (!v4) return undefined;
    bytes = v4;
  }
  if (BLOCKED_V4.some((c) => inCidr(bytes!, c))) return `${bare} is a loopback, private, link-local or reserved address`;
  return undefined;
}

export interface ResolvedAddress {
  readonly address: string;
  readonly family: 4 | 6;
}

/**
 * The allowlist (`WEB_ALLOW_HOSTS`, `--allow-hosts`): comma-separated host names (matched
 * against the URL's host, case-insensitively) and IP addresses or CIDR ranges (matched
 * against the addresses the host resolves to). Meant for tests and for an intranet on purpose;
 * cloud metadata stays refused whatever it says.
 */
export class HostPolicy {
  readonly #names = new Set<string>();
  readonly #ranges: Cidr[] = [];

  constructor(allow: string | readonly string[] = []) {
    const items = typeof allow === 'string' ? allow.split(',') : allow;
    for (const raw of items) {
      const item = raw.trim().toLowerCase().replace(/^\[|\]$/g, '');
      if (item === '') continue;
      const range = item.includes('/') || isIP(item) ? parseCidr(item) : undefined;
      if (range) this.#ranges.push(range);
      else if (item.includes('/')) throw new Error(`allowlist: ${JSON.stringify(raw.trim())} is not a CIDR range`);
      else this.#names.add(item.replace(/\.$/, ''));
    }
  }

  /** Refusal by the URL's host alone (before any DNS): metadata names. */
  checkName(hostname: string): string | undefined {
    const h = hostname.toLowerCase().replace(/^\[|\]$/g, '').replace(/\.$/, '');
    if (METADATA_NAMES.has(h)) return `${h} is a cloud metadata host`;
    return undefined;
  }

  /** Every address the host resolved to must pass, or the request is refused. */
  checkAddresses(hostname: string, addresses: readonly ResolvedAddress[]): string | undefined {
    const byName = this.checkName(hostname);
    if (byName) return byName;
    if (addresses.length === 0) return `${hostname} resolved to no address`;
    const h = hostname.toLowerCase().replace(/^\[|\]$/g, '').replace(/\.$/, '');
    const nameAllowed = this.#names.has(h);
    for (const a of addresses) {
      const bare = a.address.split('%')[0]!;
      const metadata = metadataTarget(bare);
      if (metadata) return `${hostname} resolves to ${bare}${metadata === bare.toLowerCase() ? '' : ` (${metadata})`}, a cloud metadata address`;
      const reason = blockedReason(bare);
      if (!reason) continue;
      const bytes = v4Bytes(bare) ?? v6Bytes(bare);
      if (nameAllowed || (bytes && this.#ranges.some((c) => inCidr(bytes, c)))) continue;
      return bare === h ? reason : `${hostname} resolves to ${bare}: ${reason.replace(`${bare} is `, '')}`;
    }
    return undefined;
  }
}

/**
 * The benchmark-leak guard. An agent that can search and read the web can find an eval set's
 * own questions and answers (a dataset page, a leaderboard, a benchmark's repository) and copy
 * the answer: a trajectory made that way teaches nothing and leaks the eval into training
 * data. MiroThinker refuses to scrape `huggingface.co/datasets` and `huggingface.co/spaces`
 * pages; trajforge does the same for search results (dropped) and fetches (refused) of the
 * web and corpus tools, over a configurable list of hosts and paths, and records each strike
 * on the call (`_meta["trajforge/leak_guard"]` of the tool result, kept in the ToolCallRecord).
 *
 * A rule is `host` or `host/path`: it matches the host and its subdomains, and paths that
 * start with the rule's path at a `/` boundary, case-insensitively, after percent-decoding and
 * with repeated slashes collapsed (`HuggingFace.co//datasets/%67aia` is caught).
 */
export const DEFAULT_LEAK_BLOCKLIST: readonly string[] = [
  'huggingface.co/datasets', // where eval sets live: GAIA, HLE, BrowseComp-Plus, FRAMES, SealQA, xbench…
  'huggingface.co/spaces', // leaderboards and dataset viewers
  'hf.co/datasets',
  'hf.co/spaces',
  'datasets-server.huggingface.co', // the dataset viewer's API: rows as JSON
  'github.com/openai/simple-evals', // BrowseComp and SimpleQA
  'raw.githubusercontent.com/openai/simple-evals',
  'github.com/centerforaisafety/hle', // Humanity's Last Exam
  'raw.githubusercontent.com/centerforaisafety/hle',
  'lastexam.ai',
  'github.com/texttron/browsecomp-plus',
  'raw.githubusercontent.com/texttron/browsecomp-plus',
];

/** Where in a tool result `LeakGuard` records what it blocked. */
export const LEAK_META_KEY = 'trajforge/leak_guard';

export interface LeakStrike {
  readonly url: string;
  /** The rule it matched. */
  readonly rule: string;
  /** `result`: a search result dropped; `fetch`: a page not read. */
  readonly where: 'result' | 'fetch';
}

interface LeakRule {
  readonly text: string;
  readonly host: string;
  readonly path: string;
}

function parseRule(raw: string): LeakRule | undefined {
  const text = raw.trim().replace(/^[a-z][a-z0-9+.-]*:\/\//i, '');
  if (text === '' || text.startsWith('#')) return undefined;
  const slash = text.indexOf('/');
  const host = (slash < 0 ? text : text.slice(0, slash)).toLowerCase().replace(/\.$/, '');
  const path = slash < 0 ? '' : normalPath(text.slice(slash)).replace(/\/+$/, '');
  if (host === '' || /\s/.test(host)) throw new Error(`leak blocklist: ${JSON.stringify(raw.trim())} is not a host or host/path`);
  return { text, host, path };
}

/** Lower case, percent-decoded where that decodes, repeated slashes collapsed. */
function normalPath(path: string): string {
  let p = path;
  try {
    p = decodeURIComponent(path);
  } catch {
    // A stray % stays as it is.
  }
  return p.toLowerCase().replace(/\/{2,}/g, '/');
}

export class LeakGuard {
  readonly rules: readonly LeakRule[];

  /** `rules`: lines of `host` or `host/path` (blank lines and `#` comments skipped). Throws on a rule that is not one. */
  constructor(rules: readonly string[] = DEFAULT_LEAK_BLOCKLIST) {
    this.rules = rules.flatMap((r) => parseRule(r.replace(/\s+#.*$/, '')) ?? []);
  }

  /** The rule a URL matches, or undefined. A URL without a scheme is read as http. */
  match(url: string): string | undefined {
    let u: URL;
    try {
      u = new URL(/^[a-z][a-z0-9+.-]*:/i.test(url.trim()) ? url.trim() : `http://${url.trim()}`);
    } catch {
      return undefined;
    }
    const host = u.hostname.toLowerCase().replace(/\.$/, '');
    const path = normalPath(u.pathname);
    for (const r of this.rules) {
      if (host !== r.host && !host.endsWith(`.${r.host}`)) continue;
      if (r.path === '' || path === r.path || path.startsWith(`${r.path}/`)) return r.text;
    }
    return undefined;
  }

  /** `items` without those whose URL (by `urlOf`) a rule matches; each one left out is added to `strikes`. */
  filter<T>(items: readonly T[], urlOf: (item: T) => string | null | undefined, strikes: LeakStrike[]): T[] {
    return items.filter((item) => {
      const url = urlOf(item);
      const rule = url ? this.match(url) : undefined;
      if (rule !== undefined) strikes.push({ url: url!, rule, where: 'result' });
      return rule === undefined;
    });
  }
}

/** The rules a server runs with: the file's (`--blocklist FILE`, replacing the default list) or the default, plus `--block RULE`s. */
export function leakRules(file: string | undefined, extra: readonly string[], read: (path: string) => string): string[] {
  const base = file === undefined ? [...DEFAULT_LEAK_BLOCKLIST] : read(file).split('\n');
  return [...base, ...extra];
}

/** The `_meta` a tool result carries when the guard struck: nothing when it did not. */
export function leakMeta(strikes: readonly LeakStrike[]): { _meta?: Record<string, unknown> } {
  return strikes.length === 0 ? {} : { _meta: { [LEAK_META_KEY]: { blocked: strikes } } };
}

/** What the model is told about a page the guard would not read. */
export function leakRefusal(url: string, rule: string): string {
  return `Not read: ${url} matches the benchmark-leak blocklist (${rule}). Pages that host evaluation sets or their answers are off limits; find the information elsewhere.`;
}
