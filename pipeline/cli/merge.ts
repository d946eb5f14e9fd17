/** `trajforge merge <run…> --out DIR`: shard runs → one run, one record per id. */
import { TrajforgeError } from '../errors.js';
import { merge } from '../dataset/merge.js';
import { printable } from '../printable.js';
import { parseFlags } from './flags.js';

const USAGE = `trajforge merge <run…> --out DIR [--allow-mismatch] [--allow-missing] [--queue URL --run NAME]

Merges runs (the shards of one job) into a new run directory, one record per id: an
accepted record beats a failed one, a later attempt beats an earlier one. An id accepted in
two runs is a conflict: reported, and the later run on the command line wins. Runs made with
different configs (beyond the shard) are refused unless --allow-mismatch. A run still being
written is merged as it was when merge started. DIR is written whole or not at all.
Runs that miss samples (fewer records than their manifest planned, or shards i/n not all
given) are refused unless --allow-missing.

Queue mode: with --queue URL --run NAME the runs are the workers' directories, and each
sample's record is the one Redis accepted (other copies are left out); planned samples
without an accepted record stop the merge unless --allow-missing. A worker's directory
holding no run (no manifest, no record: killed before its run began) is left out, with a note.
`;

export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('merge', argv, {
    out: { type: 'string' },
    'allow-mismatch': { type: 'boolean' },
    queue: { type: 'string' },
    run: { type: 'string' },
    'allow-missing': { type: 'boolean' },
  }, { help: USAGE });
  if (!parsed) return 0;
  const { values, positionals } = parsed;
  if (!values.out || positionals.length === 0) throw new TrajforgeError('BAD_USAGE', `merge: runs and --out DIR are required\n\n${USAGE}`);
  let queue: Parameters<typeof merge>[0]['queue'];
  if (values.queue !== undefined) {
    // Loaded only here: the queue's modules bring the Redis client and the whole worker (~0.5 s of start-up).
    const [{ checkRunName, parseQueueUrl }, { queueLedger }] = await Promise.all([import('../generate/queue.js'), import('../generate/worker.js')]);
    const address = parseQueueUrl(values.queue);
    const run = checkRunName(values.run, 'merge');
    queue = { run, ...(await queueLedger(address, run)) };
  } else if (values.run !== undefined) {
    throw new TrajforgeError('BAD_USAGE', 'merge: --run goes with --queue URL');
  }
  // The notes quote ids and paths read from the runs: never a control character of theirs to the terminal.
  const say = (text: string): void => void process.stderr.write(printable(text));
  const out = (text: string): void => void process.stdout.write(printable(text));
  const r = await merge({ runs: positionals, out: values.out, allowMismatch: values['allow-mismatch'], queue, allowMissing: values['allow-missing'] });
  for (const d of r.unstarted) say(`note: ${d} holds no run (no manifest, no record: a worker stopped before its run began); left out\n`);
  for (const i of r.incomplete) say(`note: ${i}; merged without them (--allow-missing)\n`);
  if (r.missing.count) say(`note: ${r.missing.count} planned samples have no accepted record here (${r.missing.first.join(', ')}${r.missing.count > r.missing.first.length ? ', …' : ''}); merged without them (--allow-missing)\n`);
  for (const l of r.live) say(`note: ${l.dir} is still being written (pid ${l.pid}): merged the records it held when merge started\n`);
  if (r.unrecorded.length) say(`note: some runs do not record ${r.unrecorded.join(', ')} (an earlier trajforge wrote them), so those could not be compared\n`);
  for (const c of r.cut) say(`note: ${c.file}: left out its last ${c.bytes} bytes, a line that is not whole (a write under way, or cut by a crash)\n`);
  const subs = r.sub_agents ? ` (and ${r.sub_agents.accepted} accepted, ${r.sub_agents.failed} failed sub-agent sessions)` : '';
  out(`merged ${r.runs} runs into ${r.out}: ${r.accepted} accepted, ${r.failed} failed${subs}, ${r.superseded} superseded records left out\n`);
  if (r.orphans) say(`${r.orphans} sub-agent sessions left out: their family's root session is in none of the runs\n`);
  if (r.conflicts.length) {
    say(`${r.conflicts.length} ids were accepted in more than one run (the later run kept):\n`);
    for (const c of r.conflicts.slice(0, 20)) say(`  ${c.id}: ${c.runs.join(', ')} → kept ${c.kept}\n`);
    if (r.conflicts.length > 20) say(`  … and ${r.conflicts.length - 20} more\n`);
  }
  return 0;
}
