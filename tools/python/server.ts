/**
 * MCP server over stdio: a Python interpreter for the model, with the surface of MiroThinker's
 * `tool-python` (E2B) — `create_sandbox`, `run_python_code(code_block, sandbox_id?, timeout?)`,
 * `upload_file_from_local_to_sandbox` — and its result text, run offline in sandboxes of our own:
 * Pyodide (CPython on WebAssembly, from npm) in a locked-down Node process per sandbox. Why
 * Pyodide, what each sandbox may and may not do, and the measurements: docs/tools.md.
 *
 *   node dist/tools/python/server.js [--inputs DIR]… [--timeout-s N] [--max-timeout-s N] [--memory-mb N]
 *     [--max-output-bytes N] [--max-result-chars N] [--max-sandboxes N] [--idle-s N] [--spares N]
 *     [--start-timeout-s N] [--max-upload-bytes N] [--network-namespace auto|on|off]
 *
 * Defaults: limits.ts. Without `sandbox_id`, a call runs in a sandbox of its own, ended after it.
 */
import { posix } from 'node:path';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import { PACKAGE_VERSION } from '../../pipeline/paths.js';
import { exitWith, serverFlags } from '../shared/flags.js';
import { SANDBOX_HOME } from './driver.js';
import { executionText, type CellOutcome } from './execution-text.js';
import { AllowedInputs, InputRefused } from './inputs.js';
import { DEFAULT_LIMITS, type PythonLimits } from './limits.js';
import { PoolFullError, SandboxPool, UnknownSandboxError, type PoolRun } from './pool.js';
import { launchSpec, type NetworkIsolation } from './sandbox-process.js';

const FLAGS = {
  inputs: { kind: 'string', multiple: true },
  'timeout-s': { kind: 'int', min: 1 },
  'max-timeout-s': { kind: 'int', min: 1 },
  'memory-mb': { kind: 'int', min: 64 },
  'max-output-bytes': { kind: 'int', min: 1 },
  'max-result-chars': { kind: 'int', min: 100 },
  'max-sandboxes': { kind: 'int', min: 1 },
  'idle-s': { kind: 'int', min: 1 },
  spares: { kind: 'int', min: 0 },
  'start-timeout-s': { kind: 'int', min: 1 },
  'max-upload-bytes': { kind: 'int', min: 1 },
  'network-namespace': { kind: 'string' },
} as const;

const fatal = (message: string): never => exitWith('python', message);
const text = (t: string, isError = false) => ({ content: [{ type: 'text' as const, text: t }], ...(isError ? { isError: true } : {}) });
const noSandbox = (id: string) => text(`[ERROR]: Failed to connect to sandbox ${id}. Make sure the sandbox is created and the sandbox_id is correct.`, true);

function limitsFrom(f: ReturnType<typeof parseFlags>): PythonLimits {
  const d = DEFAULT_LIMITS;
  return {
    timeoutS: f['timeout-s'] ?? d.timeoutS,
    maxTimeoutS: f['max-timeout-s'] ?? d.maxTimeoutS,
    memoryMb: f['memory-mb'] ?? d.memoryMb,
    maxOutputBytes: f['max-output-bytes'] ?? d.maxOutputBytes,
    maxResultChars: f['max-result-chars'] ?? d.maxResultChars,
    maxSandboxes: f['max-sandboxes'] ?? d.maxSandboxes,
    idleS: f['idle-s'] ?? d.idleS,
    spares: f.spares ?? d.spares,
    startTimeoutS: f['start-timeout-s'] ?? d.startTimeoutS,
    maxUploadBytes: f['max-upload-bytes'] ?? d.maxUploadBytes,
  };
}

const parseFlags = () => serverFlags('python', process.argv.slice(2), FLAGS);

/** The run's answer as the model reads it; a killed or restarted sandbox says what was lost. */
function runAnswer(run: PoolRun, limits: PythonLimits, timeoutS: number, sandboxId: string | undefined) {
  const empty = { text: '', keptBytes: 0, totalBytes: 0 };
  const lost = sandboxId === undefined ? '' : '; the sandbox was restarted, its variables and files are gone';
  const outcome: CellOutcome =
    run.kind === 'done'
      ? { stdout: run.stdout, stderr: run.stderr, value: run.value, error: run.error }
      : {
          stdout: empty,
          stderr: empty,
          value: null,
          error:
            run.kind === 'timeout'
              ? { name: 'TimeoutError', value: `the code ran past its ${timeoutS} s limit and was stopped${lost}`, traceback: '' }
              : { name: 'SandboxError', value: `the sandbox process ended (${run.why})${lost}`, traceback: '' },
        };
  const structured = {
    ...(sandboxId === undefined ? {} : { sandbox_id: sandboxId }),
    stdout: outcome.stdout.text,
    stderr: outcome.stderr.text,
    result: outcome.value,
    error: outcome.error,
    stdout_bytes: outcome.stdout.totalBytes,
    stderr_bytes: outcome.stderr.totalBytes,
    output_truncated: outcome.stdout.totalBytes > outcome.stdout.keptBytes || outcome.stderr.totalBytes > outcome.stderr.keptBytes,
    restarted: run.restarted,
  };
  return { content: [{ type: 'text' as const, text: executionText(outcome, limits.maxResultChars) }], structuredContent: structured };
}

async function setUp(inputDirs: readonly string[], limits: PythonLimits, network: NetworkIsolation): Promise<{ inputs: AllowedInputs; pool: SandboxPool }> {
  const inputs = await AllowedInputs.open(inputDirs, limits.maxUploadBytes);
  const spec = launchSpec({ memoryMb: limits.memoryMb, maxOutputBytes: limits.maxOutputBytes, startTimeoutMs: limits.startTimeoutS * 1000, network });
  process.stderr.write(`python server: Pyodide sandboxes; network namespace ${spec.unshare ? 'on' : 'unavailable here (the process lockdown alone)'}\n`);
  return { inputs, pool: new SandboxPool(spec, limits) };
}

async function main(): Promise<void> {
  const f = parseFlags();
  const limits = limitsFrom(f);
  const network = (f['network-namespace'] ?? 'auto') as NetworkIsolation;
  if (!['auto', 'on', 'off'].includes(network)) fatal(`--network-namespace needs auto, on or off, got ${JSON.stringify(network)}`);
  const { inputs, pool } = await setUp(f.inputs ?? [], limits, network).catch((err: Error) => fatal(err.message));
  const failed = (err: unknown) => {
    if (err instanceof UnknownSandboxError) return noSandbox(err.message);
    if (err instanceof PoolFullError) return text(`[ERROR]: ${err.message}; retry later, or reuse a sandbox you created.`, true);
    return text(`[ERROR]: ${(err as Error).message}`, true);
  };
  const sideEffects = { readOnlyHint: false, idempotentHint: false, openWorldHint: false } as const;

  const server = new McpServer({ name: 'trajforge-python', version: PACKAGE_VERSION });
  server.registerTool(
    'create_sandbox',
    {
      title: 'Create a Python sandbox',
      description:
        'Create a Python sandbox and get its sandbox_id. Variables, imports and files are kept between run_python_code calls with the same sandbox_id. ' +
        `A sandbox unused for ${limits.idleS} s is ended; at most ${limits.maxSandboxes} exist at once (the least recently used makes room).`,
      inputSchema: {},
      annotations: sideEffects,
    },
    async () => {
      try {
        return text(`Sandbox created with sandbox_id: ${await pool.create()}`);
      } catch (err) {
        return failed(err);
      }
    },
  );
  server.registerTool(
    'run_python_code',
    {
      title: 'Run Python code',
      description:
        'Run Python 3 code and return the execution result: Execution(Results: [Result(<repr of the last expression>)], Logs: Logs(stdout: [...], stderr: [...]), ' +
        'Error: None or ExecutionError(name=..., value=..., traceback=...)). The standard library is available; there is no network, no shell and no ' +
        'third-party package. Without sandbox_id the code runs in a fresh sandbox that is discarded afterwards.',
      inputSchema: {
        code_block: z.string().describe('The Python code to run'),
        sandbox_id: z.string().min(1).optional().describe('A sandbox_id from create_sandbox, to keep state between calls'),
        timeout: z.number().int().min(1).optional().describe(`Seconds the code may run (default ${limits.timeoutS}, at most ${limits.maxTimeoutS})`),
      },
      annotations: sideEffects,
    },
    async ({ code_block, sandbox_id, timeout }) => {
      const timeoutS = Math.min(timeout ?? limits.timeoutS, limits.maxTimeoutS);
      try {
        const run = sandbox_id === undefined ? await pool.runOnce(code_block, timeoutS * 1000) : await pool.run(sandbox_id, code_block, timeoutS * 1000);
        return runAnswer(run, limits, timeoutS, sandbox_id);
      } catch (err) {
        return failed(err);
      }
    },
  );
  server.registerTool(
    'upload_file_from_local_to_sandbox',
    {
      title: 'Copy an input file into a sandbox',
      description:
        `Copy one of this run's input files into a sandbox (into ${SANDBOX_HOME} unless sandbox_file_path names another directory). Answers the path in the sandbox.` +
        (inputs.dirs.length === 0 ? ' This run allows no input files.' : ''),
      inputSchema: {
        sandbox_id: z.string().min(1).describe('A sandbox_id from create_sandbox'),
        local_file_path: z.string().min(1).describe("The file's path: absolute, or relative to the run's input directory"),
        sandbox_file_path: z.string().default(SANDBOX_HOME).describe(`The directory in the sandbox to put it in (default ${SANDBOX_HOME})`),
      },
      annotations: sideEffects,
    },
    async ({ sandbox_id, local_file_path, sandbox_file_path }) => {
      try {
        const file = await inputs.read(local_file_path);
        const dir = posix.resolve(SANDBOX_HOME, sandbox_file_path);
        const path = await pool.put(sandbox_id, dir, file.name, file.bytes, limits.startTimeoutS * 1000);
        return text(`File uploaded to ${path}`);
      } catch (err) {
        if (err instanceof InputRefused) return text(`[ERROR]: ${err.message}`, true);
        return failed(err);
      }
    },
  );

  const stop = () => {
    pool.close();
    process.exit(0);
  };
  process.stdin.on('close', stop);
  process.on('SIGTERM', stop);
  await server.connect(new StdioServerTransport());
}

main().catch((err: unknown) => fatal(err instanceof Error ? (err.stack ?? err.message) : String(err)));
