// Counts and words, as a person reads them on a 390×844 phone (issue 29, point 14): "1 session"
// not "1 sessions"; a finished turn's row on the board shows that turn's first prompt; a long
// title is cut with an ellipsis at a word; the file viewer keeps code lines whole (the box
// scrolls sideways) and its back button returns to the file's folder; a stopped reply ends with
// a visible "stopped" marker, live and replayed; tapping the status pill shows its detail.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, launchBrowser, until, stopStack } from './harness.mjs';
import { sharedPhonePage, looksRight } from './look.mjs';

const TITLE = 'Refactor the settings screen so that every card keeps its distance and the restart dialog speaks plainly to whoever holds the phone';

describe('counts and words on a phone', () => {
  let stack; let browser; let ed; let sid;

  before(async () => {
    const launching = launchBrowser(); // while the stack starts
    stack = await Stack.start({
      env: (home) => ({ ZCODE_ACP_PROJECT_ROOTS: home, ZCODE_ACP_HUB_TERMINAL: '0', HOME: home, ZCODE_ACP_SERVE_IDLE_MS: '600000' }),
    });
    browser = await launching;
    fs.writeFileSync(path.join(stack.project, 'sub', 'wide.js'),
      `const x = ${JSON.stringify('w'.repeat(200))}; // one line, never wrapped\nlet y = 1;\n`);
    ed = await stack.bridge();
    sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'please summarise the release notes');
    await ed.prompt(sid, 'and now list the open questions');
    await stack.listed(ed.id, sid);
  });

  after(() => stopStack(stack, browser));

  const sessionUrl = () => `${stack.base}/s/${ed.id}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`;
  const filesUrl = (q) => `${stack.base}/f/${ed.id}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}${q}`;

  it('counts one session as "1 session"', async () => {
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/`);
    const row = page.locator(`#projects .project[data-path="${stack.project}"] .project-head`);
    await row.waitFor();
    assert.match(await row.innerText(), /(^|\n)1 session · /);
    await page.close();
  });

  it("shows each recent turn's own first prompt on the board", async () => {
    const page = await sharedPhonePage(browser, 'dark', stack.token);
    await page.goto(`${stack.base}/`);
    const recent = page.locator('#board .board-recent');
    await recent.waitFor();
    await recent.locator('summary').click();
    const rows = recent.locator(`li[data-run-session="${sid}"]`);
    await until('both turns on the board', async () => (await rows.count()) === 2);
    const texts = await rows.allInnerTexts();
    assert.match(texts[0], /“and now list the open questions”/, texts[0]);
    assert.match(texts[1], /“please summarise the release notes”/, texts[1]);
    await recent.evaluate((n) => n.scrollIntoView({ block: 'start' }));
    await looksRight(page, 'words-board-recent');
    await page.close();
  });

  it('cuts a long title with an ellipsis at a word', async () => {
    await stack.api(`/api/instances/${ed.id}/sessions/${encodeURIComponent(sid)}/rename`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ title: TITLE }),
    });
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/`);
    const title = page.locator(`[data-instance="${ed.id}"] [data-session="${sid}"] .title`);
    await until('the new title on home', async () => (await title.count()) === 1 && (await title.innerText()).startsWith('Refactor'));
    const shown = await title.innerText();
    assert.ok(shown.endsWith('…'), `not cut: ${shown}`);
    const kept = shown.slice(0, -1);
    assert.ok(TITLE.startsWith(kept) && TITLE[kept.length] === ' ', `not cut at a word: ${shown}`);
    await looksRight(page, 'words-long-title');
    await page.close();
  });

  it('keeps a code line whole in the file viewer, and "back" from a file returns to its folder', async () => {
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await page.goto(filesUrl('&dir=sub'));
    await page.locator('.file-list a', { hasText: 'wide.js' }).click();
    const line = page.locator('.text-view .line', { hasText: 'const x' });
    await line.waitFor();
    const m = await page.evaluate(() => {
      const l = [...document.querySelectorAll('.text-view .line')];
      const box = document.querySelector('.text-view .lines');
      return { tall: l[0].getBoundingClientRect().height, short: l[1].getBoundingClientRect().height, scroll: box.scrollWidth, width: box.clientWidth };
    });
    assert.ok(m.tall < m.short * 1.5, `the long line wraps: ${m.tall}px tall, a short one ${m.short}px`);
    assert.ok(m.scroll > m.width, `the lines box does not scroll sideways (${m.scroll} in ${m.width})`);
    await looksRight(page, 'words-file-wide');
    const back = page.locator('.files .card-head a.button');
    assert.doesNotMatch(await back.innerText(), /Session/);
    await back.click();
    await page.locator('.file-list li[data-name="wide.js"]').waitFor();
    assert.equal(new URL(page.url()).searchParams.get('dir'), 'sub');
    await page.close();
  });

  it('ends a stopped reply with a visible "stopped" marker, live and after a reload', async () => {
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await page.goto(sessionUrl());
    await page.locator('#prompt').waitFor();
    await page.locator('#transcript .msg.agent').first().waitFor();
    const turn = ed.prompt(sid, 'long hold');
    await page.locator('#transcript > .msg.agent', { hasText: 'tick 2 ' }).waitFor();
    ed.send({ method: 'session/cancel', params: { sessionId: sid } });
    assert.equal((await turn).stopReason, 'cancelled');
    const last = page.locator('#transcript > .msg.agent').last();
    await until('the marker at the end of the reply', async () => /■ stopped$/.test((await last.innerText()).trim()));
    // A reply that ended normally has none.
    assert.equal(await page.locator('#transcript > .msg.agent').first().locator('.stop-mark').count(), 0);
    await looksRight(page, 'words-stopped-reply');
    await page.reload();
    await page.locator('#transcript > .msg.agent', { hasText: 'tick 2 ' }).waitFor();
    const replayed = page.locator('#transcript > .msg.agent').last();
    await until('the marker after a reload', async () => /■ stopped$/.test((await replayed.innerText()).trim()));
    await page.close();
  });

  it('shows the status pill\'s detail when it is tapped', async () => {
    const page = await sharedPhonePage(browser, 'dark', stack.token);
    await page.goto(`${stack.base}/`);
    await page.locator('#conn', { hasText: 'online' }).waitFor();
    await page.tap('#conn');
    const detail = page.locator('#conn-detail');
    await detail.waitFor();
    assert.match(await detail.innerText(), /Hub reachable/);
    await looksRight(page, 'words-pill-detail');
    await page.tap('#conn');
    await until('the detail to close', async () => !(await detail.isVisible()));
    await page.close();
  });
});
