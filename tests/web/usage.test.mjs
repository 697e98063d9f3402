// The token usage view: reached from the home screen, it shows what the bridges recorded from
// a scripted agent (tests/peers/usage_agent.py) across two models and two days — totals, the
// models' shares, a bar per day — switches between 7 days, 30 days and all, and says so when
// nothing was ever recorded. Checked as a phone, light and dark (screenshots).
// "Yesterday" and "ten days ago" are bridges that stamp their records that far back
// (ZCODE_ACP_USAGE_BACKDATE_MS): nothing sleeps.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { Editor, BIN, ROOT, settledHome, startStack, stopStack } from './harness.mjs';
import { sharedPhonePage, looksRight } from './look.mjs';

const DAY_MS = 86400000;
const AGENT = ['/usr/bin/python3', path.join(ROOT, 'tests/peers/usage_agent.py')];
const LONG = 'provider-with-a-long-name/an-extremely-long-model-identifier-2026-09-preview';

describe('web client token usage', () => {
  let stack; let browser;

  before(async () => {
    [stack, browser] = await startStack();
  });

  after(() => stopStack(stack, browser));

  /** A bridge on the usage agent whose records are stamped `daysAgo` days back, as its editor. */
  async function bridge(daysAgo) {
    const child = spawn(BIN, ['bridge', '--', ...AGENT], {
      cwd: stack.project, env: stack.env({ ZCODE_ACP_USAGE_BACKDATE_MS: String(daysAgo * DAY_MS) }), stdio: ['pipe', 'pipe', 'ignore'],
    });
    const ed = new Editor(child);
    stack.editors.push(ed);
    return ed;
  }

  /** One turn of `script` (see usage_agent.py). */
  async function turn(ed, sid, script) {
    const r = await ed.prompt(sid, JSON.stringify(script));
    assert.equal(r.stopReason, 'end_turn');
  }

  it('says nothing was recorded yet, from the home screen\'s link', async () => {
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await settledHome(page, stack.base);
    await page.locator('#usage-link').click();
    await page.waitForURL(/\/usage$/);
    await page.locator('#usage-empty', { hasText: 'No token usage recorded yet' }).waitFor();
    await looksRight(page, 'usage-empty');
    await page.close();
  });

  it('says when the hub cannot be reached, and offers to retry', async () => {
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await page.route(/\/api\/settings\/usage/, (route) => route.abort('connectionrefused'));
    await page.goto(`${stack.base}/usage`);
    await page.locator('#view [role="alert"]').waitFor();
    assert.equal(await page.locator('#conn').textContent(), 'hub offline');
    await page.unroute(/\/api\/settings\/usage/);
    await page.locator('#view button', { hasText: 'Retry' }).click();
    await page.locator('#usage-empty, #usage-total').first().waitFor();
    assert.equal(await page.locator('#conn').textContent(), 'online');
    await page.close();
  });

  it('shows totals, models and days, and switches ranges', async () => {
    const old = await bridge(10);
    let sid = await old.newSession(stack.project);
    await turn(old, sid, { usage: { inputTokens: 900, outputTokens: 100, totalTokens: 1000 } });
    await old.close();
    const yesterday = await bridge(1);
    sid = await yesterday.newSession(stack.project);
    await turn(yesterday, sid, { tool: true, costs: [0.01], usage: { totalTokens: 125, inputTokens: 100, outputTokens: 20, thoughtTokens: 5, cachedReadTokens: 50 } });
    await yesterday.call('session/set_config_option', { sessionId: sid, configId: 'model', value: 'beta' });
    await turn(yesterday, sid, { costs: [0.03], usage: { totalTokens: 300, inputTokens: 200, outputTokens: 100 } });
    await yesterday.close();
    const today = await bridge(0);
    sid = await today.newSession(stack.project);
    await turn(today, sid, { usage: { totalTokens: 60, inputTokens: 50, outputTokens: 10 } });
    await turn(today, sid, { switch: LONG, usage: { totalTokens: 40, inputTokens: 30, outputTokens: 10 } });
    await today.close();

    const page = await sharedPhonePage(browser, 'light', stack.token);
    await settledHome(page, stack.base);
    await page.locator('#usage-note', { hasText: '525 tokens in 7 days' }).waitFor();
    await page.locator('#usage-link').click();
    await page.locator('#usage-total', { hasText: '525' }).waitFor();
    assert.equal(await page.locator('[data-range="7d"]').getAttribute('aria-pressed'), 'true');
    const models = page.locator('#usage-models li');
    assert.deepEqual(await models.evaluateAll((els) => els.map((e) => e.dataset.model)), ['beta', 'alpha', LONG]);
    assert.equal(await models.nth(0).locator('.share').textContent(), '57%');
    assert.equal(await models.nth(1).locator('.share').textContent(), '35%');
    assert.equal(await models.nth(2).locator('.share').textContent(), '7.6%');
    const days = page.locator('#usage-daily li');
    assert.equal(await days.count(), 2, 'two days, newest first');
    assert.equal(await days.nth(0).locator('.fill').count(), 2, 'today: two models');
    assert.equal(await days.nth(1).locator('.day-head .muted').textContent(), '425');
    assert.match(await page.locator('#usage-cost').textContent(), /USD 0\.03/);
    assert.equal(await page.locator('[data-stat="tools"] .stat-value').textContent(), '1');

    await page.locator('[data-range="30d"]').click();
    await page.waitForURL(/\/usage\?range=30d$/);
    await page.locator('#usage-total', { hasText: '1,525' }).waitFor();
    assert.equal(await page.locator('#usage-daily li').count(), 3);
    await page.locator('[data-range="all"]').click();
    await page.locator('#usage-total', { hasText: '1,525' }).waitFor();
    assert.equal(new URL(page.url()).searchParams.get('range'), 'all');
    // The address keeps the range: a reload shows the same.
    await page.reload();
    await page.locator('#usage-total', { hasText: '1,525' }).waitFor();
    assert.equal(await page.locator('[data-range="all"]').getAttribute('aria-pressed'), 'true');
    await page.close();

    for (const scheme of ['light', 'dark']) {
      const p = await sharedPhonePage(browser, scheme, stack.token);
      await p.goto(`${stack.base}/usage`);
      await p.locator('#usage-daily li').first().waitFor();
      await looksRight(p, 'usage', { fullPage: true });
      await p.goto(`${stack.base}/`);
      await p.locator('#usage-note', { hasText: 'tokens in 7 days' }).waitFor();
      await p.locator('#usage-card').scrollIntoViewIfNeeded();
      await looksRight(p, 'usage-home-link');
      await p.close();
    }
  });
});
