// The web client's speed on the wire (issue 33, point 11), at phone size: served gzipped when
// the browser accepts it (identity otherwise), every module preloaded from the page, assets
// under this build's URL cacheable for good; a first visit transfers at most 70 KB (CDP's
// encodedDataLength: headers and the API's answers included) and a repeat start asks for no
// unchanged asset; the home screen reads its live state from one route, not three polls.
// The page runs without its service worker here (as over plain http on a LAN, where browsers
// give it none): what is measured is the HTTP cache's part; pwa.test.mjs covers the worker.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import zlib from 'node:zlib';
import { ROOT, startStack, stopStack, until, settledHome, watchConsole } from './harness.mjs';

const PHONE = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true };
const BUDGET = 70 * 1024;

/** `GET path` on the hub with `headers`: { status, headers, body (Buffer) }, nothing decoded. */
function raw(base, p, headers = {}) {
  return new Promise((resolve, reject) => {
    http.get(`${base}${p}`, { headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    }).on('error', reject);
  });
}

/** Every request `page` makes over the network (CDP), as { url, path, status, bytes, cached }. */
async function recordNetwork(context, page) {
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  const seen = new Map();
  const log = [];
  cdp.on('Network.requestWillBeSent', (e) => {
    const r = { url: e.request.url, path: new URL(e.request.url).pathname, status: 0, bytes: 0, cached: false };
    seen.set(e.requestId, r);
    log.push(r);
  });
  cdp.on('Network.requestServedFromCache', (e) => { if (seen.has(e.requestId)) seen.get(e.requestId).cached = true; });
  cdp.on('Network.responseReceived', (e) => {
    const r = seen.get(e.requestId);
    if (!r) return;
    r.status = e.response.status;
    if (e.response.fromDiskCache || e.response.fromServiceWorker || e.response.fromPrefetchCache) r.cached = true;
  });
  cdp.on('Network.loadingFinished', (e) => { if (seen.has(e.requestId)) seen.get(e.requestId).bytes = e.encodedDataLength; });
  return { log, cdp };
}

describe('web client speed (compressed, preloaded, cached for good, one home poll)', () => {
  let stack; let browser; let context; let page; let errors; let net;

  before(async () => {
    [stack, browser] = await startStack();
    const ed = await stack.bridge();
    await ed.newSession(stack.project);
    context = await browser.newContext({ ...PHONE, serviceWorkers: 'block' });
    context.setDefaultTimeout(20000);
    await context.addInitScript((t) => localStorage.setItem('zcode-acp.token', t), stack.token);
    page = await context.newPage();
    errors = watchConsole(page);
    net = await recordNetwork(context, page);
  });

  after(() => stopStack(stack, browser));

  it('serves gzip when accepted and identity otherwise, and versioned assets for good', async () => {
    const page0 = await raw(stack.base, '/', { 'Accept-Encoding': 'gzip, deflate, br' });
    assert.equal(page0.headers['content-encoding'], 'gzip');
    assert.equal(page0.headers['cache-control'], 'no-cache', 'the page is revalidated: a new build is seen at once');
    const html = zlib.gunzipSync(page0.body).toString('utf8');
    const plain = await raw(stack.base, '/');
    assert.equal(plain.headers['content-encoding'], undefined, 'identity when gzip is not accepted');
    assert.equal(plain.body.toString('utf8'), html);
    const preloads = [...html.matchAll(/<link rel="modulepreload" href="([^"]+)">/g)].map((m) => m[1]);
    // Every module of hub/web/js (a file added there needs no one to list it): preloaded, or a
    // screen loaded when first shown, named with the modules it adds.
    const lazy = new Map(/<meta name="zcode-lazy" content="([^"]*)">/.exec(html)[1].split(';').map((e) => e.split('=')));
    for (const f of fs.readdirSync(path.join(ROOT, 'hub/web/js')).filter((n) => n.endsWith('.js'))) {
      const pre = preloads.some((u) => u.endsWith(`/js/${f}`));
      assert.ok(pre !== lazy.has(f), `js/${f}: preloaded ${pre}, a screen loaded when shown ${lazy.has(f)}`);
    }
    assert.ok(preloads.some((u) => u.endsWith('/js/home.js')), 'the home screen is preloaded');
    for (const u of preloads) {
      const gz = await raw(stack.base, u, { 'Accept-Encoding': 'gzip' });
      assert.equal(gz.status, 200, u);
      assert.equal(gz.headers['content-encoding'], 'gzip', u);
      assert.equal(gz.headers['cache-control'], 'public, max-age=31536000, immutable', u);
      assert.equal(gz.headers.vary, 'Accept-Encoding', u);
      const id = await raw(stack.base, u, { 'Accept-Encoding': 'identity' });
      assert.equal(id.headers['content-encoding'], undefined, u);
      assert.ok(id.body.length > gz.body.length, `${u}: gzip is smaller`);
    }
  });

  it('loads the home screen in at most 70 KB, and a repeat start asks for no unchanged asset', async () => {
    await settledHome(page, stack.base);
    await page.locator('[data-instance]').first().waitFor();
    const first = net.log.splice(0);
    const bytes = first.reduce((n, r) => n + r.bytes, 0);
    console.log(`first load: ${first.length} requests, ${bytes} bytes (${first.filter((r) => !r.path.startsWith('/api/')).length} for the client)`);
    assert.ok(bytes <= BUDGET, `the first load transferred ${bytes} bytes (budget ${BUDGET}):\n${first.map((r) => `${r.bytes} ${r.path}`).join('\n')}`);

    await settledHome(page, stack.base);
    await page.locator('[data-instance]').first().waitFor();
    const again = net.log.splice(0).filter((r) => !r.path.startsWith('/api/') && r.path !== '/');
    const asked = again.filter((r) => !r.cached);
    assert.deepEqual(asked.map((r) => `${r.status} ${r.path}`), [], 'a repeat start asked the hub for unchanged assets');
    assert.ok(again.length > 10, 'the assets were loaded (from the cache)');
    assert.deepEqual(errors, []);
  });

  it('reads the home screen\'s live state from one route, not three polls', async () => {
    // A short poll period (test-only knob), then five polls counted: none to the three routes.
    await page.evaluate(() => localStorage.setItem('zcode-acp.test.homePollMs', '150'));
    const counts = new Map();
    const onRequest = (r) => {
      const p = new URL(r.url()).pathname;
      counts.set(p, (counts.get(p) || 0) + 1);
    };
    await page.reload();
    await page.locator('[data-instance]').first().waitFor();
    page.on('request', onRequest);
    await until('five reads of /api/home', () => (counts.get('/api/home') || 0) >= 5);
    page.off('request', onRequest);
    for (const p of ['/api/instances', '/api/attention', '/api/workflow-overview']) {
      assert.equal(counts.get(p) || 0, 0, `the home screen polled ${p} (${[...counts].join(' ')})`);
    }
    await page.evaluate(() => localStorage.removeItem('zcode-acp.test.homePollMs'));
    assert.deepEqual(errors, []);
  });
});
