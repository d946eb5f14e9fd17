/** `trajforge check --config F`: whether a run can start, one line per check (generate/preflight.ts). */
import type { RunConfig } from '../../schemas/index.js';
import { expansionsOf, loadConfig } from '../core/config.js';
import { BUILT_IN_VARS, runSecrets } from '../core/secrets.js';
import { TrajforgeError } from '../errors.js';
import { preflight, shellWord, type CheckLine } from '../generate/preflight.js';
import { CLI_COMMAND } from '../paths.js';
import { parseFlags } from './flags.js';

const USAGE = `trajforge check --config F [options]

Checks, with the real pieces and a handful of small requests, that a run of this config can
start: the key, the questions file (its first rows as parsed), the output directory, every MCP
server (started and stopped again), the tools offered to the model, the endpoint (GET /models,
an 8-token completion, one turn of the first question in the run's dialect). One line per
check: ok, warn, FAIL (with what to do) or skip. Writes nothing.

  --config F        the run config (required)
  --questions F     --out DIR   --base-url URL   --model M   --dialect D   as for generate

Exit codes: 0 a run can start (warnings included), 1 a check failed, 2 bad config or usage.
`;

const WIDTH = 16;

function format(line: CheckLine): string {
  const head = `${line.status.padEnd(5)} ${line.name.padEnd(WIDTH)} ${line.detail}`;
  const pad = ' '.repeat(6 + WIDTH + 1);
  return [head, ...(line.more ?? []).map((m) => `${pad}${m}`)].join('\n');
}

/**
 * The variables the config was filled from (`VLLM_BASE_URL=http://gpu:8000/v1`), as a prefix of
 * the suggested command: a user who typed them before \`check\` gets them back, so the copied
 * command targets the same host. Secrets (keys, tool servers' args and headers, a URL with a
 * password) are left out: they are the user's to export, never to print.
 */
function envPrefix(config: RunConfig): string {
  const secrets = new Set(runSecrets(config, process.env, expansionsOf(config)).map((s) => s.value));
  const shown = new Map<string, string>();
  for (const e of expansionsOf(config)) {
    if (BUILT_IN_VARS.has(e.name) || secrets.has(e.value) || /\/\/[^/@]*:[^/@]*@/.test(e.value)) continue;
    shown.set(e.name, e.value);
  }
  return [...shown].map(([k, v]) => `${k}=${shellWord(v)} `).join('');
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('check', argv, {
    config: { type: 'string' },
    questions: { type: 'string' },
    out: { type: 'string' },
    'base-url': { type: 'string' },
    model: { type: 'string' },
    dialect: { type: 'string' },
  }, { help: USAGE, positionals: false });
  if (!parsed) return 0;
  const { values } = parsed;
  if (!values.config) throw new TrajforgeError('BAD_USAGE', `check: --config F is required\n\n${USAGE}`);
  const config = loadConfig(values.config, { questions: values.questions, out: values.out, baseUrl: values['base-url'], model: values.model, dialect: values.dialect });
  const out = (l: string): void => void process.stdout.write(`${l}\n`);
  out(`trajforge check ${values.config}: ${config.dialect} dialect, model ${config.endpoint.model} at ${config.endpoint.base_url}`);
  const result = await preflight({ config, onLine: (l) => out(format(l)) });
  const count = (s: string): number => result.lines.filter((l) => l.status === s).length;
  const warnings = count('warn');
  const tail = warnings ? ` (${warnings} warning${warnings > 1 ? 's' : ''})` : '';
  if (result.canRun) out(`\na run can start${tail}: ${envPrefix(config)}${CLI_COMMAND} generate ${argv.map(shellWord).join(' ')}`);
  else out(`\n${count('FAIL')} check${count('FAIL') > 1 ? 's' : ''} failed${tail}: fix the FAIL lines, then check again`);
  return result.canRun ? 0 : 1;
}
