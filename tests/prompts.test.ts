/**
 * Every prompt file renders with the variables its caller passes, and says what the loop and
 * the sim rely on. The table below is read from the callers; a new prompt file without a row
 * fails the suite.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { loadPrompt, renderPrompt } from '../pipeline/prompts.js';

interface Use {
  /** Where the code renders it, and with what. */
  readonly caller: string;
  readonly vars: Readonly<Record<string, string>>;
  /** Variables the caller passes that the template may leave out. */
  readonly optional?: readonly string[];
}

const QUESTION = 'Which enzyme does aspirin inhibit irreversibly?';

const USES: Readonly<Record<string, Use>> = {
  'tulu-system': { caller: 'dialects/tulu.ts systemPrompt', vars: { tools: '- pubmed_search: Search PubMed abstracts (TOOLS_LISTING_1)' } },
  'mcp-xml-system': {
    caller: 'dialects/mcp-xml.ts systemPrompt',
    vars: { tools: '## Server name: corpus\n### Tool name: pubmed_search (TOOLS_LISTING_2)', today: ' Today is: 2025-06-08', result_wrapping: ', inside <tool_output>...</tool_output>' },
  },
  // Hierarchical agents (#15): the agents' config defaults, and what the sim's roles key on.
  // Every final-answer prompt is rendered with {question} and {task} (rollout.ts #finalAnswerAsk), so an agent's `final_answer_prompt` may use either.
  subtask: { caller: "generate/agents.ts: a sub-agent's first user message (task_prompt)", vars: { subtask: 'Find the year aspirin was first synthesised.' } },
  'browsing-agent-summary': { caller: "rollout.ts: a sub-agent's final-report prompt", vars: { question: 'Find the year aspirin was first synthesised.', task: 'Find the year aspirin was first synthesised.' }, optional: ['question'] },
  'main-agent-summary': { caller: "rollout.ts: the main agent's final-answer prompt (MiroThinker's)", vars: { question: QUESTION, task: QUESTION }, optional: ['task'] },
  'main-agent-objective': { caller: "generate/agents.ts: appended to the main agent's system prompt (objective_prompt, raw)", vars: {} },
  'browsing-agent-objective': { caller: "generate/agents.ts: appended to the browsing sub-agent's system prompt (objective_prompt, raw)", vars: {} },
  'mcp-xml-summary': { caller: 'rollout.ts final-answer prompt (mcp-xml)', vars: { question: QUESTION } },
  'force-answer': { caller: 'rollout.ts final-answer prompt (tulu)', vars: { question: QUESTION }, optional: ['question'] },
  'native-final-answer': { caller: 'rollout.ts final-answer prompt (native)', vars: { question: QUESTION }, optional: ['question'] },
  'failure-summary': { caller: 'experience.ts summariseFailure', vars: { reason: 'max_turns', detail: 'the turn budget (8) was used up' } },
  'failure-experience': {
    caller: 'rollout.ts questionMessage',
    vars: { question: QUESTION, failure_type: 'ran out of turns', what_happened: 'Searched the same words three times.', useful_findings: '- pm-1: aspirin acetylates COX-1' },
  },
  'tool-result-omitted': { caller: 'context.ts placeholder', vars: { index: '3', keep: '2' } },
  // Sent as loaded, never rendered: they must hold no placeholder at all.
  nudge: { caller: 'rollout.ts nudge (tulu, raw)', vars: {} },
  'native-nudge': { caller: 'rollout.ts nudge (native, raw)', vars: {} },
  'mcp-xml-nudge': { caller: 'rollout.ts nudge (mcp-xml, before any tool has run; raw)', vars: {} },
  'native-system': { caller: 'dialects/native.ts systemPrompt (raw)', vars: {} },
  'judge-simpleqa': { caller: 'core/judge/kinds.ts VERDICT, filled by prompt.ts renderGrading', vars: { question: QUESTION, gold: 'cyclooxygenase (COX-1)', answer: 'It blocks COX-1 <cite id="pm-1">x</cite>.' } },
  'judge-rubric': { caller: 'core/judge/kinds.ts rubricKind, filled by prompt.ts renderGrading', vars: { question: QUESTION, answer: 'It blocks COX-1 <cite id="pm-1">x</cite>.', criteria: '[{"criterion": 1, "description": "Names COX-1"}]' } },
  // MiroThinker's layout as MiroVerse v0.1 has it (dialects/mcp-xml-layouts.ts, dialect_options.layout: miroverse-v0.1).
  'mcp-xml-miroverse-system': { caller: 'dialects/mcp-xml.ts systemPrompt (miroverse-v0.1)', vars: { tools: "## Server name: browsing-agent\n### Tool name: search_and_browse (TOOLS_LISTING_3)", today: 'Today is: 2025-06-08' } },
  'mcp-xml-miroverse-question': { caller: "rollout.ts: the main agent's first user message (miroverse-v0.1)", vars: { question: QUESTION } },
  'mcp-xml-miroverse-tool-error': { caller: 'dialects/mcp-xml.ts: a failed call as the model is shown it (miroverse-v0.1)', vars: { server_name: 'corpus', tool_name: 'pubmed_search', error: 'tool call timed out after 30000 ms' } },
  'mcp-xml-miroverse-omitted': { caller: 'context.ts placeholder (miroverse-v0.1, raw)', vars: {} },
  'main-agent-miroverse-summary': { caller: "rollout.ts: the main agent's final-answer prompt (miroverse-v0.1)", vars: { question: QUESTION, task: QUESTION, task_failed: '' }, optional: ['task', 'task_failed'] },
  'main-agent-miroverse-summary-failed': { caller: 'rollout.ts: {task_failed} of the main summary when the loop ran out (raw)', vars: {} },
  'browsing-agent-miroverse-objective': { caller: "generate/agents.ts: appended to the browsing sub-agent's system prompt (miroverse-v0.1, raw)", vars: {} },
  'browsing-agent-miroverse-summary': { caller: "rollout.ts: a sub-agent's final-report prompt (miroverse-v0.1)", vars: { question: 'Find the year aspirin was first synthesised.', task: 'Find the year aspirin was first synthesised.', task_failed: '' }, optional: ['question', 'task_failed'] },
  'browsing-agent-miroverse-summary-failed': { caller: 'rollout.ts: {task_failed} of the browsing summary when the loop ran out (raw)', vars: {} },
  // Synthesis (pipeline/synthesize/): its stages, filled by renderGrading (data blocks), and the judge's two kinds.
  'synth-draft-documents': { caller: 'synthesize/draft.ts draft (documents)', vars: { documents: 'Document 1\nid: pm-1\ntext:\nAspirin acetylates COX-1.', links: '(one document: no links)', hops: '1' } },
  'synth-draft-graph': { caller: 'synthesize/draft.ts draft (graph)', vars: { triples: '["aspirin","inhibits","COX-1"]', descriptions: '(none)', hops: '1' } },
  'synth-obfuscate': { caller: 'synthesize/draft.ts obfuscate', vars: { question: QUESTION, answer: 'COX-1', evidence: 'Document 1\nid: pm-1\ntext:\nAspirin acetylates COX-1.' } },
  'synth-closed-book': { caller: 'synthesize/judged.ts closedBookCheck', vars: { question: QUESTION } },
  'synth-entailment': { caller: 'core/judge/kinds.ts ENTAILMENT, from synthesize/judged.ts', vars: { question: QUESTION, answer: 'COX-1', evidence: '{"doc_id":"pm-1","quote":"Aspirin acetylates COX-1."}' } },
  'synth-unique': { caller: 'core/judge/kinds.ts UNIQUE, from synthesize/judged.ts', vars: { question: QUESTION, answer: 'COX-1', evidence: 'Document 1\nid: pm-1\ntext:\nAspirin acetylates COX-1.' } },
};

const PLACEHOLDER = /\{([A-Za-z_][A-Za-z0-9_]*)\}/g;
const FINAL_ANSWER_PROMPTS = ['force-answer', 'native-final-answer', 'mcp-xml-summary', 'main-agent-summary'];

function render(name: string): string {
  return renderPrompt(loadPrompt(name), USES[name]!.vars);
}

describe('prompt files', () => {
  const files = readdirSync(join(PACKAGE_ROOT, 'prompts'))
    .filter((f) => f.endsWith('.txt'))
    .map((f) => f.slice(0, -'.txt'.length))
    .sort();

  it('every file in prompts/ has a row in the table, and every row a file', () => {
    expect(files.length).toBeGreaterThan(0);
    expect(files.filter((f) => !Object.hasOwn(USES, f))).toEqual([]);
    expect(Object.keys(USES).sort()).toEqual(files);
  });

  it.each(Object.keys(USES))('%s renders with what its caller passes, leaving no placeholder', (name) => {
    const use = USES[name]!;
    const template = loadPrompt(name);
    expect(template.trim()).not.toBe('');
    const text = render(name);
    expect(text.match(PLACEHOLDER), use.caller).toBeNull();

    // The template asks only for what the caller passes, and uses all of it but the optional.
    const asked = [...new Set([...template.matchAll(PLACEHOLDER)].map((m) => m[1]!))].sort();
    const required = Object.keys(use.vars).filter((k) => !(use.optional ?? []).includes(k));
    expect(asked.filter((k) => !Object.hasOwn(use.vars, k))).toEqual([]);
    expect(required.filter((k) => !asked.includes(k))).toEqual([]);
    for (const k of required) expect(text, `${name}: {${k}}`).toContain(use.vars[k]!);
  });

  it('the raw ones come out exactly as written', () => {
    for (const name of ['nudge', 'native-nudge', 'mcp-xml-nudge', 'native-system', 'main-agent-objective', 'browsing-agent-objective']) expect(render(name)).toBe(loadPrompt(name));
  });

  it('a value is inserted once, never expanded again', () => {
    const text = renderPrompt(loadPrompt('mcp-xml-summary'), { question: 'What does {tools} mean?' });
    expect(text).toContain('Question: What does {tools} mean?');
  });
});

describe('what the loop and the sim rely on', () => {
  it('mcp-xml-system shows the <use_mcp_tool> call format', () => {
    const text = render('mcp-xml-system');
    expect(text).toContain('<use_mcp_tool>');
    expect(text).toContain('</use_mcp_tool>');
  });

  it.each(FINAL_ANSWER_PROMPTS)('%s asks for the "final answer" (the sim detects a forced answer by it)', (name) => {
    expect(render(name)).toMatch(/final answer/i);
  });

  it('mcp-xml-summary puts the question on its own line', () => {
    expect(render('mcp-xml-summary').split('\n')).toContain(`Question: ${QUESTION}`);
  });

  it('failure-summary is headed FAILURE SUMMARY and names the reason and detail', () => {
    const text = render('failure-summary');
    expect(text).toContain('FAILURE SUMMARY');
    expect(text).toContain('Failure reason: max_turns');
    expect(text).toContain('the turn budget (8) was used up');
    // It asks for the three fields parseSummary reads.
    for (const field of ['failure_type', 'what_happened', 'useful_findings']) expect(text).toContain(`"${field}"`);
  });

  it('failure-experience puts the question on a Question: line (the sim reads the question from it)', () => {
    const lines = render('failure-experience').split('\n');
    expect(lines).toContain(`Question: ${QUESTION}`);
    expect(lines.filter((l) => /^\s*question\s*:/i.test(l))).toEqual([`Question: ${QUESTION}`]);
  });

  it('tool-result-omitted holds no <tool_output>, so neither a reader nor the sim takes it for a result', () => {
    const text = render('tool-result-omitted');
    expect(text).not.toContain('<tool_output');
    expect(text).toContain('3');
    expect(text).toContain('2');
  });

  it('mcp-xml-system closes its second paragraph with the date, where MiroThinker writes it', () => {
    const line = render('mcp-xml-system').split('\n')[2]!;
    expect(line).toMatch(/^You only have access to the tools provided below\. .* previous tool-use\. Today is: 2025-06-08$/);
  });

  it('subtask ends with the line a sub-agent session is told apart by', () => {
    const lines = render('subtask').trimEnd().split('\n');
    expect(lines[0]).toBe('Find the year aspirin was first synthesised.');
    expect(lines.at(-1)).toBe('Please provide the answer and detailed supporting information of the subtask given to you.');
  });

  it('browsing-agent-summary quotes the task, forbids tools and asks for a structured report, never a "final answer" nor a FAILURE SUMMARY', () => {
    const text = render('browsing-agent-summary');
    expect(text).toContain('"Find the year aspirin was first synthesised."');
    expect(text).toMatch(/must NOT initiate any further tool use/);
    expect(text).toMatch(/structured report/);
    // The sim takes "final answer" for the main agent's summary prompt, FAILURE SUMMARY for a failure summary.
    expect(text).not.toMatch(/final answer/i);
    expect(text).not.toContain('FAILURE SUMMARY');
  });

  it('the objectives say which agent is which, and only the browsing one says "browsing"', () => {
    expect(render('main-agent-objective')).toMatch(/^# Agent Specific Objective\n\nYou are a task-solving agent/);
    expect(render('browsing-agent-objective')).toMatch(/^# Agent Specific Objective\n\nYou are an agent that performs the task of searching and browsing/);
    expect(render('main-agent-objective')).not.toMatch(/browsing/);
  });

  it.each([
    ['synth-entailment', ['SUPPORTED', 'NOT_SUPPORTED']],
    ['synth-unique', ['UNIQUE', 'NOT_UNIQUE']],
  ])('%s asks for its verdict on the first line, in the words its reader reads', (name, words) => {
    const text = render(name);
    expect(text).toContain(`Verdict: ${words[0]} or ${words[1]}`);
    expect(text).toMatch(/only the first line is read/);
  });

  it('the synthesis stages ask for one JSON object starting the reply (the readers read nothing else)', () => {
    for (const name of ['synth-draft-documents', 'synth-draft-graph', 'synth-obfuscate']) expect(render(name)).toMatch(/Reply with one JSON object and nothing else, starting with \{/);
  });

  it('judge-simpleqa names the three verdicts the parser reads', () => {
    const text = render('judge-simpleqa');
    for (const v of ['CORRECT', 'INCORRECT', 'NOT_ATTEMPTED']) expect(text).toContain(v);
  });
});
