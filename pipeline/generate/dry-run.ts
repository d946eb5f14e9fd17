/**
 * `trajforge generate --dry-run`: what a run of this config would show the model, without
 * sending it: each agent's system prompt and tools, and the first request of the first sample
 * exactly as it would go out.
 *
 * Nothing here builds a prompt or a request of its own. The tool servers start (their tools
 * are what the model is offered) and stop; the agents are planned as a run plans them; the
 * first sample's session runs through the real rollout (rollout.ts) with a model client that
 * catches its first request and ends the session there; and the body is `LlmClient.requestBody`,
 * the one `complete` posts. No request reaches the endpoint, no run directory, lock or cache
 * is made, and the key is never shown.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { RunManifest, type RunConfig, type Sample } from '../../schemas/index.js';
import { resolveApiKey, scrubberFor } from '../core/config.js';
import type { ToolSpec } from '../dialects/types.js';
import { TrajforgeError } from '../errors.js';
import { Agents } from './agents.js';
import { chatWire } from '../core/llm/chat-http.js';
import { Executor } from './executor.js';
import { LlmClient, LlmError, type Completion, type CompletionRequest } from '../core/llm/llm.js';
import { countSamples, sampleQuestions } from './sampler.js';
import { MANIFEST } from '../core/run-dir/names.js';

export interface DryRunAgent {
  readonly name: string;
  readonly dialect: string;
  readonly system_prompt: string;
  /** Every tool offered: MCP tools under their alias, then the sub-agents it may call. */
  readonly tools: readonly { readonly name: string; readonly server: string | null; readonly description: string; readonly input_schema: Record<string, unknown> }[];
  /** The XML dialects: the tools as the system prompt lists them. */
  readonly tool_listing?: string | undefined;
  /** native: the request's `tools` field. */
  readonly request_tools?: readonly unknown[] | undefined;
}

export interface DryRun {
  readonly model: string;
  readonly base_url: string;
  readonly dialect: string;
  /** Samples in the question set; null when the questions come on stdin. */
  readonly samples: number | null;
  /** The first sample the run would roll out; null when the question set holds none. */
  readonly sample: { readonly id: string; readonly question_id: string; readonly question: string } | null;
  /** Each agent, main first (a config without `agents` is one agent, `main`). */
  readonly agents: readonly DryRunAgent[];
  /** Whether the config has an `agents` section. */
  readonly with_agents: boolean;
  /** The first request of the first sample's main session; null when there is none to send. */
  readonly request: { readonly agent: string; readonly method: 'POST'; readonly url: string; readonly headers: Record<string, string>; readonly body: Record<string, unknown> } | null;
  /** What the reader should know: a key not set, a run there to resume, why there is no request. */
  readonly notes: readonly string[];
}

/** Thrown by the catching client: the session ends at its first request, which is never sent. */
class Caught extends LlmError {
  constructor() {
    super('aborted', 'dry run: the first request is shown, not sent');
  }
}

export async function dryRun(opts: { readonly config: RunConfig; readonly env?: NodeJS.ProcessEnv | undefined }): Promise<DryRun> {
  const { config } = opts;
  const env = opts.env ?? process.env;
  const questionsPath = config.questions.path;
  if (!questionsPath) throw new TrajforgeError('BAD_CONFIG', 'questions.path: no questions file (set it in the config or pass --questions)', { field: 'questions.path' });
  const scrubber = scrubberFor(config, env);
  const notes: string[] = [];

  // The key is shown by its variable's name only; a run would stop without it, a dry run says so.
  let key: string | undefined;
  try {
    key = resolveApiKey(config, env);
  } catch (err) {
    if (!(err instanceof TrajforgeError)) throw err;
    notes.push(`${config.endpoint.api_key_env} is not set: a run would stop before it starts (export it, or endpoint.api_key_env: none)`);
  }
  const shownKey = key === 'EMPTY' ? 'EMPTY' : `[${config.endpoint.api_key_env}, redacted]`;

  // As the run reads them: a bad row stops here too.
  const samples = questionsPath === '-' ? null : await countSamples({ path: questionsPath, config: config.questions });
  let sample: Sample | undefined;
  for await (const s of sampleQuestions({ path: questionsPath, config: config.questions }).samples) {
    sample = s;
    break;
  }

  const runCreatedAt = existingRun(config.output.dir, notes);
  // Without the result cache: it would make its directory, and no tool is called here.
  const executor = await Executor.start({ servers: config.mcpServers, tools: config.tools, executor: { ...config.executor, cache: false }, env, scrubber });
  let agents: Agents;
  let first: CompletionRequest | undefined;
  let unsent: string | undefined;
  try {
    agents = new Agents({ config, executor, runCreatedAt });
    if (sample !== undefined) {
      const catcher = {
        complete(req: CompletionRequest): Promise<Completion> {
          first = req;
          return Promise.reject(new Caught());
        },
      };
      try {
        const family = await agents.rollout(sample, 0, { llm: catcher, runId: 'dry-run' });
        // The session ended without asking the model: the first request would not fit its window.
        unsent = `${family.root.reason ?? 'no request'}: ${family.root.error ?? 'the session sent no request'}`;
      } catch (err) {
        if (!(err instanceof Caught)) throw err;
      }
    }
  } finally {
    await executor.close();
  }

  if (sample === undefined) notes.push('the question set selects no sample: a run would send nothing');
  else if (first === undefined) notes.push(`the first sample sends no request: ${unsent}`);
  const llm = new LlmClient(config.endpoint, { apiKey: shownKey });
  const wire = chatWire(config.endpoint.base_url, shownKey);
  const text = (s: string): string => scrubber.text(s);
  const json = <T>(v: T): T => JSON.parse(scrubber.text(JSON.stringify(v))) as T;
  return {
    model: config.endpoint.model,
    base_url: config.endpoint.base_url,
    dialect: config.dialect,
    samples,
    sample: sample === undefined ? null : { id: sample.sample_id, question_id: sample.question.id, question: sample.question.question },
    with_agents: agents.configured,
    agents: agents.shown().map(({ name, dialect, systemPrompt, tools }) => ({
      name,
      dialect: dialect.name,
      system_prompt: text(systemPrompt),
      tools: json(tools.map(toolShown)),
      ...(dialect.toolListing === undefined ? {} : { tool_listing: text(dialect.toolListing(tools)) }),
      ...(dialect.requestTools === undefined ? {} : { request_tools: json(dialect.requestTools(tools)) }),
    })),
    request: first === undefined ? null : { agent: 'main', method: 'POST', url: wire.url.href, headers: { ...wire.headers }, body: json(llm.requestBody(first)) },
    notes: notes.map(text),
  };
}

function toolShown(t: ToolSpec): DryRunAgent['tools'][number] {
  return { name: t.name, server: t.server ?? null, description: t.description, input_schema: t.inputSchema };
}

/**
 * The creation time of a run already in `dir`, read and left alone: a resumed run's mcp-xml
 * agents with `dialect_options.today: run` write its date, not today's.
 */
function existingRun(dir: string, notes: string[]): string | undefined {
  let text: string;
  try {
    text = readFileSync(join(dir, MANIFEST), 'utf8');
  } catch {
    return undefined;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const manifest = RunManifest.safeParse(parsed);
  if (!manifest.success) {
    notes.push(`${join(dir, MANIFEST)} is not a trajforge run manifest: a run there would stop (choose another output.dir, or --out)`);
    return undefined;
  }
  notes.push(`${dir} holds a run (created ${manifest.data.created_at}): a run resumes it, skipping the samples it holds, so its first request may be for a later sample than the one shown`);
  return manifest.data.created_at;
}

const RULE = '='.repeat(8);

/** The dry run for a person: a section per prompt, tool list and request, each under a header line. */
export function dryRunText(d: DryRun, configPath: string): string {
  const out: string[] = [];
  const section = (title: string, body: string): void => void out.push(`${RULE} ${title} ${RULE}`, body.trimEnd(), '');
  out.push(`trajforge generate --dry-run ${configPath}: nothing was sent to the endpoint, nothing was written`);
  out.push(`model ${d.model} at ${d.base_url}, ${d.dialect} dialect; ${d.samples ?? 'unknown (stdin)'} samples${d.sample ? `; the first: ${d.sample.id}` : ''}`);
  for (const n of d.notes) out.push(`note: ${n}`);
  out.push('');
  for (const a of d.agents) {
    const who = d.with_agents ? `agent ${a.name} (${a.dialect}): ` : '';
    section(`${who}system prompt`, a.system_prompt);
    const list = a.tools.map((t) => `- ${t.name}${t.server ? ` (server ${t.server})` : ''}: ${oneLine(t.description)}`).join('\n') || '(none)';
    if (a.request_tools !== undefined) {
      section(`${who}tools: ${a.tools.length}, sent in the request's \`tools\` field`, `${list}\n\n${JSON.stringify(a.request_tools, null, 2)}`);
    } else {
      section(`${who}tools: ${a.tools.length}, listed in the system prompt as`, a.tool_listing ?? list);
    }
  }
  if (d.request !== null) {
    const r = d.request;
    const headers = Object.entries(r.headers).map(([k, v]) => `${k}: ${v}`);
    section(`first request${d.sample ? ` (sample ${d.sample.id}` : ''}${d.with_agents ? `, agent ${r.agent}` : ''}${d.sample ? ')' : ''}`, [`${r.method} ${r.url}`, ...headers, '', JSON.stringify(r.body, null, 2)].join('\n'));
  }
  return `${out.join('\n').trimEnd()}\n`;
}

function oneLine(s: string): string {
  const flat = s.replace(/\s+/g, ' ').trim();
  return flat.length > 160 ? `${flat.slice(0, 160)}…` : flat;
}
