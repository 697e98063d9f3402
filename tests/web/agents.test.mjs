// Picking the agent at phone size: with two agents in config.json, a project's "New session"
// offers a picker (the default preselected), the new instance runs the agent chosen and home
// says so; a session that agent made is resumed from History on that agent, not the default
// (which does not know it: `alt` keeps its sessions in a home of its own).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { Stack, Editor, BIN, SHOTS, launchBrowser, until, settledHome, stopStack, pairedPage } from './harness.mjs';

describe('web client agent picker', () => {
  let stack; let browser; let page; let errors;

  // config.json with the agents `demo` and `alt`, `def` the default.
  const configure = (home, def) => {
    const demo = { command: BIN, args: ['demo-agent', '--delay-ms', '5'] };
    const alt = { command: BIN, args: ['demo-agent', '--delay-ms', '5'], env: { ZCODE_ACP_HOME: path.join(home, 'alt-home') } };
    fs.writeFileSync(path.join(home, 'config.json'), JSON.stringify({ agents: { default: def, demo, alt } }));
  };

  before(async () => {
    const launching = launchBrowser(); // while the stack starts
    stack = await Stack.start({
      env: (home) => {
        configure(home, 'demo');
        return { ZCODE_ACP_PROJECT_ROOTS: home, ZCODE_ACP_HUB_TERMINAL: '0', HOME: home };
      },
    });
    browser = await launching;
    // A conversation `alt` had in the project back when it was the default (a plain `bridge`),
    // its editor gone: it lives on in the history, and `demo` is the default again.
    configure(stack.home, 'alt');
    const child = spawn(BIN, ['bridge'], { cwd: stack.project, env: stack.env(), stdio: ['pipe', 'pipe', 'ignore'] });
    const ed = new Editor(child);
    ed.id = String(child.pid);
    stack.editors.push(ed);
    const sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'said to alt');
    await ed.close();
    configure(stack.home, 'demo');
    // The hub reads config.json again when it changes (a hub without /api/agents has nothing
    // to read it for).
    await until('the hub to see the default again', async () => {
      const r = await stack.fetch('/api/agents', { headers: { Authorization: `Bearer ${stack.token}` } });
      return r.status === 404 || (await r.json()).default === 'demo';
    });
    ({ page, errors } = await pairedPage(browser, stack, { viewport: { width: 390, height: 844 } }));
  });

  after(() => stopStack(stack, browser));

  const project = () => page.locator(`#projects .project[data-path="${stack.project}"]`);

  it('starts a new session on the agent picked, and home shows that agent', async () => {
    await settledHome(page, stack.base);
    const pick = project().locator('.agent-pick select');
    await pick.waitFor();
    assert.equal(await pick.inputValue(), 'demo', 'the default is preselected');
    assert.deepEqual(await pick.locator('option').allTextContents(), ['alt', 'demo']);
    await pick.selectOption('alt');
    await project().locator('button', { hasText: 'New session' }).click();
    await page.waitForURL(/\/n\/\d+/);
    const instance = new URL(page.url()).pathname.split('/')[2];
    const listed = (await stack.api('/api/instances')).find((i) => i.id === instance);
    assert.equal(listed.agent, 'alt');
    await page.locator('#send:not([disabled])').waitFor();
    await page.fill('#prompt', 'hello picked agent');
    await page.press('#prompt', 'Enter');
    await page.locator('.msg.agent', { hasText: 'You said: "hello picked agent"' }).waitFor();

    await settledHome(page, stack.base);
    const row = page.locator(`#instances .instance[data-instance="${instance}"]`);
    await row.locator('.badge.agent', { hasText: 'alt' }).waitFor();
    await page.screenshot({ path: path.join(SHOTS, 'home-agents-390.png'), fullPage: true });
    const box = await row.locator('.badge.agent').boundingBox();
    assert.ok(box.x >= 0 && box.x + box.width <= 390, `the agent badge is off-screen: ${JSON.stringify(box)}`);
    assert.ok(!/\b(null|undefined)\b/.test(await page.locator('#instances').innerText()), 'null/undefined on home');
  });

  it('resumes a session from History on the agent that made it', async () => {
    await settledHome(page, stack.base);
    await project().locator('button', { hasText: 'History' }).click();
    const row = project().locator('.history li', { hasText: 'said to alt' });
    await row.waitFor();
    await page.screenshot({ path: path.join(SHOTS, 'history-agents-390.png'), fullPage: true });
    const badges = await row.locator('.badge.agent').allTextContents();
    await row.locator('text=Resume').click();
    await page.waitForURL(/\/s\/\d+\/[^/?]+/);
    const instance = new URL(page.url()).pathname.split('/')[2];
    await page.locator('.msg.agent', { hasText: 'You said: "said to alt"' }).waitFor();
    const listed = (await stack.api('/api/instances')).find((i) => i.id === instance);
    assert.equal(listed.agent, 'alt', 'resumed on another agent than the one that made it');
    assert.deepEqual(badges, ['alt'], 'the history row names its agent');
    await page.fill('#prompt', 'back on alt');
    await page.press('#prompt', 'Enter');
    await page.locator('.msg.agent', { hasText: 'You said: "back on alt"' }).waitFor();
    await until('no error shown', async () => !(await page.locator('text=session not found').count()));
  });

  it('threw nothing uncaught', () => {
    assert.deepEqual(errors.filter((e) => e.startsWith('uncaught') || e.startsWith('dialog')), []);
  });
});
