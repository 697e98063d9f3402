// `scripts/bench-web`, the browser part (not a test: the suite runs only *.test.mjs): the web
// client of ZCODE_ACP_BIN on a phone (390×844 Chromium, CPU throttled 4×, DevTools' "Fast 3G":
// 562.5 ms latency, 180 kB/s down, 84 kB/s up), without a service worker (plain http on a
// LAN gets none; on https the worker serves a repeat start from its own cache either way).
// Measures, from a fresh profile: the first load of the home screen (requests, bytes on the
// wire: CDP's encodedDataLength, headers included; time until the live sessions show), a
// repeat start, a session's first rendered message (opened from home, and from a cold
// profile, as a notification's link does), a 2000-line code block in an agent's message, the
// Changes view of a repository with 20 changed files (the list; one file's 2000-line diff: time
// to its last line, then frame times while it is scrolled end to end), and the home screen's
// requests per minute while idle (BENCH_IDLE_S seconds counted, default 30, scaled to a minute).
// A client without the Changes view (an older base) gets null for those rows.
// Prints one JSON object.

import { Stack, launchBrowser } from './harness.mjs';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * A git repository at `dir` with 20 changed files: `big.rs` with 1000 lines each replaced (a
 * 2000-line diff) and 19 files with 5 changed lines each.
 */
function reviewRepo(dir) {
  fs.mkdirSync(dir, { recursive: true });
  const git = (...a) => execFileSync('git', ['-c', 'user.name=bench', '-c', 'user.email=bench@example.invalid', ...a], { cwd: dir, stdio: 'ignore' });
  git('init', '-q');
  const lines = (n, tag) => Array.from({ length: n }, (_, i) => `    let value_${i} = compute(${i}, "${tag}"); // ${tag} line ${i}`).join('\n') + '\n';
  fs.writeFileSync(path.join(dir, 'big.rs'), lines(1000, 'old'));
  for (let f = 1; f < 20; f++) fs.writeFileSync(path.join(dir, `f${f}.rs`), lines(60, 'old'));
  git('add', '-A');
  git('commit', '-q', '-m', 'base');
  fs.writeFileSync(path.join(dir, 'big.rs'), lines(1000, 'new'));
  for (let f = 1; f < 20; f++) {
    const l = lines(60, 'old').split('\n');
    for (let i = 10; i < 15; i++) l[i] = l[i].replace('old', 'new');
    fs.writeFileSync(path.join(dir, `f${f}.rs`), l.join('\n'));
  }
}

/** Scrolls the page's scroller end to end a step per frame; frame times (ms) p50/p95, frames over 50 ms. */
function scrollFrames() {
  const scrollers = [document.scrollingElement, ...document.querySelectorAll('*')]
    .filter((e) => e && e.scrollHeight > e.clientHeight + 200 && (e === document.scrollingElement || /auto|scroll/.test(getComputedStyle(e).overflowY)));
  const el = scrollers.sort((a, b) => b.scrollHeight - a.scrollHeight)[0];
  if (!el) return null;
  const end = el.scrollHeight - el.clientHeight;
  const step = Math.max(20, end / 400);
  const frames = [];
  return new Promise((resolve) => {
    let last = performance.now();
    const tick = (t) => {
      frames.push(t - last);
      last = t;
      if (el.scrollTop >= end - 1 || frames.length > 5000) {
        frames.shift();
        frames.sort((x, y) => x - y);
        const at = (q) => Math.round(frames[Math.min(frames.length - 1, Math.floor(frames.length * q))]);
        resolve({ frames: frames.length, p50: at(0.5), p95: at(0.95), long: frames.filter((f) => f > 50).length });
        return;
      }
      el.scrollTop = Math.min(end, el.scrollTop + step);
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
}

const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };
const FAST_3G = { offline: false, latency: 562.5, downloadThroughput: 180000, uploadThroughput: 84375 };
const IDLE_S = Number(process.env.BENCH_IDLE_S || 30);
const LINES = 2000;

/** An ACP agent on stdio that answers each prompt with one message: a 2000-line code block. */
const BIG_AGENT = `
const rl = require('readline').createInterface({ input: process.stdin });
const send = (m) => process.stdout.write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\\n');
const code = Array.from({ length: ${LINES} }, (_, i) => '    let line_' + (i + 1) + ' = compute(' + i + ', "value") + 1; // line ' + (i + 1)).join('\\n');
let n = 0;
rl.on('line', (l) => {
  const m = JSON.parse(l);
  if (m.method === 'initialize') send({ id: m.id, result: { protocolVersion: 1, agentCapabilities: {}, authMethods: [] } });
  else if (m.method === 'session/new') send({ id: m.id, result: { sessionId: 'bench-' + (++n) } });
  else if (m.method === 'session/prompt') {
    send({ method: 'session/update', params: { sessionId: m.params.sessionId, update: { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'The code:\\n\\n\\u0060\\u0060\\u0060rust\\n' + code + '\\n\\u0060\\u0060\\u0060\\n' } } } });
    send({ id: m.id, result: { stopReason: 'end_turn' } });
  } else if (m.id !== undefined && m.method) send({ id: m.id, error: { code: -32601, message: 'not here' } });
});`;

/** A phone page with throttled CPU and network, and its request log. */
async function phone(browser, stack) {
  const context = await browser.newContext({ ...PHONE, serviceWorkers: 'block' });
  context.setDefaultTimeout(120000);
  await context.addInitScript((t) => localStorage.setItem('zcode-acp.token', t), stack.token);
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', FAST_3G);
  await cdp.send('Emulation.setCPUThrottlingRate', { rate: 4 });
  const log = [];
  const byId = new Map();
  cdp.on('Network.requestWillBeSent', (e) => {
    const r = { path: new URL(e.request.url).pathname, bytes: 0, cached: false };
    byId.set(e.requestId, r);
    log.push(r);
  });
  cdp.on('Network.requestServedFromCache', (e) => { if (byId.has(e.requestId)) byId.get(e.requestId).cached = true; });
  cdp.on('Network.responseReceived', (e) => { if (byId.has(e.requestId) && (e.response.fromDiskCache || e.response.fromServiceWorker)) byId.get(e.requestId).cached = true; });
  cdp.on('Network.loadingFinished', (e) => { if (byId.has(e.requestId)) byId.get(e.requestId).bytes = e.encodedDataLength; });
  return { context, page, log };
}

/** Loads `url` and waits for `selector`; the time it took and what went over the network. */
async function load(p, url, selector) {
  p.log.splice(0);
  const t0 = Date.now();
  await p.page.goto(url);
  await p.page.locator(selector).first().waitFor();
  const ms = Date.now() - t0;
  await p.page.waitForLoadState('networkidle').catch(() => {});
  const net = p.log.filter((r) => !r.cached);
  return { ms, requests: net.length, bytes: net.reduce((n, r) => n + r.bytes, 0), assets: net.filter((r) => !r.path.startsWith('/api/')).length };
}

const stack = await Stack.start();
const browser = await launchBrowser({ full: true }); // the full browser, as a phone runs
try {
  const ed = await stack.bridge();
  const sid = await ed.newSession(stack.project);
  await ed.prompt(sid, 'hello from the editor');
  const big = await stack.bridge(['node', '-e', BIG_AGENT]);
  const bigSid = await big.newSession(stack.project);
  await big.prompt(bigSid, 'show me the code');
  const session = (id, s) => `${stack.base}/s/${encodeURIComponent(id)}/${encodeURIComponent(s)}?cwd=${encodeURIComponent(stack.project)}`;
  const out = {};

  const a = await phone(browser, stack);
  out.first = await load(a, `${stack.base}/`, `[data-instance="${ed.id}"]`);
  out.repeat = await load(a, `${stack.base}/`, `[data-instance="${ed.id}"]`);
  out.sessionWarm = await load(a, session(ed.id, sid), '#transcript .msg.agent');
  out.diff = await load(a, session(big.id, bigSid), `#transcript pre code:has-text("line_${LINES} ")`);
  // The Changes view (issue 33): 20 files, one of them a 2000-line diff.
  const repo = path.join(stack.project, 'review');
  reviewRepo(repo);
  const rsid = await ed.newSession(repo);
  const changes = `${stack.base}/c/${encodeURIComponent(ed.id)}/${encodeURIComponent(rsid)}?cwd=${encodeURIComponent(repo)}`;
  try {
    out.changesList = await load(a, changes, '.changes-files a >> nth=19');
    out.changesDiff = await load(a, `${changes}&file=big.rs`, '#diff-view .dl >> nth=1999');
    out.changesScroll = await a.page.evaluate(scrollFrames);
  } catch (e) {
    console.error(`bench-web: no Changes view measured: ${e.message.split('\n')[0]}`);
    out.changesList = out.changesDiff = out.changesScroll = null;
  }
  // Idle on home: every request in BENCH_IDLE_S seconds, per minute.
  await load(a, `${stack.base}/`, `[data-instance="${ed.id}"]`);
  a.log.splice(0);
  await new Promise((r) => setTimeout(r, IDLE_S * 1000));
  out.idlePerMinute = Math.round((a.log.length * 60) / IDLE_S);
  await a.context.close();

  const b = await phone(browser, stack);
  out.sessionCold = await load(b, session(ed.id, sid), '#transcript .msg.agent');
  await b.context.close();
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
  await stack.stop();
}
