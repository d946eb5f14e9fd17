/** `trajforge enqueue --config F --queue URL --run NAME`: the run's samples onto Redis, once. */
import { loadConfig } from '../core/config.js';
import { TrajforgeError } from '../errors.js';
import { checkRunName, QUEUE_OPTION_HELP, queueFor } from '../generate/queue.js';
import { enqueue } from '../generate/enqueue.js';
import { int } from './generate.js';
import { parseFlags } from './flags.js';

const USAGE = `trajforge enqueue --config F --queue redis://HOST:PORT/DB --run NAME [options]

Puts the run's samples (after sampling, dedup, --limit and --samples) on the queue. A sample
already on it is not added again, so enqueueing twice does not double the work; a run already
on the queue with another config is refused. Then start workers (trajforge worker) anywhere.
Every sample is planned before any is queued: an enqueue stopped part-way leaves a run that
status and merge know is short; run the same command again to finish it.

${QUEUE_OPTION_HELP}
  --questions F   questions file (overrides questions.path)
  --limit N       at most N questions
  --samples K     rollouts per question
  --seed S        shuffle and sampling seed
`;

export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('enqueue', argv, {
    config: { type: 'string' },
    queue: { type: 'string' },
    run: { type: 'string' },
    questions: { type: 'string' },
    limit: { type: 'string' },
    samples: { type: 'string' },
    seed: { type: 'string' },
  }, { help: USAGE, positionals: false });
  if (!parsed) return 0;
  const { values } = parsed;
  if (!values.config) throw new TrajforgeError('BAD_USAGE', `enqueue: --config F is required\n\n${USAGE}`);
  const { address, warnings } = queueFor('enqueue', values.queue);
  for (const w of warnings) process.stderr.write(`warning: ${w}\n`);
  const runName = checkRunName(values.run, 'enqueue');
  const config = loadConfig(values.config, { questions: values.questions, limit: int('limit', values.limit), samples: int('samples', values.samples), seed: int('seed', values.seed) });
  const r = await enqueue({ config, address, run: runName });
  const earlier = r.queued - r.added;
  const finished = earlier > 0 ? `; ${earlier} planned by an earlier enqueue put on the queue now` : '';
  process.stdout.write(`enqueued run ${runName} on ${address.shown}: ${r.selected} samples selected, ${r.added} new; ${r.planned} planned in all${r.existed ? ' (the run was already there: only new samples added)' : ''}${finished}\n`);
  return 0;
}
