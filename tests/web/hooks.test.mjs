// Hooks in the session view, on a phone: each hook run the bridge journals shows as one small
// line (event, command, exit, duration; its output inside), live and after a reload, and a
// prompt a UserPromptSubmit hook refuses shows the hook's reason on the phone that sent it.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { watchConsole, until, SHOTS, startStack, stopStack } from './harness.mjs';

const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };

describe('hooks in the session view', () => {
  let stack; let browser; let demo;

  before(async () => {
    [stack, browser] = await startStack();
    // Written before the bridge starts: its agent reads the tree when it starts.
    const block = 'grep -q production && { echo "no prompts about production" >&2; exit 2; }; exit 0';
    fs.writeFileSync(path.join(stack.home, 'config.json'), JSON.stringify({ hooks: { events: {
      UserPromptSubmit: [{ hooks: [{ type: 'command', command: block }] }],
      Stop: [{ hooks: [{ type: 'command', command: 'echo turn over' }] }],
    } } }));
    demo = await stack.bridge();
  });

  after(() => stopStack(stack, browser));

  it('shows each hook run as a line, and a refused prompt with the reason', async () => {
    const context = await browser.newContext(PHONE);
    context.setDefaultTimeout(15000);
    const page = await context.newPage();
    const errors = watchConsole(page);
    await page.goto(`${stack.base}/#token=${stack.token}`);
    await page.locator('#view').waitFor();
    const sid = await demo.newSession(stack.project);
    await page.goto(`${stack.base}/s/${encodeURIComponent(demo.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('#prompt').waitFor();
    await until('the session to be attached', async () => !(await page.locator('#send').isDisabled()));

    await page.fill('#prompt', 'hello there');
    await page.click('#send');
    const stop = page.locator('#transcript > .msg.hook', { hasText: 'hook Stop · echo turn over · exit 0' });
    await stop.waitFor();
    await stop.locator('summary').click();
    assert.equal((await stop.locator('pre').textContent()).trim(), 'turn over');
    const lines = page.locator('#transcript > .msg.hook');
    assert.equal(await lines.count(), 2, 'the prompt hook and the stop hook');

    await page.fill('#prompt', 'deploy to production');
    await page.click('#send');
    await page.locator('#transcript > .msg.user .status', { hasText: 'no prompts about production' }).waitFor();
    await page.locator('#transcript > .msg.hook', { hasText: 'blocked: no prompts about production' }).waitFor();
    fs.mkdirSync(SHOTS, { recursive: true });
    for (const scheme of ['light', 'dark']) {
      await page.emulateMedia({ colorScheme: scheme });
      const text = await page.evaluate(() => document.body.innerText);
      assert.doesNotMatch(text, /\b(null|undefined|NaN)\b|\[object Object\]/, text);
      const over = await page.evaluate(() => document.scrollingElement.scrollWidth - window.innerWidth);
      assert.ok(over <= 0, `the page is ${over}px wider than the screen`);
      await page.screenshot({ path: path.join(SHOTS, `session-hooks-390-${scheme}.png`) });
    }

    await page.reload();
    await page.locator('#transcript > .msg.hook').nth(2).waitFor();
    assert.equal(await lines.count(), 3, 'the journal replays every run');
    assert.deepEqual(errors, []);
    await context.close();
  });
});
