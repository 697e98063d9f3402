// Continuity on a phone's line (issue 31), with a proxy the test controls between a phone-size
// chromium and the hub: after a cut, a stall or a lost message the page resumes by number and
// shows what a fresh load shows (a message streamed meanwhile whole, nothing twice), or, when
// the bridge cannot resume, replaces the transcript keeping the reader's place; Stop stays
// while the turn runs; a stalled line (open, nothing moving) is noticed and the client
// reconnects; the installed app opens on its cached shell when the link answers a tunnel's 502
// page or never answers at all.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { Stack, launchBrowser, watchConsole, until, SHOTS, WAIT } from './harness.mjs';
import { LineProxy } from './proxy.mjs';

const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };
/** The client's ping timeout, shortened (a test-only knob: localStorage). */
const PING_MS = '1000';
/** The longest wait between reconnect attempts (5 s by default; a test-only knob too). */
const BACKOFF_MS = '200';
/**
 * How long the client's health check waits before it counts the hub as down (5 s by default;
 * a test-only knob too): after a stall it rides a stalled keep-alive connection to its end.
 */
const HEALTH_MS = '1500';
/**
 * The demo agent's `long` turn here: 300 chunks 10 ms apart (test knobs; 600 and 20 ms by
 * default), long enough to cut the line in its middle and have it go on without the page.
 */
const LONG = { chunks: 300, ms: 10 };
const LAST_TICK = `tick ${LONG.chunks} `;

/** The transcript as its messages' texts, in order (what "the same" means). */
function structure(page) {
  return page.$$eval('#transcript > .msg', (nodes) => nodes.map((n) => {
    const c = n.classList;
    if (c.contains('user')) return `user ${(n.querySelector('.plain')?.textContent || '').trim()}`;
    if (c.contains('agent')) return `agent ${(n.querySelector('.md')?.textContent || '').trim()}`;
    if (c.contains('thought')) return `thought ${(n.querySelector('.md')?.textContent || '').trim()}`;
    return n.className;
  }));
}

/**
 * The page's ACP frames (every WebSocket to `/acp`), as parsed JSON-RPC messages in arrival
 * order, each with `dir` ('sent' or 'recv') and `ws` (which connection: 1, 2, …).
 */
function recordFrames(page) {
  const frames = [];
  let n = 0;
  page.on('websocket', (ws) => {
    if (!ws.url().includes('/acp')) return;
    const at = ++n;
    const push = (dir) => (f) => {
      try { frames.push({ dir, ws: at, msg: JSON.parse(f.payload) }); } catch { /* not JSON */ }
    };
    ws.on('framesent', push('sent'));
    ws.on('framereceived', push('recv'));
  });
  return frames;
}

/**
 * The `session/load`s of `sid` the page sent that asked to resume by number, each with the
 * `replayMeta` of its answer (null while unanswered).
 */
function resumes(frames, sid) {
  return frames.filter((f) => f.dir === 'sent' && f.msg.method === 'session/load' && f.msg.params?.sessionId === sid
    && f.msg.params?._meta?.zcode?.afterSeq !== undefined).map((f) => {
    const answer = frames.find((a) => a.dir === 'recv' && a.ws === f.ws && a.msg.id === f.msg.id && a.msg.method === undefined);
    return { ...f.msg.params._meta.zcode, ws: f.ws, meta: answer ? answer.msg.result?.replayMeta || answer.msg.error : null };
  });
}

/** Whether the editor (the bridge's stdio) has seen the agent stream chunk `text` in `sid` (`times` times). */
function streamed(ed, sid, text, times = 1) {
  return ed.notes.filter((n) => n.params?.sessionId === sid && n.params?.update?.content?.text === text).length >= times;
}

/**
 * A tunnel in front of the hub (plain HTTP, WebSockets passed through) that can answer its own
 * 502 page, or accept and never answer (`mode`: up | 502 | hang). `asked` lists the paths it
 * was asked for while not up.
 */
async function tunnel(port) {
  const t = { mode: 'up', asked: [], held: new Set() };
  const server = http.createServer((req, res) => {
    if (t.mode !== 'up') t.asked.push(new URL(req.url, 'http://x').pathname);
    if (t.mode === '502') {
      res.writeHead(502, { 'Content-Type': 'text/html' });
      res.end('<!doctype html><html><body><h1>Error 502</h1><p>Bad gateway: the origin is down.</p></body></html>');
      return;
    }
    if (t.mode === 'hang') {
      t.held.add(res);
      return;
    }
    const up = http.request({ host: '127.0.0.1', port, path: req.url, method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', () => { res.writeHead(502); res.end(); });
    req.pipe(up);
  });
  server.on('upgrade', (req, socket, head) => {
    if (t.mode !== 'up') return socket.destroy();
    const up = net.connect(port, '127.0.0.1', () => {
      up.write(`${req.method} ${req.url} HTTP/1.1\r\n${Object.entries(req.headers).map(([k, v]) => `${k}: ${v}`).join('\r\n')}\r\n\r\n`);
      up.write(head);
      socket.pipe(up).pipe(socket);
    });
    const end = () => { socket.destroy(); up.destroy(); };
    up.on('error', end);
    socket.on('error', end);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.base = `http://127.0.0.1:${server.address().port}`;
  t.close = () => {
    for (const res of t.held) res.destroy();
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  };
  return t;
}

describe('continuity on a bad line', { timeout: 420000 }, () => {
  let stack; let browser; let ed; let proxy; let phone;

  before(async () => {
    const env = () => ({ ZCODE_ACP_TEST_LONG_CHUNKS: String(LONG.chunks), ZCODE_ACP_TEST_LONG_MS: String(LONG.ms) });
    [stack, browser] = await Promise.all([Stack.start({ env }), launchBrowser()]);
    ed = await stack.bridge();
    proxy = await LineProxy.start(stack.port);
    // One phone for the file, a page per look: a new context (a cold cache, the service worker
    // installed again) costs chromium several times what a page costs. The pages of a test
    // are on the proxy's origin, its fresh loads on the hub's (storage apart), and every test
    // has sessions of its own.
    phone = await browser.newContext(PHONE);
    phone.setDefaultTimeout(WAIT);
    await phone.addInitScript((t) => {
      if (!localStorage.getItem('zcode-acp.token')) localStorage.setItem('zcode-acp.token', t);
    }, stack.token);
    fs.mkdirSync(SHOTS, { recursive: true });
  });

  after(async () => {
    await proxy?.close();
    await browser?.close();
    await stack?.stop();
  });

  /**
   * A new page of the phone (`context`: the phone's) with the token and the shortened ping
   * and health-check timeouts in its storage (`quietMs`: how long a quiet line goes unchecked, when a test wants
   * only its own events to check it), and the reconnect backoff capped at `backoffMs` (''
   * keeps the client's 5 s: the stall tests watch the pill leave "online", which a reconnect
   * every 200 ms made them miss). Close it when done (the phone stays).
   */
  async function phonePage(quietMs = '', backoffMs = BACKOFF_MS) {
    const page = await phone.newPage();
    await page.addInitScript(([ping, quiet, backoff, health]) => {
      localStorage.setItem('zcode-acp.test.pingTimeoutMs', ping);
      localStorage.setItem('zcode-acp.test.healthTimeoutMs', health);
      if (backoff) localStorage.setItem('zcode-acp.test.backoffMs', backoff);
      else localStorage.removeItem('zcode-acp.test.backoffMs');
      if (quiet) localStorage.setItem('zcode-acp.test.quietMs', quiet);
      else localStorage.removeItem('zcode-acp.test.quietMs');
    }, [PING_MS, quietMs, backoffMs, HEALTH_MS]);
    return { context: phone, page, errors: watchConsole(page) };
  }

  async function openSession(page, base, sid) {
    proxy.restore(); // whatever a test that failed left it in
    await page.goto(`${base}/s/${encodeURIComponent(ed.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('#prompt').waitFor();
    await until('the session to be attached', async () => !(await page.locator('#send').isDisabled()));
  }

  it('after a cut the page resumes by number and shows what a fresh load shows, the message streaming at the drop included; Stop stays meanwhile', async () => {
    const sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'before the cut');
    const { page, errors } = await phonePage();
    const frames = recordFrames(page);
    await openSession(page, proxy.base, sid);
    await page.fill('#prompt', 'long stream please');
    await page.click('#send');
    await page.locator('#transcript .msg.agent', { hasText: 'tick 30 ' }).waitFor();

    proxy.cut();
    await page.locator('#conn:not([data-state="open"])').waitFor();
    const stopWhileCut = await page.locator('#cancel').isVisible();
    await page.screenshot({ path: path.join(SHOTS, 'continuity-cut-390.png') });
    // The stream goes on without the page; the line comes back well after.
    await until('the stream to move on', () => streamed(ed, sid, 'tick 150 '));
    proxy.restore();
    await page.locator('#conn[data-state="open"]').waitFor();
    await until('the turn to end', () => streamed(ed, sid, LAST_TICK));
    await page.locator('#cancel').waitFor({ state: 'hidden' });
    await page.locator('#transcript .msg.agent', { hasText: LAST_TICK }).waitFor();
    const live = await structure(page);

    const fresh = await phonePage();
    await openSession(fresh.page, stack.base, sid);
    await fresh.page.locator('#transcript .msg.agent', { hasText: LAST_TICK }).waitFor();
    const loaded = await structure(fresh.page);
    const ticks = (s) => (s.join(' ').match(/tick \d+/g) || []).length;
    assert.equal(ticks(live), ticks(loaded), 'every chunk is shown, none twice');
    assert.deepEqual(live, loaded, 'the page shows what a fresh load shows');
    assert.ok(stopWhileCut, 'Stop stays while the turn runs, connected or not');
    // The reconnect asked for what followed its last number, and got exactly that.
    const asked = resumes(frames, sid);
    assert.ok(asked.length >= 1, `the reconnect's session/load carried afterSeq: ${JSON.stringify(frames.filter((f) => f.msg.method === 'session/load').map((f) => f.msg.params))}`);
    assert.ok(asked[0].afterSeq > 0 && typeof asked[0].epoch === 'string', JSON.stringify(asked[0]));
    assert.equal(asked[0].meta?.resumed, true, `the bridge resumed: ${JSON.stringify(asked[0].meta)}`);
    await page.screenshot({ path: path.join(SHOTS, 'continuity-back-390.png') });
    assert.deepEqual(errors.filter((e) => !/WebSocket|Failed to load resource/.test(e)), []);
    await fresh.page.close();
    await page.close();
  });

  it('a message lost on the live stream (a number skipped) makes the page resume at once; the echo of its own prompt is no loss', async () => {
    const sid = await ed.newSession(stack.project);
    const { page, errors } = await phonePage();
    const frames = recordFrames(page);
    await openSession(page, proxy.base, sid);
    proxy.loseOnce((text) => text.includes('"tick 100 "'));
    await page.fill('#prompt', 'long stream please');
    await page.click('#send');
    await until('the turn to end', () => streamed(ed, sid, LAST_TICK));
    await page.locator('#cancel').waitFor({ state: 'hidden' });
    await page.locator('#transcript .msg.agent', { hasText: LAST_TICK }).waitFor();
    assert.equal(proxy.lose, null, 'the proxy lost a message on its way');
    const asked = resumes(frames, sid);
    assert.equal(asked.length, 1, `one resume, for the lost message: ${JSON.stringify(asked)}`);
    assert.equal(asked[0].ws, 1, 'on the same connection');
    assert.equal(asked[0].meta?.resumed, true, JSON.stringify(asked[0].meta));
    const live = await structure(page);
    const fresh = await phonePage();
    await openSession(fresh.page, stack.base, sid);
    await fresh.page.locator('#transcript .msg.agent', { hasText: LAST_TICK }).waitFor();
    assert.deepEqual(live, await structure(fresh.page), 'the page shows what a fresh load shows');
    assert.deepEqual(errors.filter((e) => !/WebSocket|Failed to load resource/.test(e)), []);
    await fresh.page.close();
    await page.close();
  });

  it('a prompt sent as the line stalls shows once after the resume, though its echo comes in the resumed batch', async () => {
    const sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'before the stall');
    const { page, errors } = await phonePage();
    const frames = recordFrames(page);
    await openSession(page, proxy.base, sid);
    await page.locator('#transcript .msg.agent', { hasText: 'You said: "before the stall"' }).waitFor();
    // Nothing comes back to the page any more; what it sends still reaches the bridge.
    assert.ok(proxy.stall(true) > 0, 'the page had its connections open');
    await page.fill('#prompt', 'sent into the stall');
    await page.click('#send');
    await until('the bridge to echo the prompt', () => ed.notes.some((n) => n.params?.sessionId === sid
      && n.params?.update?.sessionUpdate === 'user_message_chunk' && n.params.update.content?.text === 'sent into the stall'));
    // The page notices the stall, reconnects and resumes: the echo and the reply come in its batch.
    await page.locator('#transcript .msg.agent', { hasText: 'You said: "sent into the stall"' }).waitFor();
    await page.locator('#cancel').waitFor({ state: 'hidden' });
    const asked = resumes(frames, sid);
    assert.ok(asked.length >= 1 && asked[0].meta?.resumed === true, JSON.stringify(asked));
    const live = await structure(page);
    assert.equal(live.filter((m) => m === 'user sent into the stall').length, 1, `the prompt shows once: ${JSON.stringify(live)}`);
    const fresh = await phonePage();
    await openSession(fresh.page, stack.base, sid);
    await fresh.page.locator('#transcript .msg.agent', { hasText: 'You said: "sent into the stall"' }).waitFor();
    assert.deepEqual(live, await structure(fresh.page), 'the page shows what a fresh load shows');
    assert.equal(await page.locator('#transcript .msg.user .status').count(), 0, 'no prompt is left "not confirmed"');
    assert.deepEqual(errors.filter((e) => !/WebSocket|Failed to load resource/.test(e)), []);
    await fresh.page.close();
    await page.close();
  });

  it('a resume the bridge cannot fill (a gap) replaces the transcript with what a fresh load shows, keeping a follower at the bottom and a reader where they were', async () => {
    // A bridge that holds only the last 40 messages: a cut of more than that is a gap. Its
    // long turns are of 600 chunks: a reader scrolls up into the second while it goes on.
    const small = await stack.bridge(undefined, { ZCODE_ACP_TEST_BACKLOG: '40', ZCODE_ACP_TEST_LONG_CHUNKS: '600' });
    const sid = await small.newSession(stack.project);
    for (const text of ['first turn', 'second turn', 'third turn']) await small.prompt(sid, text);
    const { page, errors } = await phonePage();
    const frames = recordFrames(page);
    proxy.restore();
    await page.goto(`${proxy.base}/s/${encodeURIComponent(small.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await until('the session to be attached', async () => !(await page.locator('#send').isDisabled()));
    const scroller = page.locator('#transcript-scroller');
    const below = () => scroller.evaluate((s) => s.scrollHeight - s.scrollTop - s.clientHeight);

    /** The `nth` long turn, cut once the page shows tick `at` for 100 messages (the bridge holds 40). */
    async function cutThroughAGap(nth, at, beforeCut = async () => {}, whileCut = async () => {}) {
      await page.fill('#prompt', 'long stream please');
      await page.click('#send');
      await page.locator('#transcript .msg.agent', { hasText: `tick ${at} ` }).nth(nth - 1).waitFor();
      await beforeCut();
      const seen = resumes(frames, sid).length;
      proxy.cut();
      const mark = small.notes.length;
      await page.locator('#conn:not([data-state="open"])').waitFor();
      await whileCut();
      await until('the stream to move on past what the bridge holds', () => small.notes.length > mark + 100);
      proxy.restore();
      await page.locator('#conn[data-state="open"]').waitFor();
      await until('the resume to be answered', () => resumes(frames, sid).slice(seen).some((r) => r.meta));
      const asked = resumes(frames, sid)[seen];
      assert.equal(asked.meta.resumed, false, JSON.stringify(asked.meta));
      assert.equal(asked.meta.reason, 'gap', JSON.stringify(asked.meta));
      await until('the turn to end', () => streamed(small, sid, 'tick 600 ', nth));
      await page.locator('#cancel').waitFor({ state: 'hidden' });
      await page.locator('#transcript .msg.agent', { hasText: 'tick 600 ' }).nth(nth - 1).waitFor();
    }

    // Following the stream at the bottom: still at the bottom after the replace.
    await cutThroughAGap(1, 40);
    await until('the page to follow the stream to its end', async () => (await below()) < 2);

    // A reader scrolled up to the first turn's answer while the stream goes on below.
    // A reader scrolled up into the streaming message while it goes on below. Above it, the
    // page's own prompt loses its "not confirmed" line (shown since the cut) in the replace. As on Safari (no CSS
    // scroll anchoring), the page itself must keep what the reader looked at in place.
    await scroller.evaluate((s) => { s.style.overflowAnchor = 'none'; });
    const reading = page.locator('#transcript .msg.agent', { hasText: 'tick 1 ' }).nth(1);
    const top = () => reading.evaluate((n) => n.getBoundingClientRect().top - document.querySelector('#transcript-scroller').getBoundingClientRect().top);
    let before = 0;
    await cutThroughAGap(2, 200, async () => {
      // Scrolled again until the page takes it (a streamed chunk may stick it to the end first).
      await until('the page to stop following', () => reading.evaluate((n) => new Promise((resolve) => {
        const s = document.querySelector('#transcript-scroller');
        s.scrollTop += n.getBoundingClientRect().top - s.getBoundingClientRect().top + 100;
        requestAnimationFrame(() => requestAnimationFrame(() => resolve(s.scrollHeight - s.scrollTop - s.clientHeight > 100)));
      })));
    }, async () => {
      await page.locator('#transcript .msg.user .status', { hasText: 'not confirmed' }).waitFor();
      before = await top();
    });
    const after = await top();
    assert.ok(Math.abs(after - before) < 2, `what the reader looked at stays in place: ${before} px from the top, then ${after}`);
    const live = await structure(page);
    await page.screenshot({ path: path.join(SHOTS, 'continuity-gap-390.png') });

    const fresh = await phonePage();
    await fresh.page.goto(`${stack.base}/s/${encodeURIComponent(small.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await fresh.page.locator('#transcript .msg.agent', { hasText: 'tick 600 ' }).nth(1).waitFor();
    assert.deepEqual(live, await structure(fresh.page), 'the page shows what a fresh load shows');
    assert.deepEqual(errors.filter((e) => !/WebSocket|Failed to load resource/.test(e)), []);
    await fresh.page.close();
    await page.close();
  });

  it('a permission pending across a cut shows one card, and answering it after the resume ends the turn', async () => {
    const sid = await ed.newSession(stack.project);
    const { page, errors } = await phonePage();
    const frames = recordFrames(page);
    await openSession(page, proxy.base, sid);
    await page.fill('#prompt', 'permission please');
    await page.click('#send');
    const cards = page.locator('.request.permission');
    await cards.first().waitFor();
    const id = await cards.first().getAttribute('data-id');
    proxy.cut();
    await page.locator('#conn:not([data-state="open"])').waitFor();
    proxy.restore();
    await page.locator('#conn[data-state="open"]').waitFor();
    await until('the resume to be answered', () => resumes(frames, sid).some((r) => r.meta));
    assert.equal(resumes(frames, sid)[0].meta.resumed, true, JSON.stringify(resumes(frames, sid)[0].meta));
    // The pending request comes again after the answer, with its id: one card.
    await until('the request delivered again', () => frames.some((f) => f.dir === 'recv' && f.ws > 1 && f.msg.method === 'session/request_permission'));
    const last = frames.filter((f) => f.dir === 'recv' && f.msg.method === 'session/request_permission').pop();
    await cards.first().waitFor();
    assert.equal(await cards.count(), 1, 'one card for one request');
    assert.equal(await cards.first().getAttribute('data-id'), id);
    assert.equal(String(last.msg.id), id);
    // The prompt went through (the bridge numbered its echo): its cut call is not shown as a doubt.
    await page.locator('#transcript .msg.user .status', { hasText: 'not confirmed' }).waitFor({ state: 'detached' });
    await page.screenshot({ path: path.join(SHOTS, 'continuity-permission-390.png') });
    await page.click('.request.permission [data-option="allow"]');
    await page.locator('#transcript .msg.agent', { hasText: 'You said: "permission please"' }).waitFor();
    await page.locator('#cancel').waitFor({ state: 'hidden' });
    assert.equal(await cards.count(), 0);
    const live = await structure(page);
    const fresh = await phonePage();
    await openSession(fresh.page, stack.base, sid);
    await fresh.page.locator('#transcript .msg.agent', { hasText: 'You said: "permission please"' }).waitFor();
    assert.deepEqual(live, await structure(fresh.page), 'the page shows what a fresh load shows');
    assert.deepEqual(errors.filter((e) => !/WebSocket|Failed to load resource/.test(e)), []);
    await fresh.page.close();
    await page.close();
  });

  it('a Stop pressed while the line is cut is sent when it is back', async () => {
    const sid = await ed.newSession(stack.project);
    const { page } = await phonePage();
    await openSession(page, proxy.base, sid);
    // The turn ends only when the Stop reaches the agent, however long the line is down.
    await page.fill('#prompt', 'long stream, then hold');
    await page.click('#send');
    await page.locator('#transcript .msg.agent', { hasText: 'tick 20 ' }).waitFor();
    proxy.cut();
    await page.locator('#conn:not([data-state="open"])').waitFor();
    await page.click('#cancel');
    await page.locator('#cancel', { hasText: 'Stopping…' }).waitFor();
    proxy.restore();
    await page.locator('#transcript .msg.agent .stop-mark', { hasText: 'stopped' }).waitFor();
    await page.locator('#cancel').waitFor({ state: 'hidden' });
    await page.close();
  });

  it('a stalled line (open, nothing moving) is noticed, said, and the client reconnects', async () => {
    const sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'before the stall');
    const { page, errors } = await phonePage('', '');
    await openSession(page, proxy.base, sid);
    await page.locator('#conn[data-state="open"]').waitFor();
    assert.ok(proxy.stall() > 0, 'the page had its connections open');
    // The pill leaves "online" and says what is true.
    await page.locator('#conn:not([data-state="open"])').waitFor();
    await page.locator('#conn', { hasText: /reconnecting…|offline since \d\d:\d\d/ }).waitFor();
    await page.screenshot({ path: path.join(SHOTS, 'continuity-stalled-390.png') });
    await page.locator('#conn[data-state="open"]').waitFor();
    await page.fill('#prompt', 'after the stall');
    await page.click('#send');
    await page.locator('#transcript .msg.agent', { hasText: 'You said: "after the stall"' }).waitFor();
    assert.deepEqual(errors.filter((e) => !/WebSocket|Failed to load resource/.test(e)), []);
    await page.close();
  });

  it('the line is checked at once when the browser says the network is back, and when the page shows again', async () => {
    const sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'before the stall');
    // A quiet line is never checked by the timer here: only the events can notice the stall.
    const { context, page } = await phonePage('3600000', '');
    await openSession(page, proxy.base, sid);
    await page.locator('#conn[data-state="open"]').waitFor();
    for (const fire of [
      () => context.setOffline(true).then(() => context.setOffline(false)),
      () => page.evaluate(() => document.dispatchEvent(new Event('visibilitychange'))),
    ]) {
      assert.ok(proxy.stall() > 0, 'the page had its connections open');
      await fire();
      await page.locator('#conn:not([data-state="open"])').waitFor();
      await page.locator('#conn[data-state="open"]').waitFor();
    }
    await page.fill('#prompt', 'after the checks');
    await page.click('#send');
    await page.locator('#transcript .msg.agent', { hasText: 'You said: "after the checks"' }).waitFor();
    await page.close();
  });

  it('prompts sent while the line is down are queued, survive a reload, and go in order when it is back; the draft stays', async () => {
    const sid = await ed.newSession(stack.project);
    const { page, errors } = await phonePage();
    await openSession(page, proxy.base, sid);
    // Installed: the page reloads from the worker's cache while the line is down.
    await until('the service worker to control the page', () => page.evaluate(() => Boolean(navigator.serviceWorker.controller)));
    proxy.cut();
    await page.locator('#conn:not([data-state="open"])').waitFor();
    for (const text of ['first queued', 'dropped one', 'second queued']) {
      await page.fill('#prompt', text);
      await page.click('#send');
    }
    const queued = page.locator('.queue .queued');
    await until('three queued prompts', async () => (await queued.count()) === 3);
    assert.match(await queued.first().textContent(), /will send when back/);
    await queued.filter({ hasText: 'dropped one' }).locator('button').click();
    await page.fill('#prompt', 'half a thought');
    await page.reload();
    await until('the queue after the reload', async () => (await queued.allTextContents()).map((q) => q.replace(/×$/, '')).join('|')
      === 'will send when backfirst queued|will send when backsecond queued');
    assert.equal(await page.inputValue('#prompt'), 'half a thought', 'the draft survives the reload');
    await page.screenshot({ path: path.join(SHOTS, 'continuity-queued-390.png') });
    proxy.restore();
    await page.locator('#transcript .msg.agent', { hasText: 'You said: "second queued"' }).waitFor();
    const users = await page.locator('#transcript .msg.user .plain').allTextContents();
    assert.deepEqual(users, ['first queued', 'second queued']);
    await page.locator('.queue').waitFor({ state: 'hidden' });
    assert.equal(await page.inputValue('#prompt'), 'half a thought');
    assert.deepEqual(errors.filter((e) => !/WebSocket|Failed to load resource/.test(e)), []);
    await page.close();
  });

  it('a conversation opened before is shown from its saved copy while the line is down, marked read-only', async () => {
    const sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'from the editor');
    const { page, errors } = await phonePage();
    await openSession(page, proxy.base, sid);
    await until('the service worker to control the page', () => page.evaluate(() => Boolean(navigator.serviceWorker.controller)));
    await page.fill('#prompt', 'from the phone');
    await page.click('#send');
    await page.locator('#transcript .msg.agent', { hasText: 'You said: "from the phone"' }).waitFor();
    await page.locator('#cancel').waitFor({ state: 'hidden' });
    const live = await structure(page);
    // What streamed is saved a moment after it arrived (up to the phone's turn's end record).
    await until('the saved copy', () => page.evaluate((key) => new Promise((resolve) => {
      const r = indexedDB.open('zcode-acp');
      // Not there yet: this look must not create it.
      r.onupgradeneeded = () => r.transaction.abort();
      r.onsuccess = () => {
        try {
          const q = r.result.transaction('conversations').objectStore('conversations').getAll();
          q.onsuccess = () => { r.result.close(); resolve(q.result.some((c) => c.key.endsWith(key) && c.updates.filter((u) => u.sessionUpdate === '_zcode/turn_end').length === 2)); };
          q.onerror = () => { r.result.close(); resolve(false); };
        } catch {
          r.result.close();
          resolve(false);
        }
      };
      r.onerror = () => resolve(false);
    }), `/${sid}`));

    proxy.cut();
    await page.reload();
    await page.locator('.top-note .saved-copy', { hasText: 'read-only until the hub answers' }).waitFor();
    await page.locator('#transcript .msg.agent', { hasText: 'You said: "from the phone"' }).waitFor();
    assert.deepEqual(await structure(page), live, 'the saved copy shows what was shown');
    await page.screenshot({ path: path.join(SHOTS, 'continuity-saved-copy-390.png') });

    proxy.restore();
    await page.locator('#conn[data-state="open"]').waitFor();
    await page.locator('.top-note .saved-copy').waitFor({ state: 'detached' });
    assert.deepEqual(await structure(page), live, 'the re-attach shows the same, nothing twice');

    // A deleted session leaves nothing on the device.
    await page.fill('#prompt', 'a draft of a doomed session');
    await page.click('#more summary');
    await page.click('#delete-btn');
    await page.click('dialog button[value="ok"]');
    await page.waitForURL((u) => new URL(u).pathname === '/');
    await until('the saved copy and the draft gone', () => page.evaluate((key) => new Promise((resolve) => {
      if (Object.keys(localStorage).some((k) => k.endsWith(key))) return resolve(false);
      const r = indexedDB.open('zcode-acp');
      r.onsuccess = () => {
        const q = r.result.transaction('conversations').objectStore('conversations').getAllKeys();
        q.onsuccess = () => { r.result.close(); resolve(!q.result.some((k) => k.endsWith(key))); };
        q.onerror = () => { r.result.close(); resolve(false); };
      };
      r.onerror = () => resolve(false);
    }), `/${sid}`));
    assert.deepEqual(errors.filter((e) => !/WebSocket|Failed to load resource/.test(e)), []);
    await page.close();
  });

  it('the installed app opens on its cached shell when the link answers 502 or never answers', async () => {
    const t = await tunnel(stack.port);
    const { page } = await phonePage();
    try {
      await page.goto(`${t.base}/`);
      await until('the service worker to control the page', () => page.evaluate(() => Boolean(navigator.serviceWorker.controller)));
      await page.locator('#instances h2', { hasText: 'Live sessions' }).waitFor();

      // The hub behind the tunnel is down: the tunnel answers its own error page.
      t.mode = '502';
      await page.reload();
      await page.locator('#bar').waitFor();
      await page.locator('#instances .error').waitFor();
      assert.doesNotMatch(await page.evaluate(() => document.body.innerText), /Error 502/);
      await page.screenshot({ path: path.join(SHOTS, 'continuity-502-390.png') });

      // A link that accepts and never answers: the app's own files never wait for it.
      t.mode = 'hang';
      t.asked.length = 0;
      await page.reload({ waitUntil: 'commit' });
      await page.locator('#bar').waitFor();
      await page.locator('#instances').waitFor();
      const shell = t.asked.filter((p) => !p.startsWith('/api/') && p !== '/sw.js');
      assert.deepEqual(shell, [], 'the shell comes from the cache, not the silent link');
    } finally {
      t.mode = 'up';
      await page.close();
      await t.close();
    }
  });
});
