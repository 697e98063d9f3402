// Projects from the web client: the known-project list, a project's history with resume,
// creating a session in a project (a headless serve bridge the hub starts), and browsing to a
// directory under a configured project root to start one there.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, launchBrowser, until, settledHome, stopStack, pairedPage } from './harness.mjs';

describe('web client projects', () => {
  let stack; let browser; let page; let errors; let ed; let closed;

  before(async () => {
    const launching = launchBrowser(); // while the stack starts
    // The project sits in a temp dir, which the known-project list hides unless it is under a
    // configured root; headless bridges only (no terminal window in a test).
    stack = await Stack.start({ env: (home) => ({ ZCODE_ACP_PROJECT_ROOTS: home, ZCODE_ACP_HUB_TERMINAL: '0', HOME: home }) });
    browser = await launching;
    fs.mkdirSync(path.join(stack.home, 'fresh'));
    // A conversation whose editor has gone: the project's history is where it lives on.
    ed = await stack.bridge();
    closed = await ed.newSession(stack.project);
    await ed.prompt(closed, 'an old conversation');
    await ed.close();
    ({ page, errors } = await pairedPage(browser, stack, { viewport: { width: 420, height: 860 } }));
  });

  after(() => stopStack(stack, browser));

  const project = () => page.locator(`#projects .project[data-path="${stack.project}"]`);

  // The home screen, once its cards have filled in (`settledHome`), with the project listed.
  async function home() {
    await settledHome(page, stack.base);
    await project().waitFor();
  }

  it('lists the project and its history, and resumes a session from it', async () => {
    await home();
    await project().locator('button', { hasText: 'History' }).click();
    const row = project().locator('.history li', { hasText: 'an old conversation' });
    await row.waitFor();
    await row.locator('a', { hasText: 'Resume' }).click();
    await page.locator('.msg.agent', { hasText: 'You said: "an old conversation"' }).waitFor();
    await page.fill('#prompt', 'picked up again');
    await page.press('#prompt', 'Enter');
    await page.locator('.msg.agent', { hasText: 'You said: "picked up again"' }).waitFor();
  });

  it('creates a session in a project', async () => {
    await home();
    await project().locator('button', { hasText: 'New session' }).click();
    await page.waitForURL(/\/n\/\d+/);
    const instance = new URL(page.url()).pathname.split('/')[2];
    assert.notEqual(instance, ed.id, 'a new instance, not the editor\'s');
    await page.locator('#send:not([disabled])').waitFor();
    await page.fill('#prompt', 'born on the phone');
    await page.press('#prompt', 'Enter');
    await page.waitForURL(/\/s\/\d+\/[^/?]+/);
    await page.locator('.msg.agent', { hasText: 'You said: "born on the phone"' }).waitFor();
    const list = await stack.api('/api/instances');
    assert.equal(list.find((i) => i.id === instance).origin, 'serve');
  });

  it('browses to a directory under a project root and starts a session there', async () => {
    await home();
    const browse = page.locator('#browse');
    await browse.locator('.dirs button', { hasText: 'fresh/' }).click();
    await browse.locator('code.path', { hasText: /fresh$/ }).waitFor();
    await browse.locator('button', { hasText: 'Start a session here' }).click();
    await page.waitForURL(/\/n\/\d+/);
    assert.equal(new URL(page.url()).searchParams.get('cwd'), path.join(stack.home, 'fresh'));
    await page.locator('#send:not([disabled])').waitFor();
    await page.fill('#prompt', 'somewhere new');
    await page.press('#prompt', 'Enter');
    await page.waitForURL(/\/s\/\d+\/[^/?]+/);
    await page.locator('.msg.agent', { hasText: 'You said: "somewhere new"' }).waitFor();
  });

  it('deletes a session from its view, even the last one of a serve bridge', async () => {
    // The close (first) ends the serve bridge; the delete is held until that bridge has left
    // the hub, as a slow phone's would be: the hub answers it then.
    const deletes = /\/api\/instances\/([^/]+)\/sessions\/[^/]+\/delete$/;
    let held = null;
    await page.route(deletes, async (route) => {
      const id = deletes.exec(new URL(route.request().url()).pathname)[1];
      await until(`instance ${id} to leave the hub`, async () => !(await stack.api('/api/instances')).some((i) => i.id === id));
      held = id;
      await route.continue();
    });
    await page.click('#more summary');
    await page.click('#delete-btn');
    await page.click('dialog button[value="ok"]');
    await page.locator('text=Session deleted.').waitFor();
    await page.waitForURL((u) => new URL(u).pathname === '/');
    await page.unroute(deletes);
    assert.ok(held, 'the delete went through the held route');
  });

  it('deletes a project', async () => {
    await home();
    await project().locator('button', { hasText: 'Delete' }).click();
    await page.click('dialog button[value="ok"]');
    await page.locator('text=/sessions hidden/').waitFor();
    await project().waitFor({ state: 'detached' });
    const list = await stack.api('/api/projects');
    assert.ok(!list.some((p) => p.workspacePath === stack.project), JSON.stringify(list));
  });

  it('threw nothing uncaught', () => {
    assert.deepEqual(errors.filter((e) => e.startsWith('uncaught') || e.startsWith('dialog')), []);
  });
});
