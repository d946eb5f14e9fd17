/**
 * The report of a run with agents in a real browser (Debian's Chromium through playwright-core,
 * as tests/browser/report.test.ts): a call to a sub-agent links to that session, the session
 * links back to its parent's call, and a click goes each way. The run is
 * data/configs/miroverse.yaml against the sim.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { miroverseRun, type Run } from '../families-runs.js';
import { runCli, tempDir } from '../helpers.js';

const CHROMIUM = '/usr/bin/chromium';
const HAVE_CHROMIUM = existsSync(CHROMIUM);
const ARTIFACTS = join(PACKAGE_ROOT, 'tests', 'artifacts');

describe.runIf(!HAVE_CHROMIUM && process.env.CI)('family links in a browser (CI)', () => {
  it('has chromium', () => {
    expect.fail(`${CHROMIUM} is missing in CI: .ci/run should have installed it (apt-get install -y chromium)`);
  });
});

describe.runIf(HAVE_CHROMIUM)('family links in the report, in a browser', () => {
  let browser: Browser;
  let run: Run;
  let report: string;

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    run = await miroverseRun();
    report = join(tempDir('tf-browser-fam-'), 'report.html');
    const r = await runCli(['report', run.dir, '--out', report]);
    expect(r.code, r.stderr).toBe(0);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
  }, 180_000);
  afterAll(async () => {
    await browser?.close();
  });

  it('parent → child → parent: a call opens the sub-agent session it started, which opens its parent at that call', async () => {
    const root = run.ok.find((t) => t.parent_id === undefined && t.tool_calls.filter((c) => c.child_id).length >= 2)!;
    expect(root, 'a main session with two sub-agent calls').toBeDefined();
    const second = root.tool_calls[1]!.child_id!;
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${pathToFileURL(report).href}#id=${encodeURIComponent(root.id)}`, { waitUntil: 'load' });
    await page.waitForSelector('body[data-ready]');
    await expect.poll(() => page.textContent('.viewer .head .id')).toBe(root.id);

    // The parent: one link per call to a sub-agent, on that call, naming the session.
    const links = page.locator('.viewer .seg.c a.to-child');
    expect(await links.count()).toBe(root.tool_calls.filter((c) => c.child_id).length);
    const onSecond = page.locator('.viewer .seg.c[data-call="1"] a.to-child');
    expect(await onSecond.getAttribute('data-target')).toBe(second);

    // → the child.
    await onSecond.click();
    await expect.poll(() => page.textContent('.viewer .head .id')).toBe(second);
    const child = run.ok.find((t) => t.id === second)!;
    expect(await page.textContent('.viewer .fam')).toContain(`agent: browsing · depth 1 · family ${root.id}`);
    expect(await page.locator('.viewer pre.box').nth(1).textContent()).toBe(child.final_answer);
    expect(page.url()).toContain(`#id=${encodeURIComponent(second)}`);
    await page.screenshot({ path: join(ARTIFACTS, 'report-family-child.png') });

    // ← back to the parent, at the call that started it, highlighted and in view.
    const back = page.locator('.viewer a.to-parent');
    expect(await back.textContent()).toBe(`← called by ${root.id}, call 1`);
    await back.click();
    await expect.poll(() => page.textContent('.viewer .head .id')).toBe(root.id);
    const call = page.locator('.viewer .seg.c[data-call="1"]');
    expect(await call.getAttribute('class')).toContain('hl');
    await expect.poll(() => call.evaluate((e) => {
      const v = e.closest('.viewer')!.getBoundingClientRect();
      const r = e.getBoundingClientRect();
      return r.top >= v.top && r.top < v.bottom;
    })).toBe(true);
    await page.screenshot({ path: join(ARTIFACTS, 'report-family-parent.png') });
    expect(errors).toEqual([]);
  }, 60_000);

  it('a call whose session is not in the report names it without a link', async () => {
    const root = run.ok.find((t) => t.parent_id === undefined && t.tool_calls.some((c) => c.child_id))!;
    const only = join(tempDir('tf-browser-fam-'), 'mains.html');
    const mains = join(tempDir('tf-browser-fam-'), 'mains.jsonl');
    expect((await runCli(['filter', run.dir, '--keep', 'agent == main', '--out', mains])).code).toBe(0);
    expect((await runCli(['report', mains, '--out', only])).code).toBe(0);
    const page = await browser.newPage();
    await page.goto(`${pathToFileURL(only).href}#id=${encodeURIComponent(root.id)}`, { waitUntil: 'load' });
    await page.waitForSelector('body[data-ready]');
    await expect.poll(() => page.textContent('.viewer .head .id')).toBe(root.id);
    expect(await page.locator('.viewer a.to-child').count()).toBe(0);
    expect(await page.locator('.viewer .seg.c[data-call="0"]').textContent()).toContain(`→ sub-agent session ${root.tool_calls[0]!.child_id} (not in this report)`);
  }, 60_000);
});
