// `scripts/bench-continuity`, the browser part (not a test: the suite runs only *.test.mjs).
//
// 1. The real web client in a phone-size Chromium follows a session through a proxy that cuts
//    the line, stalls it (open, nothing moving) or answers a tunnel's 502 page at random while
//    the demo agent streams long turns back to back (`BENCH_WEB_EVENTS`, default 50). After
//    each event: the time from the line coming back until the page shows what the agent had
//    streamed at that moment, then the rendered transcript against a fresh load's (another
//    page, straight to the hub): chunks missing or shown twice.
// 2. The installed app's start on a dead link (`BENCH_SHELL_RUNS`, default 20 each): the app
//    installed from the hub (its service worker), then the network made dead, by Chromium's
//    network conditions (offline) and by a link that accepts and never answers; reload → the
//    shell's top bar visible, and the page's own first contentful paint.
//
// Prints Markdown; `BENCH_ONLY=web` or `shell` runs one part.

import net from 'node:net';
import { Stack, launchBrowser, until, WAIT } from './harness.mjs';

const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };
const EVENTS = Number(process.env.BENCH_WEB_EVENTS || 50);
const SHELL_RUNS = Number(process.env.BENCH_SHELL_RUNS || 20);
const ONLY = process.env.BENCH_ONLY || '';
let seed = Number(process.env.BENCH_SEED || Date.now()) >>> 0 || 1;
const rand = () => {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 2 ** 32;
};
const between = (lo, hi) => Math.round(lo + rand() * (hi - lo));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A proxy in front of the hub: `set('cut')` drops open connections and refuses new ones,
 * `set('stall')` freezes open ones for good and leaves new ones unanswered, `set('502')` drops
 * open ones and answers new ones a tunnel's 502 page, `set('up')` lets new ones pass.
 */
async function chaosProxy(target) {
  const p = { mode: 'up', pairs: new Set() };
  const page = '<!doctype html><html><body><h1>Error 502</h1><p>Bad gateway</p></body></html>';
  const server = net.createServer((client) => {
    client.on('error', () => {});
    if (p.mode === 'cut') return client.destroy();
    if (p.mode === 'stall') return client.on('data', () => {});
    if (p.mode === '502') {
      let head = '';
      client.on('data', (b) => {
        head += b;
        if (head.includes('\r\n\r\n')) {
          client.end(`HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: ${page.length}\r\nConnection: close\r\n\r\n${page}`);
        }
      });
      return;
    }
    const upstream = net.connect(target, '127.0.0.1');
    const pair = { client, upstream, stalled: false };
    p.pairs.add(pair);
    const end = () => { p.pairs.delete(pair); client.destroy(); upstream.destroy(); };
    client.on('data', (b) => { if (!pair.stalled) upstream.write(b); });
    upstream.on('data', (b) => { if (!pair.stalled) client.write(b); });
    for (const s of [client, upstream]) { s.on('error', end); s.on('close', end); }
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  p.base = `http://127.0.0.1:${server.address().port}`;
  p.set = (mode) => {
    p.mode = mode;
    for (const pair of p.pairs) {
      if (mode === 'cut' || mode === '502') { pair.client.destroy(); pair.upstream.destroy(); }
      if (mode === 'stall') pair.stalled = true;
    }
    if (mode === 'cut' || mode === '502') p.pairs.clear();
  };
  p.close = () => { p.set('cut'); return new Promise((r) => server.close(r)); };
  return p;
}

/** The transcript as its messages' texts, in order (as tests/web/continuity.test.mjs). */
function structure(page) {
  return page.$$eval('#transcript > .msg', (nodes) => nodes.map((n) => {
    const c = n.classList;
    const norm = (s) => (s || '').replace(/\s+/g, ' ').trim();
    if (c.contains('user')) return `user ${norm(n.querySelector('.plain')?.textContent)}`;
    if (c.contains('agent')) return `agent ${norm(n.querySelector('.md')?.textContent)}`;
    if (c.contains('thought')) return `thought ${norm(n.querySelector('.md')?.textContent)}`;
    return n.className;
  }));
}

const ticks = (s) => s.match(/tick \d+/g) || [];

/**
 * Compares the live page's transcript with a fresh load's: aligned on the fresh one's first
 * user message (each turn's prompt names its number), every message equal but the last one
 * both have (it may still be streaming: one a prefix of the other). Returns {lost, duplicated,
 * ok} in chunks (a tick), or ok false when they cannot be aligned.
 */
function compare(live, fresh) {
  const u = fresh.findIndex((m) => m.startsWith('user '));
  const j = u < 0 ? -1 : live.indexOf(fresh[u]);
  if (j < 0) return { ok: false, lost: 0, duplicated: 0, why: 'no common prompt' };
  const n = Math.min(fresh.length - u, live.length - j);
  let lost = 0; let duplicated = 0; let ok = true;
  for (let i = 0; i < n; i++) {
    const f = fresh[u + i]; const l = live[j + i];
    if (f === l) continue;
    if (i === n - 1 && (f.startsWith(l) || l.startsWith(f))) continue;
    ok = false;
    const want = new Map();
    for (const t of ticks(f)) want.set(t, (want.get(t) || 0) + 1);
    for (const t of ticks(l)) want.set(t, (want.get(t) || 0) - 1);
    for (const v of want.values()) { if (v > 0) lost += v; else duplicated -= v; }
    if (!ticks(f).length && !ticks(l).length) lost += 1;
  }
  return { ok, lost, duplicated };
}

function pcts(v) {
  if (!v.length) return '–';
  const s = [...v].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.floor(s.length * q))];
  return `${Math.round(at(0.5))} ms / ${Math.round(at(0.95))} ms / ${Math.round(s[s.length - 1])} ms (n=${s.length})`;
}

async function phone(browser, stack) {
  const context = await browser.newContext(PHONE);
  context.setDefaultTimeout(WAIT);
  await context.addInitScript(([t]) => {
    if (!localStorage.getItem('zcode-acp.token')) localStorage.setItem('zcode-acp.token', t);
    // A stalled line is noticed in 1 s instead of 10 (the browser tests' setting).
    localStorage.setItem('zcode-acp.test.pingTimeoutMs', '1000');
  }, [stack.token]);
  return { context, page: await context.newPage() };
}

async function openSession(page, base, ed, sid, cwd) {
  await page.goto(`${base}/s/${encodeURIComponent(ed.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(cwd)}`);
  await page.locator('#prompt').waitFor();
  await until('the session to be attached', async () => !(await page.locator('#send').isDisabled()));
}

/**
 * What the agent had streamed when the line came back: its turn (the thought names the prompt)
 * and the text of that turn's last agent message so far.
 */
function streamedSoFar(ed, sid) {
  let id = null; let text = ''; let turn = 0;
  for (const n of ed.notes) {
    const u = n.params?.update;
    if (n.params?.sessionId !== sid) continue;
    if (u?.sessionUpdate === 'agent_thought_chunk') {
      const m = /turn (\d+)/.exec(u.content?.text || '');
      if (m && Number(m[1]) !== turn) { turn = Number(m[1]); id = null; text = ''; }
    }
    if (u?.sessionUpdate !== 'agent_message_chunk') continue;
    if (u.messageId !== id) { id = u.messageId; text = ''; }
    text += u.content?.text || '';
  }
  return { turn, text: text.replace(/\s+/g, ' ').trim() };
}

async function webPart(browser, stack) {
  const ed = await stack.bridge();
  const sid = await ed.newSession(stack.project);
  const proxy = await chaosProxy(stack.port);
  const { context, page } = await phone(browser, stack);
  await openSession(page, proxy.base, ed, sid, stack.project);
  let turn = 0; let running = true;
  const turns = (async () => {
    while (running) {
      turn += 1;
      await ed.prompt(sid, `long stream please, turn ${turn}`);
    }
  })();
  await until('the first turn to stream', () => ed.notes.some((n) => n.params?.update?.sessionUpdate === 'agent_message_chunk'));
  const caught = { all: [], cut: [], stall: [], '502': [] };
  let lost = 0; let duplicated = 0; const unaligned = []; let missed = 0;
  const started = Date.now();
  for (let e = 0; e < EVENTS; e++) {
    await sleep(between(300, 1200));
    const kind = ['cut', 'stall', '502'][Math.floor(rand() * 3)];
    proxy.set(kind);
    await sleep(between(100, 1500));
    proxy.set('up');
    const back = Date.now();
    const want = streamedSoFar(ed, sid);
    try {
      // Caught up: after this turn's prompt, an agent message that shows at least what had
      // streamed (a turn's ticks repeat every turn: the prompt names the turn).
      await page.waitForFunction(({ prompt, text }) => {
        const msgs = [...document.querySelectorAll('#transcript > .msg')];
        const at = msgs.findIndex((m) => m.classList.contains('user') && (m.querySelector('.plain')?.textContent || '').trim() === prompt);
        if (at < 0) return false;
        return !text || msgs.slice(at).some((m) => m.classList.contains('agent')
          && (m.querySelector('.md')?.textContent || '').replace(/\s+/g, ' ').trim().startsWith(text));
      }, { prompt: `long stream please, turn ${want.turn}`, text: want.text }, { polling: 10, timeout: WAIT });
      const ms = Date.now() - back;
      caught.all.push(ms);
      caught[kind].push(ms);
    } catch {
      missed += 1;
    }
    // The rendered transcript against a fresh load straight from the hub.
    const fresh = await phone(browser, stack);
    await openSession(fresh.page, stack.base, ed, sid, stack.project);
    let r = null;
    for (let tries = 0; tries < 5; tries++) {
      await fresh.page.locator('#transcript .msg.user').first().waitFor();
      r = compare(await structure(page), await structure(fresh.page));
      if (r.ok) break;
      await sleep(300);
    }
    if (!r.ok) unaligned.push({ event: e, kind, ...r });
    lost += r.lost; duplicated += r.duplicated;
    await fresh.context.close();
    if (e % 10 === 0) process.stderr.write(`bench-continuity web: event ${e}/${EVENTS} (${Math.round((Date.now() - started) / 1000)} s)\n`);
  }
  running = false;
  await turns.catch(() => {});
  await context.close();
  await proxy.close();
  const took = Math.round((Date.now() - started) / 1000);
  console.log(`\n### The web client in Chromium (390×844), ${EVENTS} events in ${took} s, ${turn} long turns\n`);
  console.log('| | the page |');
  console.log('| --- | ---: |');
  console.log(`| **updates lost** (chunks a fresh load shows that the page does not) | **${lost}** |`);
  console.log(`| **updates duplicated** | **${duplicated}** |`);
  console.log(`| events after which the page differed from a fresh load | ${unaligned.length} |`);
  console.log(`| events not caught up within 20 s | ${missed} |`);
  for (const k of ['all', 'cut', 'stall', '502']) console.log(`| line back → page caught up, p50 / p95 / max (${k}) | ${pcts(caught[k])} |`);
  for (const u of unaligned.slice(0, 5)) process.stderr.write(`bench-continuity web: differed after event ${u.event} (${u.kind}): ${JSON.stringify(u)}\n`);
}

async function shellPart(browser, stack) {
  const proxy = await chaosProxy(stack.port);
  const { context, page } = await phone(browser, stack);
  await page.goto(`${proxy.base}/`);
  await until('the service worker to control the page', () => page.evaluate(() => Boolean(navigator.serviceWorker.controller)));
  await page.locator('#instances h2').first().waitFor();
  await page.reload();
  await page.locator('#instances h2').first().waitFor();
  const rows = [];
  for (const [name, dead, alive] of [
    ['offline (Chromium network conditions)', () => context.setOffline(true), () => context.setOffline(false)],
    ['a link that accepts and never answers', () => proxy.set('stall'), () => proxy.set('up')],
  ]) {
    const wall = []; const fcp = [];
    for (let i = 0; i < SHELL_RUNS; i++) {
      await dead();
      const t0 = Date.now();
      await page.reload({ waitUntil: 'commit' }).catch(() => {});
      await page.locator('#bar').waitFor({ state: 'visible' });
      wall.push(Date.now() - t0);
      const paint = await page.evaluate(() => new Promise((resolve) => {
        const got = () => performance.getEntriesByName('first-contentful-paint')[0]?.startTime;
        if (got() !== undefined) return resolve(got());
        new PerformanceObserver(() => resolve(got())).observe({ type: 'paint', buffered: true });
        setTimeout(() => resolve(null), 5000);
      }));
      if (paint !== null) fcp.push(paint);
      await alive();
      await page.reload();
      await page.locator('#instances h2').first().waitFor();
    }
    rows.push([name, wall, fcp]);
  }
  await context.close();
  await proxy.close();
  console.log(`\n### The installed app started on a dead link, ${SHELL_RUNS} runs each\n`);
  console.log('| the link | reload → top bar visible, p50 / p95 / max | first contentful paint, p50 / p95 / max |');
  console.log('| --- | ---: | ---: |');
  for (const [name, wall, fcp] of rows) console.log(`| ${name} | ${pcts(wall)} | ${pcts(fcp)} |`);
}

const [stack, browser] = await Promise.all([Stack.start(), launchBrowser({ full: true })]);
try {
  if (!ONLY || ONLY.includes('web')) await webPart(browser, stack);
  if (!ONLY || ONLY.includes('shell')) await shellPart(browser, stack);
} finally {
  await browser.close();
  await stack.stop();
}
