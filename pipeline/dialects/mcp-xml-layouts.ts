/**
 * The mcp-xml dialect's prompt layouts (config `dialect_options.layout`): which prompt files a
 * run sends and how the tools are listed. `trajforge` is what every run made before layouts
 * existed sends, kept so those runs resume unchanged; `miroverse-v0.1` is MiroThinker's layout as
 * MiroVerse v0.1 has it (the fixture row of ../shared/fixtures/miroverse-chat-row.jsonl, and
 * MiroThinker's apps/miroflow-agent/src/utils/prompt_utils.py at commit
 * 73cb96f755de98f10d8dc57ac62ba8d0877a6bb4, "initial commit", 2025-08-08, the day MiroVerse v0.1
 * was published). Where the two differ the fixture wins: it is the data (docs/agents.md lists
 * each difference).
 */

export const LAYOUT_NAMES = ['trajforge', 'miroverse-v0.1'] as const;
export type LayoutName = (typeof LAYOUT_NAMES)[number];

/** The prompts of an agent role (main, or the browsing sub-agent) in a layout; undefined: trajforge's defaults. */
export interface AgentPrompts {
  readonly objective: string;
  /** Its final-answer prompt; `{task_failed}` in it is filled from `<name>-failed` when the loop did not finish. */
  readonly summary: string;
}

export interface Layout {
  readonly name: LayoutName;
  /** The system prompt template (`{today}`, `{tools}`, and trajforge's `{result_wrapping}`). */
  readonly system: string;
  /** How the tool list is written: trajforge's (JSON schemas, a blank line between tools) or MiroThinker's. */
  readonly listing: 'trajforge' | 'mirothinker';
  /** The first user message of a main session, `{question}` filled; undefined: the question alone. */
  readonly question?: string;
  /** The keep-K placeholder; undefined: the shared `tool-result-omitted`. */
  readonly omitted?: string;
  /**
   * Set: tool results go back as the tool's own text (JSON when it returned JSON), and a failed
   * call as this template (`{tool_name}`, `{server_name}`, `{error}`), as MiroThinker sends them.
   */
  readonly toolError?: string;
  readonly main?: AgentPrompts;
  readonly browsing?: AgentPrompts;
  /** A sub-agent's summary repeats its whole first message as `{task}` (MiroThinker), not the subtask alone. */
  readonly summaryRepeatsMessage?: boolean;
}

const LAYOUTS: Readonly<Record<LayoutName, Layout>> = {
  trajforge: { name: 'trajforge', system: 'mcp-xml-system', listing: 'trajforge' },
  'miroverse-v0.1': {
    name: 'miroverse-v0.1',
    system: 'mcp-xml-miroverse-system',
    listing: 'mirothinker',
    question: 'mcp-xml-miroverse-question',
    omitted: 'mcp-xml-miroverse-omitted',
    toolError: 'mcp-xml-miroverse-tool-error',
    main: { objective: 'main-agent-objective', summary: 'main-agent-miroverse-summary' },
    browsing: { objective: 'browsing-agent-miroverse-objective', summary: 'browsing-agent-miroverse-summary' },
    summaryRepeatsMessage: true,
  },
};

export function layoutNamed(name: LayoutName | undefined): Layout {
  return LAYOUTS[name ?? 'trajforge'];
}

/** The prompt files a layout sends beyond the shared ones (the failed-task notes included). */
export function layoutPrompts(name: LayoutName | undefined): string[] {
  const l = layoutNamed(name);
  if (l.name === 'trajforge') return [];
  const agents = [l.main, l.browsing].flatMap((a) => (a === undefined ? [] : [a.objective, a.summary, `${a.summary}-failed`]));
  return [l.system, l.question, l.omitted, l.toolError, ...agents].filter((p): p is string => p !== undefined);
}

/**
 * Prompt files only a layout other than trajforge sends: a run of another layout leaves them out
 * of its fingerprint, so adding a layout never stops an older run from resuming.
 */
export const LAYOUT_ONLY_PROMPTS: readonly string[] = [...new Set(LAYOUT_NAMES.flatMap((n) => layoutPrompts(n)))];
