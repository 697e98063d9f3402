// A session deleted from its own screen stays deleted (issue 29, point 1): leaving the screen
// used to "watch" the session (a metadata-only `session/load`), which re-attached it on its
// bridge and lifted the tombstone, so the project's history and count showed it again.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { settledHome, SHOTS, startStack, stopStack, pairedPage } from './harness.mjs';

const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };

describe('deleting a session from the phone', () => {
  let stack; let browser; let page; let errors; let ed; let doomed; let kept;

  before(async () => {
    [stack, browser] = await startStack({ env: (home) => ({ ZCODE_ACP_PROJECT_ROOTS: home, ZCODE_ACP_HUB_TERMINAL: '0', HOME: home }) });
    // An editor's bridge that stays up all along: whatever the phone sends after the delete
    // reaches it (a serve bridge would leave after its last close).
    ed = await stack.bridge();
    kept = await ed.newSession(stack.project);
    await ed.prompt(kept, 'a conversation to keep');
    await stack.api(`/api/instances/${ed.id}/sessions/${kept}/close`, { method: 'POST', body: '{}' });
    doomed = await ed.newSession(stack.project);
    await ed.prompt(doomed, 'a conversation to delete');
    ({ page, errors } = await pairedPage(browser, stack, PHONE));
  });

  after(() => stopStack(stack, browser));

  it('is gone from the history, the project count, the live list and session/list', async () => {
    await page.goto(`${stack.base}/s/${ed.id}/${doomed}?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('.msg.agent', { hasText: 'You said: "a conversation to delete"' }).waitFor();
    await page.click('#more summary');
    await page.click('#delete-btn');
    await page.click('dialog button[value="ok"]');
    await page.locator('text=Session deleted.').waitFor();
    await page.waitForURL((u) => new URL(u).pathname === '/');

    await settledHome(page, stack.base);
    const project = page.locator(`#projects .project[data-path="${stack.project}"]`);
    await project.locator('button', { hasText: 'History' }).click();
    await project.locator('.history li', { hasText: 'a conversation to keep' }).waitFor();
    assert.equal(await project.locator('.history li', { hasText: 'a conversation to delete' }).count(), 0,
      'the deleted session is still in the history');
    await project.locator('.project-head', { hasText: /(?<!\d)1 session(?!s)/ }).waitFor();
    assert.equal(await page.locator(`#instances [data-session="${doomed}"]`).count(), 0,
      'the deleted session is listed as live');
    fs.mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: path.join(SHOTS, 'delete-home-history.png'), fullPage: true });
    const text = await page.evaluate(() => document.body.innerText);
    assert.doesNotMatch(text, /\b(null|undefined|NaN)\b|\[object Object\]/, text);

    // The store agrees, however it is asked.
    const projects = await stack.api('/api/projects');
    assert.equal(projects.find((p) => p.workspacePath === stack.project)?.sessions, 1, JSON.stringify(projects));
    const page1 = await stack.api(`/api/projects/sessions?workspacePath=${encodeURIComponent(stack.project)}`);
    assert.deepEqual(page1.sessions.map((s) => s.sessionId), [kept]);
    const listed = await ed.call('session/list', { cwd: stack.project });
    const ids = listed.sessions.map((s) => s.sessionId);
    assert.ok(ids.includes(kept) && !ids.includes(doomed), JSON.stringify(listed));
  });

  it('threw nothing uncaught', () => {
    assert.deepEqual(errors.filter((e) => e.startsWith('uncaught') || e.startsWith('dialog')), []);
  });
});
