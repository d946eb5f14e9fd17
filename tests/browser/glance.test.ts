/**
 * The report read at a glance, in a real browser (Debian's Chromium through playwright-core, as
 * tests/browser/report.test.ts): the run header, families as a tree with an agent filter, turn
 * numbers on blocks with repairs and rollbacks in place, each call's details, an error box for
 * a failure with no message, a question's rollouts with pass@k, charts whose bars filter the
 * list, and the judge's charts. The run is written by hand (glance-run.ts) so each fact sits
 * where the test knows, and every string of it carries markup that must stay text.
 *
 * Screenshots go to tests/artifacts/ (report-glance-*.png).
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { runCli, tempDir } from '../helpers.js';
import { EVIL, SECRET, writeGlanceRun } from './glance-run.js';

const CHROMIUM = '/usr/bin/chromium';
const HAVE_CHROMIUM = existsSync(CHROMIUM);
const ARTIFACTS = join(PACKAGE_ROOT, 'tests', 'artifacts');
const SHOTS = process.env.TRAJFORGE_SHOTS ?? ARTIFACTS;

describe.runIf(!HAVE_CHROMIUM && process.env.CI)('the report at a glance in a browser (CI)', () => {
  it('has chromium', () => {
    expect.fail(`${CHROMIUM} is missing in CI: .ci/run should have installed it (apt-get install -y chromium)`);
  });
});

describe.runIf(HAVE_CHROMIUM)('the report at a glance, in a browser', () => {
  let browser: Browser;
  let report: string;
  let page: Page;
  const errors: string[] = [];

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    const dir = tempDir('tf-browser-glance-');
    writeGlanceRun(join(dir, 'run'), { cost: 1.234 });
    report = join(dir, 'report.html');
    const r = await runCli(['report', join(dir, 'run'), '--out', report]);
    expect(r.code, r.stderr).toBe(0);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
    page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text());
    });
    await page.goto(pathToFileURL(report).href, { waitUntil: 'load' });
    await page.waitForSelector('body[data-ready="9"]');
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });

  const count = (): Promise<string | null> => page.textContent('#count');
  const open = async (id: string): Promise<void> => {
    await page.fill('#q', id);
    await page.locator(`#list .row[data-id="${id}"]`).click();
    await expect.poll(() => page.textContent('#viewer .head .id')).toBe(id);
  };
  const reset = async (): Promise<void> => {
    await page.fill('#q', '');
    for (const f of ['#f-status', '#f-reason', '#f-rule', '#f-agent', '#f-verdict']) await page.selectOption(f, '');
    if (await page.locator('#f-range').isVisible()) await page.click('#f-range button');
    await expect.poll(count).toBe('9 of 9 trajectories');
  };

  it('a run header: model, endpoint without its secret, dialect, wall time, cost', async () => {
    const fact = (k: string): Promise<string | null> => page.textContent(`#run-header [data-fact="${k}"] b`);
    expect(await fact('model')).toBe(`m-glance${EVIL}`);
    expect(await fact('endpoint')).toBe('http://127.0.0.1:9/v1');
    expect(await fact('dialect')).toBe('tulu');
    // 100 s and 25 s: the half hour between the sessions is not wall time.
    expect(await fact('wall')).toBe('2 min 5 s (2 sessions)');
    expect(await fact('cost')).toBe('$1.23');
    expect(readFileSync(report, 'utf8')).not.toContain(SECRET);
    await page.screenshot({ path: join(SHOTS, 'report-glance-header.png') });
  });

  it('families as a tree: a sub-agent session sits under its main session, and the agent filter picks it', async () => {
    const ids = await page.locator('#list .row').evaluateAll((rows) => rows.map((r) => [r.getAttribute('data-id'), r.getAttribute('data-depth')]));
    const at = ids.findIndex(([id]) => id === 'fam1');
    expect(at).toBeGreaterThanOrEqual(0);
    // Written before its parent in the file, listed right after it, one level in.
    expect(ids[at + 1]).toEqual(['fam1.browsing.0', '1']);
    expect(ids.filter(([, d]) => d !== '0').length).toBe(1);
    expect(await page.textContent('#list .row[data-id="fam1"]')).toContain('+1 sub-agent session');
    expect(await page.locator('#f-agent').isVisible()).toBe(true);
    await page.selectOption('#f-agent', `browsing${EVIL}`);
    await expect.poll(count).toBe('1 of 9 trajectories');
    expect(await page.locator('#list .row .tag.agent').first().textContent()).toBe(`browsing${EVIL}`);
    await page.selectOption('#f-agent', 'main');
    await expect.poll(count).toBe('1 of 9 trajectories');
    await reset();
  });

  it('turn numbers on blocks, a rollback before its turn with the text it threw away, a repair after its turn', async () => {
    await open('q1#0');
    const blocks = await page.locator('#viewer > .seg, #viewer > .fix').evaluateAll((els) =>
      els.map((e) => (e.classList.contains('fix') ? `${e.classList.contains('repair') ? 'repair' : 'rollback'}@${e.getAttribute('data-turn')}` : `${e.getAttribute('data-kind')}@${e.getAttribute('data-turn')}`)),
    );
    expect(blocks).toEqual(['think@0', 'call@0', 'tool output@0', 'rollback@1', 'think@1', 'call@1', 'tool output@1', 'repair@1', 'answer@2']);
    expect(await page.locator('#viewer .seg').first().locator('.lab').textContent()).toBe('think · turn 0');
    const rollback = page.locator('#viewer .fix.rollback');
    expect(await rollback.locator('pre.before').textContent()).toBe(`<call_tool name="search">alpha</call_tool> ${EVIL}`);
    expect(await rollback.textContent()).toContain('repeated_query');
    expect(await page.locator('#viewer .fix.repair').textContent()).toContain(`unclosed_call`);
    expect(await page.locator('#viewer .fix.repair').textContent()).toContain(`closed the call ${EVIL}`);
  });

  it('per-call details: tool, arguments, latency, cached, error', async () => {
    const first = page.locator('#viewer .seg.c[data-call="0"] .callx');
    expect(await first.textContent()).toContain('latency: 1,234 ms');
    expect(await first.textContent()).toContain('cached: yes');
    const second = page.locator('#viewer .seg.c[data-call="1"] .callx');
    expect(await second.textContent()).toContain(`tool: browse${EVIL}`);
    expect(await second.textContent()).toContain('latency: 56 ms');
    expect(await second.textContent()).toContain('cached: no');
    expect(await second.locator('.cerr').textContent()).toBe(`error: timeout ${EVIL}`);
    await second.locator('summary').click();
    expect(JSON.parse((await second.locator('pre.args').textContent())!)).toEqual({ query: 'beta', note: EVIL });
    await page.locator('#viewer .fix.rollback').evaluate((e) => e.scrollIntoView({ block: 'start' }));
    await page.evaluate(() => window.scrollTo(0, document.getElementById('browse')!.offsetTop - 8));
    await page.screenshot({ path: join(SHOTS, 'report-glance-turns.png') });
  });

  it('the judge: verdict, rubric score and criteria in the viewer', async () => {
    const j = page.locator('#viewer .judge');
    expect(await j.locator('.badge').textContent()).toBe('correct');
    expect(await j.textContent()).toContain('rubric score 0.95');
    expect(await j.locator('pre').textContent()).toBe(`because ${EVIL}`);
    expect(await j.locator('tr').first().textContent()).toContain(`names the answer ${EVIL}`);
  });

  it('a truncated failure with no message still gets an error box that says what happened', async () => {
    await reset();
    await open('q2#0');
    const box = page.locator('#viewer .errbox[data-reason="truncated"]');
    expect(await box.isVisible()).toBe(true);
    expect(await box.locator('b').textContent()).toBe('failed: truncated');
    expect(await box.locator('.why').textContent()).toContain('cut by the token limit');
    expect(await box.locator('pre').textContent()).toBe('(the record has no error message)');
    await page.screenshot({ path: join(SHOTS, 'report-glance-error.png') });
  });

  it("a question's k rollouts grouped, with pass@1 and pass@k", async () => {
    await reset();
    await page.check('#f-group');
    const ids = await page.locator('#list .row').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-id')));
    const at = ids.indexOf('q1#0');
    expect(ids.slice(at, at + 3)).toEqual(['q1#0', 'q1#1', 'q1#2']);
    await open('q1#1');
    const box = page.locator('#viewer .rollouts');
    expect(await box.locator('.facts').textContent()).toBe('3 samples · 2 correct · pass@1 66.7% · pass@3 100%');
    expect(await box.locator('li').allTextContents()).toEqual([
      'sample 0 · ok · correct · score 0.95 · q1#0',
      'sample 1 · ok · incorrect · score 0.30 · q1#1',
      'sample 2 · ok · correct · score 0.75 · q1#2',
    ]);
    await page.screenshot({ path: join(SHOTS, 'report-glance-rollouts.png') });
    await box.locator('a.to-sample').first().click();
    await expect.poll(() => page.textContent('#viewer .head .id')).toBe('q1#0');
    await page.uncheck('#f-group');
  });

  it('a chart bar filters the list: status, reason, a histogram bin, a verdict, a rubric score', async () => {
    await reset();
    await page.click('#chart-status [data-filter="status:failed"]');
    await expect.poll(count).toBe('1 of 9 trajectories');
    expect(await page.inputValue('#f-status')).toBe('failed');
    await reset();
    await page.click('#chart-reasons [data-filter="reason:truncated"]');
    await expect.poll(count).toBe('1 of 9 trajectories');
    await reset();
    // The tool-calls histogram: the bin of two calls holds q1#0 alone.
    await page.click('#chart-tool-calls [data-filter="calls:2:2"]');
    await expect.poll(count).toBe('1 of 9 trajectories');
    expect(await page.textContent('#f-range span')).toBe('calls 2');
    await page.click('#f-range button');
    await expect.poll(count).toBe('9 of 9 trajectories');
    await page.click('#chart-verdicts [data-filter="verdict:correct"]');
    await expect.poll(count).toBe('2 of 9 trajectories');
    await reset();
    await page.click('#chart-rubric [data-filter="rubric:0.3:0.4"]');
    await expect.poll(count).toBe('1 of 9 trajectories');
    expect(await page.locator('#list .row').first().getAttribute('data-id')).toBe('q1#1');
    await reset();
  });

  it('draws judge verdict and rubric score charts', async () => {
    expect(await page.locator('#chart-verdicts svg rect').count()).toBe(2);
    expect(await page.locator('#chart-rubric svg [data-filter]').count()).toBe(3);
    expect(await page.textContent('#chart-rubric h3')).toBe('Rubric scores (3 scored, mean 0.67)');
    await page.locator('#chart-verdicts').evaluate((e) => e.scrollIntoView({ block: 'center' }));
    await page.screenshot({ path: join(SHOTS, 'report-glance-charts.png') });
  });

  it('ran nothing from the records: no script, no image, no error', async () => {
    expect(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned)).toBeUndefined();
    expect(await page.locator('img').count()).toBe(0);
    expect(errors).toEqual([]);
  });
});
