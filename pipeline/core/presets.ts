/**
 * `trajforge init`: the starter configs (data/configs/presets/, commented YAML that works from
 * any directory) and the writing of one, beside a copy of the bundled questions, into a folder
 * of the user's. Nothing a user wrote is ever overwritten without `--force`.
 */
import { mkdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { TrajforgeError } from '../errors.js';
import { entryAt, fsError, replaceFile, statPath } from '../files.js';
import { PACKAGE_ROOT } from '../paths.js';

export interface Preset {
  readonly name: string;
  /** One line: the model, the endpoint, the dialect. */
  readonly summary: string;
  /** What to do first, before `check`: the endpoint to start, the key to export. */
  readonly before: string;
}

export const PRESETS: readonly Preset[] = [
  { name: 'vllm-tulu', summary: 'DR-Tulu-8B served by vLLM, DR Tulu\'s own format (tulu dialect), the offline corpus as its search tool', before: 'vllm serve rl-research/DR-Tulu-8B --port 8000' },
  { name: 'openai-native', summary: 'an OpenAI model (gpt-4.1-mini) with native function calling, the offline corpus as its search tool', before: 'export OPENAI_API_KEY=sk-...' },
  { name: 'mirothinker', summary: 'MiroThinker-v1.0-8B served by vLLM, MiroThinker\'s format (mcp-xml): a main agent and a browsing sub-agent over the offline corpus', before: 'vllm serve miromind-ai/MiroThinker-v1.0-8B --port 8000' },
];

/** The bundled question bank, copied beside the config (the presets read `${CONFIG_DIR}/questions.jsonl`). */
const QUESTIONS = 'questions.jsonl';

export function presetNamed(name: string): Preset {
  const preset = PRESETS.find((p) => p.name === name);
  if (preset === undefined) throw new TrajforgeError('BAD_USAGE', `init: no preset "${name}" (presets: ${PRESETS.map((p) => p.name).join(', ')})`);
  return preset;
}

export function presetText(preset: Preset): string {
  return readFileSync(join(PACKAGE_ROOT, 'data/configs/presets', `${preset.name}.yaml`), 'utf8');
}

export interface Written {
  readonly config: string;
  readonly questions: string;
  /** The questions file was there already, the same as the bundled one, and left alone. */
  readonly questionsKept: boolean;
  /** Questions in it. */
  readonly questionCount: number;
  /** Symbolic links that `--force` replaced with the file (the files they pointed to are untouched): name and target. */
  readonly linksReplaced: readonly { readonly path: string; readonly target: string }[];
}

/** How a name already there is described: a symbolic link says where it points. */
function described(path: string): string {
  const at = entryAt(path);
  return at?.isSymbolicLink() ? `${path} (a symbolic link to ${readlinkSync(path)})` : path;
}

/**
 * Writes `<preset>.yaml` and `questions.jsonl` into `dir` (made when missing). Anything already
 * at either name (a symbolic link too, even one that points nowhere) is an error unless
 * `force`; a questions file identical to the bundled one is kept. Each file is written in place
 * of the name (files.ts `replaceFile`): a symbolic link there is replaced, never written through,
 * so the file it points to, inside `dir` or out of it, stays as it was.
 */
export function writePreset(preset: Preset, dir: string, force = false): Written {
  const config = join(dir, `${preset.name}.yaml`);
  const questions = join(dir, QUESTIONS);
  const bank = readFileSync(join(PACKAGE_ROOT, 'data', QUESTIONS));
  const there = statPath(dir, `init: --out ${dir}`);
  if (there !== undefined && !there.isDirectory()) throw new TrajforgeError('BAD_USAGE', `init: --out ${dir}: a file, not a directory`, { file: dir });
  statPath(config, `init: ${config}`);
  const configAt = entryAt(config);
  const questionsAt = entryAt(questions);
  // Read, never written: a link to a copy of the bundled bank is as good as the copy.
  const questionsKept = statPath(questions, `init: ${questions}`)?.isFile() === true && readFileSync(questions).equals(bank);
  if (!force) {
    const inWay = [configAt ? config : undefined, questionsAt && !questionsKept ? questions : undefined].filter((f) => f !== undefined).map(described);
    if (inWay.length > 0) throw new TrajforgeError('BAD_USAGE', `init: ${inWay.join(' and ')} already there; nothing was written (--force replaces ${inWay.length > 1 ? 'them' : 'it'}, or choose another --out)`);
  }
  const linksReplaced = [configAt?.isSymbolicLink() ? config : undefined, !questionsKept && questionsAt?.isSymbolicLink() ? questions : undefined]
    .filter((f) => f !== undefined)
    .map((path) => ({ path, target: readlinkSync(path) }));
  try {
    mkdirSync(dir, { recursive: true });
    replaceFile(config, presetText(preset));
    if (!questionsKept) replaceFile(questions, bank);
  } catch (err) {
    throw fsError(dir, err, 'cannot write the starter config');
  }
  const questionCount = bank.toString('utf8').split('\n').filter((l) => l.trim() !== '').length;
  return { config, questions, questionsKept, questionCount, linksReplaced };
}
