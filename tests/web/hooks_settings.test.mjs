// The hooks tree on the phone (/settings/hooks): all seven events and every entry shown, the
// tree and one entry toggled, an entry's command and timeout edited — each change lands in
// config.json (other keys kept) and the screen says it applies when an agent restarts; entries
// added and removed (beyond the contract), the hub's refusal shown in the form.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { watchConsole, until, SHOTS, startStack, stopStack } from './harness.mjs';
import { phonePage, looksRight } from './look.mjs';

const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };

describe('hooks settings', () => {
  let stack; let browser; let file;
  const read = () => JSON.parse(fs.readFileSync(file, 'utf8'));

  before(async () => {
    [stack, browser] = await startStack();
    file = path.join(stack.home, 'config.json');
    fs.writeFileSync(file, JSON.stringify({ custom: 1, hooks: { timeoutMs: 5000, events: {
      PreToolUse: [{ matcher: '^read$', hooks: [{ type: 'command', command: 'echo pre', note: 'kept' }] }],
      Stop: [{ hooks: [{ type: 'command', command: 'echo stop' }, { type: 'command', command: 'echo second', enabled: false }] }],
    } } }));
  });

  after(() => stopStack(stack, browser));

  it('shows the tree and edits what the contract allows', async () => {
    const context = await browser.newContext(PHONE);
    context.setDefaultTimeout(15000);
    const page = await context.newPage();
    const errors = watchConsole(page);
    await page.goto(`${stack.base}/#token=${stack.token}`);
    await page.locator('#view').waitFor();
    await page.goto(`${stack.base}/settings/hooks`);
    await page.locator('#hooks-enabled').waitFor();
    // The header says what loading the screen found (it said `connecting` on this screen).
    assert.equal(await page.locator('#conn').textContent(), 'online');
    assert.equal(await page.locator('.hook-event').count(), 7);
    assert.equal(await page.locator('.hook-entry').count(), 3);
    assert.equal(await page.locator('[data-event="PreToolUse"] .hook-entry').textContent().then((t) => t.includes('tools matching ^read$')), true);
    assert.equal(await page.locator('[data-event="Stop"] .hook-enabled').nth(1).isChecked(), false);
    fs.mkdirSync(SHOTS, { recursive: true });
    for (const scheme of ['light', 'dark']) {
      await page.emulateMedia({ colorScheme: scheme });
      const text = await page.evaluate(() => document.body.innerText);
      assert.doesNotMatch(text, /\b(null|undefined|NaN)\b|\[object Object\]/, text);
      const over = await page.evaluate(() => document.scrollingElement.scrollWidth - window.innerWidth);
      assert.ok(over <= 0, `the page is ${over}px wider than the screen`);
      await page.screenshot({ path: path.join(SHOTS, `settings-hooks-390-${scheme}.png`), fullPage: true });
    }

    await page.locator('#hooks-enabled').uncheck();
    await until('the tree to be off in config.json', () => read().hooks.enabled === false);
    await page.locator('#hooks-status', { hasText: 'applies when an agent restarts' }).waitFor();

    await page.locator('[data-event="Stop"] .hook-enabled').nth(1).check();
    await until('the second Stop hook to be on', () => read().hooks.events.Stop[0].hooks[1].enabled === true);

    // The answer to a save may come back after the person has typed again (a slow phone): it
    // must not redraw the entry under their fingers. Held here until they have.
    let release;
    const held = new Promise((r) => { release = r; });
    const entryPut = /\/api\/settings\/hooks\/PreToolUse\/0$/;
    await page.route(entryPut, async (route) => {
      const response = await route.fetch();
      await held;
      await route.fulfill({ response });
    });
    const pre = page.locator('[data-event="PreToolUse"] .hook-entry');
    await pre.locator('.hook-command').fill('echo edited');
    await pre.locator('.hook-timeout').fill('1500');
    await pre.locator('.hook-save').click();
    await until('the edit to land', () => read().hooks.events.PreToolUse[0].hooks[0].command === 'echo edited');
    const entry = read().hooks.events.PreToolUse[0].hooks[0];
    assert.deepEqual(entry, { type: 'command', command: 'echo edited', note: 'kept', timeoutMs: 1500 });
    assert.equal(read().custom, 1);
    await pre.locator('.hook-command').fill('   ');
    release();
    await page.locator('#hooks-status', { hasText: 'PreToolUse hook 1 saved.' }).waitFor();
    await page.unroute(entryPut);
    assert.equal(await pre.locator('.hook-command').inputValue(), '   ', 'what was typed after the save is kept');

    // A refused edit says why and changes nothing.
    await pre.locator('.hook-save').click();
    await page.locator('#hooks-status.error', { hasText: 'command' }).waitFor();
    assert.equal(read().hooks.events.PreToolUse[0].hooks[0].command, 'echo edited');
    assert.deepEqual(errors.filter((e) => !e.includes('400')), []);
    await context.close();
  });

  it('adds a hook and removes one from the phone, refusals said in the form', async () => {
    const page = await phonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/settings/hooks`);
    const pre = page.locator('[data-event="PreToolUse"]');
    await pre.locator('.hook-entry').first().waitFor();
    // Adding: the form asks for a tool matcher (a tool event) and shows the hub's refusal.
    await pre.locator('.hook-add').click();
    await page.fill('#hook-new-command', 'echo added');
    await page.fill('#hook-new-matcher', '(');
    await looksRight(page, 'settings-hooks-add');
    await page.click('dialog button[value="add"]');
    await page.locator('dialog .error', { hasText: 'matcher' }).waitFor();
    await page.fill('#hook-new-matcher', '^edit$');
    await page.fill('#hook-new-timeout', '2500');
    await page.click('dialog button[value="add"]');
    await until('the new entry in config.json', () => read().hooks.events.PreToolUse.length === 2);
    assert.deepEqual(read().hooks.events.PreToolUse[1],
      { matcher: '^edit$', hooks: [{ type: 'command', command: 'echo added', timeoutMs: 2500 }] });
    await pre.locator('.hook-entry', { hasText: 'tools matching ^edit$' }).waitFor();
    await page.locator('#hooks-status', { hasText: 'PreToolUse hook added.' }).waitFor();
    // An event without a tool has no matcher to ask for.
    await page.locator('[data-event="SessionStart"] .hook-add').click();
    assert.equal(await page.locator('#hook-new-matcher').count(), 0);
    await page.fill('#hook-new-command', 'echo hello');
    await page.click('dialog button[value="add"]');
    await until('the SessionStart entry', () => (read().hooks.events.SessionStart || []).length === 1);

    // Removing asks first, then the entry (and its emptied group) goes; the others stay.
    const stops = page.locator('[data-event="Stop"] .hook-entry');
    const before = await stops.count();
    await stops.first().locator('.hook-remove').click();
    await page.click('dialog button[value="remove"]');
    await until('the first Stop entry to go', () => read().hooks.events.Stop[0].hooks.length === before - 1);
    await until('the row to go', async () => (await stops.count()) === before - 1);
    assert.equal(read().hooks.events.Stop[0].hooks[0].command, 'echo second');
    await pre.locator('.hook-entry').nth(1).locator('.hook-remove').click();
    await page.click('dialog button[value="remove"]');
    await until('the ^edit$ group to go', () => read().hooks.events.PreToolUse.length === 1);
    assert.equal(read().custom, 1);
    // The browser logs the refused add (400) itself: expected here.
    await looksRight(page, 'settings-hooks-after-edits', { fullPage: true, console: [/status of 400/] });
    await page.context().close();
  });

  it('says when the hub cannot be reached', async () => {
    const context = await browser.newContext(PHONE);
    context.setDefaultTimeout(15000);
    const page = await context.newPage();
    await page.goto(`${stack.base}/#token=${stack.token}`);
    await page.locator('#view').waitFor();
    await page.route(/\/api\/settings\/hooks$/, (route) => route.abort('connectionrefused'));
    await page.goto(`${stack.base}/settings/hooks`);
    await page.locator('#hooks-status.error').waitFor();
    assert.equal(await page.locator('#conn').textContent(), 'hub offline');
    await context.close();
  });
});
