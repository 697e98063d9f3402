// The session screen as a phone user sees it, against the real hub and bridges over the demo
// agent and over the ACP SDK's example agent (which reuses tool call ids every turn): a live turn
// renders exactly as its replay (same cards, same order), open cards stay open while they stream,
// streamed messages are patched in place (not re-announced), the composer fits its placeholder and
// lets a phone keyboard type newlines, and a cancelled turn says so, also after a reload.
//
// DEV_ASSETS=hub/web serves the client's JS and CSS from that directory instead of the binary's
// copy (to iterate without a rebuild; the suite never sets it).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { watchConsole, until, SHOTS, SDK_AGENT, SDK_AGENT_QUICK, startStack, stopStack } from './harness.mjs';

const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };

/** The transcript as a list of its messages and cards, in order (what "the same" means). */
function structure(page) {
  return page.$$eval('#transcript > .msg', (nodes) => nodes.map((n) => {
    const c = n.classList;
    const text = (sel) => (n.querySelector(sel)?.textContent || '').trim();
    if (c.contains('tool')) return `tool ${text('.title')} [${n.dataset.status}]`;
    if (c.contains('user')) return `user ${text('.plain')}`;
    if (c.contains('agent')) return `agent ${n.textContent.trim()}`;
    if (c.contains('thought')) return `thought ${text('.md')}`;
    if (c.contains('plan')) return `plan ${[...n.querySelectorAll('li')].map((li) => `${li.className}:${li.textContent}`).join(' | ')}`;
    return n.className;
  }));
}

/** Saves `name`-light.png and `name`-dark.png, checking each looks right (see `looksRight`). */
async function shot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    await looksRight(page, `${name} (${scheme})`);
    await page.screenshot({ path: path.join(SHOTS, `${name}-${scheme}.png`) });
  }
  await page.emulateMedia({ colorScheme: 'light' });
}

/** No visible `null`, `undefined`, `NaN` or `[object Object]`; nothing wider than the screen. */
async function looksRight(page, what) {
  const text = await page.evaluate(() => document.body.innerText);
  assert.doesNotMatch(text, /\b(null|undefined|NaN)\b|\[object Object\]/, `${what}: ${text}`);
  const over = await page.evaluate(() => document.scrollingElement.scrollWidth - window.innerWidth);
  assert.ok(over <= 0, `${what}: the page is ${over}px wider than the screen`);
}

describe('session screen', () => {
  let stack; let browser; let demo; let sdk; let quick; let shared;

  before(async () => {
    [stack, browser] = await startStack();
    // The SDK agent twice: with its second between updates (a card stays pending long enough
    // to be opened), and with 200 ms (turns that are only waited for).
    [demo, sdk, quick] = await Promise.all([stack.bridge(), stack.bridge(SDK_AGENT), stack.bridge(SDK_AGENT_QUICK)]);
  });

  after(() => stopStack(stack, browser));

  /**
   * A paired phone page: a new page of the file's one phone (a new context costs chromium
   * several times what a page costs: a cold cache, the service worker installed again), or of
   * a phone of its own (`own`: a second device, storage and routes apart). Close the page when
   * done (and an own page's context).
   */
  async function phonePage(own = false) {
    let context = own ? null : shared;
    if (!context) {
      // DEV_ASSETS: no service worker, which would serve the built files past the route.
      context = await browser.newContext(process.env.DEV_ASSETS ? { ...PHONE, serviceWorkers: 'block' } : PHONE);
      context.setDefaultTimeout(15000);
      if (process.env.DEV_ASSETS) {
        await context.route(/\/(js\/[a-z]+\.js|app\.css)$/, (route) => {
          const rel = new URL(route.request().url()).pathname;
          route.fulfill({ path: path.join(process.env.DEV_ASSETS, rel) });
        });
      }
      if (!own) shared = context;
    }
    const page = await context.newPage();
    const errors = watchConsole(page);
    await page.goto(`${stack.base}/#token=${stack.token}`);
    await page.locator('#view').waitFor();
    return { context, page, errors };
  }

  const openSession = async (page, ed, sid) => {
    await page.goto(`${stack.base}/s/${encodeURIComponent(ed.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('#prompt').waitFor();
    await until('the session to be attached', async () => !(await page.locator('#send').isDisabled()));
  };

  /** Sends `text` with the Send button (on a phone, Enter types a newline). */
  async function send(page, text) {
    await page.fill('#prompt', text);
    await page.click('#send');
  }

  const idle = (page) => page.locator('#cancel').waitFor({ state: 'hidden' });

  it('a live turn of the SDK example agent shows its tool cards between its texts, turn after turn, as its replay does', async () => {
    const { page, errors } = await phonePage();
    const sid = await quick.newSession(stack.project);
    await openSession(page, quick, sid);
    for (const [i, word] of ['first', 'second'].entries()) {
      await send(page, `${word} turn`);
      // Mid-stream: the read card of THIS turn (ids repeat: call_1 every turn).
      const cards = page.locator('#transcript > .msg.tool');
      await until(`turn ${i + 1}'s read card`, async () => (await cards.count()) === 2 * i + 1);
      if (i === 1) await shot(page, 'session-sdk-midstream-390');
      const allow = page.locator('.request.permission [data-option="allow"]');
      await allow.click();
      await page.locator('#transcript > .msg.agent', { hasText: 'Perfect!' }).nth(i).waitFor();
      await idle(page);
    }
    const live = await structure(page);
    const turn = [
      "agent I'll help you with that. Let me start by reading some files to understand the current situation.",
      'tool Reading project files [completed]',
      'agent Now I understand the project structure. I need to make some changes to improve it.',
      'tool Modifying critical configuration file [completed]',
      "agent Perfect! I've successfully updated the configuration. The changes have been applied.",
    ];
    assert.deepEqual(live, ['user first turn', ...turn, 'user second turn', ...turn]);
    // The conversation followed the turn to its end (a permission card came and went meanwhile).
    await until('the last message to be in view', () => page.evaluate(() => {
      const s = document.querySelector('#transcript-scroller');
      return s.scrollHeight - s.scrollTop - s.clientHeight < 2;
    }));
    await shot(page, 'session-sdk-finished-390');
    await page.reload();
    await page.locator('#transcript > .msg.tool').nth(3).waitFor();
    assert.deepEqual(await structure(page), live, 'the replay shows what the live turns showed');
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('a live turn of the demo agent renders as its replay, with a turn driven by another device', async () => {
    const { page, errors } = await phonePage();
    const sid = await demo.newSession(stack.project);
    await openSession(page, demo, sid);
    await send(page, 'hello there');
    await page.locator('#transcript > .msg.agent', { hasText: 'You said: "hello there"' }).waitFor();
    await idle(page);
    const turn = demo.prompt(sid, 'the editor asks for permission');
    await page.locator('.request.permission [data-option="allow"]').click();
    await turn;
    await page.locator('#transcript > .msg.agent', { hasText: 'You said: "the editor asks for permission"' }).waitFor();
    await idle(page);
    const plans = async () => (await structure(page)).filter((s) => s.startsWith('plan'));
    await until('both plans to complete', async () => {
      const p = await plans();
      return p.length === 2 && p.every((x) => !/in_progress|pending|stopped/.test(x));
    });
    const live = await structure(page);
    assert.ok(live.filter((s) => s.startsWith('tool')).length >= 3, live.join('\n'));
    await page.reload();
    await page.locator('#transcript > .msg.user').nth(1).waitFor();
    await until('the replay to be shown', async () => (await structure(page)).length === live.length);
    assert.deepEqual(await structure(page), live);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('the transcript is not a live region; a status region says what matters once', async () => {
    const { page, errors } = await phonePage();
    const sid = await demo.newSession(stack.project);
    await openSession(page, demo, sid);
    assert.notEqual(await page.getAttribute('#transcript', 'aria-live'), 'polite', 'every streamed frame would be re-announced');
    const status = page.locator('#session-status');
    assert.equal(await status.getAttribute('role'), 'status');
    await send(page, 'hello');
    await until('the turn end to be announced', async () => /finished/.test(await status.textContent()));
    assert.match(await status.textContent(), /You said: "hello"/);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('an open tool card stays open (the same node) while its call streams', async () => {
    const { page, errors } = await phonePage();
    const sid = await sdk.newSession(stack.project);
    await openSession(page, sdk, sid);
    await send(page, 'open the card');
    const card = page.locator('#transcript > .msg.tool[data-status="pending"]').first();
    await card.waitFor();
    await card.locator('summary').click();
    await page.evaluate(() => { document.querySelector('#transcript > .msg.tool details').zMarked = true; });
    await page.locator('#transcript > .msg.tool[data-status="completed"]').first().waitFor();
    const kept = await page.evaluate(() => {
      const d = document.querySelector('#transcript > .msg.tool details');
      return { same: d.zMarked === true, open: d.open };
    });
    assert.deepEqual(kept, { same: true, open: true }, 'the card the reader opened was replaced or closed');
    // Stopped rather than run to its permission (three more seconds of the agent's pauses).
    await page.click('#cancel');
    await idle(page);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('a streamed message grows in the same node', async () => {
    const { page, errors } = await phonePage();
    const sid = await demo.newSession(stack.project);
    await openSession(page, demo, sid);
    await send(page, 'long hold');
    await page.locator('#transcript > .msg.agent', { hasText: 'tick 3 ' }).waitFor();
    await page.evaluate(() => { document.querySelector('#transcript > .msg.agent').zMarked = true; });
    await page.locator('#transcript > .msg.agent', { hasText: 'tick 30 ' }).waitFor();
    assert.equal(await page.evaluate(() => document.querySelector('#transcript > .msg.agent').zMarked === true), true,
      'the streamed message was replaced, not patched');
    await page.click('#cancel');
    await idle(page);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('Stop says in place that the cancel was sent: no toast over the transcript', async () => {
    const { page, errors } = await phonePage();
    const sid = await demo.newSession(stack.project);
    await openSession(page, demo, sid);
    await send(page, 'long hold');
    await page.locator('#transcript > .msg.agent', { hasText: 'tick 2 ' }).waitFor();
    await page.click('#cancel');
    assert.equal(await page.locator('#toasts .toast').count(), 0, 'a toast covers the transcript');
    await page.locator('.msg.user .status', { hasText: 'stopped: cancelled' }).waitFor();
    await idle(page);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('a cancelled turn shows its plan stopped and keeps its "stopped: cancelled" after a reload', async () => {
    const { page, errors } = await phonePage();
    const sid = await demo.newSession(stack.project);
    await openSession(page, demo, sid);
    await send(page, 'long hold');
    await page.locator('#transcript > .msg.agent', { hasText: 'tick 2 ' }).waitFor();
    await shot(page, 'session-demo-midstream-390');
    await page.click('#cancel');
    await page.locator('.msg.user .status', { hasText: 'stopped: cancelled' }).waitFor();
    await idle(page);
    const plan = page.locator('#transcript > .msg.plan').last();
    await until('the plan to show it stopped', async () => /stopped/.test(await plan.textContent()));
    assert.doesNotMatch(await plan.textContent(), /◐/);
    await shot(page, 'session-demo-cancelled-390');
    await page.reload();
    await page.locator('#transcript > .msg.plan').waitFor({ state: 'attached' }); // hidden: the pin shows it
    await page.locator('.msg.user .status', { hasText: 'stopped: cancelled' }).waitFor();
    await until('the replayed plan to show it stopped', async () => /stopped/.test(await page.locator('#transcript > .msg.plan').last().textContent()));
    assert.doesNotMatch(await page.locator('#transcript > .msg.plan').last().textContent(), /◐/);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('the composer shows its whole placeholder, idle and busy', async () => {
    const { page, errors } = await phonePage();
    const sid = await demo.newSession(stack.project);
    await openSession(page, demo, sid);
    // Chromium counts an empty box's placeholder in its scrollHeight.
    const fits = () => page.evaluate(() => {
      const box = document.querySelector('#prompt');
      return { need: box.scrollHeight, has: box.clientHeight };
    });
    let fit = await fits();
    assert.ok(fit.has >= fit.need, `the placeholder needs ${fit.need}px, the box shows ${fit.has}px`);
    await shot(page, 'session-empty-390');
    await send(page, 'long hold');
    await page.locator('#cancel').waitFor();
    fit = await fits();
    assert.ok(fit.has >= fit.need, `while busy the placeholder needs ${fit.need}px, the box shows ${fit.has}px`);
    await page.click('#cancel');
    await idle(page);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('on a phone Enter types a newline and Send sends; on a desktop Enter sends', async () => {
    const { page, errors } = await phonePage();
    const sid = await demo.newSession(stack.project);
    await openSession(page, demo, sid);
    await page.click('#prompt');
    await page.keyboard.type('first line');
    await page.keyboard.press('Enter');
    await page.keyboard.type('second line');
    assert.equal(await page.inputValue('#prompt'), 'first line\nsecond line');
    assert.equal(await page.locator('#transcript > .msg.user').count(), 0, 'Enter sent the prompt');
    await page.click('#send');
    await page.locator('#transcript > .msg.user', { hasText: 'second line' }).waitFor();
    assert.equal(await page.inputValue('#prompt'), '');
    await idle(page);
    assert.deepEqual(errors, []);
    await page.close();

    const desk = await browser.newContext({ viewport: { width: 1100, height: 800 } });
    const dp = await desk.newPage();
    await dp.goto(`${stack.base}/#token=${stack.token}`);
    await openSession(dp, demo, sid);
    await dp.fill('#prompt', 'sent by Enter');
    await dp.press('#prompt', 'Enter');
    await dp.locator('#transcript > .msg.user.local', { hasText: 'sent by Enter' }).waitFor();
    await idle(dp);
    await desk.close();
  });

  /** Answers `page`'s status route with `sid` forever running (a status that lags behind). */
  async function staleStatus(page, sid) {
    await page.context().route(/\/api\/instances\/[^/]+\/status$/, (route) => route.fulfill({
      status: 200, contentType: 'application/json',
      body: JSON.stringify({ sessions: [{ sessionId: sid, status: 'running', title: 'long' }] }),
    }));
  }

  it('one phone cancels: the other loses its Stop button from the turn-end record and a reload there says "stopped: cancelled"', async () => {
    const a = await phonePage(true);
    const b = await phonePage(true);
    const sid = await demo.newSession(stack.project);
    await openSession(a.page, demo, sid);
    await openSession(b.page, demo, sid);
    // From here on B's status route would say "running" forever: only the bridge's record
    // can tell B that the turn is over.
    await staleStatus(b.page, sid);
    await send(a.page, 'long hold');
    await b.page.locator('#cancel').waitFor();
    await b.page.locator('#transcript > .msg.agent', { hasText: 'tick 2 ' }).waitFor();
    await a.page.click('#cancel');
    await idle(a.page);
    await idle(b.page);
    await b.page.locator('.msg.user .status', { hasText: 'stopped: cancelled' }).waitFor();
    const plan = b.page.locator('#transcript > .msg.plan').last();
    assert.match(await plan.textContent(), /stopped: cancelled/);
    assert.doesNotMatch(await plan.textContent(), /◐/);
    // A turn that ends normally: B's Stop button goes too.
    await send(a.page, 'second');
    await b.page.locator('#transcript > .msg.agent', { hasText: 'You said: "second"' }).waitFor();
    await idle(b.page);
    await b.page.context().unroute(/\/api\/instances\/[^/]+\/status$/);
    await shot(b.page, 'session-other-device-cancelled-390');
    // B reloads (it never prompted, and stores nothing): the replayed record says how it ended.
    await b.page.reload();
    await b.page.locator('#transcript > .msg.user', { hasText: 'second' }).waitFor();
    await b.page.locator('.msg.user .status', { hasText: 'stopped: cancelled' }).waitFor();
    const users = await b.page.$$eval('#transcript > .msg.user', (n) => n.map((x) => x.querySelector('.status')?.textContent || ''));
    assert.deepEqual(users, ['stopped: cancelled', ''], 'only the cancelled turn says so');
    assert.match(await b.page.locator('#transcript > .msg.plan').first().textContent(), /stopped: cancelled/);
    await idle(b.page);
    assert.equal(await b.page.evaluate(() => Object.keys(localStorage).filter((k) => k.includes('stops')).length), 0);
    assert.deepEqual(a.errors, []);
    assert.deepEqual(b.errors, []);
    await a.context.close();
    await b.context.close();
  });

  it('a new prompt closes the plan of the turn before it, live as in a replay', async () => {
    const { page, errors } = await phonePage();
    await page.goto(`${stack.base}/#token=${stack.token}`);
    const shown = await page.evaluate(async () => {
      const { Transcript } = await import('/js/transcript.js');
      const box = document.createElement('div');
      document.body.append(box);
      const t = new Transcript(box);
      const chunk = (text) => ({ sessionUpdate: 'user_message_chunk', messageId: `u-${text}`, content: { type: 'text', text } });
      t.live(chunk('first'));
      t.live({ sessionUpdate: 'plan', entries: [{ content: 'Answer', status: 'in_progress', priority: 'high' }] });
      // The next turn's prompt arrives with no word of the first turn's end.
      t.live(chunk('second'));
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      return box.querySelector('.msg.plan').textContent;
    });
    assert.doesNotMatch(shown, /◐/, `the first turn's plan is still in progress: ${shown}`);
    assert.match(shown, /stopped/);
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('when another device cancels its turn, the Stop button goes and the plan shows it stopped', async () => {
    const { page, errors } = await phonePage();
    const sid = await demo.newSession(stack.project);
    await openSession(page, demo, sid);
    const turn = demo.prompt(sid, 'long hold');
    await page.locator('#cancel').waitFor();
    await page.locator('#transcript > .msg.agent', { hasText: 'tick 2 ' }).waitFor();
    demo.send({ method: 'session/cancel', params: { sessionId: sid } });
    assert.equal((await turn).stopReason, 'cancelled');
    await idle(page);
    const plan = page.locator('#transcript > .msg.plan').last();
    await until('the plan to show it stopped', async () => /stopped/.test(await plan.textContent()));
    assert.deepEqual(errors, []);
    await page.close();
  });
});
