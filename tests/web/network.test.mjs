// The web client when the network is not kind: the hub stops, a tunnel answers with its own
// error page, the hub comes back (the page re-attaches without showing anything twice), an
// instance vanishes, the token expires. Each gets its own message, never a blank page.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { watchConsole, until, WAIT, startStack, stopStack } from './harness.mjs';

/** Listens on the hub's port with `server` (taking the port from a hub a bridge started). */
async function holdPort(stack, server) {
  const sockets = new Set();
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  const deadline = Date.now() + WAIT;
  for (;;) {
    try {
      await new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(stack.port, '127.0.0.1', resolve);
      });
      break;
    } catch (e) {
      if (e.code !== 'EADDRINUSE' || Date.now() > deadline) throw e;
      stack.killSpawnedHub();
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return () => new Promise((resolve) => {
    for (const s of sockets) s.destroy();
    server.close(resolve);
  });
}

/** What a tunnel answers when its origin is down: its own HTML error page, 502. */
function tunnelErrorPage() {
  const server = http.createServer((req, res) => {
    res.writeHead(502, { 'Content-Type': 'text/html' });
    res.end('<!doctype html><html><body><h1>502 Bad Gateway</h1><p>The origin is unreachable.</p></body></html>');
  });
  server.on('upgrade', (req, socket) => socket.destroy());
  return server;
}

/** Nothing that answers: every connection is dropped at once (a bridge cannot start a hub
 * here either, so the hub stays down for as long as the test wants). */
function deadPort() {
  return net.createServer((socket) => socket.destroy());
}

describe('web client on a bad network', () => {
  let stack; let browser; let page; let errors; let ed; let sid;

  before(async () => {
    [stack, browser] = await startStack();
    ed = await stack.bridge();
    sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'before the storm');
    await stack.listed(ed.id, sid);
    const context = await browser.newContext({ viewport: { width: 400, height: 800 } });
    context.setDefaultTimeout(WAIT);
    await context.addInitScript((t) => { if (!localStorage.getItem('zcode-acp.token')) localStorage.setItem('zcode-acp.token', t); }, stack.token);
    page = await context.newPage();
    errors = watchConsole(page);
  });

  after(() => stopStack(stack, browser));

  const banner = () => page.locator('.conn-banner');

  it('says the hub stopped, then that a tunnel page answers, and re-attaches without duplicates', async () => {
    await page.goto(`${stack.base}/s/${ed.id}/${sid}?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('.msg.agent', { hasText: 'You said: "before the storm"' }).waitFor();
    await page.locator('#conn[data-state="open"]').waitFor();

    // The hub dies; something else (a tunnel's error page) answers on its address.
    stack.hub.kill('SIGKILL');
    await stack.hubExited;
    const releaseTunnel = await holdPort(stack, tunnelErrorPage());
    await banner().filter({ hasText: "web page instead of the hub's API" }).waitFor();
    assert.match(await banner().textContent(), /Retrying in \d/);
    assert.ok(!(await page.locator('#send').isDisabled()), 'a prompt can be queued while the line is down');

    // Nothing answers at all: the hub is stopped.
    await releaseTunnel();
    const releaseDead = await holdPort(stack, deadPort());
    await banner().locator('button', { hasText: 'Retry now' }).click();
    await banner().filter({ hasText: 'The hub is not answering' }).waitFor();
    await page.locator('#conn[data-why="down"]', { hasText: /offline since \d\d:\d\d/ }).waitFor();

    // The conversation moves on without us, then the hub comes back, not knowing the bridge
    // until it registers again (held here: the bridge is stopped). Not listed is not gone.
    await ed.prompt(sid, 'while you were away');
    process.kill(Number(ed.id), 'SIGSTOP');
    try {
      await releaseDead();
      await stack.startHub();
      await banner().locator('button', { hasText: 'Retry now' }).click();
      await banner().filter({ hasText: 'waiting for this instance to register' }).waitFor();
    } finally {
      process.kill(Number(ed.id), 'SIGCONT');
    }
    await stack.listed(ed.id, sid);
    // Its own retry may already have re-attached it: then there is no button to press.
    await page.evaluate(() => [...document.querySelectorAll('.conn-banner button')].find((b) => b.textContent === 'Retry now')?.click());
    await page.locator('.msg.agent', { hasText: 'You said: "while you were away"' }).waitFor();
    await page.locator('#conn[data-state="open"]').waitFor();
    assert.ok(await banner().isHidden());
    const users = await page.locator('#transcript .msg.user').allTextContents();
    assert.deepEqual(users.map((u) => u.trim()), ['before the storm', 'while you were away']);
    const keys = await page.locator('#transcript [data-key]').evaluateAll((ns) => ns.map((n) => n.dataset.key));
    assert.equal(new Set(keys).size, keys.length, 'nothing shown twice');

    // And it works again.
    await page.fill('#prompt', 'after the storm');
    await page.press('#prompt', 'Enter');
    await page.locator('.msg.agent', { hasText: 'You said: "after the storm"' }).waitFor();
  });

  it('says so when the instance is gone', async () => {
    const ed2 = await stack.bridge();
    const sid2 = await ed2.newSession(stack.project);
    await ed2.prompt(sid2, 'short-lived');
    await page.goto(`${stack.base}/s/${ed2.id}/${sid2}?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('.msg.agent', { hasText: 'You said: "short-lived"' }).waitFor();
    await ed2.close();
    await banner().filter({ hasText: 'This instance is gone' }).waitFor();
    await page.locator('#conn', { hasText: 'instance gone' }).waitFor();
    await banner().locator('button', { hasText: 'Back to the list' }).click();
    await page.locator(`[data-instance="${ed.id}"]`).waitFor();
    assert.equal(await page.locator(`[data-instance="${ed2.id}"]`).count(), 0);
  });

  it('says so when the token expired, and offers to pair again', async () => {
    await page.evaluate(() => localStorage.setItem('zcode-acp.token', 'a-token-that-was-rotated'));
    await page.goto(`${stack.base}/s/${ed.id}/${sid}?cwd=${encodeURIComponent(stack.project)}`);
    await banner().filter({ hasText: 'rejected the token' }).waitFor();
    await page.locator('#conn', { hasText: 'token rejected' }).waitFor();
    await banner().locator('button', { hasText: 'Pair again' }).click();
    await page.fill('#token-input', stack.token);
    await page.press('#token-input', 'Enter');
    await page.locator(`[data-instance="${ed.id}"] [data-session="${sid}"]`).waitFor();
  });

  it('threw nothing uncaught', () => {
    assert.deepEqual(errors.filter((e) => e.startsWith('uncaught') || e.startsWith('dialog')), []);
  });
});
