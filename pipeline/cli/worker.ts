/** `trajforge worker --config F --queue URL --run NAME`: pulls samples from the queue and rolls them out, on any number of machines. */
import { loadConfig, type ConfigOverrides } from '../core/config.js';
import { TrajforgeError } from '../errors.js';
import { stderrSink } from '../generate/progress.js';
import { checkRunName, QUEUE_OPTION_HELP, queueFor } from '../generate/queue.js';
import { runWorker } from '../generate/worker.js';
import { configWarnings } from '../generate/warnings.js';
import { int, runInterruptibly } from './generate.js';
import { parseFlags } from './flags.js';

const USAGE = `trajforge worker --config F --queue redis://HOST:PORT/DB --run NAME [options]

Pulls the run's samples from the queue, rolls them out and accepts each in Redis once its
record is on disk, until every planned sample is accepted. Start as many as you like, anywhere;
a worker that dies loses its leases, and its samples go back to the queue after
queue.visibility_timeout_ms. The config must be the one the run was enqueued with (the keys
come from this machine's environment). Records go to DIR/worker-<name>.

${QUEUE_OPTION_HELP}
  --out DIR          where this worker's run directory goes (default runs/NAME)
  --name LABEL       a label for the worker's name (default the host name)
  --concurrency N    model requests in flight (default: the config's concurrency, 32)
  --base-url URL     the endpoint as this machine reaches it
`;

/**
 * TRAJFORGE_CLOCK_OFFSET_MS: runs the worker with its clock off by that many ms (every
 * Date.now it makes), as on a machine whose clock is wrong; the fault tests use it. Leases
 * are timed by Redis's clock, so a worker's own must not matter.
 */
function applyClockOffset(env: NodeJS.ProcessEnv): void {
  const raw = env.TRAJFORGE_CLOCK_OFFSET_MS;
  if (raw === undefined || raw === '') return;
  const offset = Number(raw);
  if (!Number.isFinite(offset)) throw new TrajforgeError('BAD_USAGE', `TRAJFORGE_CLOCK_OFFSET_MS: expected a number of ms, got "${raw}"`);
  const real = Date.now.bind(Date);
  Date.now = () => real() + offset;
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('worker', argv, {
    config: { type: 'string' },
    queue: { type: 'string' },
    run: { type: 'string' },
    out: { type: 'string' },
    name: { type: 'string' },
    concurrency: { type: 'string' },
    'base-url': { type: 'string' },
  }, { help: USAGE, positionals: false });
  if (!parsed) return 0;
  const { values } = parsed;
  if (!values.config) throw new TrajforgeError('BAD_USAGE', `worker: --config F is required\n\n${USAGE}`);
  const { address, warnings } = queueFor('worker', values.queue);
  for (const w of warnings) process.stderr.write(`warning: ${w}\n`);
  const runName = checkRunName(values.run, 'worker');
  applyClockOffset(process.env);
  const overrides: ConfigOverrides = { concurrency: int('concurrency', values.concurrency), baseUrl: values['base-url'] };
  const config = loadConfig(values.config, overrides);
  for (const w of configWarnings(config)) process.stderr.write(`warning: ${w.message}\n`);
  const out = values.out ?? `runs/${runName}`;
  return runInterruptibly(async (signal) => {
    const s = await runWorker({ config, address, run: runName, out, label: values.name, signal, progress: stderrSink() });
    process.stdout.write(`worker ${s.worker.name}: ${s.worker.accepted} samples accepted${s.worker.beaten ? `, ${s.worker.beaten} records beaten by another worker's accept (merge leaves them out)` : ''}${s.worker.leaseLost ? `, ${s.worker.leaseLost} recorded failed (lease_lost)` : ''}${s.worker.setAside ? `, ${s.worker.setAside} bad queue entries set aside` : ''}\n`);
    return s;
  });
}
