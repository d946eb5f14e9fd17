/**
 * A repair's text before and after, in a real browser (Debian's Chromium through playwright-core,
 * as glance.test.ts): in `trajforge report` and in the page `report --serve` serves, each repair
 * whose record kept the completion before it (`Repair.before`) shows it at its turn, collapsed,
 * beside the turn's kept text, with what was dropped marked. The completion is hostile markup
 * (`</details>`, `<script>`): it must stay text. A repair without `before` (an older record) shows
 * what it always did.
 *
 * Screenshots go to tests/artifacts/ (report-before-*.png).
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ReportServeOptions, Trajectory } from '../../schemas/index.js';
import { serveReport, type ReportServer } from '../../pipeline/dataset/report/serve.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { runCli, tempDir } from '../helpers.js';
import { EVIL } from './glance-run.js';

const CHROMIUM = '/usr/bin/chromium';
const HAVE_CHROMIUM = existsSync(CHROMIUM);
const SHOTS = process.env.TRAJFORGE_SHOTS ?? join(PACKAGE_ROOT, 'tests', 'artifacts');

/** Markup that would close the before/after box, or run, if it reached the page as HTML. */
const HOSTILE = `</pre></details></div><details open><summary>forged</summary>${EVIL}<script>window.pwned=3</script>`;
const CALL0 = '<call_tool name="search">alpha</call_tool>';
/** Turn 0 as the endpoint sent it: the call, then an invented tool output that the repair dropped. */
const SENT0 = `<think>look it up</think>\n${CALL0}\n<tool_output>invented ${HOSTILE}</tool_output>`;
/** Turn 2 as sent (turn 1 was nudged): an answer never closed. */
const SENT2 = '<answer>42';

function writeRun(dir: string): void {
  mkdirSync(dir, { recursive: true });
  const t = Trajectory.parse({
    schema_version: 1, id: 'rb1', question_id: 'rb1', question: 'what is it?', dialect: 'tulu', model: 'm', status: 'ok', final_answer: '42',
    interleaved_text: `<think>look it up</think>\n${CALL0}\n<tool_output>\nresult one\n</tool_output>\n<answer>42</answer>`,
    messages: [],
    tool_calls: [{
      schema_version: 1, call_id: 'c0', turn: 0, tool_name: 'search', server: 'corpus', mcp_tool: 'search', parameters: { query: 'alpha' }, query: 'alpha', arguments: { query: 'alpha' }, result: null,
      truncated: false, output_text: 'result one', snippet_ids: [], skipped: false, cached: false, duration_ms: 10, timestamp: '2026-01-01T10:00:01Z',
    }],
    total_tool_calls: 1, tools_used: ['search'], cited_ids: [], unresolved_cited_ids: [], turns: 3,
    repairs: [
      { turn: 0, kind: 'hallucinated_output', detail: 'the model wrote <tool_output> itself', before: SENT0 },
      { turn: 0, kind: 'stop_ignored', detail: 'the client cut the turn', before: SENT0 },
      // A nudged turn: nothing of it entered the training view.
      { turn: 1, kind: 'no_action', detail: 'neither a call nor an answer', before: `just musing ${HOSTILE}`, before_truncated: true },
      { turn: 2, kind: 'unclosed_answer', detail: '<answer> never closed', before: SENT2 },
      // Written before records kept the text before a repair.
      { turn: 2, kind: 'noncanonical_syntax', detail: `an older record ${EVIL}` },
    ],
    rollbacks: [], validation: { passed: true, issues: [] }, usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2, llm_calls: 3, estimated: false },
    timing: { started_at: '2026-01-01T10:00:00Z', finished_at: '2026-01-01T10:00:05Z', duration_ms: 5000, llm_ms: 4000, tool_ms: 1000 }, attempt: 0, run_id: 'rb',
  });
  writeFileSync(join(dir, 'trajectories.jsonl'), `${JSON.stringify(t)}\n`);
  writeFileSync(join(dir, 'failures.jsonl'), '');
}

describe.runIf(!HAVE_CHROMIUM && process.env.CI)('a repair before and after in a browser (CI)', () => {
  it('has chromium', () => {
    expect.fail(`${CHROMIUM} is missing in CI: .ci/run should have installed it (apt-get install -y chromium)`);
  });
});

describe.runIf(HAVE_CHROMIUM)('a repair shows the text before and after it, at its turn', () => {
  let browser: Browser;
  let server: ReportServer | undefined;
  const dir = tempDir('tf-browser-before-');
  const run = join(dir, 'run');

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    writeRun(run);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    await browser?.close();
  });

  /** Opens rb1 in a new page at `url`, with the page's errors collected. */
  async function openRow(url: string): Promise<{ page: Page; errors: string[] }> {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(url, { waitUntil: 'load' });
    await page.waitForSelector('body[data-ready="1"]');
    await page.locator('#list .row[data-id="rb1"]').click();
    await expect.poll(() => page.textContent('#viewer .head .id')).toBe('rb1');
    return { page, errors };
  }

  async function checkViewer(page: Page, errors: string[]): Promise<void> {
    // In place: turn 0's repairs after its blocks; the nudged turn 1, which left none; turn 2's after the answer.
    const blocks = await page.locator('#viewer > .seg, #viewer > .fix').evaluateAll((els) =>
      els.map((e) => (e.classList.contains('fix') ? `repair@${e.getAttribute('data-turn')}` : `${e.getAttribute('data-kind')}@${e.getAttribute('data-turn')}`)),
    );
    expect(blocks).toEqual(['think@0', 'call@0', 'tool output@0', 'repair@0', 'repair@0', 'repair@1', 'answer@2', 'repair@2', 'repair@2']);
    const fixes = page.locator('#viewer > .fix.repair');
    // One box per turn's completion, collapsed; the second repair of turn 0 points to it.
    const boxes = page.locator('#viewer > .fix.repair > details.ba');
    expect(await boxes.count()).toBe(3);
    expect(await boxes.evaluateAll((els) => els.map((e) => (e as HTMLDetailsElement).open))).toEqual([false, false, false]);
    expect(await fixes.nth(1).textContent()).toContain('text before and after: as in the repair of turn 0 above');
    // The hostile text forged no element: no box of its own, no script ran.
    expect(await page.locator('#viewer summary', { hasText: 'forged' }).count()).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned)).toBeUndefined();

    // Turn 0: before is the completion as sent, the invented output struck through; after the turn's kept text.
    const first = fixes.nth(0);
    await first.locator('summary').click();
    expect(await boxes.nth(0).evaluate((e) => (e as HTMLDetailsElement).open)).toBe(true);
    expect(await first.locator('pre.before').textContent()).toBe(SENT0);
    expect(await first.locator('pre.before del').textContent()).toBe(`\n<tool_output>invented ${HOSTILE}</tool_output>`);
    expect(await first.locator('pre.after').textContent()).toBe(`<think>look it up</think>\n${CALL0}`);
    expect(await first.locator('summary').textContent()).toContain(`${`\n<tool_output>invented ${HOSTILE}</tool_output>`.length} characters dropped · 0 written`);
    // Turn 2: the answer, its close written by the repair.
    const answer = fixes.nth(3);
    await answer.locator('summary').click();
    expect(await answer.locator('pre.before').textContent()).toBe(SENT2);
    expect(await answer.locator('pre.after ins').textContent()).toBe('</answer>');
    // The older record's repair, as before: no box, the turn as repaired above.
    expect(await fixes.nth(4).locator('details').count()).toBe(0);
    expect(await fixes.nth(4).textContent()).toContain(`an older record ${EVIL}`);
    expect(await fixes.nth(4).textContent()).toContain('after: turn 2 as repaired, above');
    // The nudged turn kept nothing: all of before was dropped, and it says it was cut.
    const nudged = fixes.nth(2);
    await nudged.locator('summary').click();
    expect(await nudged.locator('pre.before del').textContent()).toBe(`just musing ${HOSTILE}`);
    expect(await nudged.textContent()).toContain('after: turn 1 left no text in the trajectory');
    expect(await nudged.textContent()).toContain('long: cut where marked');
    expect(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned)).toBeUndefined();
    expect(errors).toEqual([]);
  }

  it('trajforge report: before and after at the right turn, the hostile text as text', async () => {
    const report = join(dir, 'report.html');
    const r = await runCli(['report', run, '--out', report]);
    expect(r.code, r.stderr).toBe(0);
    const { page, errors } = await openRow(pathToFileURL(report).href);
    await checkViewer(page, errors);
    await page.locator('#viewer > .fix.repair').first().evaluate((e) => e.scrollIntoView({ block: 'start' }));
    await page.screenshot({ path: join(SHOTS, 'report-before-after.png') });
    await page.close();
  }, 60_000);

  it('report --serve: the same, in the live page', async () => {
    server = await serveReport(run, { options: ReportServeOptions.parse({ port: 0, poll_ms: 50 }), log: () => {} });
    const { page, errors } = await openRow(server.url);
    await checkViewer(page, errors);
    await page.locator('#viewer > .fix.repair').nth(2).evaluate((e) => e.scrollIntoView({ block: 'start' }));
    await page.screenshot({ path: join(SHOTS, 'report-before-after-serve.png') });
    await page.close();
  }, 60_000);
});
