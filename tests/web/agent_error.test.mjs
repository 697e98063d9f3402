// An agent that cannot start is shown, not hidden (issue 29, point 2): a bridge whose agent
// command does not exist is listed on home with its agent's error, and the new-session and
// session screens say it in words instead of "offline" and a retry countdown. Phone size.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { BIN, until, startStack, stopStack } from './harness.mjs';
import { sharedPhonePage, looksRight } from './look.mjs';

const WANT = 'zcode-acpp: command not found: zcode-acpp';

describe('an agent that cannot start', () => {
  let stack; let browser;

  before(async () => {
    [stack, browser] = await startStack();
  });

  after(() => stopStack(stack, browser));

  it('is named on home, on a new session and on a session, in the bridge\'s words', async () => {
    const ed = await stack.bridge(['zcode-acpp']);
    await assert.rejects(
      ed.call('initialize', { protocolVersion: 1, clientCapabilities: {} }),
      (e) => e.message.includes(WANT),
    );
    await until('the listing to carry the agent\'s error', async () =>
      (await stack.api('/api/instances')).find((i) => i.id === ed.id)?.agentError?.startsWith(WANT));

    for (const scheme of ['light', 'dark']) {
      const page = await sharedPhonePage(browser, scheme, stack.token);
      await page.goto(`${stack.base}/`);
      const row = page.locator(`.instance[data-instance="${ed.id}"] .agent-error`);
      await row.waitFor();
      assert.equal(await row.innerText(), WANT);
      await looksRight(page, 'agent-error-home');

      // "New session" on it: the screen says why nothing can be sent.
      await page.locator(`.instance[data-instance="${ed.id}"] a.button`).click();
      const problem = page.locator('.new-session .error');
      await until('the new-session screen to name the agent', async () =>
        (await problem.isVisible()) && (await problem.innerText()).includes(WANT));
      assert.match(await problem.innerText(), /^The agent could not start: zcode-acpp: command not found: zcode-acpp\./);
      assert.doesNotMatch(await problem.innerText(), /restarts on the next request/);
      // The indicator follows from the same refusal, a moment later on a loaded machine (it
      // was read still 'connecting' once).
      await until('the indicator to say the agent is down', async () => (await page.locator('#conn').innerText()) === 'agent down');
      await looksRight(page, 'agent-error-new-session');

      // A session of it (a link from before it broke): the banner says the same.
      await page.goto(`${stack.base}/s/${ed.id}/sess_gone?cwd=${encodeURIComponent(stack.project)}`);
      const banner = page.locator('.conn-banner[data-why="agent"]');
      await banner.waitFor();
      assert.match(await banner.innerText(), /The agent could not start: zcode-acpp: command not found: zcode-acpp\./);
      assert.doesNotMatch(await banner.innerText(), /offline|dropped/);
      await looksRight(page, 'agent-error-session');
      await page.close();
    }
  });

  it('shows a headless bridge of the hub whose agent cannot start, though it holds no session', async () => {
    const serve = spawn(BIN, ['serve', '--cwd', stack.project, '--', 'zcode-acpp'],
      { env: stack.env({ ZCODE_ACP_SERVE_IDLE_MS: '600000' }), stdio: ['ignore', 'ignore', 'ignore'] });
    try {
      const id = String(serve.pid);
      await until('the serve bridge', async () => (await stack.api('/api/instances')).some((i) => i.id === id));
      const page = await sharedPhonePage(browser, 'light', stack.token);
      // Someone tries it (a new session on it), which is when its agent is started.
      await page.goto(`${stack.base}/n/${id}?cwd=${encodeURIComponent(stack.project)}`);
      await until('the refusal', async () => (await page.locator('.new-session .error').innerText()).includes(WANT));
      await page.goto(`${stack.base}/`);
      const row = page.locator(`.instance[data-instance="${id}"] .agent-error`);
      await row.waitFor();
      assert.equal(await row.innerText(), WANT);
      await page.close();
    } finally {
      serve.kill('SIGTERM');
    }
  });
});
