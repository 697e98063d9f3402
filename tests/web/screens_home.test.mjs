// Every screen but the session view, looked at as a phone (390×844, light and dark): no
// "null"/"undefined"/"NaN"/"[object Object]" in the visible text, nothing wider than the
// screen, no console error, a screenshot of each under target/web-screenshots/. And the
// defects issue 14 found there: the file view's pager, the projects screen's explanations, the
// lazy "New session", a hidden page that keeps polling, Markdown backticks shown as such, and
// a permission that reaches the home screen only with a heartbeat (the bridges here heartbeat
// every 10 minutes: only the status nudge can deliver a change).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { Stack, BIN, SHOTS, launchBrowser, watchConsole, until, settledHome, stopStack } from './harness.mjs';

const PHONE = { width: 390, height: 844 };
// "null", "nullnull", "undefined", "NaN" as words (not inside "nullable"), "[object Object]".
const BAD_TEXT = /(^|[^A-Za-z])(null|undefined|NaN)+([^A-Za-z]|$)|\[object Object\]/;

describe('web client screens (home, projects, browse, files, pairing)', () => {
  let stack; let browser; let page; let errors; let ed; let sid;

  before(async () => {
    fs.mkdirSync(SHOTS, { recursive: true });
    const launching = launchBrowser(); // while the stack starts
    // No projectRoots; the stack lives under the system temp dir (hidden from Projects); the
    // registration heartbeat is far beyond any wait here, and instances outlive it.
    stack = await Stack.start({
      env: (home) => ({
        HOME: home, ZCODE_ACP_HUB_TERMINAL: '0', ZCODE_ACP_HEARTBEAT_MS: '600000', ZCODE_ACP_INSTANCE_TTL_MS: '1200000',
      }),
    });
    browser = await launching;
    const lines = Array.from({ length: 126 }, (_, i) => `line ${i + 1}`);
    lines[9] = `a long line ${'without-any-break-'.repeat(30)}end`;
    fs.writeFileSync(path.join(stack.project, 'short.txt'), `${lines.join('\n')}\n`);
    fs.writeFileSync(path.join(stack.project, 'sub', 'inner.txt'), 'inside\n');
    ed = await stack.bridge();
    sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'hello from the editor');
    page = await (await phone('light')).newPage();
    errors = watchConsole(page);
  });

  after(() => stopStack(stack, browser));

  async function phone(colorScheme) {
    const c = await browser.newContext({ viewport: PHONE, deviceScaleFactor: 2, colorScheme, isMobile: true, hasTouch: true });
    c.setDefaultTimeout(15000);
    await c.addInitScript((t) => localStorage.setItem('zcode-acp.token', t), stack.token);
    return c;
  }

  /** Asserts what a person sees on `p` is sound, and saves a screenshot as `name`. */
  async function look(p, name) {
    const seen = await p.evaluate(() => ({
      text: document.body.innerText,
      scroll: document.documentElement.scrollWidth,
      width: window.innerWidth,
    }));
    const bad = seen.text.split('\n').filter((l) => BAD_TEXT.test(l));
    assert.deepEqual(bad, [], `${name}: visible text shows a JS value`);
    assert.doesNotMatch(seen.text, /`/, `${name}: a Markdown backtick is shown as such`);
    // A phone zooms out to fit a page wider than the screen (innerWidth grows): both count.
    assert.ok(Math.max(seen.scroll, seen.width) <= PHONE.width, `${name}: the page is ${seen.scroll} px wide (window ${seen.width} px) on a ${PHONE.width} px screen`);
    await p.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
  }

  const filesUrl = (q) => `${stack.base}/f/${ed.id}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}${q}`;

  it('shows no "null" under "Start somewhere new"', async () => {
    await page.goto(`${stack.base}/`);
    await page.locator('#browse .dirs button', { hasText: 'project/' }).waitFor();
    const text = await page.locator('#browse').innerText();
    assert.doesNotMatch(text, BAD_TEXT);
  });

  it('shows no "nullnull" under a file list, and pages a short file without dead buttons', async () => {
    await page.goto(filesUrl(''));
    await page.locator('.file-list li[data-name="short.txt"]').waitFor();
    assert.doesNotMatch(await page.locator('.files').innerText(), BAD_TEXT);
    await page.goto(filesUrl('&file=short.txt'));
    await page.locator('.text-view .lines').waitFor();
    const pager = page.locator('.text-view .actions').first();
    assert.equal((await pager.innerText()).trim(), 'Lines 1–126');
    assert.equal(await page.locator('.text-view button').count(), 0, 'a 126-line file has no previous or next page');
    assert.doesNotMatch(await page.locator('.files').innerText(), BAD_TEXT);
  });

  it('keeps a long line inside the file view (its box scrolls sideways), never widening the page', async () => {
    await page.goto(filesUrl('&file=short.txt'));
    await page.locator('.line', { hasText: 'a long line' }).waitFor();
    const { scroll, width, right } = await page.evaluate(() => ({
      scroll: document.documentElement.scrollWidth,
      width: window.innerWidth,
      right: document.querySelector('.text-view').getBoundingClientRect().right,
    }));
    assert.ok(Math.max(scroll, width) <= PHONE.width, `the page is ${scroll} px wide (window ${width} px) on a ${PHONE.width} px screen`);
    assert.ok(right <= PHONE.width, `the file view ends at ${right} px on a ${PHONE.width} px screen`);
    // A long name without a break point, in the list and as the file view's heading.
    const name = `${'LongNameWithoutBreaks'.repeat(6)}.txt`;
    fs.writeFileSync(path.join(stack.project, name), 'x\n');
    for (const q of ['', `&file=${name}`]) {
      await page.goto(filesUrl(q));
      await page.locator(q ? '.text-view .lines' : `.file-list li[data-name="${name}"]`).waitFor();
      const w = await page.evaluate(() => Math.max(document.documentElement.scrollWidth, window.innerWidth));
      assert.ok(w <= PHONE.width, `${q ? 'the file view' : 'the file list'} is ${w} px wide with a long file name`);
    }
    fs.rmSync(path.join(stack.project, name));
  });

  it('pages a long file with true ranges: no previous on the first page, no next on the last', async () => {
    fs.writeFileSync(path.join(stack.project, 'long.txt'), `${Array.from({ length: 250 }, (_, i) => `row ${i + 1}`).join('\n')}\n`);
    await page.goto(filesUrl('&file=long.txt'));
    const pager = page.locator('.text-view .actions').first();
    await pager.locator('.next-lines').waitFor();
    assert.equal(await pager.locator('button', { hasText: '←' }).count(), 0, 'no previous page before line 1');
    assert.match(await pager.innerText(), /Lines 1–200/);
    assert.equal((await pager.locator('.next-lines').innerText()).trim(), 'Lines 201… →');
    await pager.locator('.next-lines').click();
    await page.locator('.text-view .actions span', { hasText: 'Lines 201–250' }).first().waitFor();
    assert.equal(await page.locator('.text-view .next-lines').count(), 0, 'no next page after the last line');
    assert.equal((await page.locator('.text-view button', { hasText: '←' }).first().innerText()).trim(), '← Lines 1–200');
  });

  it('says temp directories are not listed, and why a session cannot start here, in the page', async () => {
    await page.goto(`${stack.base}/`);
    const empty = page.locator('#projects p', { hasText: 'No known project' });
    await empty.waitFor();
    assert.match(await empty.innerText(), /temporary/);
    const start = page.locator('#browse button', { hasText: 'Start a session here' });
    await start.waitFor();
    assert.ok(await start.isDisabled());
    const why = page.locator('#browse #create-why');
    assert.ok(await why.isVisible(), 'the reason is visible text, not a tooltip');
    assert.match(await why.innerText(), /projectRoots/);
    assert.equal(await start.getAttribute('title'), null);
  });

  it('shows a session blocked on a permission as waiting, without a heartbeat', async () => {
    await page.goto(`${stack.base}/`);
    await page.locator(`[data-instance="${ed.id}"]`).waitFor();
    // A brand-new session, listed only once its first turn starts.
    const fresh = await ed.newSession(stack.project);
    const turn = ed.prompt(fresh, 'please ask permission');
    // Once the editor has the request the session waits: a page shown again polls at once
    // (instead of the test idling until the next 4 s poll).
    const pollNow = () => page.evaluate(() => document.dispatchEvent(new Event('visibilitychange')));
    const ask = await ed.request((r) => r.method === 'session/request_permission' && r.params.sessionId === fresh);
    await pollNow();
    const waiting = page.locator('#waiting a', { hasText: 'asks permission' });
    await waiting.waitFor();
    assert.match(await waiting.getAttribute('href'), new RegExp(encodeURIComponent(fresh)));
    await look(page, 'screens-home-waiting-light');
    ed.answer(ask.id, { outcome: { outcome: 'selected', optionId: 'allow' } });
    await turn;
    await pollNow();
    await waiting.waitFor({ state: 'detached' });
  });

  it('creates a session only when its first prompt is sent, and lists it on home after', async () => {
    const before = (await ed.call('session/list', {})).sessions.length;
    await settledHome(page, stack.base);
    await page.locator(`[data-instance="${ed.id}"] a.button`, { hasText: 'New session' }).click();
    await page.locator('#send:not([disabled])').waitFor();
    assert.match(new URL(page.url()).pathname, /^\/n\/\d+$/, 'still the new-session route');
    await look(page, 'screens-new-session-light');
    // Leaving without a word leaves nothing behind.
    await page.goBack();
    await page.locator(`[data-instance="${ed.id}"]`).waitFor();
    assert.equal((await ed.call('session/list', {})).sessions.length, before, 'opening "New session" created nothing');
    await page.goForward();
    await page.locator('#send:not([disabled])').waitFor();
    await page.fill('#prompt', 'born lazily');
    await page.click('#send'); // a phone: Enter is a newline there
    await page.waitForURL(/\/s\/\d+\/[^/?]+/);
    await page.locator('.msg.agent', { hasText: 'You said: "born lazily"' }).waitFor();
    const newSid = decodeURIComponent(new URL(page.url()).pathname.split('/')[3]);
    assert.equal((await ed.call('session/list', {})).sessions.length, before + 1);
    // Back home, the session the phone just left is listed, with its title.
    await page.click('#home-link');
    const row = page.locator(`[data-instance="${ed.id}"] li[data-session="${newSid}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), /born lazily/);
    assert.doesNotMatch(await page.locator(`[data-instance="${ed.id}"]`).innerText(), /No live session/);
  });

  it('does not poll while the page is hidden, and polls at once when shown', async () => {
    // A page of its own on a clock the test moves: two poll periods pass without waiting them
    // out. The page counts its own requests for the list as it makes them.
    const context = await phone('light');
    await context.addInitScript(() => {
      const fetch = window.fetch;
      window.polls = 0;
      window.fetch = (url, init) => {
        if (String(url).includes('/api/home')) window.polls++;
        return fetch(url, init);
      };
    });
    const p = await context.newPage();
    await p.clock.install();
    await p.goto(`${stack.base}/`);
    await p.locator(`[data-instance="${ed.id}"]`).waitFor();
    const polls = () => p.evaluate(() => window.polls);
    const hidden = await p.evaluate(() => {
      Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' });
      document.dispatchEvent(new Event('visibilitychange'));
      return window.polls;
    });
    // Two poll periods (4 s each) with the page hidden.
    await p.clock.runFor(9000);
    assert.equal(await polls(), hidden, 'a hidden home screen polled the hub');
    await p.evaluate(() => {
      Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'visible' });
      document.dispatchEvent(new Event('visibilitychange'));
    });
    await until('a poll when shown', async () => (await polls()) > hidden);
    await context.close();
  });

  it('labels the instance `zcode-acp up` runs as "up", not "serve"', async () => {
    const dir = path.join(stack.home, 'upproj');
    fs.mkdirSync(dir);
    const up = spawn(BIN, ['up'], { cwd: dir, env: stack.env(), stdio: ['ignore', 'ignore', 'ignore'] });
    try {
      const inst = await until('the up instance', async () => (await stack.api('/api/instances')).find((i) => i.pid === up.pid));
      assert.equal(inst.origin, 'serve', 'the contract\'s origin is unchanged');
      await page.goto(`${stack.base}/`);
      const badge = page.locator(`[data-instance="${inst.id}"] .instance-head .badge.origin`);
      await badge.waitFor();
      assert.equal((await badge.innerText()).trim(), 'up');
      assert.equal((await page.locator(`[data-instance="${ed.id}"] .instance-head .badge.origin`).innerText()).trim(), 'editor');
    } finally {
      up.kill('SIGTERM');
    }
  });

  it('shows the pairing help without Markdown backticks', async () => {
    // Its own context: the pairing screen forgets the stored token.
    const c = await phone('light');
    const p = await c.newPage();
    await p.goto(`${stack.base}/pair`);
    const help = p.locator('form.pair p', { hasText: 'pairing link' });
    await help.waitFor();
    assert.doesNotMatch(await help.innerText(), /`/);
    assert.equal(await help.locator('code').count(), 2);
    await c.close();
  });

  it('fits a phone on every screen, in light and dark (screenshots)', async () => {
    for (const scheme of ['light', 'dark']) {
      const c = await phone(scheme);
      const p = await c.newPage();
      const errs = watchConsole(p);
      await p.goto(`${stack.base}/`);
      await p.locator(`[data-instance="${ed.id}"] li[data-session]`).first().waitFor();
      await p.locator('#browse .dirs button').first().waitFor();
      await p.locator('#projects #no-projects').waitFor();
      await look(p, `screens-home-${scheme}`);
      await p.goto(filesUrl(''));
      await p.locator('.file-list li').first().waitFor();
      await look(p, `screens-files-${scheme}`);
      await p.goto(filesUrl('&file=short.txt'));
      await p.locator('.text-view .lines').waitFor();
      await look(p, `screens-file-view-${scheme}`);
      await p.goto(filesUrl('&dir=sub'));
      await p.locator('.file-list li[data-name="inner.txt"]').waitFor();
      await look(p, `screens-files-subdir-${scheme}`);
      await p.goto(filesUrl('&file=missing.txt'));
      await p.locator('.files [role="alert"]').waitFor();
      await look(p, `screens-file-error-${scheme}`);
      await p.goto(`${stack.base}/n/${ed.id}?cwd=${encodeURIComponent(stack.project)}`);
      await p.locator('#new-note').waitFor();
      await look(p, `screens-new-session-${scheme}`);
      await p.goto(`${stack.base}/pair`);
      await p.locator('#pair-help').waitFor();
      await look(p, `screens-pair-${scheme}`);
      await p.goto(`${stack.base}/#token=wrong-token`);
      await p.locator('#pair-error').waitFor();
      await look(p, `screens-pair-error-${scheme}`);
      // The wrong token's 401 and the missing file's 404 are the screens under test.
      assert.deepEqual(errs.filter((e) => !/status of (401|404)/.test(e)), [], `console errors (${scheme})`);
      await c.close();
    }
  });

  it('logged no console error along the way', () => {
    assert.deepEqual(errors, []);
  });
});
