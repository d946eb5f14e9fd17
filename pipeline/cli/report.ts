/** `trajforge report <file|run|-> --out report.html`: one self-contained HTML report and trajectory viewer; `--serve RUN`: the same page, live. */
import { ReportServeOptions } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import { untilStopped } from '../wait.js';
import { pageInto, reportData } from '../dataset/report/build.js';
import { DEFAULT_ROW_OPTIONS } from '../dataset/report/rows.js';
import { isLoopback, serveReport } from '../dataset/report/serve.js';
import { datasetTokenCounter, parseDatasetArgs, readOptions } from './common.js';
import { Outputs } from './output.js';
import { checkedOptions, numberFlag } from './flags.js';

const S = ReportServeOptions.parse({});

const HELP = `Usage: trajforge report <file|run|-> --out report.html [options]
       trajforge report --serve RUN [--port N] [options]

One HTML file with everything inline (no network, no CDN): status and failure reasons,
histograms of tool calls, turns and tokens, repairs and rollbacks by kind, tools used,
failed rules, and a list of every trajectory (search by id or question; filter by status,
reason and rule) with a viewer that colours think, call, tool output and answer. The figures
are those of 'trajforge stats'. A run directory shows the latest state of each id.

  --out F             the HTML file ('-' for stdout; required)
  --title T           page title (default: "trajforge report: <input>")
  --output-chars N    characters of each tool output kept in the viewer (default ${DEFAULT_ROW_OPTIONS.outputChars});
                      the rest is cut with a note, which keeps 10,000 trajectories near 50 MB
  --input-format F    input row format: auto (default), trajforge, drtulu, chat (was --format)
  --on-bad-row M      error (default) or skip
  --tokenizer T       what counts the tokens of rows from other systems: o200k_base (default;
                      a run directory: its config's tokenizer), cl100k_base, or the path of a
                      Hugging Face tokenizer

Rows from other systems (DR Tulu, chat) are run through the validator's rules, as in stats.

--serve RUN serves the page of a run directory on ${S.host} and keeps it up to date while the
run writes: done / planned, accepted, failed by reason, samples per minute, tokens and spend,
the newest trajectories, and new rows in the list (the open trajectory and the scroll stay).
It follows the run's files by byte offset, so a large run stays cheap. A run that has not
started yet is waited for; a finished one is served as it is. Ctrl-C stops it (exit 0).

  --serve             serve RUN instead of writing a file
  --port N            port (default ${S.port}; 0: any free port)
  --host H            address to listen on (default ${S.host}); only loopback unless --allow-remote
  --allow-remote      listen on a non-loopback address: anyone who can reach it reads the run's
                      trajectories (there is no password)
  --poll-ms N         how often the run's files are looked at (default ${S.poll_ms})
  --window S          seconds samples per minute is measured over (default ${S.rate_window_s})
  --newest N          newest trajectories named in the live panel (default ${S.newest})
  --price-prompt P    US dollars per million prompt tokens, and
  --price-completion P  per million completion tokens: with both, the spend is shown in
                      dollars too; without, at the prices the run's config
                      recorded (prices), else in tokens only
  --heartbeat S       seconds between keep-alive events to the page (default ${S.heartbeat_s})
  --read-chunk-bytes N  bytes of the run read per step (default ${S.read_chunk_bytes})
`;

const SERVE_FLAGS: Record<string, string> = {
  host: 'host',
  port: 'port',
  allow_remote: 'allow-remote',
  poll_ms: 'poll-ms',
  rate_window_s: 'window',
  newest: 'newest',
  price_prompt: 'price-prompt',
  price_completion: 'price-completion',
  heartbeat_s: 'heartbeat',
  read_chunk_bytes: 'read-chunk-bytes',
};

function positiveInt(flag: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!/^\d+$/.test(v) || !(n > 0)) throw new TrajforgeError('BAD_USAGE', `--${flag}: expected a positive integer, got "${v}"`, { field: flag });
  return n;
}

export async function run(argv: string[]): Promise<number> {
  const args = parseDatasetArgs('report', argv, {
      out: { type: 'string', short: 'o' },
      title: { type: 'string' },
      'output-chars': { type: 'string' },
      tokenizer: { type: 'string' },
      serve: { type: 'boolean' },
      port: { type: 'string' },
      host: { type: 'string' },
      'allow-remote': { type: 'boolean' },
      'poll-ms': { type: 'string' },
      window: { type: 'string' },
      newest: { type: 'string' },
      'price-prompt': { type: 'string' },
      'price-completion': { type: 'string' },
      heartbeat: { type: 'string' },
      'read-chunk-bytes': { type: 'string' },
  }, HELP);
  if (!args) return 0;
  const { values, input } = args;
  if (values.serve) return serve(input, values);
  const serveOnly = Object.values(SERVE_FLAGS).find((f) => values[f as keyof typeof values] !== undefined);
  if (serveOnly) throw new TrajforgeError('BAD_USAGE', `report: --${serveOnly} goes with --serve`);
  if (!values.out) throw new TrajforgeError('BAD_USAGE', 'report: --out F is required (- for stdout)');
  const out = values.out;
  const outputs = Outputs.check('report', { out }, [input, values.tokenizer]);
  const outputChars = positiveInt('output-chars', values['output-chars']);
  const read = readOptions(values['input-format'], values['on-bad-row'], 'report');
  const opts = { read, counter: datasetTokenCounter(input, values.tokenizer), ...(values.title ? { title: values.title } : {}), ...(outputChars ? { outputChars } : {}) };
  const started = performance.now();
  return outputs.write(
    async (w) => pageInto(await reportData(input, read), w.out!, opts),
    (result) => {
      const s = result.stats;
      const bad = s.rows.bad ? `, ${s.rows.bad} bad rows skipped` : '';
      const secs = ((performance.now() - started) / 1000).toFixed(1);
      process.stderr.write(
        `report: ${result.listed} trajectories (${s.status.ok ?? 0} ok, ${s.status.failed ?? 0} failed${bad}), ${(result.bytes / 1024 / 1024).toFixed(1)} MB, ${secs} s → ${out === '-' ? 'stdout' : out}\n`,
      );
    },
  );
}

type Values = Partial<Record<string, string | boolean>>;

/** `report --serve RUN`: serves until SIGINT or SIGTERM, then returns 0 (serving has no end of its own, so stopping it is how it finishes). */
async function serve(input: string, values: Values): Promise<number> {
  for (const flag of ['out', 'input-format', 'on-bad-row', 'tokenizer']) {
    if (values[flag] !== undefined) throw new TrajforgeError('BAD_USAGE', `report --serve: --${flag} does not apply (the page is served, from the run's own records; lines that are not records are skipped and counted)`);
  }
  if (input === '-') throw new TrajforgeError('BAD_USAGE', 'report --serve: follows a run directory, not stdin');
  const str = (f: string): string | undefined => (typeof values[f] === 'string' ? (values[f] as string) : undefined);
  const options = checkedOptions('report', ReportServeOptions, {
    host: str('host'),
    port: numberFlag('port', str('port')),
    allow_remote: values['allow-remote'] === true ? true : undefined,
    poll_ms: numberFlag('poll-ms', str('poll-ms')),
    rate_window_s: numberFlag('window', str('window')),
    newest: numberFlag('newest', str('newest')),
    price_prompt: numberFlag('price-prompt', str('price-prompt')),
    price_completion: numberFlag('price-completion', str('price-completion')),
    heartbeat_s: numberFlag('heartbeat', str('heartbeat')),
    read_chunk_bytes: numberFlag('read-chunk-bytes', str('read-chunk-bytes')),
  }, SERVE_FLAGS);
  if ((options.price_prompt === undefined) !== (options.price_completion === undefined)) {
    throw new TrajforgeError('BAD_USAGE', 'report --serve: --price-prompt and --price-completion go together (US dollars per million tokens of each)');
  }
  const outputChars = positiveInt('output-chars', str('output-chars'));
  const server = await serveReport(input, { options, title: str('title'), outputChars });
  if (!isLoopback(options.host)) {
    process.stderr.write(`warning: report --serve: listening on ${options.host}: anyone who can reach it reads this run's trajectories (questions, answers, tool outputs); there is no password\n`);
  }
  process.stdout.write(`report: serving ${input} at ${server.url} (Ctrl-C stops)\n`);
  const now = server.live.figures();
  if (now.manifest === null && now.rows.read === 0) process.stdout.write(`report: ${input} holds no run yet; the page fills in once one starts writing there\n`);
  await untilStopped();
  await server.close();
  process.stderr.write('report: stopped serving\n');
  return 0;
}
