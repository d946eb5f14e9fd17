/** `trajforge status --queue URL --run NAME`: a queued run's counts in Redis, in all and per worker. */
import { checkRunName, QUEUE_OPTION_HELP, queueFor } from '../generate/queue.js';
import { queueStatus } from '../generate/worker.js';
import { parseFlags } from './flags.js';

const USAGE = `trajforge status --queue redis://HOST:PORT/DB --run NAME [--json]

Shows a queued run: samples planned, waiting, in flight (claimed, not accepted), accepted
(ok and failed), and per worker: in flight, accepted, when Redis last heard from it. It says
[done] once every planned sample is accepted and the enqueue finished.

${QUEUE_OPTION_HELP}
`;

export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('status', argv, { queue: { type: 'string' }, run: { type: 'string' }, json: { type: 'boolean' } }, { help: USAGE, positionals: false });
  if (!parsed) return 0;
  const { values } = parsed;
  const { address, warnings } = queueFor('status', values.queue);
  for (const w of warnings) process.stderr.write(`warning: ${w}\n`);
  const runName = checkRunName(values.run, 'status');
  const s = await queueStatus(address, runName);
  if (values.json) {
    const { meta: _meta, ...rest } = s;
    process.stdout.write(`${JSON.stringify(rest, null, 2)}\n`);
    return 0;
  }
  const out = (l: string): void => void process.stdout.write(`${l}\n`);
  const done = s.enqueueComplete && s.accepted >= s.planned;
  out(`run ${runName} on ${address.shown}${done ? '  [done]' : ''}`);
  out(`planned    ${s.planned}`);
  if (!s.enqueueComplete) out(`not queued ${s.notQueued}: the enqueue has not finished (it is running, or was stopped: run it again)`);
  out(`waiting    ${s.waiting}`);
  out(`in flight  ${s.inFlight}`);
  out(`accepted   ${s.accepted}: ${s.ok} ok, ${s.failed} failed`);
  if (s.setAside > 0) out(`set aside  ${s.setAside} bad queue entries (${s.setAsidePlanned} of them planned samples), in trajforge:{${runName}}:dead`);
  for (const w of s.workers) {
    const seen = w.seenAgoMs === undefined ? '' : `, seen ${(w.seenAgoMs / 1000).toFixed(1)} s ago`;
    out(`worker     ${w.name}: ${w.inFlight} in flight, ${w.ok} ok, ${w.failed} failed${w.host ? ` (${w.host} pid ${w.pid}${seen})` : ''}`);
  }
  return 0;
}
