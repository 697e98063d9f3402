// Reading, photos, voice and layout on a phone (issue 33, points 7–10), on ONE page navigated
// across the checks, against the real hub and bridges over the demo agent (`--images`: it takes
// image blocks and says what arrived; `markdown`: a table, a code block, a tool titled with
// `code` whose output has terminal colours):
// - markdown tables, coloured code with a Copy button, `code` in tool titles, terminal colours,
//   the plan pinned above the conversation, agent text never parsed as HTML; a live turn
//   renders as its replay;
// - photos: attached (input with `capture`) and pasted, made to fit 2 MP and 1 MB, at most 4,
//   removable, sent as ACP image blocks and shown live and on replay; no Attach button for an
//   agent that takes no images;
// - "Jump to latest" while scrolled up during a turn; dictation where speech recognition exists;
// - every visible button, link, input, summary and [role=button] of every screen is at least
//   44 × 44 px; the split view at 1000 px; the manifest's dark splash colours.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { BIN, until, startStack, stopStack, pairedPage, settledHome } from './harness.mjs';
import { looksRight } from './look.mjs';

const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };

/** Every visible tap target smaller than 44 × 44 px, described (run in the page). */
function smallTargets() {
  const out = [];
  const sel = 'button, a[href], input:not([type=hidden]), select, textarea, summary, [role=button]';
  const describe = (el) => {
    let d = el.tagName.toLowerCase();
    if (el.id) d += `#${el.id}`;
    if (typeof el.className === 'string' && el.className.trim()) d += `.${el.className.trim().split(/\s+/).join('.')}`;
    return `${d} "${(el.textContent || el.getAttribute('aria-label') || el.value || '').trim().slice(0, 30)}"`;
  };
  for (const el of document.querySelectorAll(sel)) {
    if (!el.checkVisibility({ visibilityProperty: true }) || !el.getClientRects().length) continue;
    // A link inside a sentence is exempt (WCAG 2.5.8): its line is the text's.
    if (el.tagName === 'A' && getComputedStyle(el).display === 'inline' && el.closest('p, li, td, .md')) continue;
    let r = el.getBoundingClientRect();
    // A checkbox or radio is pressed through its label: the label is the target.
    if (['checkbox', 'radio'].includes(el.type) && el.closest('label')) r = el.closest('label').getBoundingClientRect();
    if (r.width < 43.5 || r.height < 43.5) out.push(`${describe(el)} ${Math.round(r.width)}×${Math.round(r.height)}`);
  }
  return out;
}

describe('reading, photos and voice, layout', () => {
  let stack; let browser; let demo; let plain; let page; let context; let errors;

  before(async () => {
    [stack, browser] = await startStack();
    [demo, plain] = await Promise.all([
      stack.bridge([BIN, 'demo-agent', '--delay-ms', '5', '--images']),
      stack.bridge(),
    ]);
    ({ context, page, errors } = await pairedPage(browser, stack, PHONE));
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.base });
  });

  after(async () => {
    await context?.close();
    await stopStack(stack, browser);
  });

  const sessionUrl = (ed, sid) => `${stack.base}/s/${encodeURIComponent(ed.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`;
  const open = async (ed, sid) => {
    await page.goto(sessionUrl(ed, sid));
    await page.locator('#prompt').waitFor();
    await until('the session to be attached', async () => !(await page.locator('#send').isDisabled()));
  };
  const idle = () => page.locator('#cancel').waitFor({ state: 'hidden' });
  const send = async (text) => {
    await page.fill('#prompt', text);
    await page.click('#send');
  };
  let sid;

  it('tables, coloured code with Copy, `code` in tool titles, terminal colours, the pinned plan; live as on replay; never HTML', async () => {
    sid = await demo.newSession(stack.project);
    await open(demo, sid);
    await send('markdown <img src=x onerror="window.pwned=1"> | <b>cell</b> |');
    const reply = page.locator('#transcript > .msg.agent').last();
    await reply.locator('table').waitFor();
    await page.locator('#transcript > .msg.agent', { hasText: 'You said:' }).waitFor();
    await idle();
    assert.deepEqual(await reply.locator('th').allTextContents(), ['Crate', 'Role']);
    assert.deepEqual(await reply.locator('td').allTextContents(), ['shared', 'config, store', 'hub', 'the public entry']);
    assert.equal(await reply.locator('td code').first().textContent(), 'shared');
    assert.equal(await reply.locator('td.align-center').count(), 2);
    const code = reply.locator('.code-block code[data-lang="rust"]');
    assert.deepEqual(await code.locator('.tok-kw').allTextContents(), ['fn', 'let']);
    assert.deepEqual(await code.locator('.tok-com').allTextContents(), ['// the answer']);
    assert.deepEqual(await code.locator('.tok-num').allTextContents(), ['42']);
    assert.deepEqual(await code.locator('.tok-fn').allTextContents(), ['main', 'println!']);
    await reply.locator('.code-block button.copy').click();
    await reply.locator('.code-block button.copy', { hasText: 'Copied' }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), await code.textContent());
    await reply.locator('.code-block button.copy', { hasText: /^Copy$/ }).waitFor();
    // The agent's words are text: no element came from them, no handler ran.
    assert.equal(await page.locator('#transcript img, #transcript b').count(), 0);
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    assert.match(await reply.textContent(), /<img src=x onerror=/);
    // The tool's title shows its `code`, its output the terminal's colours and nothing else.
    const tool = page.locator('#transcript > .msg.tool', { hasText: 'cargo test' });
    assert.equal(await tool.locator('.title').textContent(), 'Run cargo test');
    assert.equal(await tool.locator('.title code').textContent(), 'cargo test');
    await tool.locator('summary').click();
    const out = tool.locator('.tool-text.terminal');
    assert.equal(await out.locator('.ansi-32.ansi-bold').textContent(), 'test result: ok');
    assert.equal(await out.locator('.ansi-31').textContent(), '0 failed');
    assert.equal((await out.textContent()).trim(), 'test result: ok. 3 passed; 0 failed');
    // One plan, pinned above the conversation; none inline.
    const pin = page.locator('#plan-pin');
    await pin.locator('summary', { hasText: '2 of 2 done' }).waitFor();
    assert.equal(await page.locator('#transcript > .msg.plan:visible').count(), 0);
    const pinBox = await pin.boundingBox();
    const scrollerBox = await page.locator('#transcript-scroller').boundingBox();
    assert.ok(pinBox.y + pinBox.height <= scrollerBox.y + 1, 'the plan is above the conversation');
    assert.equal(await pin.getAttribute('open'), null, 'a finished plan is folded');
    await pin.locator('summary').click();
    await pin.locator('li', { hasText: 'Answer' }).waitFor();
    for (const colorScheme of ['dark', 'light']) {
      await page.emulateMedia({ colorScheme });
      await looksRight(page, 'reading-markdown-390');
    }
    // The replay shows the same.
    const shown = () => page.$$eval('#transcript > .msg', (n) => n.map((x) => x.innerHTML.replace(/ open=""/g, '')));
    const live = await shown();
    await page.reload();
    await page.locator('#transcript > .msg.agent table').waitFor();
    await until('the replay to show the same', async () => JSON.stringify(await shown()) === JSON.stringify(live));
    await page.locator('#plan-pin summary', { hasText: '2 of 2 done' }).waitFor();
    assert.deepEqual(errors, []);
  });

  it('photos: attached and pasted, made to fit, at most 4, removable, sent as image blocks, shown live and on replay', async () => {
    await open(demo, sid);
    await page.locator('#attach').waitFor();
    assert.equal(await page.getAttribute('#attach-input', 'accept'), 'image/*');
    assert.notEqual(await page.getAttribute('#attach-input', 'capture'), null);
    // A 1800×1200 photo of noise (2.2 MP, megabytes as PNG) and small PNGs.
    const [big, small] = await page.evaluate(async () => {
      const png = async (w, h, noise) => {
        const c = document.createElement('canvas');
        c.width = w;
        c.height = h;
        const g = c.getContext('2d');
        const img = g.createImageData(w, h);
        for (let i = 0; i < img.data.length; i += 4) {
          img.data[i] = noise ? Math.random() * 255 : 200;
          img.data[i + 1] = noise ? Math.random() * 255 : 80;
          img.data[i + 2] = 40;
          img.data[i + 3] = 255;
        }
        g.putImageData(img, 0, 0);
        return c.toDataURL('image/png').split(',')[1];
      };
      return [await png(1800, 1200, true), await png(40, 30, false)];
    });
    const file = (name, b64) => ({ name, mimeType: 'image/png', buffer: Buffer.from(b64, 'base64') });
    assert.ok(Buffer.from(big, 'base64').length > 2_000_000);
    await page.setInputFiles('#attach-input', [file('big.png', big), file('a.png', small), file('b.png', small)]);
    const thumbs = page.locator('#attachments .thumb');
    await until('three previews', async () => (await thumbs.count()) === 3);
    // Two pasted: one more than fits.
    await page.evaluate((b64) => {
      const dt = new DataTransfer();
      for (const n of ['c.png', 'd.png']) dt.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], n, { type: 'image/png' }));
      document.querySelector('#prompt').dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
    }, small);
    await page.locator('#attach-note', { hasText: 'At most 4 images' }).waitFor();
    await until('four previews', async () => (await thumbs.count()) === 4);
    await looksRight(page, 'reading-photos-390');
    await page.click('#attachments li:nth-child(3) .remove');
    await page.click('#attachments li:nth-child(3) .remove');
    assert.equal(await thumbs.count(), 2);
    const fitted = await page.$$eval('#attachments .thumb', (n) => n.map((i) => ({
      px: i.naturalWidth * i.naturalHeight, bytes: Math.floor((i.src.split(',')[1].length * 3) / 4), type: i.src.split(';')[0].slice(5),
    })));
    assert.equal(fitted[0].type, 'image/jpeg', 'the big photo was re-encoded');
    assert.ok(fitted[0].px <= 2_000_000 && fitted[0].px > 1_000_000 && fitted[0].px < 1800 * 1200, JSON.stringify(fitted));
    assert.ok(fitted.every((f) => f.bytes <= 1_000_000), JSON.stringify(fitted));
    assert.equal(fitted[1].type, 'image/png', 'a small one is sent as it is');
    const prompts = await page.locator('#transcript > .msg.user').count();
    await send('two photos');
    const mine = page.locator('#transcript > .msg.user').last();
    assert.equal(await mine.locator('.inline-img').count(), 2);
    await page.locator('#transcript > .msg.agent', { hasText: 'Received 2 image(s)' }).waitFor();
    const said = await page.locator('#transcript > .msg.agent', { hasText: 'Received 2 image(s)' }).textContent();
    assert.match(said, new RegExp(`image/jpeg ${fitted[0].bytes - 2}|image/jpeg ${fitted[0].bytes - 1}|image/jpeg ${fitted[0].bytes}\\b`));
    assert.match(said, /image\/png \d+ bytes/);
    await idle();
    assert.equal(await thumbs.count(), 0, 'sent: the previews are gone');
    // The prompt's echo (one numbered message per block) was not taken for a loss: shown once.
    assert.equal(await page.locator('#transcript > .msg.user').count(), prompts + 1);
    await page.reload();
    await page.locator('#transcript > .msg.user', { hasText: 'two photos' }).locator('.inline-img').nth(1).waitFor();
    assert.deepEqual(await page.locator('#transcript > .msg.user', { hasText: 'two photos' }).locator('.inline-img').evaluateAll(
      (n) => n.map((i) => i.naturalWidth > 0),
    ), [true, true]);
    // An agent that takes no images: no Attach button.
    const other = await plain.newSession(stack.project);
    await open(plain, other);
    assert.equal(await page.locator('#attach').isVisible(), false);
    assert.deepEqual(errors, []);
  });

  it('"Jump to latest" shows when scrolled up during a turn and brings the end back', async () => {
    await open(demo, sid);
    await send('hold');
    await page.locator('#cancel').waitFor();
    const scroller = page.locator('#transcript-scroller');
    await until('the conversation to be taller than its box', () => scroller.evaluate((s) => s.scrollHeight > s.clientHeight + 200));
    await scroller.evaluate((s) => { s.scrollTop = 0; });
    await page.locator('#jump-latest').waitFor();
    assert.notEqual(await page.getAttribute('#plan-pin', 'open'), null, 'the running turn\'s plan is open');
    await looksRight(page, 'reading-jump-390');
    await page.click('#jump-latest');
    await until('the end to be in view', () => scroller.evaluate((s) => s.scrollHeight - s.scrollTop - s.clientHeight < 5));
    assert.equal(await page.locator('#jump-latest').isVisible(), false);
    await page.click('#cancel');
    await idle();
    assert.deepEqual(errors, []);
  });

  it('every tap target of every screen is at least 44 × 44 px', async () => {
    fs.writeFileSync(path.join(stack.project, 'tap-notes.txt'), 'notes for the tap check\n');
    const offenders = [];
    const check = async (name) => {
      for (const o of await page.evaluate(smallTargets)) offenders.push(`${name}: ${o}`);
    };
    await settledHome(page, stack.base);
    await check('home');
    await open(demo, sid);
    await page.locator('#transcript > .msg.tool').first().locator('summary').click();
    await page.click('#more summary');
    await check('session');
    await page.click('#more summary');
    const asked = demo.prompt(sid, 'permission');
    await page.locator('.request.permission button').first().waitFor();
    await check('session, asking permission');
    await page.locator('.request.permission button').first().click();
    await asked;
    // The elicitation form a turn can ask, and a dialog (Rename).
    await send('please elicit');
    await page.locator('form.request.elicitation').waitFor();
    await check('session, an elicitation form');
    await page.locator('form.request.elicitation input[name="name"]').fill('Ada');
    await page.locator('form.request.elicitation button[type="submit"]').click();
    await page.locator('form.request.elicitation').waitFor({ state: 'detached' });
    await idle();
    await page.click('#more summary');
    await page.click('#rename-btn');
    await page.locator('dialog[open] #rename-input').waitFor();
    await check('session, the Rename dialog');
    await page.keyboard.press('Escape');
    await page.locator('dialog[open]').waitFor({ state: 'detached' });
    await page.goto(`${stack.base}/c/${encodeURIComponent(demo.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('#not-git').waitFor();
    await check('changes (not a repository)');
    await page.goto(`${stack.base}/n/${encodeURIComponent(demo.id)}?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('#view textarea, #view form').first().waitFor();
    await check('new session');
    await page.goto(`${stack.base}/f/${encodeURIComponent(demo.id)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('.files').waitFor();
    await page.locator('.files', { hasText: 'Listing' }).waitFor({ state: 'detached' });
    await check('files');
    await page.locator('.files a', { hasText: 'tap-notes.txt' }).click();
    await page.locator('.text-view').waitFor();
    await page.locator('.text-view', { hasText: 'notes for the tap check' }).waitFor();
    await check('files, an opened text file');
    for (const route of ['/settings', '/settings/hooks', '/usage', '/devices', '/pair']) {
      await page.goto(`${stack.base}${route}`);
      await page.waitForLoadState('networkidle');
      await check(route);
    }
    assert.deepEqual(offenders, [], `tap targets under 44 × 44 px:\n  ${offenders.join('\n  ')}`);
    assert.deepEqual(errors, []);
  });

  it('at 1000 px the session keeps the list beside it; the manifest has dark splash colours', async () => {
    await page.setViewportSize({ width: 1000, height: 800 });
    await open(demo, sid);
    const side = page.locator('#side');
    await side.locator(`li[data-session="${sid}"] a[aria-current="page"]`).waitFor();
    const s = await side.boundingBox();
    const m = await page.locator('main#view').boundingBox();
    assert.ok(s.x + s.width <= m.x + 1 && m.width > 500, `side ${JSON.stringify(s)} main ${JSON.stringify(m)}`);
    await page.screenshot({ path: `${process.env.WEB_SCREENSHOTS || 'target/web-screenshots'}/reading-split-1000.png` });
    await page.goto(`${stack.base}/`);
    assert.equal(await side.isVisible(), false, 'home is the list itself');
    await page.setViewportSize(PHONE.viewport);
    const manifest = await (await stack.fetch('/manifest.webmanifest')).json();
    const luminance = (hex) => {
      const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255);
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    assert.ok(luminance(manifest.background_color) < 0.2, manifest.background_color);
    assert.ok(luminance(manifest.theme_color) < 0.2, manifest.theme_color);
    assert.deepEqual(errors, []);
  });

  it('dictation: a microphone button only where speech recognition exists; what it hears lands in the composer', async () => {
    await open(demo, sid);
    const has = await page.evaluate(() => Boolean(window.SpeechRecognition || window.webkitSpeechRecognition));
    assert.equal(await page.locator('#dictate').count(), has ? 1 : 0);
    await page.addInitScript(() => { delete window.SpeechRecognition; delete window.webkitSpeechRecognition; });
    await open(demo, sid);
    assert.equal(await page.locator('#dictate').count(), 0, 'no speech recognition: no button');
    await page.addInitScript(() => {
      window.SpeechRecognition = class {
        start() {
          setTimeout(() => {
            const result = Object.assign([{ transcript: 'fix the failing test' }], { isFinal: true });
            this.onresult({ resultIndex: 0, results: [result] });
            this.onend();
          }, 10);
        }

        stop() { this.onend(); }
      };
    });
    await open(demo, sid);
    await page.fill('#prompt', 'please');
    await page.click('#dictate');
    await until('the words in the composer', async () => (await page.inputValue('#prompt')) === 'please fix the failing test');
    assert.equal(await page.getAttribute('#dictate', 'aria-pressed'), 'false');
    await looksRight(page, 'reading-dictation-390');
    assert.deepEqual(errors, []);
  });
});
