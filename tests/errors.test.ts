/**
 * pipeline/errors.ts: one root for every error trajforge raises on purpose, and the two kinds
 * under it kept apart — what a user must fix (UserError, TrajforgeError with its stable code)
 * and what crossed a wire (WireError) — and the CLI picking the exit code from the kind.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main } from '../pipeline/cli/main.js';
import { OutputClosedError } from '../pipeline/core/jsonl.js';
import { LimitsRedisError } from '../pipeline/core/limits-redis.js';
import { ConnectionError, EndpointError, MalformedResponse, RequestAborted, ResponseTooLarge } from '../pipeline/core/llm/chat-http.js';
import { LlmError } from '../pipeline/core/llm/llm.js';
import { FilterSpecError } from '../pipeline/dataset/filter-compile.js';
import { ExprError } from '../pipeline/dataset/filter-expr.js';
import { UnexportableRow } from '../pipeline/dataset/unexportable-row.js';
import { TrajforgeBaseError, TrajforgeError, UserError, WireError, type ErrorCode } from '../pipeline/errors.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { CorpusError } from '../tools/corpus/search.js';
import { EutilsError } from '../tools/pubmed/eutils.js';
import { LimiterUnavailable } from '../tools/pubmed/ratelimit.js';
import { PubmedXmlError } from '../tools/pubmed/xml.js';
import { FetchError } from '../tools/web/fetch-page.js';
import { SerperError } from '../tools/web/serper.js';

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : sourceFiles(path);
    return e.name.endsWith('.ts') ? [path] : [];
  });
}

describe('one error root', () => {
  it('no error class in pipeline/, tools/ or sim/ extends Error but the root itself', () => {
    const stray = ['pipeline', 'tools', 'sim']
      .flatMap((d) => sourceFiles(join(PACKAGE_ROOT, d)))
      .flatMap((file) =>
        readFileSync(file, 'utf8')
          .split('\n')
          .map((line, i) => ({ where: `${relative(PACKAGE_ROOT, file)}:${i + 1}`, line }))
          .filter(({ line }) => /\bclass\s+\w+\s+extends\s+Error\b/.test(line) && !/class TrajforgeBaseError\b/.test(line)),
      )
      .map(({ where, line }) => `${where}: ${line.trim()}`);
    expect(stray).toEqual([]);
  });

  it('errors that crossed a wire are WireErrors, and keep their facts', () => {
    const endpoint = new EndpointError(429, 'slow down', { code: 'rate_limit_exceeded' }, {});
    const wire: Error[] = [
      endpoint,
      new ConnectionError('refused', 'ECONNREFUSED'),
      new MalformedResponse('not JSON'),
      new ResponseTooLarge(10, 'the body'),
      new RequestAborted(),
      new LlmError('fatal', 'the endpoint refused', 401),
      new LimitsRedisError('Redis did not answer'),
      new OutputClosedError(),
      new EutilsError('NCBI refused'),
      new PubmedXmlError('not XML', true),
      new FetchError('refused'),
      new SerperError('no key'),
      new LimiterUnavailable('closed'),
    ];
    for (const e of wire) {
      expect(e, e.constructor.name).toBeInstanceOf(WireError);
      expect(e, e.constructor.name).toBeInstanceOf(TrajforgeBaseError);
      expect(e, e.constructor.name).not.toBeInstanceOf(UserError);
    }
    expect(endpoint.status).toBe(429);
    // The kind adds no fields of its own to an error that has none (its name is its own).
    expect(Object.keys(new MalformedResponse('x'))).toEqual(['name']);
  });

  it('errors a user must fix are UserErrors, and never WireErrors', () => {
    const user: Error[] = [
      new TrajforgeError('BAD_CONFIG', 'bad'),
      new ExprError('unexpected character', 3),
      new FilterSpecError('keep', 'x ==', new ExprError('expected a value', 5)),
      new UnexportableRow('the template refused it'),
      new CorpusError('corpus.jsonl', 2, 'not a JSON object'),
    ];
    for (const e of user) {
      expect(e, e.constructor.name).toBeInstanceOf(UserError);
      expect(e, e.constructor.name).toBeInstanceOf(TrajforgeBaseError);
      expect(e, e.constructor.name).not.toBeInstanceOf(WireError);
    }
  });

  it("a TrajforgeError's exit code: 1 when a run or a write could not go on, else 2", () => {
    const one: ErrorCode[] = ['WRITE_FAILED', 'ENDPOINT_FATAL', 'ENDPOINT_UNREACHABLE', 'QUEUE_UNREACHABLE', 'RUN_INCOMPLETE'];
    const two: ErrorCode[] = ['BAD_CONFIG', 'BAD_INPUT', 'BAD_USAGE', 'MISSING_ENV', 'TOOL_SERVER_FAILED', 'RUN_MISMATCH', 'RUN_LOCKED'];
    for (const code of one) expect(new TrajforgeError(code, 'x').exitCode, code).toBe(1);
    for (const code of two) expect(new TrajforgeError(code, 'x').exitCode, code).toBe(2);
    expect(new ExprError('x', 1).exitCode).toBe(2);
  });
});

describe('the CLI picks the exit code from the kind', () => {
  async function run(argv: string[]): Promise<{ code: number; stderr: string }> {
    const chunks: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string | Uint8Array) => {
      chunks.push(String(chunk));
      return true;
    }) as typeof process.stderr.write;
    try {
      return { code: await main(argv), stderr: chunks.join('') };
    } finally {
      process.stderr.write = write;
    }
  }

  it('a user error is one line, no stack, exit 2', async () => {
    const r = await run(['no-such-command']);
    expect(r).toEqual({ code: 2, stderr: 'error: unknown command "no-such-command" (try trajforge --help)\n' });
  });

  it("an unknown flag (node's parseArgs) is a user error too: exit 2", async () => {
    const r = await run(['stats', '--no-such-flag']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^error: .*--no-such-flag/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});
