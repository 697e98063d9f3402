// `scripts/bench-fleet`, the browser part (not a test: the suite runs only *.test.mjs): one
// phone page (390×844 Chromium, no throttling: what is measured is the merging, not the
// network) served by the first of BENCH_HUBS hubs on this machine (default 10), each with its
// own home and one demo-agent bridge holding BENCH_SESSIONS live sessions (default 100), one
// short turn each. The page is paired with every hub (the first by its link, the others under
// "Add a machine"). Measured:
//  - the merged home from a warm start (the client cached, every machine paired and its last
//    answer kept), BENCH_LOADS reloads (default 20), each timed twice: until it is shown (every
//    other machine's block with its rows, its 10 latest sessions, whether kept from its last
//    answer or fresh, and the page's own sessions) and until it is fresh (every machine online,
//    having answered this load), in the page from the reload's start;
//  - opening a session of any machine from a cold page load (as a notification's link would):
//    until its first message shows, BENCH_OPENS times (default 20), on machines in turn.
// The demo agent is a script: no model time is in these figures. Prints Markdown.

import os from 'node:os';
import { Stack, launchBrowser } from './harness.mjs';

const HUBS = Number(process.env.BENCH_HUBS || 10);
const SESSIONS = Number(process.env.BENCH_SESSIONS || 100);
const LOADS = Number(process.env.BENCH_LOADS || 20);
const OPENS = Number(process.env.BENCH_OPENS || 20);
const LONG = Number(process.env.BENCH_WAIT_MS || 120000);

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};
const ms = (x) => `${Math.round(x)} ms`;

const started = Date.now();
const load = () => os.loadavg().map((x) => x.toFixed(1)).join(' ');
const loadBefore = load();
const stacks = await Promise.all(Array.from({ length: HUBS }, () => Stack.start({ env: () => ({ ZCODE_ACP_SERVE_IDLE_MS: '600000' }) })));
const browser = await launchBrowser({ full: true }); // the full browser, as a phone runs
const sessions = []; // {hub, instance, sid, cwd}
try {
  await Promise.all(stacks.map(async (stack, hub) => {
    const ed = await stack.bridge();
    const ids = [];
    for (let i = 0; i < SESSIONS; i++) ids.push(await ed.newSession(stack.project));
    // One short turn each, a few at a time.
    for (let i = 0; i < ids.length; i += 10) await Promise.all(ids.slice(i, i + 10).map((sid, k) => ed.prompt(sid, `hello ${hub}/${i + k}`)));
    for (const sid of ids) sessions.push({ hub, instance: ed.id, sid, cwd: stack.project });
  }));
  const setupS = ((Date.now() - started) / 1000).toFixed(0);
  const pairing = async (stack) => (await stack.api('/api/pairing', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ scope: 'full' }),
  })).url;

  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  context.setDefaultTimeout(LONG);
  const page = await context.newPage();
  await page.goto(await pairing(stacks[0]));
  await page.locator('#instances li[data-session]').first().waitFor();
  const links = await Promise.all(stacks.slice(1).map(pairing));
  const hostIds = [(await stacks[0].api('/api/version')).hostId];
  await page.evaluate(async (ls) => {
    const { addMachine } = await import('/js/machines.js');
    for (const [i, l] of ls.entries()) await addMachine(l, `machine ${i + 1}`);
  }, links);
  for (const s of stacks.slice(1)) hostIds.push((await s.api('/api/version')).hostId);

  // The merged home, warm, timed in the page from the reload's start (performance.now(), when
  // the DOM is in place, a frame before it is painted; no round trip to Playwright counted):
  // shown when the page's own sessions and every other machine's rows (kept or fresh) are in
  // it; fresh when every machine, this page's own included, has answered this load.
  await page.addInitScript(([n, perMachine]) => {
    if (location.pathname !== '/') return;
    const at = {};
    window.benchHome = at;
    const state = (b) => b.querySelector('[data-machine-state]')?.dataset.machineState;
    // A machine shows its 10 latest live sessions (and "Show all N") on the home screen.
    const rows = (b) => document.querySelectorAll(`#instances li[data-session][data-machine="${b.dataset.machine}"]`).length >= Math.min(10, perMachine);
    const check = () => {
      const blocks = [...document.querySelectorAll('#fleet .machine-block')];
      if (document.querySelectorAll('#instances li[data-session]').length < perMachine || blocks.length !== n) return;
      if (!at.shown && blocks.every((b) => ['online', 'cached'].includes(state(b)) && rows(b))) at.shown = performance.now();
      if (!at.fresh && document.querySelector('#instances').dataset.kept !== 'yes' && blocks.every((b) => state(b) === 'online' && rows(b))) {
        at.fresh = performance.now();
        watcher.disconnect();
      }
    };
    const watcher = new MutationObserver(check);
    watcher.observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-kept'] });
  }, [HUBS - 1, SESSIONS]);
  const shown = [];
  const homes = [];
  for (let i = 0; i < LOADS + 2; i++) {
    await page.goto(`${stacks[0].base}/`);
    await page.waitForFunction(() => window.benchHome && window.benchHome.fresh, null, { polling: 50, timeout: LONG });
    const at = await page.evaluate(() => window.benchHome);
    if (i >= 2) { shown.push(at.shown); homes.push(at.fresh); } // the first two warm the caches
  }
  // Where the last reload's time went: each API path's requests, median duration.
  const spent = await page.evaluate(() => {
    const by = {};
    for (const e of performance.getEntriesByType('resource')) {
      const u = new URL(e.name);
      if (!u.pathname.startsWith('/api/')) continue;
      (by[u.pathname] ||= []).push(e);
    }
    const med = (xs) => Math.round(xs.sort((a, b) => a - b)[xs.length >> 1]);
    return Object.entries(by).map(([p, es]) => `${p} ×${es.length} started at ${med(es.map((e) => e.startTime))}, took ${med(es.map((e) => e.duration))} ms (medians)`);
  });

  // Any session, from a page load: its first message shows.
  const opens = [];
  for (let i = 0; i < OPENS; i++) {
    const s = sessions[(i * 997 + 13) % sessions.length];
    const m = s.hub === 0 ? '' : `&m=${encodeURIComponent(hostIds[s.hub])}`;
    const t0 = Date.now();
    await page.goto(`${stacks[0].base}/s/${encodeURIComponent(s.instance)}/${encodeURIComponent(s.sid)}?cwd=${encodeURIComponent(s.cwd)}${m}`);
    await page.locator('.msg.agent').first().waitFor().catch(async (e) => {
      await page.screenshot({ path: 'target/bench-fleet-stuck.png' });
      throw new Error(`${page.url()}: ${e.message}`);
    });
    opens.push(Date.now() - t0);
  }

  console.log(`bench-fleet: ${HUBS} hubs × ${SESSIONS} live sessions (demo agent, one turn each; set up in ${setupS} s), one page paired with all; load average ${loadBefore} before, ${load()} after`);
  console.log('');
  console.log('| measured | p50 | p95 | max | runs |');
  console.log('|---|---|---|---|---|');
  console.log(`| merged home, warm reload → shown (every machine's rows, kept or fresh) | ${ms(pct(shown, 50))} | ${ms(pct(shown, 95))} | ${ms(Math.max(...shown))} | ${shown.length} |`);
  console.log(`| merged home, warm reload → fresh (every machine online with its rows) | ${ms(pct(homes, 50))} | ${ms(pct(homes, 95))} | ${ms(Math.max(...homes))} | ${homes.length} |`);
  console.log(`\nthe last reload's API requests: ${spent.join('; ')}\n`);
  console.log(`| any machine's session, page load → first message | ${ms(pct(opens, 50))} | ${ms(pct(opens, 95))} | ${ms(Math.max(...opens))} | ${opens.length} |`);
} finally {
  await browser.close();
  await Promise.all(stacks.map((s) => s.stop()));
}
