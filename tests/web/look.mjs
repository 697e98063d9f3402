// The look of a screen, checked the way a phone user would notice it going wrong: no visible
// `null`, `undefined`, `NaN` or `[object Object]`; nothing wider than the screen (apart from
// the horizontal scrollers named in SCROLLERS); a connection pill that says something in
// words; cards not touching the screen's edges; no centred path; no console error; and a screenshot under
// target/web-screenshots/<screen>-<light|dark>.png for a person to look at.
//
//   const page = await phonePage(browser, 'dark', stack.token);   // 390×844, watched
//   ...
//   await looksRight(page, 'home');
//
// Other tests call `watch(page)` on a page of their own (before it loads) and `looksRight`.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { SHOTS, WAIT } from './harness.mjs';

/** The phone every screen is checked at. */
export const PHONE = { width: 390, height: 844 };

/**
 * The intended horizontal scrollers: content inside one of these may be wider than the
 * screen (the scroller itself must fit, and scroll with `overflow-x: auto | scroll` when its
 * content is wider; it may wrap instead). Nothing else may extend past the right edge or
 * scroll sideways.
 */
export const SCROLLERS = [
  '.md pre', // a code block in agent text
  '.text-view .lines', // a text file's lines
  '.diff pre', // a diff in a tool card
  '.tool-text', // a tool's raw output
];

const watched = new WeakMap();

/** Starts collecting `page`'s console errors and uncaught exceptions (once per page). */
export function watch(page) {
  if (watched.has(page)) return watched.get(page);
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(`uncaught: ${e.message}`));
  watched.set(page, errors);
  return errors;
}

/**
 * A 390×844 touch phone page in `scheme` (light | dark), watched; `token` (if given) is
 * stored as a paired browser would have it.
 */
export async function phonePage(browser, scheme, token) {
  const page = await (await phoneContext(browser, scheme, token)).newPage();
  watch(page);
  return page;
}

async function phoneContext(browser, scheme, token) {
  const context = await browser.newContext({
    viewport: PHONE, deviceScaleFactor: 2, isMobile: true, hasTouch: true, colorScheme: scheme,
  });
  context.setDefaultTimeout(WAIT);
  if (token) await context.addInitScript((t) => localStorage.setItem('zcode-acp.token', t), token);
  return context;
}

/** Per browser: its shared phones (context promises) by scheme and token. */
const phones = new WeakMap();

/**
 * Like `phonePage`, but a new page of one phone per browser, scheme and token, made at the
 * first call: a new context costs chromium a cold cache and the service worker's install
 * (~1.5 CPU-s), a page a fraction of that. For a test that needs no storage of its own and
 * leaves none that matters to the next; close the page, not its context (a closed one is
 * made again).
 */
export async function sharedPhonePage(browser, scheme, token) {
  let byKey = phones.get(browser);
  if (!byKey) phones.set(browser, (byKey = new Map()));
  const key = `${scheme} ${token || ''}`;
  if (!byKey.has(key)) {
    const made = phoneContext(browser, scheme, token);
    byKey.set(key, made);
    (await made).once('close', () => { if (byKey.get(key) === made) byKey.delete(key); });
  }
  const page = await (await byKey.get(key)).newPage();
  watch(page);
  return page;
}

/** What the page shows, checked inside the browser: returns a list of problems. */
function inspect({ scrollers, width }) {
  const problems = [];
  // The phone's width, not innerWidth: a mobile browser lays a too-wide page out wider and
  // zooms out, so innerWidth grows with the overflow it should reveal.
  const vw = width;
  if (window.innerWidth > vw) {
    problems.push(`the page is laid out ${window.innerWidth}px wide on a ${vw}px phone: something is too wide, the browser zoomed out`);
  }
  // Word-boundary matches (so "nullable" or "annulled" pass), repeats included ("nullnull").
  const bad = /(?<![\p{L}\p{N}_])(?:null|undefined|NaN)+(?![\p{L}\p{N}_])|\[object Object\]/u;
  const describe = (el) => {
    if (!el) return '?';
    let d = el.tagName.toLowerCase();
    if (el.id) d += `#${el.id}`;
    if (typeof el.className === 'string' && el.className.trim()) d += `.${el.className.trim().split(/\s+/).join('.')}`;
    const parent = el.parentElement;
    return parent && parent !== document.body ? `${describe(parent)} > ${d}` : d;
  };
  const shown = (el) => el.checkVisibility({ visibilityProperty: true })
    && el.getClientRects().length > 0;

  // 1. Visible text: text nodes, and what form controls show (value, placeholder).
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || ['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE'].includes(el.tagName)) continue;
    const m = bad.exec(n.data);
    if (!m || !shown(el)) continue;
    const r = document.createRange();
    r.selectNodeContents(n);
    const box = r.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) continue;
    problems.push(`visible text "${m[0]}" in ${describe(el)}: ${JSON.stringify(n.data.slice(0, 120))}`);
  }
  for (const el of document.querySelectorAll('input, textarea, select')) {
    if (!shown(el)) continue;
    const texts = [el.placeholder, el.type === 'password' ? '' : el.value,
      el.tagName === 'SELECT' && el.selectedOptions[0] ? el.selectedOptions[0].textContent : ''];
    for (const t of texts) {
      const m = t && bad.exec(t);
      if (m) problems.push(`visible text "${m[0]}" in ${describe(el)}: ${JSON.stringify(t.slice(0, 120))}`);
    }
  }
  const title = bad.exec(document.title);
  if (title) problems.push(`the tab title shows "${title[0]}": ${JSON.stringify(document.title)}`);

  // The connection pill names a state in words on every screen ("…" said nothing).
  const pill = document.querySelector('#conn');
  if (pill && shown(pill) && !/\p{L}{2,}/u.test(pill.textContent)) {
    problems.push(`the connection pill says nothing: ${JSON.stringify(pill.textContent)}`);
  }
  // Cards keep a gap from the screen's edges; paths read from their start (left-aligned).
  for (const el of document.querySelectorAll('.card')) {
    if (!shown(el)) continue;
    const r = el.getBoundingClientRect();
    if (r.left < 4 || r.right > vw - 4) {
      problems.push(`${describe(el)} touches the screen's edge (left ${Math.round(r.left)}, right ${Math.round(r.right)} of ${vw})`);
    }
  }
  for (const el of document.querySelectorAll('.path')) {
    if (shown(el) && getComputedStyle(el).textAlign === 'center') {
      problems.push(`${describe(el)} is centred: a path reads from its start: ${JSON.stringify((el.textContent || '').slice(0, 80))}`);
    }
  }

  // 2. Nothing wider than the screen.
  const sw = document.scrollingElement.scrollWidth;
  if (sw > vw) problems.push(`the page scrolls sideways: scrollWidth ${sw} > the phone's ${vw}`);
  const scrollerSel = scrollers.join(', ');
  const scrollsX = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  for (const el of document.body.querySelectorAll('*')) {
    if (!shown(el)) continue;
    const marked = el.matches(scrollerSel);
    const inside = el.parentElement && el.parentElement.closest(scrollerSel);
    if (inside && scrollsX(inside)) continue; // content of an intended scroller
    // A scroller may wrap instead; content wider than it must scroll, never spill or be cut.
    if (marked && el.scrollWidth > el.clientWidth + 1 && !scrollsX(el)) {
      problems.push(`${describe(el)} is an intended scroller whose content is wider (${el.scrollWidth}px in ${el.clientWidth}px) but it does not scroll sideways`);
    }
    const rects = [...el.getClientRects()];
    const right = Math.max(...rects.map((r) => r.right));
    if (right > vw + 0.5) {
      problems.push(`${describe(el)} extends past the right edge (right ${Math.round(right)} > ${vw}): ${JSON.stringify((el.textContent || '').trim().slice(0, 80))}`);
    }
    // A box that scrolls sideways where no scroller is meant (form controls scroll their own text).
    if (!marked && !['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName)
      && el.scrollWidth > el.clientWidth + 1 && scrollsX(el) && el.clientWidth > 0) {
      problems.push(`${describe(el)} scrolls sideways (content ${el.scrollWidth}px in ${el.clientWidth}px) and is not an intended scroller`);
    }
  }
  return problems;
}

/**
 * Checks the screen `page` shows and saves its screenshot as `<name>-<scheme>.png`. Fails with
 * every problem found. `opts.console`: regexps of console errors this screen expects (a
 * stopped hub makes the browser log its refused requests); every other console error since
 * the last check fails it. `opts.known`: a note naming a known defect, added to the message.
 * `opts.fullPage`: screenshot the whole page, not only the screen; `opts.screenshot: false`: none.
 */
export async function looksRight(page, name, opts = {}) {
  const errors = watch(page);
  const scheme = await page.evaluate(() => (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light'));
  const vw = page.viewportSize()?.width;
  assert.equal(vw, PHONE.width, `${name} (${scheme}): checked at ${vw}px wide, not on a ${PHONE.width}px phone`);
  if (opts.screenshot !== false) {
    fs.mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: path.join(SHOTS, `${name}-${scheme}.png`), fullPage: !!opts.fullPage });
  }
  const problems = await page.evaluate(inspect, { scrollers: SCROLLERS, width: PHONE.width });
  const expected = opts.console || [];
  const logged = errors.splice(0);
  for (const e of logged) if (!expected.some((re) => re.test(e))) problems.push(`console error: ${e}`);
  const note = opts.known ? `\n(${opts.known})` : '';
  assert.deepEqual(problems, [], `${name} (${scheme}) does not look right:\n  ${problems.join('\n  ')}${note}`);
}
