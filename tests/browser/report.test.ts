/**
 * The report in a real browser: Debian's Chromium driven by playwright-core (which never
 * downloads a browser). A 10,000-trajectory report, made of real trajectories repeated with
 * fresh ids (as bench/lifecycle.ts does), must open, draw its charts, list, filter, search
 * and show a trajectory; the screenshots are left in tests/artifacts/ to be looked at.
 *
 * CI installs chromium in .ci/run. Without /usr/bin/chromium this suite is skipped with a
 * message, except under CI, where a missing browser is a failure.
 */
import { createWriteStream, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim } from '../../sim/server.js';
import { runCli, tempDir, writeConfig } from '../helpers.js';

const CHROMIUM = '/usr/bin/chromium';
const HAVE_CHROMIUM = existsSync(CHROMIUM);
const ARTIFACTS = join(PACKAGE_ROOT, 'tests', 'artifacts');
const ROWS = 10_000;

if (!HAVE_CHROMIUM) {
  process.stderr.write(`tests/browser: ${CHROMIUM} not found, so the browser tests are skipped. Install it with: apt-get update && apt-get install -y chromium (.ci/run does this in CI)\n`);
}

describe.runIf(!HAVE_CHROMIUM && process.env.CI)('report in a browser (CI)', () => {
  it('has chromium', () => {
    expect.fail(`${CHROMIUM} is missing in CI: .ci/run should have installed it (apt-get install -y chromium)`);
  });
});

async function launch(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** A page that records script errors and every request that is not the file itself. */
async function openPage(browser: Browser, file: string): Promise<{ page: Page; errors: string[]; requests: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors: string[] = [];
  const requests: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  const url = pathToFileURL(file).href;
  page.on('request', (r) => {
    if (r.url() !== url) requests.push(r.url());
  });
  await page.goto(url, { waitUntil: 'load', timeout: 90_000 });
  return { page, errors, requests };
}

/** Real trajectories: a short generate run against the sim (misbehaving, so some fail) and the corpus server. */
async function realLines(dir: string): Promise<string[]> {
  const sim = await startSim({ port: 0, seed: 21, misbehave: { no_action: 0.25, refusal: 0.2, unclosed_call: 0.2, multiple_calls: 0.2, length: 0.15, hallucinated_output: 0.1 } });
  try {
    const config = loadConfig(writeConfig(dir, sim.url, { budgets: { max_turns: 4, max_tool_calls: 3, max_nudges: 1, forced_answer_attempts: 1 }, concurrency: 16 }), { limit: 40 });
    await generate({ config });
  } finally {
    await sim.close();
  }
  return ['trajectories.jsonl', 'failures.jsonl'].flatMap((f) =>
    readFileSync(join(dir, 'run', f), 'utf8')
      .split('\n')
      .filter(Boolean),
  );
}

interface Expected {
  failed: number;
  reason: string;
  byReason: number;
  rule: string;
  byRule: number;
}

describe.runIf(HAVE_CHROMIUM)('report in a browser', () => {
  let browser: Browser;
  let dir: string;
  let report: string;
  let expected: Expected;
  const timings: Record<string, number> = {};

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    dir = tempDir('tf-browser-');
    let t0 = performance.now();
    const lines = await realLines(dir);
    timings.generate_ms = Math.round(performance.now() - t0);

    // 10,000 rows: the real ones over and over, each with an id of its own.
    const data = join(dir, 'big.jsonl');
    const out = createWriteStream(data);
    const reasons = new Map<string, number>();
    const rules = new Map<string, number>();
    let failed = 0;
    for (let i = 0; i < ROWS; i++) {
      const rec = JSON.parse(lines[i % lines.length]!) as { id: string; status: string; reason?: string; validation: { issues: { rule: string }[] } };
      if (rec.status === 'failed') failed++;
      const reason = rec.reason ?? 'none';
      reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
      for (const r of new Set(rec.validation.issues.map((x) => x.rule))) rules.set(r, (rules.get(r) ?? 0) + 1);
      if (!out.write(`${JSON.stringify({ ...rec, id: `${rec.id}~${i}` })}\n`)) await new Promise<void>((r) => out.once('drain', () => r()));
    }
    await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
    const topFailure = [...reasons].filter(([k]) => k !== 'none').sort((a, b) => b[1] - a[1])[0]!;
    const topRule = [...rules].sort((a, b) => b[1] - a[1])[0]!;
    expected = { failed, reason: topFailure[0], byReason: topFailure[1], rule: topRule[0], byRule: topRule[1] };

    report = join(dir, 'report.html');
    t0 = performance.now();
    const r = await runCli(['report', data, '--out', report]);
    timings.report_ms = Math.round(performance.now() - t0);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`report: ${ROWS} trajectories`);
    browser = await launch();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    writeFileSync(join(ARTIFACTS, 'browser-timings.json'), `${JSON.stringify(timings, null, 2)}\n`);
  });

  it('keeps a 10,000-trajectory report well under 100 MB', () => {
    const bytes = statSync(report).size;
    timings.report_bytes = bytes;
    expect(bytes).toBeLessThan(100 * 1024 * 1024);
  });

  it('opens with no network, draws the charts, lists lazily, filters, searches and shows a trajectory', async () => {
    const t0 = performance.now();
    const { page, errors, requests } = await openPage(browser, report);
    await page.waitForSelector(`body[data-ready="${ROWS}"]`, { timeout: 90_000 });
    timings.open_ms = Math.round(performance.now() - t0);

    // Charts: inline SVG with bars drawn.
    expect(await page.locator('#overview svg.chart').count()).toBeGreaterThanOrEqual(9);
    for (const id of ['chart-status', 'chart-reasons', 'chart-tool-calls', 'chart-turns', 'chart-tokens', 'chart-repairs', 'chart-tools']) {
      expect(await page.locator(`#${id} svg rect`).count(), id).toBeGreaterThan(0);
    }
    await page.screenshot({ path: join(ARTIFACTS, 'report-overview.png') });

    // The list: every row counted, only the visible ones in the DOM.
    await expect.poll(() => page.textContent('#count')).toBe('10,000 of 10,000 trajectories');
    const inDom = await page.locator('#list .row').count();
    expect(inDom).toBeGreaterThan(5);
    expect(inDom).toBeLessThan(60);
    await page.locator('#list').evaluate((el) => (el.scrollTop = 46 * 5000));
    await expect.poll(() => page.locator('#list .row').evaluateAll((rows) => rows.map((r) => Number(r.getAttribute('data-i'))))).toContain(5000);
    expect(await page.locator('#list .row').count()).toBeLessThan(60);

    // Filters: status, then reason, then rule; each count is the data's own.
    const t1 = performance.now();
    await page.selectOption('#f-status', 'failed');
    await expect.poll(() => page.textContent('#count')).toBe(`${expected.failed.toLocaleString('en-US')} of 10,000 trajectories`);
    timings.filter_ms = Math.round(performance.now() - t1);
    const badges = await page.locator('#list .row .badge').allTextContents();
    expect(badges.length).toBeGreaterThan(0);
    expect(new Set(badges)).toEqual(new Set(['failed']));
    await page.selectOption('#f-reason', expected.reason);
    await expect.poll(() => page.textContent('#count')).toBe(`${expected.byReason.toLocaleString('en-US')} of 10,000 trajectories`);
    await page.selectOption('#f-status', '');
    await page.selectOption('#f-reason', '');
    await page.selectOption('#f-rule', expected.rule);
    await expect.poll(() => page.textContent('#count')).toBe(`${expected.byRule.toLocaleString('en-US')} of 10,000 trajectories`);
    await page.selectOption('#f-rule', '');

    // Search by id, then by question text.
    await page.fill('#q', '~4321');
    await expect.poll(() => page.textContent('#count')).toBe('1 of 10,000 trajectories');
    await page.fill('#q', 'Chrome Android');
    // The search waits for typing to pause: poll until every listed question matches.
    await expect
      .poll(async () => {
        const qs = await page.locator('#list .row .q').allTextContents();
        return qs.length > 0 && qs.every((q) => q.toLowerCase().includes('chrome android'));
      })
      .toBe(true);
    const found = Number((await page.textContent('#count'))!.split(' ')[0]!.replace(/,/g, ''));
    expect(found).toBeGreaterThan(0);
    expect(found).toBeLessThan(ROWS);

    // Open a trajectory that made calls: its segments, colour-coded, with the outputs.
    await page.fill('#q', '');
    await page.selectOption('#f-status', 'ok');
    await expect.poll(() => page.textContent('#count')).not.toBe('10,000 of 10,000 trajectories');
    // The first of the top rows that shows every kind, think included, makes the better picture.
    let id: string | null = null;
    let kinds: (string | null)[] = [];
    for (let k = 0; k < 8; k++) {
      const row = page.locator('#list .row').nth(k);
      id = await row.getAttribute('data-id');
      await row.click();
      await expect.poll(() => page.textContent('#viewer .head .id')).toBe(id);
      kinds = await page.locator('#viewer .seg').evaluateAll((els) => els.map((e) => e.getAttribute('data-kind')));
      if (kinds.includes('think') && kinds.includes('call')) break;
    }
    expect(kinds).toContain('call');
    expect(kinds).toContain('tool output');
    expect(kinds).toContain('answer');
    const colours = await page.locator('#viewer .seg').evaluateAll((els) => [...new Set(els.map((e) => getComputedStyle(e).backgroundColor))]);
    expect(colours.length).toBeGreaterThanOrEqual(3);
    expect(await page.locator('#list .row.sel').getAttribute('data-id')).toBe(id);
    expect(page.url()).toContain(`#id=${encodeURIComponent(id!)}`);
    await page.locator('#viewer .legend').evaluate((e) => e.scrollIntoView({ block: 'start' }));
    await page.evaluate(() => window.scrollTo(0, document.getElementById('browse')!.offsetTop - 8));
    await page.screenshot({ path: join(ARTIFACTS, 'report-10k.png') });

    // A press and a release with a re-render between them (the list scrolled, a filter or the
    // search applied) still open the pressed row: rows are kept across renders, not rebuilt.
    const second = page.locator('#list .row').nth(1);
    const secondId = await second.getAttribute('data-id');
    expect(secondId).not.toBe(id);
    const box = (await second.boundingBox())!;
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.down();
    await page.locator('#list').evaluate((el) => new Promise<void>((r) => {
      el.dispatchEvent(new Event('scroll'));
      requestAnimationFrame(() => requestAnimationFrame(() => r()));
    }));
    await page.mouse.up();
    await expect.poll(() => page.locator('#viewer .head .id').textContent()).toBe(secondId);

    expect(errors).toEqual([]);
    expect(requests).toEqual([]);
    await page.close();
  }, 150_000); // a 37 MB page on a loaded 2-core machine can take a minute to parse

  it('shows hostile text as text: </script> in a trajectory runs nothing', async () => {
    const evil = '</script><script>window.pwned=1</script><!--<script><img src=x onerror="window.pwned=2">';
    const row = {
      schema_version: 1, id: 'evil', question_id: 'evil', question: `q ${evil}`, dialect: 'tulu', model: 'm', status: 'ok', final_answer: evil,
      interleaved_text: `<call_tool name="s">q</call_tool>\n<tool_output>\n${evil}\n</tool_output>\n<answer>${evil}</answer>`,
      messages: [], tool_calls: [], total_tool_calls: 1, tools_used: [], cited_ids: [], unresolved_cited_ids: [], turns: 2, repairs: [], rollbacks: [],
      validation: { passed: true, issues: [] }, usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: 0, estimated: false },
      timing: { started_at: '', finished_at: '', duration_ms: 0, llm_ms: 0, tool_ms: 0 }, attempt: 0, run_id: 'r',
    };
    const file = join(dir, 'evil.jsonl');
    writeFileSync(file, `${JSON.stringify(row)}\n`);
    const html = join(dir, 'evil.html');
    const r = await runCli(['report', file, '--out', html]);
    expect(r.code, r.stderr).toBe(0);
    const { page, errors } = await openPage(browser, html);
    await page.waitForSelector('body[data-ready="1"]');
    await page.locator('#list .row').first().click();
    await expect.poll(() => page.locator('#viewer .seg[data-kind="tool output"] pre').textContent()).toContain(evil);
    expect(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned)).toBeUndefined();
    expect(await page.locator('#viewer img').count()).toBe(0);
    expect(errors).toEqual([]);
    await page.close();
  });
});
