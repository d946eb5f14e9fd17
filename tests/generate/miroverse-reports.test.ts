/**
 * #25 item 10: a sub-agent's report that is empty or a refusal. The validator flags it
 * (`agent.report_unusable`); the sub-agent's `unusable_report` policy says what its caller sees:
 * by default a tool error (in MiroThinker's words under the miroverse-v0.1 layout) and the
 * session is not accepted; with `pass` the report as it is, the session kept and flagged. The
 * sim writes such reports on purpose (misbehaviours `refused_report`, `empty_report`), and the
 * MiroVerse config runs against it through the CLI.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { unusableReport } from '../../pipeline/core/validator.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { FailureRecord, Trajectory, type Trajectory as Traj } from '../../schemas/index.js';
import { EMPTY_REPORT, REFUSAL_TEXT } from '../../sim/misbehave.js';
import { startSim, type Sim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir } from '../helpers.js';

const CONFIG = join(PACKAGE_ROOT, 'data/configs/miroverse.yaml');
const LIMIT = 8;

describe('unusableReport', () => {
  it('flags an empty report and a refusal, and only those', () => {
    expect(unusableReport('')).toMatch(/^the report is empty$/);
    expect(unusableReport(' \n--- \n')).toMatch(/^the report is empty \("---"\)$/);
    expect(unusableReport("I'm sorry, but I can't help with that.")).toMatch(/^the report is a refusal: "I'm sorry, but I can't help with that\."$/);
    expect(unusableReport('I cannot assist with this request.')).toMatch(/refusal/);
    // A report that opens with an apology and goes on to report is a report.
    expect(unusableReport(`I'm sorry, the sources disagree. ${'Chrome first supported it in version 76, per the MDN table. '.repeat(6)}`)).toBeUndefined();
    expect(unusableReport('### Final Response\n\nOpera first supported it in version 15.')).toBeUndefined();
  });
});

/** A MiroVerse run against a sim that writes unusable reports; `policy` for the browsing agent (default: the config's). */
async function run(sim: Sim, policy?: 'pass'): Promise<{ ok: Traj[]; failed: Traj[] }> {
  const dir = tempDir('tf-miroverse-reports-');
  const cfg = parse(readFileSync(CONFIG, 'utf8').replaceAll('${TRAJFORGE_ROOT}', PACKAGE_ROOT)) as { agents: { browsing: Record<string, unknown> } };
  if (policy !== undefined) cfg.agents.browsing.unusable_report = policy;
  const file = join(dir, 'miroverse.yaml');
  writeFileSync(file, stringify(cfg));
  const out = join(dir, 'run');
  const r = await runCli(['generate', '--config', file, '--base-url', sim.url, '--out', out, '--limit', String(LIMIT), '--no-cache'], { timeoutMs: 120_000 });
  // Every sample may fail (a main agent without a report cannot answer): exit 0 or 1, never a crash.
  expect(r.code, r.stderr).toBeLessThanOrEqual(1);
  return {
    ok: readJsonl(join(out, 'trajectories.jsonl')).map((t) => Trajectory.parse(t)),
    failed: readJsonl(join(out, 'failures.jsonl')).map((t) => FailureRecord.parse(t) as Traj),
  };
}

/** The message that carried call `i`'s result back to the parent. */
function resultMessage(parent: Traj, i: number): string {
  const results = parent.messages.filter((m, k) => k > 1 && m.role === 'user' && parent.messages[k - 1]!.role === 'assistant' && parent.messages[k - 1]!.content.includes('<use_mcp_tool>'));
  return results[i]!.content;
}

describe('data/configs/miroverse.yaml with a sim that writes unusable reports', () => {
  let sim: Sim;
  beforeAll(async () => {
    sim = await startSim({ port: 0, seed: 5, misbehave: { refused_report: 0.35, empty_report: 0.35 } });
  });
  afterAll(() => sim.close());

  it('by default fails the sub-agent session and shows its caller a tool error, in MiroThinker\'s words', async () => {
    const { ok, failed } = await run(sim);
    const all = [...ok, ...failed];
    const bad = all.filter((t) => t.agent === 'browsing' && (t.final_answer.trim() === REFUSAL_TEXT || t.final_answer.trim() === EMPTY_REPORT));
    expect(new Set(bad.map((t) => t.final_answer.trim()))).toEqual(new Set([REFUSAL_TEXT, EMPTY_REPORT]));
    for (const child of bad) {
      expect(child).toMatchObject({ status: 'failed', reason: 'invalid' });
      expect(child.validation.issues.map((i) => [i.rule, i.severity])).toContainEqual(['agent.report_unusable', 'error']);
      const parent = all.find((t) => t.id === child.parent_id && t.attempt === child.attempt)!;
      const call = parent.tool_calls[child.parent_call!]!;
      expect(call.error).toMatch(/^sub-agent browsing failed: invalid: agent\.report_unusable: the report is (a refusal|empty)/);
      expect(resultMessage(parent, child.parent_call!)).toBe(`Tool call to search_and_browse on browsing-agent failed. Error: ${call.error}`);
    }
    // No accepted session holds an unusable report.
    for (const t of ok) if (t.agent === 'browsing') expect(unusableReport(t.final_answer)).toBeUndefined();
  }, 180_000);

  it('with unusable_report: pass, hands the report to the caller as it is and keeps the session, flagged', async () => {
    const { ok, failed } = await run(sim, 'pass');
    const all = [...ok, ...failed];
    const bad = all.filter((t) => t.agent === 'browsing' && unusableReport(t.final_answer) !== undefined);
    expect(bad.length).toBeGreaterThan(0);
    for (const child of bad) {
      expect(child.validation.issues.map((i) => [i.rule, i.severity])).toContainEqual(['agent.report_unusable', 'warn']);
      if (child.reason !== 'parent_failed') expect(child.status).toBe('ok');
      const parent = all.find((t) => t.id === child.parent_id && t.attempt === child.attempt)!;
      expect(parent.tool_calls[child.parent_call!]!.error).toBeUndefined();
      expect(resultMessage(parent, child.parent_call!)).toBe(child.final_answer);
    }
  }, 180_000);
});
