/** `trajforge init --preset P [--out DIR]`: a commented starter config and a questions file (presets.ts). */
import { TrajforgeError } from '../errors.js';
import { shellWord } from '../generate/preflight.js';
import { CLI_COMMAND } from '../paths.js';
import { presetNamed, PRESETS, writePreset } from '../core/presets.js';
import { parseFlags } from './flags.js';

const list = PRESETS.map((p) => `  ${p.name.padEnd(15)} ${p.summary}`).join('\n');

const USAGE = `trajforge init --preset P [--out DIR] [--force]

Writes DIR/P.yaml, a commented starter run config, and DIR/questions.jsonl,
a copy of the bundled questions it reads. The tool servers it names ship with trajforge, so
\`trajforge check --config DIR/P.yaml\` is the next step.

  --preset P    one of:
${list.replace(/^/gm, '  ')}
  --out DIR     where to write (default: the current directory)
  --force       replace files already there
`;

export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('init', argv, { preset: { type: 'string' }, out: { type: 'string' }, force: { type: 'boolean' } }, { help: USAGE, positionals: false });
  if (!parsed) return 0;
  const { values } = parsed;
  if (values.preset === undefined) throw new TrajforgeError('BAD_USAGE', `init: choose a preset with --preset P:\n${list}`);
  const preset = presetNamed(values.preset);
  const written = writePreset(preset, values.out ?? '.', values.force === true);
  // Paths as the user gave them (join drops a leading ./), so that they paste back as typed.
  const show = (f: string): string => shellWord(f);
  const out = (l: string): void => void process.stdout.write(`${l}\n`);
  out(`wrote ${show(written.config)}: ${preset.summary}`);
  for (const l of written.linksReplaced) out(`note: ${show(l.path)} was a symbolic link to ${l.target}: replaced by the file; ${l.target} is untouched`);
  out(written.questionsKept ? `kept  ${show(written.questions)} (the bundled questions already)` : `wrote ${show(written.questions)}: the bundled questions (${written.questionCount}, with gold answers the corpus supports)`);
  out('next:');
  out(`  ${CLI_COMMAND} generate --config ${show(written.config)} --dry-run   # the prompts and the first request; sends nothing`);
  out(`  ${preset.before}`);
  out(`  ${CLI_COMMAND} check --config ${show(written.config)}`);
  out(`  ${CLI_COMMAND} generate --config ${show(written.config)} --limit 20`);
  return 0;
}
