// One phone, several machines (issue 34): two hubs on this machine, each with its own home
// (so its own hostId, devices and sessions), and one 390×844 phone whose page is served by
// hub A. The page pairs with B by B's pairing link (redeemed cross-origin at B), shows one
// list of both machines' live sessions each labelled by its machine, opens B's session from
// A's page and streams a prompt's answer over B's relay, answers a permission pending on B
// from A's home, gets B's notifications (B's hub pushes to this device's subscription there,
// made with B's key in a registration of its own) which open B's session and answer Allow at
// B, resumes B's ended session from the Projects card, and shows B offline, without holding
// up A's rows, once B stops. A device credential of one hub is refused by the other.
//
// The browser's push service (Google's, for chromium) cannot be reached from here: PushManager
// answers with subscriptions whose endpoint is this test's push service on loopback, with a
// key pair the test holds; what a hub sends there is decrypted (RFC 8291) and delivered to the
// worker through DevTools, as the push service would.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Stack, launchBrowser, stopStack, until, WAIT } from './harness.mjs';
import { phonePage, looksRight } from './look.mjs';

const CUT = [/^Failed to load resource: (net::ERR_\w+|the server responded with a status of \d{3} )/, /^WebSocket connection to '.*' failed: /];

/** A push service on loopback: every message it is sent, by the path it was sent to. */
async function pushService() {
  const got = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      got.push({ path: decodeURIComponent(req.url.replace(/^\/send\//, '')), body: Buffer.concat(chunks) });
      res.writeHead(201);
      res.end();
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { got, server, port: server.address().port };
}

/** The plaintext of an `aes128gcm` Web Push message (RFC 8188/8291) for the subscription `ua` (ECDH) with `auth`. */
function decrypt(body, ua, auth) {
  const salt = body.subarray(0, 16);
  const idlen = body[20];
  const server = body.subarray(21, 21 + idlen);
  const ct = body.subarray(21 + idlen);
  const info = (s) => Buffer.from(`Content-Encoding: ${s}\0`);
  const ikm = Buffer.from(crypto.hkdfSync('sha256', ua.computeSecret(server), auth,
    Buffer.concat([Buffer.from('WebPush: info\0'), ua.getPublicKey(), server]), 32));
  const cek = Buffer.from(crypto.hkdfSync('sha256', ikm, salt, info('aes128gcm'), 16));
  const nonce = Buffer.from(crypto.hkdfSync('sha256', ikm, salt, info('nonce'), 12));
  const d = crypto.createDecipheriv('aes-128-gcm', cek, nonce);
  d.setAuthTag(ct.subarray(ct.length - 16));
  const plain = Buffer.concat([d.update(ct.subarray(0, ct.length - 16)), d.final()]);
  let end = plain.length - 1;
  while (end > 0 && plain[end] === 0) end--; // the padding, then its delimiter (2)
  return plain.subarray(0, end).toString();
}

describe('several machines: one page, two hubs', () => {
  let a; let b; let browser; let page;
  let edA; let edB; let sidA; let sidB; let hostB;
  let push;
  const ua = crypto.createECDH('prime256v1');
  ua.generateKeys();
  const auth = crypto.randomBytes(16);

  /** A full-access pairing link of `stack` (as `zcode-acp pair` prints it). */
  const pairingLink = async (stack) => (await stack.api('/api/pairing', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ scope: 'full' }),
  })).url;

  before(async () => {
    // B lists its temp-dir project (under a project root) and starts its bridges headless.
    [a, b, browser, push] = await Promise.all([Stack.start(),
      Stack.start({ env: (home) => ({ ZCODE_ACP_PROJECT_ROOTS: home, ZCODE_ACP_HUB_TERMINAL: '0', HOME: home }) }),
      launchBrowser({ full: true }), pushService()]);
    [edA, edB] = await Promise.all([a.bridge(), b.bridge()]);
    [sidA, sidB] = await Promise.all([edA.newSession(a.project), edB.newSession(b.project)]);
    await Promise.all([edA.prompt(sidA, 'hello machine A'), edB.prompt(sidB, 'hello machine B')]);
    page = await phonePage(browser, 'light');
    await page.context().grantPermissions(['notifications']);
    // A short per-machine timeout: a stopped machine is said offline soon (a long one while a
    // test holds a machine's answer on purpose).
    await page.context().addInitScript(() => localStorage.setItem('zcode-acp.test.machineTimeoutMs', sessionStorage.getItem('fleet-test.patient') ? '60000' : '1500'));
    // Each registration's subscription (kept across loads as the browser would), with the key
    // it was made with, at this test's push service, named by the registration's scope.
    await page.context().addInitScript(({ port, p256dh, secret }) => {
      const get = Object.getOwnPropertyDescriptor(ServiceWorkerRegistration.prototype, 'pushManager').get;
      Object.defineProperty(ServiceWorkerRegistration.prototype, 'pushManager', {
        configurable: true,
        get() { const pm = get.call(this); pm.zcodeScope = new URL(this.scope).pathname; return pm; },
      });
      const kept = () => JSON.parse(localStorage.getItem('zcode-test-subs') || '{}');
      const of = (scope, key) => {
        const endpoint = `http://127.0.0.1:${port}/send/${encodeURIComponent(scope)}`;
        return {
          endpoint, options: { applicationServerKey: new Uint8Array(key).buffer },
          toJSON: () => ({ endpoint, expirationTime: null, keys: { p256dh, auth: secret } }),
          unsubscribe: async () => { const all = kept(); delete all[scope]; localStorage.setItem('zcode-test-subs', JSON.stringify(all)); return true; },
        };
      };
      PushManager.prototype.subscribe = async function subscribe(opts) {
        const key = Array.from(new Uint8Array(opts.applicationServerKey));
        localStorage.setItem('zcode-test-subs', JSON.stringify({ ...kept(), [this.zcodeScope]: key }));
        return of(this.zcodeScope, key);
      };
      PushManager.prototype.getSubscription = async function getSubscription() {
        const key = kept()[this.zcodeScope];
        return key ? of(this.zcodeScope, key) : null;
      };
    }, { port: push.port, p256dh: ua.getPublicKey().toString('base64url'), secret: auth.toString('base64url') });
  });

  after(async () => {
    push?.server.close();
    await browser?.close();
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it('pairs A\'s page with B by B\'s link and shows both machines\' sessions, each labelled', async () => {
    await page.goto(await pairingLink(a));
    await page.locator(`#instances li[data-session="${sidA}"]`).waitFor();
    // A wrong link is refused in words, before anything is asked of anyone.
    await page.locator('#machine-add-box summary').click();
    await page.fill('#machine-link', `${b.base}/`);
    await page.click('#machine-add');
    assert.match(await page.locator('#machine-error').innerText(), /no pairing code/);
    await page.fill('#machine-link', await pairingLink(b));
    await page.fill('#machine-name', 'Machine B');
    await page.click('#machine-add');
    const versionB = await b.api('/api/version');
    hostB = versionB.hostId;
    // One list: B's row and A's in the same "Live sessions", each labelled with its machine.
    const row = page.locator(`#instances li[data-session="${sidB}"][data-machine="${hostB}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), /machine b/i);
    assert.match(await page.locator('#fleet [data-machine-state]').innerText(), /online/);
    const rowA = page.locator(`#instances li[data-session="${sidA}"]`);
    await rowA.locator('.badge.machine', { hasText: os.hostname() }).waitFor();
    // B's turns join A's on the one board; the Machines card lists no rows of its own.
    await page.locator(`#board li[data-run-session="${sidB}"][data-machine="${hostB}"]`).waitFor({ state: 'attached' });
    assert.equal(await page.locator('#fleet li').count(), 0, 'no second list');
    // "Projects on" offers B at once.
    await page.locator(`#projects-machine option[value="${hostB}"]`).waitFor({ state: 'attached' });
    const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('zcode-acp.machines')));
    assert.equal(versionB.hostName, os.hostname(), 'a hub names its host (what a machine is called when the person gives no name)');
    assert.equal(stored.length, 1);
    assert.equal(stored[0].id, hostB, 'the machine is known by its hostId');
    assert.equal(stored[0].origin, b.base);
    // As with its own hub, the page keeps no credential of B's: a key B knows (IndexedDB).
    assert.equal(stored[0].key, true);
    assert.equal(stored[0].token, undefined);
    assert.ok((await b.api('/api/devices')).devices.some((d) => d.id === stored[0].deviceId), 'B lists this browser as a device');
    await looksRight(page, 'fleet-home', { fullPage: true });
  });

  it('shows A\'s and B\'s last rows at once on a reload, marked, until each answers afresh', async () => {
    // Both homes are held on their way: what the page shows meanwhile is what it kept.
    let release;
    const held = new Promise((r) => { release = r; });
    const asked = new Set();
    const hold = async (route) => { asked.add(new URL(route.request().url()).origin); await held; await route.continue().catch(() => {}); };
    await page.route(`${a.base}/api/home`, hold);
    await page.route(`${b.base}/api/home`, hold);
    try {
      await page.evaluate(() => sessionStorage.setItem('fleet-test.patient', '1'));
      await page.reload();
      const block = page.locator(`#fleet .machine-block[data-machine="${(await b.api('/api/version')).hostId}"]`);
      await page.locator(`#instances li[data-session="${sidB}"]`).waitFor();
      await page.locator(`#instances[data-kept="yes"] li[data-session="${sidA}"]`).waitFor();
      assert.match(await block.locator('[data-machine-state]').innerText(), /as of/);
      assert.match(await page.locator('#instances .card-head').innerText(), /as of/);
      await until('both homes to be asked', () => asked.size === 2);
      assert.equal(await block.locator('[data-machine-state="cached"]').count(), 1, 'B shown from what was kept, not answered yet');
      assert.equal(await page.locator('#instances[data-kept="yes"]').count(), 1, 'A shown from what was kept, not answered yet');
      await looksRight(page, 'fleet-kept', { fullPage: true });
      release();
      await block.locator('[data-machine-state="online"]').waitFor();
      await page.locator('#instances[data-kept=""]').waitFor();
      await page.locator(`#instances li[data-session="${sidB}"]`).waitFor();
      await page.locator(`#instances li[data-session="${sidA}"]`).waitFor();
    } finally {
      release();
      await page.unroute(`${a.base}/api/home`);
      await page.unroute(`${b.base}/api/home`);
      await page.evaluate(() => sessionStorage.removeItem('fleet-test.patient'));
    }
  });

  it('refuses a credential issued by the other hub', async () => {
    // The access tokens each hub's key signs for, minted in the page as its requests get them.
    const [own, fromB] = await page.evaluate(async () => {
      const [api, ms] = [await import('/js/api.js'), await import('/js/machines.js')];
      return [await api.credential(), await ms.machines()[0].credential()];
    });
    assert.ok(own && fromB && own !== fromB);
    const at = (stack, t) => stack.fetch('/api/instances', { headers: { Authorization: `Bearer ${t}` } }).then((r) => r.status);
    assert.equal(await at(a, own), 200);
    assert.equal(await at(b, fromB), 200);
    assert.equal(await at(b, own), 401, 'A\'s device credential used at B');
    assert.equal(await at(a, fromB), 401, 'B\'s device credential used at A');
    // The page's own preflight for a credentialed cross-origin call, as a browser sends it.
    const pre = await b.fetch('/api/pair', { method: 'OPTIONS', headers: { Origin: a.base, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization, content-type' } });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), '*');
    assert.equal(pre.headers.get('access-control-allow-credentials'), null, 'no cookies: credentials ride headers');
  });

  it('opens B\'s session from A\'s page and streams a prompt\'s answer from B', async () => {
    await page.locator(`#instances li[data-session="${sidB}"] a`).click();
    await page.waitForURL(/\/s\/\d+\/[^/?]+\?.*m=/);
    await page.locator('.msg.agent', { hasText: 'hello machine B' }).first().waitFor();
    await page.locator('#send:not([disabled])').waitFor();
    await page.fill('#prompt', 'from the phone to B');
    await page.click('#send');
    await page.locator('.msg.agent', { hasText: 'You said: "from the phone to B"' }).waitFor();
    assert.ok(edB.notes.some((n) => JSON.stringify(n).includes('from the phone to B')), 'B\'s editor saw the turn');
    await looksRight(page, 'fleet-session-b');
    // Loaded afresh on B's session (as a notification's link opens it): this page's own
    // credential is still had from A, not asked of B, and A's rows show back home.
    await page.evaluate(() => sessionStorage.clear());
    await page.reload();
    await page.locator('.msg.agent', { hasText: 'You said: "from the phone to B"' }).waitFor();
    assert.match(await page.locator('#bar-title').innerText(), /Machine B/);
    await page.click('#home-link');
    await page.locator(`#instances li[data-session="${sidB}"]`).waitFor();
    await page.locator(`#instances li[data-session="${sidA}"]`).waitFor();
  });

  it('answers a permission pending on B from A\'s home', async () => {
    const turn = edB.prompt(sidB, 'permission from the other machine');
    await edB.request((r) => r.method === 'session/request_permission');
    const row = page.locator(`#waiting li[data-inbox-session="${sidB}"][data-machine="${hostB}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), /machine b[\s\S]*asks permission/i);
    // The tab title counts what waits on every machine the page shows (nothing waits on A).
    await until('the title to count B\'s wait', async () => /^\(1\) /.test(await page.title()));
    await looksRight(page, 'fleet-waiting', { fullPage: true });
    await row.locator('button[data-option="allow"]').click();
    assert.equal((await turn).stopReason, 'end_turn');
    assert.ok(edB.notes.some((n) => JSON.stringify(n).includes('Permission granted (allow)')), 'B\'s agent got the Allow');
    await row.waitFor({ state: 'detached' });
  });

  it('gets B\'s notifications: one opens B\'s session on A\'s page, its Allow answers at B', async () => {
    await page.locator('#notify-on').click();
    await page.locator('#notify-off').waitFor();
    // A subscription at each hub, made with that hub's own key, each in a registration of its own.
    const scopeB = `/push/${encodeURIComponent(hostB)}/`;
    const subs = await page.evaluate(() => JSON.parse(localStorage.getItem('zcode-test-subs')));
    assert.deepEqual(Object.keys(subs).sort(), ['/', scopeB].sort());
    for (const [scope, hub] of [['/', a], [scopeB, b]]) {
      assert.equal(Buffer.from(subs[scope]).toString('base64url'), (await hub.api('/api/push/vapid-public-key')).publicKey, `${scope}: its hub's key`);
      const endpoint = `http://127.0.0.1:${push.port}/send/${encodeURIComponent(scope)}`;
      await hub.api('/api/push/mute', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ endpoint }) });
    }
    assert.match(await page.locator('#notify').innerText(), /another paired one/);

    // B's hub pushes its permission to this device's subscription there.
    const turn = edB.prompt(sidB, 'permission by notification');
    await edB.request((r) => r.method === 'session/request_permission');
    const payload = await until('B\'s push of the permission', () => push.got.filter((p) => p.path === scopeB)
      .map((p) => JSON.parse(decrypt(p.body, ua, auth))).find((p) => p.kind === 'waiting' && p.answer));
    const cdp = await page.context().newCDPSession(page);
    const regs = [];
    cdp.on('ServiceWorker.workerRegistrationUpdated', (e) => regs.push(...e.registrations));
    await cdp.send('ServiceWorker.enable');
    const reg = await until('B\'s registration', () => regs.find((r) => r.scopeURL === `${a.base}${scopeB}` && !r.isDeleted));
    // B's worker as it runs now (an idle worker is stopped, and started again by a push).
    const sw = () => until('B\'s worker', async () => {
      for (const w of page.context().serviceWorkers()) {
        if (await w.evaluate(() => self.registration.scope).catch(() => '') === `${a.base}${scopeB}`) return w;
      }
      return null;
    });
    const shown = async () => (await sw()).evaluate(async () => (await self.registration.getNotifications())
      .map((n) => ({ title: n.title, tag: n.tag, url: n.data.url, actions: n.actions.map((x) => x.action) })));
    // Under load chromium now and then drops a DevTools delivery: up to three.
    const deliver = async () => {
      for (let attempt = 1; ; attempt++) {
        await cdp.send('ServiceWorker.deliverPushMessage', { origin: a.base, registrationId: reg.registrationId, data: JSON.stringify(payload) });
        try {
          return await until('the notification', async () => (await shown())[0], attempt < 3 ? 5000 : WAIT);
        } catch (e) {
          if (attempt === 3) throw e;
        }
      }
    };
    const n = await deliver();
    // The app badge counts every machine's waits: A's last count (2, as A's worker keeps it)
    // beside what B's push says waits on B.
    await page.evaluate(async () => (await caches.open('zcode-acp-state')).put('/badge/self', new Response('2')));
    const badge = await (async () => {
      for (let attempt = 1; ; attempt++) {
        const w = await sw();
        await w.evaluate(() => {
          self.badges = [];
          Object.defineProperty(self.navigator, 'setAppBadge', { configurable: true, value: async (x) => { self.badges.push(x); } });
        });
        await cdp.send('ServiceWorker.deliverPushMessage', { origin: a.base, registrationId: reg.registrationId, data: JSON.stringify(payload) });
        try {
          return await until('the badge set', () => w.evaluate(() => self.badges.at(-1)), attempt < 3 ? 5000 : WAIT);
        } catch (e) {
          if (attempt === 3) throw e;
        }
      }
    })();
    assert.equal(badge, 2 + payload.pending, `the badge: A's 2 and B's ${payload.pending}`);
    await page.evaluate(async () => (await caches.open('zcode-acp-state')).delete('/badge/self'));
    assert.equal(n.title, `Machine B: ${payload.title}`);
    assert.deepEqual(n.actions, ['allow', 'deny']);
    assert.equal(n.url, `${payload.url}${payload.url.includes('?') ? '&' : '?'}m=${encodeURIComponent(hostB)}`);
    // A tap opens B's session on this page, its permission waiting.
    const click = async (action) => (await sw()).evaluate(async (x) => {
      const [note] = await self.registration.getNotifications();
      self.dispatchEvent(new NotificationEvent('notificationclick', x ? { notification: note, action: x } : { notification: note }));
    }, action);
    await click('');
    await page.waitForURL((u) => u.pathname === `/s/${edB.id}/${sidB}` && u.searchParams.get('m') === hostB);
    await page.locator('.request.permission').waitFor();
    await looksRight(page, 'fleet-notified');
    // Allow on the notification: the worker answers at B, with B's key.
    await deliver();
    await click('allow');
    assert.equal((await turn).stopReason, 'end_turn');
    assert.ok(edB.notes.some((x) => JSON.stringify(x).includes('Permission granted (allow)')), 'B\'s agent got the Allow');
    await page.locator('.request.permission').waitFor({ state: 'detached' });
    await cdp.detach();
  });

  it('resumes B\'s ended session from the Projects card, and starts a new one on B from the home', async () => {
    const ed = await b.bridge();
    const old = await ed.newSession(b.project);
    await ed.prompt(old, 'an old conversation on B');
    await ed.close();
    await page.goto(`${a.base}/`);
    await page.selectOption('#projects-machine', hostB);
    const project = page.locator(`#projects .project[data-machine="${hostB}"][data-path="${b.project}"]`);
    await project.locator('button', { hasText: 'History' }).click();
    const row = project.locator('.history li', { hasText: 'an old conversation on B' });
    await row.locator('a, button', { hasText: 'Resume' }).click();
    await page.waitForURL((u) => u.pathname.endsWith(`/${old}`) && u.searchParams.get('m') === hostB);
    await page.locator('.msg.agent', { hasText: 'You said: "an old conversation on B"' }).waitFor();
    await page.locator('#send:not([disabled])').waitFor();
    await page.fill('#prompt', 'picked up on B');
    await page.click('#send');
    await page.locator('.msg.agent', { hasText: 'You said: "picked up on B"' }).waitFor();
    await looksRight(page, 'fleet-resumed');
    await page.click('#home-link');
    await page.locator(`#instances .machine-group[data-machine="${hostB}"] a.button`).click();
    await page.waitForURL((u) => u.pathname.startsWith('/n/') && u.searchParams.get('m') === hostB);
    await page.locator('#send:not([disabled])').waitFor();
    await page.fill('#prompt', 'born on B');
    await page.click('#send');
    await page.waitForURL((u) => u.pathname.startsWith('/s/') && u.searchParams.get('m') === hostB);
    await page.locator('.msg.agent', { hasText: 'You said: "born on B"' }).waitFor();
    const sid = decodeURIComponent(new URL(page.url()).pathname.split('/')[3]);
    assert.ok((await b.api('/api/instances')).some((i) => i.sessions.some((x) => x.sessionId === sid)), 'B runs the new session');
    await page.click('#home-link');
  });

  it('lists B\'s directories under "Start somewhere new on" and starts a session there on B', async () => {
    await page.goto(`${a.base}/`);
    const browse = page.locator('#browse');
    await page.selectOption('#browse-machine', hostB);
    // B's home, not A's: both have a `project/`.
    await browse.locator('code.path', { hasText: b.home }).waitFor();
    await looksRight(page, 'fleet-browse', { fullPage: true });
    await browse.locator('.dirs button', { hasText: 'project/' }).click();
    await browse.locator('code.path', { hasText: b.project }).waitFor();
    await browse.locator('.dirs button', { hasText: 'sub/' }).click();
    const where = path.join(b.project, 'sub');
    await browse.locator('code.path', { hasText: where }).waitFor();
    await browse.locator('button', { hasText: 'Start a session here' }).click();
    await page.waitForURL((u) => u.pathname.startsWith('/n/') && u.searchParams.get('m') === hostB && u.searchParams.get('cwd') === where);
    await page.locator('#send:not([disabled])').waitFor();
    await page.fill('#prompt', 'somewhere new on B');
    await page.click('#send');
    await page.waitForURL((u) => u.pathname.startsWith('/s/') && u.searchParams.get('m') === hostB);
    await page.locator('.msg.agent', { hasText: 'You said: "somewhere new on B"' }).waitFor();
    const sid = decodeURIComponent(new URL(page.url()).pathname.split('/')[3]);
    assert.ok((await b.api('/api/instances')).some((i) => i.sessions.some((x) => x.sessionId === sid)), 'B runs the new session');
    await page.click('#home-link');
  });

  it('shows B offline once it stops, while A\'s rows still render', async () => {
    // Its bridges first: a bridge that finds no hub starts one again.
    await edB.close();
    const serve = (await b.api('/api/instances')).filter((i) => i.origin === 'serve').map((i) => Number(i.pid));
    for (const pid of serve) process.kill(pid, 'SIGTERM');
    await until('B\'s headless bridges gone', () => serve.every((pid) => { try { process.kill(pid, 0); return false; } catch { return true; } }));
    await b.stopHub();
    await page.locator(`#instances [data-machine="${hostB}"] [data-machine-state="offline"]`).waitFor();
    await page.locator('#fleet [data-machine-state="offline"]').waitFor();
    await page.locator(`#instances li[data-session="${sidB}"]`).waitFor({ state: 'detached' });
    await page.locator(`#instances li[data-session="${sidA}"]`).waitFor();
    await looksRight(page, 'fleet-offline', { fullPage: true, console: CUT });
    // Forgotten here, B leaves nothing of its own behind: not its key, not its kept home.
    const kept = () => page.evaluate(() => Object.keys(localStorage).filter((k) => k.startsWith('zcode-acp.machineHome.')));
    assert.equal((await kept()).length, 1, 'B\'s last home was kept');
    await page.locator('#fleet .machine-block button', { hasText: 'Forget' }).click();
    await page.locator('#fleet .machine-block').waitFor({ state: 'detached' });
    assert.deepEqual(await kept(), []);
  });
});
