// The machine at a glance on the home screen: the inbox (a permission answered in place,
// without opening its session), the "Running now" board, the About sheet with "Update hub"
// when the binary on disk is newer, and a headless bridge that idles out while the home
// screen is open (the home attaches to no session any more). Phone-size screenshots of each.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { Stack, BIN, launchBrowser, until, settledHome, stopStack } from './harness.mjs';
import { sharedPhonePage, looksRight } from './look.mjs';

describe('home: inbox, board, idle serve bridges', () => {
  let stack; let browser;

  before(async () => {
    const launching = launchBrowser(); // while the stack starts
    // Long enough for the page to reach a new serve bridge before it idles out.
    stack = await Stack.start({ env: () => ({ ZCODE_ACP_SERVE_IDLE_MS: '8000' }) });
    browser = await launching;
  });

  after(() => stopStack(stack, browser));

  it('answers a permission from the inbox in place and shows the turn on the board', async () => {
    const ed = await stack.bridge();
    const sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'hello first');
    const turn = ed.prompt(sid, 'permission from the inbox');
    await ed.request((r) => r.method === 'session/request_permission');
    for (const scheme of ['light', 'dark']) {
      const page = await sharedPhonePage(browser, scheme, stack.token);
      // Where the answer is given, home reads the hub every 250 ms (every 4 s by default): the
      // board shows the turn going on at its next read.
      if (scheme === 'dark') await page.addInitScript(() => localStorage.setItem('zcode-acp.test.homePollMs', '250'));
      await page.goto(`${stack.base}/`);
      const row = page.locator(`#waiting li[data-inbox-session="${sid}"]`);
      await row.waitFor();
      assert.match(await row.innerText(), /asks permission/);
      await page.locator(`#board li[data-run-session="${sid}"][data-status="waiting"]`).waitFor();
      await page.locator('#board details summary').waitFor();
      await looksRight(page, 'glance-home', { fullPage: true });
      if (scheme === 'dark') {
        await row.locator('button[data-option="allow"]').click();
        const done = await turn;
        assert.equal(done.stopReason, 'end_turn');
        assert.ok(ed.notes.some((n) => JSON.stringify(n).includes('Permission granted (allow)')), 'the agent got the Allow');
        await row.waitFor({ state: 'detached' });
        assert.ok(page.url().endsWith('/'), 'answered without opening the session');
        await page.locator(`#board li[data-run-session="${sid}"][data-status="waiting"]`).waitFor({ state: 'detached' });
        await page.locator('#board details summary').click();
        await page.locator(`#board .board-recent li[data-run-session="${sid}"]`).first().waitFor();
        // Opened stays open while the board is drawn again (another turn ends meanwhile).
        await ed.prompt(sid, 'one more turn');
        await page.locator('#board .board-recent li', { hasText: 'one more turn' }).waitFor();
        await looksRight(page, 'glance-board-recent', { fullPage: true });
      }
      await page.close();
    }
  });

  it('lets a headless bridge idle out while the home screen is open', async () => {
    const serve = spawn(BIN, ['serve', '--cwd', stack.project], { env: stack.env(), stdio: ['ignore', 'ignore', 'ignore'] });
    const id = String(serve.pid);
    await until('the serve bridge', async () => (await stack.api('/api/instances')).some((i) => i.id === id));
    // The phone runs one turn on it, in a session of its own, and goes back home: the
    // session stays listed and nobody is attached.
    const page = await sharedPhonePage(browser, 'light', stack.token);
    // Home reads the hub every 250 ms (every 4 s by default): the bridge's row goes at the
    // first read after it left.
    await page.addInitScript(() => localStorage.setItem('zcode-acp.test.homePollMs', '250'));
    await page.goto(`${stack.base}/n/${id}?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('#send:not([disabled])').waitFor();
    await page.fill('#prompt', 'hello, then idle');
    await page.click('#send');
    await page.waitForURL(/\/s\/\d+\/[^/?]+/);
    await page.locator('.msg.agent', { hasText: 'You said: "hello, then idle"' }).waitFor();
    const made = decodeURIComponent(new URL(page.url()).pathname.split('/')[3]);
    await page.click('#home-link');
    await page.locator(`[data-instance="${id}"] li[data-session="${made}"]`).waitFor();
    // The home screen stays open and polls; the bridge sees no client and exits.
    await until('the serve bridge to idle out', () => serve.exitCode !== null || serve.signalCode !== null, 60000);
    await page.locator(`[data-instance="${id}"]`).waitFor({ state: 'detached' });
    assert.ok(page.url().endsWith('/'));
    await page.close();
  });
});

describe('About: versions and "Update hub"', () => {
  let stack; let browser;

  before(async () => {
    const launching = launchBrowser(); // while the stack starts
    // The running hub reports an older version than the binary on disk (a debug-build knob).
    stack = await Stack.start({ env: () => ({ ZCODE_ACP_TEST_VERSION: '0.0.1' }) });
    browser = await launching;
  });

  after(() => stopStack(stack, browser));

  it('shows the versions and updates the hub when the disk binary is newer', async () => {
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await settledHome(page, stack.base);
    await page.locator('#about summary').click();
    await page.locator('#about-version', { hasText: '0.0.1' }).waitFor();
    const disk = await page.locator('#about-disk').innerText();
    assert.notEqual(disk.trim(), '0.0.1');
    await page.locator('#update-hub').waitFor();
    await page.locator('#about').scrollIntoViewIfNeeded();
    await looksRight(page, 'glance-about', { fullPage: true });
    const before = await stack.api('/api/version');
    await page.locator('#update-hub').click();
    await page.locator('#about', { hasText: 'Updated: the new hub is running.' }).waitFor();
    assert.equal((await page.locator('#about-version').innerText()).trim(), disk.trim());
    await page.locator('#about-current').waitFor().catch(async (e) => {
      throw new Error(`${e.message}\nthe sheet says: ${await page.locator('#about').innerText()}`);
    });
    const after = await stack.api('/api/version');
    assert.notEqual(after.startedAt, before.startedAt);
    assert.equal(after.hostId, before.hostId);
    await looksRight(page, 'glance-about-updated', { fullPage: true, console: [/ERR_CONNECTION_REFUSED|Failed to load resource/] });
    await page.close();
  });
});
