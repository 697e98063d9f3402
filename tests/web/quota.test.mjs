// The plan quota card of the home screen, in a real chromium against the real hub, whose
// vendors are local HTTP servers speaking GLM's, OpenCode Go's and Ollama Cloud's shapes (the
// test-only origin variables): a bar per window with its percentage and reset time, Ollama's
// spend, a failure's message, nothing for providers that are not configured, and no card at
// all once none is (config.json edited while the hub runs). Looked at as a phone, light and dark.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { Stack, launchBrowser, until } from './harness.mjs';
import { sharedPhonePage, looksRight } from './look.mjs';

const FIVE_HOUR_RESET = Date.now() + 2 * 3600e3;
const GLM = JSON.stringify({ code: 200, msg: 'ok', success: true, data: { level: 'pro', limits: [
  { type: 'TOKENS_LIMIT', number: 5, usage: 100, currentValue: 35, remaining: 65, nextResetTime: FIVE_HOUR_RESET },
  { type: 'TOKENS_LIMIT', number: 7, percentage: 62, nextResetTime: Date.now() + 4 * 86400e3 },
  { type: 'TIME_LIMIT', number: 1, usage: 30, currentValue: 27, remaining: 3, nextResetTime: Date.now() + 20 * 86400e3,
    usageDetails: [{ modelCode: 'search-prime', usage: 20 }] },
] } });
const OLLAMA_USAGE = JSON.stringify({ range: '30d', totals: { usage_usd: 1.5747, request_count: 246, input_tokens: 10, cached_input_tokens: 5, output_tokens: 3 } });
const OLLAMA_ME = JSON.stringify({ Plan: 'pro', SubscriptionPeriodEnd: new Date(Date.now() + 9 * 86400e3).toISOString() });

/** One server for the three vendors (by path); counts requests. */
function vendors() {
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push(req.url);
    const json = (status, body) => { res.writeHead(status, { 'content-type': 'application/json' }); res.end(body); };
    if (req.url === '/api/monitor/usage/quota/limit') return json(200, GLM);
    if (req.url.startsWith('/workspace/')) { res.writeHead(302, { location: '/auth/authorize' }); return res.end(); }
    if (req.url === '/api/usage?range=30d') return json(200, OLLAMA_USAGE);
    if (req.url === '/api/me') return json(200, OLLAMA_ME);
    return json(404, '{}');
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, seen, origin: `http://127.0.0.1:${server.address().port}` })));
}

const CONFIG = { quota: {
  glm: { apiKey: 'glm-web-test-key' },
  opencode: { workspaceId: 'wrk_web1', authCookie: 'Fe26.2**web' },
  ollama: { apiKey: 'ollama-web-test-key' },
} };

describe('the plan quota card on the home screen', () => {
  let stack; let browser; let vendor;

  before(async () => {
    vendor = await vendors();
    const launching = launchBrowser(); // while the stack starts
    stack = await Stack.start({
      env: (home) => {
        fs.writeFileSync(path.join(home, 'config.json'), JSON.stringify(CONFIG));
        const o = vendor.origin;
        return {
          ZCODE_ACP_HUB_TERMINAL: '0', ZCODE_ACP_QUOTA_TEST_GLM_URL: o, ZCODE_ACP_QUOTA_TEST_OPENCODE_URL: o, ZCODE_ACP_QUOTA_TEST_OLLAMA_URL: o,
          ZCODE_ACP_GLM_API_KEY: '', OLLAMA_API_KEY: '', OPENCODE_GO_WORKSPACE_ID: '', OPENCODE_GO_AUTH_COOKIE: '',
        };
      },
    });
    browser = await launching;
  });

  after(async () => {
    await browser?.close();
    await stack?.stop();
    vendor?.server.close();
  });

  for (const scheme of ['light', 'dark']) {
    it(`shows a bar per window, the spend and a failure's message (${scheme})`, async () => {
      const page = await sharedPhonePage(browser, scheme, stack.token);
      await page.goto(`${stack.base}/`);
      const card = page.locator('#quota');
      await card.locator('.quota-provider[data-provider="ollama"]').waitFor();
      assert.equal(await card.isVisible(), true);
      const glm = card.locator('[data-provider="glm"]');
      assert.match(await glm.innerText(), /GLM Coding Plan\s+pro/);
      assert.deepEqual(await glm.locator('.quota-label').allInnerTexts(), ['5h', 'Week', 'MCP']);
      assert.deepEqual(await glm.locator('.quota-pct').allInnerTexts(), ['35%', '62%', '90%']);
      // A reset later today shows its time; one on another day shows the day too (the 5h
      // window's reset, two hours from now, is tomorrow when the test runs after 22:00).
      const onAnotherDay = /^resets [A-Z][a-z]{2}, [A-Z][a-z]{2} \d{1,2}, \d\d:\d\d( [AP]M)?$/;
      const reset = await glm.locator('[data-key="token_5h"] .quota-reset').innerText();
      const today = await page.evaluate((t) => new Date(t).toDateString() === new Date().toDateString(), FIVE_HOUR_RESET);
      if (today) assert.match(reset, /^35\/100 · resets \d\d:\d\d( [AP]M)?$/);
      else assert.match(reset.replace(/^35\/100 · /, ''), onAnotherDay);
      assert.match(reset, /^35\/100 · resets /);
      assert.match(await glm.locator('[data-key="token_week"] .quota-reset').innerText(), onAnotherDay);
      const fills = await glm.locator('.quota-fill').evaluateAll((els) => els.map((e) => [e.className, e.style.width]));
      assert.deepEqual(fills, [['quota-fill low', '35%'], ['quota-fill mid', '62%'], ['quota-fill high', '90%']]);
      const go = card.locator('[data-provider="opencode"]');
      assert.equal(await go.getAttribute('data-kind'), 'auth_error');
      assert.match(await go.innerText(), /OpenCode Go\s+The credentials were refused or have expired/);
      const ollama = card.locator('[data-provider="ollama"]');
      assert.deepEqual(await ollama.locator('.quota-label').allInnerTexts(), ['Month']);
      assert.deepEqual(await ollama.locator('.quota-pct').allInnerTexts(), ['2.6%']);
      assert.equal(await ollama.locator('.quota-spend').innerText(), 'Spent $1.57 of $60 in 30 days · 246 requests');
      await card.scrollIntoViewIfNeeded();
      await looksRight(page, 'home-quota');
      await page.close();
    });
  }

  it('is hidden when no provider is configured (config.json edited while the hub runs)', async () => {
    fs.writeFileSync(path.join(stack.home, 'config.json'), JSON.stringify({}));
    await until('the hub to read the new config', async () => (await stack.api('/api/quota')).glm.kind === 'not_configured');
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/`);
    await page.locator('#quota[data-state="loaded"]').waitFor({ state: 'attached' });
    await page.locator('#instances').waitFor();
    assert.equal(await page.locator('#quota').isHidden(), true);
    assert.equal(await page.locator('#quota .quota-provider').count(), 0);
    await looksRight(page, 'home-quota-none', { screenshot: false });
    await page.close();
  });
});
