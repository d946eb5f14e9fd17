/**
 * A row of DR Tulu's trajectory generator (`{sample_id, question, trajectory: {interleaved_text,
 * tool_calls…}}`) as a trajectory.
 *
 * The generator's tool records are matched to the `<tool_output>` blocks of the text by
 * position (record i ↔ block i), as the generator wrote them; where the model invented blocks
 * this pairs records with invented ones, and the validator flags the count. `final_answer` is
 * the generator's own field (it can differ from the `<answer>` in the text); cited ids are read
 * from it. `messages` stays empty: the generator kept no transcript and a reconstruction would
 * be a guess.
 */
import { SCHEMA_VERSION, type ToolCallRecord, type Trajectory } from '../../schemas/index.js';
import { tulu } from '../dialects/tulu.js';
import { bad, isObj, type Obj } from './row-shapes.js';
import { externalHead, externalTail, firstAnswer, idOf, metaFrom, outputsOf, str, toolsUsed, unresolved, uniqueId, type ReadContext } from './external-rows.js';

const DRTULU_MAPPED = new Set(['question', 'interleaved_text', 'tool_calls', 'final_answer', 'total_tool_calls', 'tools_used']);

export function fromDrTulu(row: Obj, ctx: ReadContext): Trajectory {
  const traj = row.trajectory as Obj;
  const text = traj.interleaved_text as string;
  const sourceId = idOf(row.sample_id) ?? bad('sample_id', 'missing: expected a string or a number');
  const question = str(row.question) ?? str(traj.question) ?? bad('question', 'missing: expected a string');
  const rawCalls = traj.tool_calls ?? [];
  if (!Array.isArray(rawCalls)) bad('trajectory.tool_calls', 'expected an array');
  // Checked before the id is taken: a bad row must not push the next row's id to `#2`.
  rawCalls.forEach((c: unknown, i: number) => {
    if (!isObj(c)) bad(`trajectory.tool_calls[${i}]`, 'expected an object');
    if (typeof c.tool_name !== 'string') bad(`trajectory.tool_calls[${i}].tool_name`, 'expected a string');
  });
  const id = uniqueId(sourceId, ctx);

  const top = Object.entries(row).filter(([k]) => k !== 'sample_id' && k !== 'question' && k !== 'trajectory');
  const taken = new Set(top.map(([k]) => k));
  const inner = Object.entries(traj).filter(([k]) => !DRTULU_MAPPED.has(k) && !taken.has(k));
  const meta = metaFrom([...top, ...inner], { source_format: 'drtulu', source_id: sourceId });
  const metadata = isObj(row.metadata) ? row.metadata : {};

  const parsed = tulu.parseTrajectory(text);
  const outputs = outputsOf(parsed.segments);
  const records: ToolCallRecord[] = (rawCalls as Obj[]).map((c, i): ToolCallRecord => {
    const toolName = c.tool_name as string;
    const result = c.result ?? null;
    const err = isObj(result) ? result.error : undefined;
    const out = outputs[i];
    const record: ToolCallRecord = {
      schema_version: SCHEMA_VERSION,
      call_id: `${id}-${i}`,
      turn: i,
      tool_name: toolName,
      server: null,
      mcp_tool: null,
      parameters: isObj(c.parameters) ? c.parameters : {},
      query: typeof c.query === 'string' ? c.query : c.query === undefined || c.query === null ? '' : JSON.stringify(c.query),
      arguments: {},
      result,
      truncated: isObj(result) && result.truncated === true,
      output_text: out?.text ?? '',
      snippet_ids: out ? [...out.snippetIds] : [],
      skipped: false,
      cached: false,
      duration_ms: 0,
      timestamp: str(c.timestamp) ?? '',
    };
    if (err !== undefined && err !== null && err !== '') record.error = typeof err === 'string' ? err : JSON.stringify(err);
    return record;
  });

  const answer = firstAnswer(parsed.segments);
  const finalAnswer = str(traj.final_answer) ?? answer?.answer ?? '';
  const cited = finalAnswer !== '' ? tulu.citedIds(finalAnswer) : answer ? tulu.citedIds(answer.text) : [];
  return {
    ...externalHead(row, id, question, meta),
    dialect: 'tulu',
    model: str(metadata.model) ?? str(metadata.api_model) ?? str(row.model) ?? 'unknown',
    status: 'ok',
    final_answer: finalAnswer,
    interleaved_text: text,
    messages: [],
    tool_calls: records,
    total_tool_calls: records.length,
    tools_used: toolsUsed(records),
    cited_ids: cited,
    unresolved_cited_ids: unresolved(cited, outputs),
    turns: records.length + 1,
    ...externalTail(str(metadata.generation_time)),
  };
}
