/**
 * What a config allows but a person rarely means: said when a run starts (`generate`, `rerun`)
 * and by `trajforge check`, never an error. Each one names the field to change.
 */
import type { RunConfig } from '../../schemas/index.js';

export interface ConfigWarning {
  /** Stable: `no_tools`, `thinking_max_tokens`. */
  readonly id: string;
  readonly message: string;
}

/** Below this `endpoint.max_tokens`, a thinking model's turn is likely to be cut inside its thinking. */
export const THINKING_MIN_MAX_TOKENS = 2048;

/**
 * Model names of models that think before they answer, as their makers name them: DR Tulu,
 * MiroThinker, Qwen3 and QwQ, DeepSeek-R1 (and its distills, `deepseek-reasoner`), OpenAI's
 * o-series, GPT-5 and gpt-oss, Magistral, Phi-4-reasoning, and anything called thinking or
 * reasoning. A guess from the name: a warning, never a refusal.
 */
const THINKING_MODEL = /dr-?tulu|mirothinker|qwen-?3|qwq|deepseek-?(r1|reasoner)|r1-distill|(^|[/:])o[1-9](-|$)|gpt-?5|gpt-oss|magistral|reasoning|thinking|(^|[-_/])r1([-_]|$)/i;

export function looksLikeThinkingModel(model: string): boolean {
  return THINKING_MODEL.test(model);
}

/** The warnings a config earns before any server starts or request is sent. */
export function configWarnings(cfg: RunConfig): ConfigWarning[] {
  const out: ConfigWarning[] = [];
  const servers = Object.entries(cfg.mcpServers).filter(([, s]) => s.disabled !== true);
  if (servers.length === 0) {
    const disabled = Object.keys(cfg.mcpServers).length;
    out.push({
      id: 'no_tools',
      message:
        `no tools offered: ${disabled ? `every server in mcpServers is disabled (${disabled})` : 'the config lists no mcpServers'}, so the model answers from what it knows ` +
        'and the trajectories hold no tool calls. Add a server (`trajforge init` writes a config with the bundled offline corpus server)',
    });
  } else if (cfg.tools.expose !== undefined && cfg.tools.expose.length === 0) {
    out.push({ id: 'no_tools', message: 'no tools offered: tools.expose is empty, so the model is shown no tool and every call it makes is refused. Name the tools to offer, or leave tools.expose out to offer them all' });
  }
  const { max_tokens: maxTokens, model, send_reasoning: sendReasoning } = cfg.endpoint;
  const thinking = looksLikeThinkingModel(model) ? `${model} looks like a thinking model` : sendReasoning !== 'none' ? `endpoint.send_reasoning is ${sendReasoning}, so the model thinks` : undefined;
  if (thinking !== undefined && maxTokens < THINKING_MIN_MAX_TOKENS) {
    out.push({
      id: 'thinking_max_tokens',
      message:
        `endpoint.max_tokens is ${maxTokens} and ${thinking}: its thinking alone can use that, and a turn cut before its call or answer is wasted ` +
        `(the sample fails as truncated). Raise endpoint.max_tokens (at least ${THINKING_MIN_MAX_TOKENS}; thinking models often write several thousand tokens a turn)`,
    });
  }
  return out;
}

/** Said when the servers are up and offer nothing: a server that lists no tools, or an expose list that names none. */
export function noToolsListedWarning(servers: readonly string[]): ConfigWarning {
  return {
    id: 'no_tools',
    message: `no tools offered: the servers (${servers.join(', ')}) list no tool the model is shown, so the trajectories hold no tool calls. Check the servers, tools.aliases and tools.expose`,
  };
}
