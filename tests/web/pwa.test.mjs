// The installable web app in a real chromium against the real hub: the manifest and its icons,
// Chromium's own installability check (DevTools `Page.getInstallabilityErrors`) on localhost and
// behind an https proxy, the shell opening while the hub is unreachable, the service worker's
// push handler (a push delivered through DevTools `ServiceWorker.deliverPushMessage`), the
// waiting count in the title and the app badge, and the "Notify me" button at phone size.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { watchConsole, until, SHOTS, ROOT, CHROMIUM, WAIT, startStack, stopStack } from './harness.mjs';

const { chromium } = createRequire(path.join(ROOT, 'tests/peers/package.json'))('playwright-core');

const PHONE = { width: 390, height: 844 };

/** A PNG's width and height, from its IHDR chunk. */
function pngSize(buf) {
  assert.equal(buf.subarray(1, 4).toString(), 'PNG');
  return `${buf.readUInt32BE(16)}x${buf.readUInt32BE(20)}`;
}

/** An https reverse proxy in front of `port`, with a self-signed certificate; resolves to its server. */
function httpsProxy(dir, port) {
  const key = path.join(dir, 'key.pem');
  const cert = path.join(dir, 'cert.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
    '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=localhost'], { stdio: 'ignore' });
  const server = https.createServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) }, (req, res) => {
    const up = http.request({ host: '127.0.0.1', port, path: req.url, method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', () => { res.writeHead(502); res.end(); });
    req.pipe(up);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/** Opens `url` and waits until the service worker controls the page. */
async function openControlled(page, url) {
  await page.goto(url);
  // The first load is controlled once the worker has installed, activated and claimed it.
  await until('the service worker to control the page', () => page.evaluate(() => Boolean(navigator.serviceWorker.controller)));
}

/**
 * A browser with an on-disk profile: Chromium never offers to install from an incognito
 * profile, which is what a plain Playwright context is.
 */
async function persistentContext(opts = {}, extraArgs = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'zcode-pwa-profile-'));
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM, viewport: PHONE, ...opts,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', ...extraArgs],
  });
  const close = context.close.bind(context);
  context.close = async () => { await close(); fs.rmSync(dir, { recursive: true, force: true }); };
  return context;
}

async function installabilityErrors(page) {
  const cdp = await page.context().newCDPSession(page);
  const { installabilityErrors } = await cdp.send('Page.getInstallabilityErrors');
  await cdp.detach();
  return installabilityErrors.map((e) => e.errorId);
}

/**
 * Chromium never fires pushsubscriptionchange (nor can its push service be reached here): the
 * event is dispatched in the real worker `sw` with stand-ins for the two subscriptions.
 */
function renewSubscription(sw, old, fresh) {
  return sw.evaluate(([o, f]) => {
    const e = new ExtendableEvent('pushsubscriptionchange');
    Object.defineProperty(e, 'oldSubscription', { value: { endpoint: o, options: {} } });
    Object.defineProperty(e, 'newSubscription', { value: { endpoint: f, toJSON: () => ({ endpoint: f, expirationTime: null, keys: { p256dh: 'BNEW', auth: 'ANEW' } }) } });
    self.dispatchEvent(e);
  }, [old, fresh]);
}

describe('installable web app', { timeout: 120000 }, () => {
  let stack; let browser;

  before(async () => {
    [stack, browser] = await startStack(undefined, { full: true });
    fs.mkdirSync(SHOTS, { recursive: true });
  });

  after(() => stopStack(stack, browser));

  it('serves the manifest, its icons and the service worker', async () => {
    const r = await stack.fetch('/manifest.webmanifest');
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-type'), 'application/manifest+json');
    const m = await r.json();
    assert.equal(m.start_url, '/');
    assert.equal(m.scope, '/');
    assert.equal(m.display, 'standalone');
    assert.ok(m.name && m.short_name && m.theme_color && m.background_color, JSON.stringify(m));
    const sizes = new Set();
    for (const icon of m.icons) {
      const ir = await stack.fetch(icon.src);
      assert.equal(ir.status, 200, icon.src);
      assert.equal(ir.headers.get('content-type'), icon.type, icon.src);
      assert.ok(ir.headers.get('etag'), icon.src);
      if (icon.type === 'image/png') {
        const size = pngSize(Buffer.from(await ir.arrayBuffer()));
        assert.equal(size, icon.sizes, icon.src);
        sizes.add(`${icon.purpose}:${size}`);
      }
    }
    for (const want of ['any:192x192', 'any:512x512', 'maskable:512x512']) assert.ok(sizes.has(want), `${want} in ${[...sizes]}`);
    const sw = await stack.fetch('/sw.js');
    assert.equal(sw.status, 200);
    assert.match(sw.headers.get('content-type'), /javascript/);
    assert.equal(sw.headers.get('cache-control'), 'no-cache');
    const csp = sw.headers.get('content-security-policy');
    assert.match(csp, /worker-src 'self'/);
    assert.match(csp, /manifest-src 'self'/);
    const page = await (await stack.fetch('/')).text();
    assert.match(page, /<link rel="manifest" href="\/manifest.webmanifest">/);
    assert.match(page, /<meta name="theme-color" content="#[0-9a-f]{6}" media="\(prefers-color-scheme: light\)">/);
    assert.match(page, /<meta name="theme-color" content="#[0-9a-f]{6}" media="\(prefers-color-scheme: dark\)">/);
  });

  it('meets Chromium\'s installability criteria on localhost', async () => {
    const context = await persistentContext();
    const page = await context.newPage();
    const errors = watchConsole(page);
    await openControlled(page, `http://localhost:${stack.port}/#token=${stack.token}`);
    assert.deepEqual(await installabilityErrors(page), []);
    assert.deepEqual(errors, []);
    await context.close();
  });

  it('meets Chromium\'s installability criteria on https', async () => {
    const proxy = await httpsProxy(stack.home, stack.port);
    try {
      // The certificate is self-signed: chromium is told to accept it (a tunnel's is real).
      const context = await persistentContext({ ignoreHTTPSErrors: true }, ['--ignore-certificate-errors']);
      const page = await context.newPage();
      await openControlled(page, `https://localhost:${proxy.address().port}/#token=${stack.token}`);
      assert.equal(await page.evaluate(() => window.isSecureContext), true);
      assert.deepEqual(await installabilityErrors(page), []);
      await context.close();
    } finally {
      proxy.close();
    }
  });

  it('opens offline from its cache and says the hub is unreachable', async () => {
    const context = await browser.newContext({ viewport: PHONE });
    const page = await context.newPage();
    await openControlled(page, `${stack.base}/#token=${stack.token}`);
    await page.locator('#instances h2', { hasText: 'Live sessions' }).waitFor();
    await context.setOffline(true);
    try {
      await page.reload();
      const error = page.locator('#instances .error');
      await error.waitFor();
      assert.match(await error.textContent(), /cannot reach the hub/);
      // A deep link opens too (every route is the cached page).
      await page.goto(`${stack.base}/s/1/sess_x`);
      await page.locator('#bar').waitFor();
    } finally {
      await context.setOffline(false);
    }
    // The hub itself gone (not only the network): the cached shell still opens.
    await stack.stopHub();
    try {
      await page.goto(`${stack.base}/`);
      const error = page.locator('#instances .error');
      await error.waitFor();
      assert.match(await error.textContent(), /cannot reach the hub/);
      assert.match(await page.locator('#conn').textContent(), /offline/);
      await page.screenshot({ path: path.join(SHOTS, 'pwa-offline-390.png') });
    } finally {
      await stack.startHub();
    }
    await context.close();
  });

  it('shows a notification for a push and leaves nothing but the session path in it', async () => {
    const context = await browser.newContext({ viewport: PHONE });
    await context.grantPermissions(['notifications']);
    const page = await context.newPage();
    const errors = watchConsole(page);
    await openControlled(page, `${stack.base}/#token=${stack.token}`);
    const cdp = await context.newCDPSession(page);
    const regs = [];
    cdp.on('ServiceWorker.workerRegistrationUpdated', (e) => regs.push(...e.registrations));
    await cdp.send('ServiceWorker.enable');
    const reg = await until('the worker registration', () => regs.find((r) => r.scopeURL === `${stack.base}/` && !r.isDeleted));
    const notifications = () => page.evaluate(async () => {
      const r = await navigator.serviceWorker.ready;
      return (await r.getNotifications()).map((n) => ({ title: n.title, body: n.body, tag: n.tag, url: n.data && n.data.url }));
    });
    // Delivers `data` and waits for the notification `pred` picks. Under load chromium now and
    // then drops a DevTools delivery before the worker sees it (seen 2 in ~10 runs, never a
    // push that reached the handler without a notification): up to three deliveries.
    const push = async (what, data, pred) => {
      for (let attempt = 1; ; attempt++) {
        await cdp.send('ServiceWorker.deliverPushMessage', { origin: stack.base, registrationId: reg.registrationId, data });
        try {
          return await until(what, async () => (await notifications()).find(pred), attempt < 3 ? 5000 : WAIT);
        } catch (e) {
          if (attempt === 3) throw e;
        }
      }
    };

    const shown = await push('the notification', JSON.stringify({ title: 'fix-tests waits for you', body: 'Permission: run cargo test', url: '/s/42/sess_1?cwd=%2Ftmp', tag: 'sess_1' }), (n) => n.tag === 'sess_1');
    assert.deepEqual(shown, { title: 'fix-tests waits for you', body: 'Permission: run cargo test', tag: 'sess_1', url: '/s/42/sess_1?cwd=%2Ftmp' });

    // A payload that is not the hub's JSON, or that names another site, still says something
    // and never sends the click elsewhere.
    const fallback = await push('the fallback notification', 'not json', (n) => n.title === 'An agent is waiting for you');
    assert.equal(fallback.url, '/');
    const other = await push('the third notification', JSON.stringify({ title: 'elsewhere', url: 'https://evil.example/phish', tag: 'x' }), (n) => n.tag === 'x');
    assert.equal(other.url, '/');
    await cdp.detach();
    assert.deepEqual(errors, []);
    await context.close();
  });

  /** The page's service worker, as Playwright sees it (to run code in the real worker). */
  async function workerOf(context) {
    return until('the service worker', () => context.serviceWorkers().find((w) => w.url().endsWith('/sw.js')));
  }

  it('a click on a notification opens the session it names in the open window', async () => {
    const context = await browser.newContext({ viewport: PHONE });
    await context.grantPermissions(['notifications']);
    const page = await context.newPage();
    const errors = watchConsole(page);
    await openControlled(page, `${stack.base}/#token=${stack.token}`);
    await page.locator('#instances').waitFor();
    const sw = await workerOf(context);
    const url = '/s/42/sess_click?cwd=%2Ftmp';
    await sw.evaluate((u) => self.registration.showNotification('fix-tests waits for you', { tag: 'sess_click', data: { url: u } }), url);
    // No browser API clicks a system notification: the real worker's own handler runs on a
    // notificationclick event dispatched in it, with the notification the worker showed.
    await sw.evaluate(async () => {
      const [n] = (await self.registration.getNotifications()).filter((x) => x.tag === 'sess_click');
      self.dispatchEvent(new NotificationEvent('notificationclick', { notification: n }));
    });
    await page.waitForURL(`${stack.base}${url}`);
    await page.locator('#prompt, .conn-banner, .top-note').first().waitFor();
    await until('the notification closed', async () => (await sw.evaluate(async () => (await self.registration.getNotifications()).length)) === 0);
    assert.deepEqual(errors.filter((e) => !/Failed to load resource|WebSocket/.test(e)), []);
    await context.close();
  });

  it('a permission shows what it asks, and its notification\'s Allow answers without opening the app', async () => {
    const ed = await stack.bridge();
    const sid = await ed.newSession(stack.project);
    // This device's subscription, as the hub keeps it (Chromium's own push service cannot be
    // reached here): the session's menu offers to mute it.
    const endpoint = `https://push.example/send/${sid}`;
    const p256dh = crypto.createECDH('prime256v1').generateKeys().toString('base64url');
    await stack.api('/api/push/subscriptions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ endpoint, keys: { p256dh, auth: crypto.randomBytes(16).toString('base64url') } }) });
    const context = await browser.newContext({ viewport: PHONE });
    await context.grantPermissions(['notifications']);
    await context.addInitScript((e) => {
      PushManager.prototype.getSubscription = async () => ({ endpoint: e, options: {} });
    }, endpoint);
    const page = await context.newPage();
    const errors = watchConsole(page);
    const turn = ed.prompt(sid, 'permission please');
    const copy = await ed.request((r) => r.method === 'session/request_permission');
    await openControlled(page, `${stack.base}/s/${ed.id}/${sid}?cwd=${encodeURIComponent(stack.project)}#token=${stack.token}`);
    const card = page.locator('.request.permission');
    await card.waitFor();
    // What is asked: the kind, the path, the diff, the raw input behind a fold.
    assert.equal(await card.locator('.perm-kind').textContent(), 'Edit');
    assert.match(await card.locator('.perm-paths').textContent(), /demo\.txt:2/);
    assert.match(await card.locator('.diff .add').first().textContent(), /\+ brave new world/);
    assert.equal(await card.locator('.perm-details').evaluate((d) => d.open), false);
    await card.locator('.perm-details summary').click();
    assert.match(await card.locator('.perm-details pre').textContent(), /"new_string": "brave new world"/);
    // "Always allow" does not look like "Allow once".
    const look = (kind) => card.locator(`button[data-kind="${kind}"]`).evaluate((b) => {
      const s = getComputedStyle(b);
      return `${s.backgroundColor} ${s.borderStyle} ${b.innerText.replace(/\s+/g, ' ')}`;
    });
    const [once, always] = [await look('allow_once'), await look('allow_always')];
    assert.notEqual(once.split(' from')[0], always.split(' from')[0], `${once} | ${always}`);
    assert.match(always, /dashed Always allow from now on/);
    await card.scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(SHOTS, 'permission-card-390.png') });
    // The notification, as the hub sends it: Allow and Deny, answered by the worker itself.
    const sw = await workerOf(context);
    await until('the page handed the worker its token', () => sw.evaluate(async () => Boolean(await (await caches.open('zcode-acp-state')).match('/answer-token'))));
    const route = `/api/instances/${ed.id}/sessions/${sid}/permissions/${copy.id}`;
    const tag = `session:${sid}`;
    const payload = { title: 'permission please asks: Edit', body: 'Edit: demo.txt · project', url: `/s/${ed.id}/${sid}`, tag, kind: 'waiting', pending: 1, answer: { path: route, allow: 'allow', deny: 'reject' } };
    const cdp = await context.newCDPSession(page);
    const regs = [];
    cdp.on('ServiceWorker.workerRegistrationUpdated', (e) => regs.push(...e.registrations));
    await cdp.send('ServiceWorker.enable');
    const reg = await until('the worker registration', () => regs.find((r) => r.scopeURL === `${stack.base}/` && !r.isDeleted));
    const shown = (t) => sw.evaluate(async (x) => (await self.registration.getNotifications()).filter((n) => n.tag === x)
      .map((n) => ({ title: n.title, body: n.body, actions: n.actions.map((a) => a.action) })), t);
    // Under load chromium now and then drops a DevTools delivery: up to three.
    const deliver = async (data, pred) => {
      for (let attempt = 1; ; attempt++) {
        await cdp.send('ServiceWorker.deliverPushMessage', { origin: stack.base, registrationId: reg.registrationId, data: JSON.stringify(data) });
        try {
          return await until('the push handled', async () => pred(await shown(tag)), attempt < 3 ? 5000 : WAIT);
        } catch (e) {
          if (attempt === 3) throw e;
        }
      }
    };
    // The worker's app badge follows the hub's count of what waits.
    await sw.evaluate(() => {
      self.badges = [];
      Object.defineProperty(self.navigator, 'setAppBadge', { configurable: true, value: async (x) => { self.badges.push(x); } });
      Object.defineProperty(self.navigator, 'clearAppBadge', { configurable: true, value: async () => { self.badges.push(0); } });
    });
    const [n] = await deliver(payload, (list) => list.length === 1 && list);
    assert.deepEqual(n, { title: payload.title, body: payload.body, actions: ['allow', 'deny'] });
    assert.equal(await sw.evaluate(() => self.badges.at(-1)), 1);
    await sw.evaluate(async (x) => {
      const [note] = (await self.registration.getNotifications()).filter((m) => m.tag === x);
      self.dispatchEvent(new NotificationEvent('notificationclick', { notification: note, action: 'allow' }));
    }, tag);
    await turn;
    await until('the editor\'s copy withdrawn', () => ed.notes.some((m) => m.method === '$/cancel_request' && m.params.requestId === copy.id));
    await page.locator('#transcript', { hasText: 'Permission granted (allow)' }).waitFor();
    await until('the card gone', async () => (await card.count()) === 0);
    assert.equal(page.url().includes(`/s/${ed.id}/`), true, 'the page was not navigated');
    // A second answer loses, and says so; a withdrawal closes the notification of its tag.
    await deliver(payload, (list) => list.length === 1);
    await sw.evaluate(async (x) => {
      const [note] = (await self.registration.getNotifications()).filter((m) => m.tag === x);
      self.dispatchEvent(new NotificationEvent('notificationclick', { notification: note, action: 'deny' }));
    }, tag);
    const [late] = await until('the late answer told', async () => { const l = await shown(tag); return l.length === 1 && l[0].title === 'Already answered' && l; });
    assert.match(late.body, /already answered \(by device|already answered \(by machine/);
    await deliver({ kind: 'withdraw', tag, pending: 0 }, (list) => list.length === 0);
    assert.equal(await sw.evaluate(() => self.badges.at(-1)), 0, 'the badge cleared');
    // A command to run shows the command.
    const run = ed.prompt(sid, 'execute');
    await card.waitFor();
    assert.equal(await card.locator('.perm-kind').textContent(), 'Run a command');
    assert.equal(await card.locator('.perm-command').textContent(), 'cargo test --workspace -- --nocapture');
    await page.screenshot({ path: path.join(SHOTS, 'permission-execute-390.png') });
    await card.locator('button[data-kind="reject_once"]').click();
    await run;
    // Follow / mute from the session's menu, kept by the hub for this device.
    await page.locator('#more summary').click();
    await page.locator('#mute-btn:not([hidden])').click();
    await until('the session muted', async () => (await stack.api('/api/push/mute', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ endpoint }) })).muted.includes(sid));
    await page.locator('#more summary').click();
    assert.equal(await page.locator('#mute-btn').textContent(), 'Follow notifications');
    await page.locator('#more summary').click();

    await cdp.detach();
    assert.deepEqual(errors.filter((e) => !/WebSocket/.test(e)), []);
    await context.close();
  });

  it('a click on a notification asks for a new window on the session when no page of the app is open', async () => {
    const context = await browser.newContext({ viewport: PHONE });
    await context.grantPermissions(['notifications']);
    const page = await context.newPage();
    await openControlled(page, `${stack.base}/#token=${stack.token}`);
    await page.locator('#instances').waitFor();
    const sw = await workerOf(context);
    const url = '/s/42/sess_closed?cwd=%2Ftmp';
    await sw.evaluate((u) => self.registration.showNotification('fix-tests waits for you', { tag: 'sess_closed', data: { url: u } }), url);
    // The app's only page goes; the context (the browser profile) and its worker stay.
    await page.close();
    await until('no window of the app left', async () => (await sw.evaluate(async () => (await self.clients.matchAll({ type: 'window', includeUncontrolled: true })).length)) === 0);
    // Chromium lets a worker open a window only while it handles a notificationclick the
    // browser itself dispatched (a click on a shown notification); one dispatched by script, as
    // here, is refused ("Not allowed to open a window."), and no DevTools command clicks a
    // notification. So the real openWindow is called and watched: the URL it was asked for,
    // and either the window it opened or exactly that refusal.
    await sw.evaluate(() => {
      const real = self.clients.openWindow.bind(self.clients);
      self.opened = [];
      self.clients.openWindow = (u) => {
        const seen = { url: u };
        self.opened.push(seen);
        return real(u).then((c) => { seen.result = c ? c.url : null; return c; }, (e) => { seen.result = `${e.name}: ${e.message}`; return null; });
      };
    });
    const pagesBefore = context.pages().length;
    await sw.evaluate(async () => {
      const [n] = (await self.registration.getNotifications()).filter((x) => x.tag === 'sess_closed');
      self.dispatchEvent(new NotificationEvent('notificationclick', { notification: n }));
    });
    const [opened] = await until('the worker to ask for a window', async () => {
      const o = await sw.evaluate(() => self.opened);
      return o.length && 'result' in o[0] && o;
    });
    assert.equal(opened.url, `${stack.base}${url}`);
    if (opened.result === 'InvalidAccessError: Not allowed to open a window.') {
      assert.equal(context.pages().length, pagesBefore, 'no window opened');
      // What that window would show: the session the notification names, from a cold start.
      const fresh = await context.newPage();
      await fresh.goto(opened.url);
      await fresh.locator('#prompt, .conn-banner, .top-note').first().waitFor();
    } else {
      // A chromium that lets the script-dispatched click open it: the window shows the session.
      assert.equal(opened.result, `${stack.base}${url}`);
      const fresh = await until('the new window', () => context.pages().find((p) => p.url() === opened.url));
      await fresh.locator('#prompt, .conn-banner, .top-note').first().waitFor();
    }
    await until('the notification closed', async () => (await sw.evaluate(async () => (await self.registration.getNotifications()).length)) === 0);
    await context.close();
  });

  it('a renewed push subscription (pushsubscriptionchange) reaches the hub, now or when the app next opens', async () => {
    const context = await browser.newContext({ viewport: PHONE });
    await context.grantPermissions(['notifications']);
    const seen = [];
    await context.route('**/api/push/subscriptions', async (r) => {
      const req = r.request();
      seen.push({ method: req.method(), auth: req.headers().authorization, body: JSON.parse(req.postData() || 'null') });
      return r.fulfill({ status: 204, body: '' });
    });
    const page = await context.newPage();
    const errors = watchConsole(page);
    await openControlled(page, `${stack.base}/#token=${stack.token}`);
    await page.evaluate(() => localStorage.setItem('zcode-acp.notifyTurnEnd', '1'));
    const sw = await workerOf(context);
    const change = (old, fresh) => renewSubscription(sw, old, fresh);
    await change('https://push.example/old', 'https://push.example/new');
    const bearer = `Bearer ${stack.token}`;
    await until('the renewal sent to the hub', () => seen.length >= 2);
    assert.deepEqual(seen, [
      { method: 'POST', auth: bearer, body: { endpoint: 'https://push.example/new', expirationTime: null, keys: { p256dh: 'BNEW', auth: 'ANEW' }, notifyTurnEnd: true } },
      { method: 'DELETE', auth: bearer, body: { endpoint: 'https://push.example/old' } },
    ]);

    // With no window open, the worker keeps the renewal; the next window sends it.
    await page.close();
    await until('no window left', async () => (await sw.evaluate(async () => (await self.clients.matchAll({ type: 'window' })).length)) === 0);
    await change('https://push.example/new', 'https://push.example/newer');
    await until('the renewal kept', () => sw.evaluate(async () => Boolean(await (await caches.open('zcode-acp-state')).match('/push-renewed'))));
    assert.equal(seen.length, 2, 'nothing reached the hub without a page (the worker leaves renewals to a page)');
    const again = await context.newPage();
    await again.goto(`${stack.base}/`);
    await until('the kept renewal sent', () => seen.length >= 4);
    assert.deepEqual(seen.slice(2).map((x) => [x.method, x.body.endpoint]), [['POST', 'https://push.example/newer'], ['DELETE', 'https://push.example/new']]);
    await until('the kept renewal dropped', async () => !(await sw.evaluate(async () => Boolean(await (await caches.open('zcode-acp-state')).match('/push-renewed')))));
    assert.deepEqual(errors, []);
    await context.close();
  });

  it('a renewed push subscription the hub could not take at first is sent again, without a reload', async () => {
    const context = await browser.newContext({ viewport: PHONE });
    await context.grantPermissions(['notifications']);
    const seen = [];
    await context.route('**/api/push/subscriptions', async (r) => {
      const req = r.request();
      seen.push(req.method());
      // The first try meets a hub that cannot take it (busy, restarting).
      if (seen.length === 1) return r.fulfill({ status: 503, body: 'busy' });
      return r.fulfill({ status: 204, body: '' });
    });
    const page = await context.newPage();
    await openControlled(page, `${stack.base}/#token=${stack.token}`);
    const sw = await workerOf(context);
    await renewSubscription(sw, 'https://push.example/was', 'https://push.example/is');
    await until('the renewal sent again', () => seen.filter((m) => m === 'POST').length >= 2);
    await until('the old one removed', () => seen.includes('DELETE'));
    await until('the kept renewal dropped', async () => !(await sw.evaluate(async () => Boolean(await (await caches.open('zcode-acp-state')).match('/push-renewed')))));
    await context.close();
  });

  it('counts what waits in the tab title and the app badge', async () => {
    const ed = await stack.bridge();
    const sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'hello');
    await stack.listed(ed.id, sid);
    const context = await browser.newContext({ viewport: PHONE });
    await context.addInitScript(() => {
      // Home reads the hub every 250 ms (every 4 s by default): a request shows at its next read.
      localStorage.setItem('zcode-acp.test.homePollMs', '250');
      window.badges = [];
      navigator.setAppBadge = (n) => { window.badges.push(n); return Promise.resolve(); };
      navigator.clearAppBadge = () => { window.badges.push(0); return Promise.resolve(); };
    });
    const page = await context.newPage();
    await page.goto(`${stack.base}/#token=${stack.token}`);
    await page.locator(`[data-session="${sid}"]`).waitFor();
    assert.equal(await page.title(), 'zcode-acp');
    const turn = ed.prompt(sid, 'permission for the badge');
    const copy = await ed.request((r) => r.method === 'session/request_permission');
    await until('the count in the title', async () => (await page.title()) === '(1) zcode-acp');
    await until('the badge', () => page.evaluate(() => window.badges.at(-1) === 1));
    // The count follows the page into the session it belongs to.
    await page.locator('#waiting a').click();
    await page.locator('.request.permission').waitFor();
    assert.match(await page.title(), /^\(1\) /);
    ed.answer(copy.id, { outcome: { outcome: 'selected', optionId: 'reject' } });
    await turn;
    await until('the title without a count', async () => !/^\(\d+\)/.test(await page.title()));
    await until('the badge cleared', () => page.evaluate(() => window.badges.at(-1) === 0));
    await context.close();
  });

  it('subscribes with the hub\'s key on a click and sends the hub the subscription, then unsubscribes', async () => {
    const context = await browser.newContext({ viewport: PHONE });
    await context.grantPermissions(['notifications']);
    // The browser's push service (Google's, for chromium) cannot be reached from here: the one
    // stand-in is PushManager's subscribe, which records the key it is given and answers with
    // a subscription of the shape browsers give. Everything else is the real page and worker.
    await context.addInitScript(() => {
      let current = null;
      PushManager.prototype.subscribe = async function subscribe(opts) {
        window.subscribedWith = { userVisibleOnly: opts.userVisibleOnly, key: Array.from(new Uint8Array(opts.applicationServerKey)) };
        current = {
          endpoint: 'https://push.example/send/abc', options: { applicationServerKey: opts.applicationServerKey.buffer },
          toJSON: () => ({ endpoint: 'https://push.example/send/abc', expirationTime: null, keys: { p256dh: 'BPUB', auth: 'AUTH' } }),
          unsubscribe: async () => { current = null; return true; },
        };
        return current;
      };
      PushManager.prototype.getSubscription = async () => current;
    });
    const ecdh = crypto.createECDH('prime256v1');
    const publicKey = ecdh.generateKeys();
    const seen = [];
    await context.route('**/api/push/**', async (r) => {
      const req = r.request();
      seen.push({ method: req.method(), path: new URL(req.url()).pathname, auth: req.headers().authorization, body: req.postData() && JSON.parse(req.postData()) });
      if (req.method() === 'GET') return r.fulfill({ json: { publicKey: publicKey.toString('base64url') } });
      return r.fulfill({ status: 204, body: '' });
    });
    const page = await context.newPage();
    const errors = watchConsole(page);
    await openControlled(page, `${stack.base}/#token=${stack.token}`);
    assert.equal(await page.evaluate(() => Notification.permission), 'granted');
    await page.locator('#notify-turn-end').check();
    await page.locator('#notify-on').click();
    await page.locator('#notify-off').waitFor();
    assert.match(await page.locator('#notify-status').textContent(), /on for this device/);
    assert.deepEqual(await page.evaluate(() => window.subscribedWith), { userVisibleOnly: true, key: Array.from(publicKey) });
    const bearer = `Bearer ${stack.token}`;
    assert.deepEqual(seen, [
      { method: 'GET', path: '/api/push/vapid-public-key', auth: bearer, body: null },
      { method: 'POST', path: '/api/push/subscriptions', auth: bearer, body: { endpoint: 'https://push.example/send/abc', expirationTime: null, keys: { p256dh: 'BPUB', auth: 'AUTH' }, notifyTurnEnd: true } },
    ]);
    assert.equal(await page.evaluate(() => JSON.stringify(localStorage).includes('push.example')), false, 'nothing stored in the page');
    await page.locator('#notify-off').click();
    await page.locator('#notify-on').waitFor();
    assert.deepEqual(seen.at(-1), { method: 'DELETE', path: '/api/push/subscriptions', auth: bearer, body: { endpoint: 'https://push.example/send/abc' } });
    assert.deepEqual(errors, []);
    await context.close();
  });

  for (const scheme of ['light', 'dark']) {
    it(`offers "Notify me when an agent waits" on the home screen (${scheme})`, async () => {
      const context = await browser.newContext({ viewport: PHONE, colorScheme: scheme });
      await context.grantPermissions(['notifications']);
      const page = await context.newPage();
      const errors = watchConsole(page);
      await openControlled(page, `${stack.base}/#token=${stack.token}`);
      const button = page.locator('#notify-on');
      await button.waitFor();
      assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth), true, 'no horizontal overflow');
      assert.equal(await page.evaluate((s) => getComputedStyle(document.querySelector('#bar')).backgroundColor
        === (s === 'dark' ? 'rgb(26, 30, 35)' : 'rgb(255, 255, 255)'), scheme), true, 'theme-color matches the header');
      await page.locator('#notify').scrollIntoViewIfNeeded();
      await page.screenshot({ path: path.join(SHOTS, `pwa-notify-${scheme}-390.png`) });
      // This hub has no push key to give: the button says so, clearly.
      await page.route('**/api/push/vapid-public-key', (r) => r.fulfill({ status: 404, contentType: 'text/plain', body: 'not found' }));
      await button.click();
      const status = page.locator('#notify-status');
      await until('the status', async () => /does not send notifications/.test(await status.textContent()));
      // A browser whose push service cannot be reached: "Notify me" gives up and says why.
      await page.unroute('**/api/push/vapid-public-key');
      await page.evaluate(() => {
        window.zcodePushSubscribeMs = 300;
        PushManager.prototype.subscribe = () => new Promise(() => {});
      });
      await button.click();
      await until('the timeout said', async () => /push service did not answer within/.test(await status.textContent()));
      if (scheme === 'light') await page.screenshot({ path: path.join(SHOTS, 'pwa-notify-timeout-390.png') });
      assert.deepEqual(errors.filter((e) => !/404/.test(e)), []);
      await context.close();
    });
  }
});
