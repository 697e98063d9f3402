// One phone, several machines (issue 34): two hubs on this machine, each with its own home
// (so its own hostId, devices and sessions), and one 390×844 phone whose page is served by
// hub A. The page pairs with B by B's pairing link (redeemed cross-origin at B), shows one
// home with both machines' sessions each labelled by its machine, opens B's session from A's
// page and streams a prompt's answer over B's relay, answers a permission pending on B from
// A's home, and shows B offline, without holding up A's rows, once B stops. A device
// credential of one hub is refused by the other.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import os from 'node:os';
import { Stack, launchBrowser, stopStack, until } from './harness.mjs';
import { phonePage, looksRight } from './look.mjs';

const CUT = [/^Failed to load resource: (net::ERR_\w+|the server responded with a status of \d{3} )/, /^WebSocket connection to '.*' failed: /];

describe('several machines: one page, two hubs', () => {
  let a; let b; let browser; let page;
  let edA; let edB; let sidA; let sidB;

  /** A full-access pairing link of `stack` (as `zcode-acp pair` prints it). */
  const pairingLink = async (stack) => (await stack.api('/api/pairing', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ scope: 'full' }),
  })).url;

  before(async () => {
    [a, b, browser] = await Promise.all([Stack.start(), Stack.start(), launchBrowser()]);
    [edA, edB] = await Promise.all([a.bridge(), b.bridge()]);
    [sidA, sidB] = await Promise.all([edA.newSession(a.project), edB.newSession(b.project)]);
    await Promise.all([edA.prompt(sidA, 'hello machine A'), edB.prompt(sidB, 'hello machine B')]);
    page = await phonePage(browser, 'light');
    // A short per-machine timeout: a stopped machine is said offline soon (a long one while a
    // test holds a machine's answer on purpose).
    await page.context().addInitScript(() => localStorage.setItem('zcode-acp.test.machineTimeoutMs', sessionStorage.getItem('fleet-test.patient') ? '60000' : '1500'));
  });

  after(async () => {
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
    const row = page.locator(`#fleet li[data-session="${sidB}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), /machine b/i);
    assert.match(await page.locator('#fleet [data-machine-state]').innerText(), /online/);
    // A's own rows are there all the same.
    await page.locator(`#instances li[data-session="${sidA}"]`).waitFor();
    const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('zcode-acp.machines')));
    const versionB = await b.api('/api/version');
    const hostB = versionB.hostId;
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
      await block.locator(`li[data-session="${sidB}"]`).waitFor();
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
      await block.locator(`li[data-session="${sidB}"]`).waitFor();
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
    await page.locator(`#fleet li[data-session="${sidB}"] a`).click();
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
    await page.locator(`#fleet li[data-session="${sidB}"]`).waitFor();
    await page.locator(`#instances li[data-session="${sidA}"]`).waitFor();
  });

  it('answers a permission pending on B from A\'s home', async () => {
    const turn = edB.prompt(sidB, 'permission from the other machine');
    await edB.request((r) => r.method === 'session/request_permission');
    const row = page.locator(`#fleet .fleet-waiting li[data-inbox-session="${sidB}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), /machine b[\s\S]*asks permission/i);
    await looksRight(page, 'fleet-waiting', { fullPage: true });
    await row.locator('button[data-option="allow"]').click();
    assert.equal((await turn).stopReason, 'end_turn');
    assert.ok(edB.notes.some((n) => JSON.stringify(n).includes('Permission granted (allow)')), 'B\'s agent got the Allow');
    await row.waitFor({ state: 'detached' });
  });

  it('shows B offline once it stops, while A\'s rows still render', async () => {
    // Its bridge first: a bridge that finds no hub starts one again.
    await edB.close();
    await b.stopHub();
    await page.locator('#fleet [data-machine-state="offline"]').waitFor();
    await page.locator(`#fleet li[data-session="${sidB}"]`).waitFor({ state: 'detached' });
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
