// Every screen of the web client, visited on a 390×844 phone in light and in dark, each checked
// by look.mjs (no visible null/undefined/NaN/[object Object], nothing wider than the screen, no
// console error) and photographed into target/web-screenshots/<screen>-<scheme>.png: pairing
// and a rejected token, home, projects, a project's history, browse, a session finished,
// streaming and asking permission, files, file views (long, short, wide lines), an unknown
// instance, and a stopped hub.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, launchBrowser, until, stopStack } from './harness.mjs';
import { looksRight, phonePage } from './look.mjs';

const SCHEMES = ['light', 'dark'];
// The browser's own log of a refused or failed request (not the page's errors): expected only
// on the screens that are about such a failure.
const STATUS = (code) => new RegExp(`^Failed to load resource: the server responded with a status of ${code} `);
// A hub going away: whatever the browser's network log says about the requests and sockets it
// cut (refused, reset, or the 404 of a bridge that left first).
const CUT = [/^Failed to load resource: (net::ERR_\w+|the server responded with a status of \d{3} )/, /^WebSocket connection to '.*' failed: /];
const WS_404 = /^WebSocket connection to '.*' failed: Error during WebSocket handshake: Unexpected response code: 404$/;

describe('web client screens at phone size, light and dark', () => {
  let stack; let browser; let ed; let sid; let old;
  const pages = {};

  before(async () => {
    const launching = launchBrowser(); // while the stack starts
    // The project sits in a temp dir, which the known-project list shows only under a
    // configured root; headless bridges only, and they stay until the stack stops them.
    stack = await Stack.start({
      env: (home) => ({ ZCODE_ACP_PROJECT_ROOTS: home, ZCODE_ACP_HUB_TERMINAL: '0', HOME: home, ZCODE_ACP_SERVE_IDLE_MS: '600000' }),
    });
    browser = await launching;
    const lines = Array.from({ length: 450 }, (_, i) => `log line ${i + 1}`).join('\n');
    fs.writeFileSync(path.join(stack.project, 'notes.txt'), `${lines}\n`);
    fs.writeFileSync(path.join(stack.project, 'short.txt'), 'one\ntwo\nthree\n');
    const wide = `const x = ${JSON.stringify('w'.repeat(240))}; // a long line that must scroll inside its box\n`;
    fs.writeFileSync(path.join(stack.project, 'wide.js'), `${wide}${wide}let y = 1;\n`);
    // A conversation whose editor has gone (the project's history), and a live one.
    const gone = await stack.bridge();
    old = await gone.newSession(stack.project);
    await gone.prompt(old, 'an old conversation');
    await gone.close();
    ed = await stack.bridge();
    sid = await ed.newSession(stack.project);
    await ed.prompt(sid, 'hello from the editor');
    // A word longer than the screen (a path, a hash) must wrap inside its bubble.
    await ed.prompt(sid, `look at /${'very-long-directory-name/'.repeat(8)}file.rs and ${'0123456789abcdef'.repeat(6)}`);
    // Tool cards with long paths, locations and a diff; agent text with a long line and code.
    const deep = `${'deeply-nested-folder/'.repeat(5)}a-file-with-a-rather-long-name.rs`;
    const content = `fn main() { let s = "${'x'.repeat(150)}"; } // \`${'y'.repeat(80)}\`\nsecond\n`;
    let done = false;
    const tools = ed.prompt(sid, `read:${deep} write:${deep}`).finally(() => { done = true; });
    while (!done) { // the editor's side of the file access, as the agent asks for it
      for (const r of ed.requests.filter((q) => !q.taken)) {
        r.taken = true;
        ed.answer(r.id, r.method === 'fs/read_text_file' ? { content } : {});
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    await tools;
    await stack.listed(ed.id, sid);
    for (const scheme of SCHEMES) pages[scheme] = await phonePage(browser, scheme, stack.token);
  });

  after(() => stopStack(stack, browser));

  const sessionUrl = () => `${stack.base}/s/${ed.id}/${sid}?cwd=${encodeURIComponent(stack.project)}`;
  const filesUrl = (q = '') => `${stack.base}/f/${ed.id}/${sid}?cwd=${encodeURIComponent(stack.project)}${q}`;
  const project = (page) => page.locator(`#projects .project[data-path="${stack.project}"]`);

  /** Runs `visit(page, scheme)` on the light phone, then on the dark one. */
  async function both(visit) {
    for (const scheme of SCHEMES) await visit(pages[scheme], scheme);
  }

  it('the checker sees each kind of defect, and not what merely resembles one', async () => {
    const page = await phonePage(browser, 'light');
    const head = '<meta name="viewport" content="width=device-width, initial-scale=1">'
      + '<style>body { margin: 0; font: 16px sans-serif } .md pre { overflow-x: auto; white-space: pre }</style>';
    const bad = [
      ['<p>null</p>', /visible text "null" in p/],
      ['<ul><li>a.txt</li></ul><p>nullnull</p>', /visible text "nullnull"/],
      ['<p>Total: NaN items</p>', /visible text "NaN"/],
      ['<p>Hello [object Object]</p>', /visible text "\[object Object\]"/],
      ['<p><span>size </span><b>undefined</b></p>', /visible text "undefined" in p > b/],
      ['<input placeholder="undefined">', /visible text "undefined" in input/],
      ['<div id="w" style="width: 500px">wide</div>', /laid out \d+px wide[\s\S]*page scrolls sideways[\s\S]*div#w extends past the right edge/],
      ['<div id="f" style="position: fixed; left: 300px; width: 200px">off the edge</div>', /div#f extends past the right edge/],
      ['<div id="s" style="overflow-x: auto"><div style="width: 900px">x</div></div>', /div#s scrolls sideways .* not an intended scroller/],
      [`<div class="md"><pre id="p" style="overflow: hidden">${'x'.repeat(300)}</pre></div>`, /pre#p is an intended scroller whose content is wider .* does not scroll sideways/],
      ['<script>console.error("boom")</script><p>ok</p>', /console error: boom/],
      ['<script>throw new Error("bad script")</script><p>ok</p>', /console error: uncaught: bad script/],
    ];
    for (const [html, problem] of bad) {
      await page.setContent(head + html);
      await assert.rejects(looksRight(page, 'checker', { screenshot: false }), problem, html);
    }
    const fine = [
      '<p>nullable, annulled, Nancy, undefinedness, NaNo, null_ptr</p>',
      '<p hidden>null</p><p style="display: none">undefined</p><p style="visibility: hidden">NaN</p>',
      `<div class="md"><pre>${'x'.repeat(300)}</pre></div>`,
      `<div class="md"><pre style="overflow: visible; white-space: pre-wrap; overflow-wrap: anywhere">${'x'.repeat(300)}</pre></div>`,
      '<p style="overflow-wrap: anywhere">' + 'y'.repeat(300) + '</p>',
      '<input value="' + 'z'.repeat(300) + '" style="width: 100%">',
    ];
    for (const html of fine) {
      await page.setContent(head + html);
      await looksRight(page, 'checker', { screenshot: false });
    }
    await page.context().close();
  });

  it('pairing, and a rejected token', async () => {
    for (const scheme of SCHEMES) {
      const page = await phonePage(browser, scheme); // never paired
      await page.goto(`${stack.base}/`);
      await page.locator('#token-input').waitFor();
      await looksRight(page, 'pairing');
      assert.equal((await page.locator('#conn').textContent()).trim(), 'not paired');
      await page.goto(`${stack.base}/#token=not-the-token`);
      await page.locator('#pair-error', { hasText: 'rejected' }).waitFor();
      await looksRight(page, 'pairing-rejected', { console: [STATUS(401)] });
      await page.context().close();
    }
  });

  it('home', () => both(async (page) => {
    await page.goto(`${stack.base}/`);
    await page.locator(`[data-instance="${ed.id}"] [data-session="${sid}"]`).waitFor();
    await project(page).waitFor();
    await until('browse to list', async () => (await page.locator('#browse .browse-head').count()) > 0);
    await looksRight(page, 'home');
  }));

  it('projects', () => both(async (page) => {
    await project(page).scrollIntoViewIfNeeded();
    await page.locator('#projects').evaluate((n) => n.scrollIntoView({ block: 'start' }));
    await looksRight(page, 'projects');
  }));

  it('history', () => both(async (page) => {
    await project(page).locator('button', { hasText: 'History' }).click();
    const row = project(page).locator('.history li', { hasText: 'an old conversation' });
    await row.waitFor();
    await row.evaluate((n) => n.scrollIntoView({ block: 'center' }));
    await looksRight(page, 'history');
  }));

  it('the headless bridge a history listing starts is not shown as an empty live instance', async () => {
    // A history listing incubates a headless bridge for the project (the contract's incubator)
    // and answers once it is registered. (This stack's serve bridges do not idle out: the one
    // the history screen above started could be gone by now on a loaded machine, and this test
    // would show nothing.)
    const listing = await stack.api(`/api/projects/sessions?workspacePath=${encodeURIComponent(stack.project)}`);
    const id = listing.instance && listing.instance.id;
    assert.ok(id, `the listing names its instance: ${JSON.stringify(listing)}`);
    const incubator = (await stack.api('/api/instances')).find((i) => i.id === id);
    assert.ok(incubator && incubator.origin === 'serve' && !(incubator.sessions || []).length,
      `the incubator is listed, with no session: ${JSON.stringify(incubator)}`);
    await both(async (page) => {
      await page.goto(`${stack.base}/`);
      await page.locator(`[data-instance="${ed.id}"] [data-session="${sid}"]`).waitFor();
      assert.equal(await page.locator(`[data-instance="${id}"]`).count(), 0,
        'an instance with "No live session" that nobody started appeared on home');
      assert.equal(await page.locator('#instances', { hasText: 'No live session on this instance' }).count(), 0);
    });
    assert.ok((await stack.api('/api/instances')).some((i) => i.id === id), 'the incubator was still running');
  });

  it('browse', () => both(async (page) => {
    const browse = page.locator('#browse');
    // Into the project root's listing (the home, a configured root): sessions can start there.
    await browse.locator('.browse-head code', { hasText: stack.home }).waitFor();
    await browse.locator('.dirs button', { hasText: 'project/' }).click();
    await browse.locator('.browse-head code', { hasText: stack.project }).waitFor();
    await browse.evaluate((n) => n.scrollIntoView({ block: 'start' }));
    await looksRight(page, 'browse');
  }));

  it('session, finished', () => both(async (page) => {
    await page.goto(sessionUrl());
    await page.locator('#transcript .msg.agent', { hasText: 'You said: "read:deeply' }).waitFor();
    // Open every tool card: their content must fit as well.
    await page.locator('#transcript .msg.tool details').evaluateAll((ds) => { for (const d of ds) d.open = true; });
    await looksRight(page, 'session-finished');
  }));

  it('session, mid-stream', () => both(async (page) => {
    // `hold`: the turn runs until Stop, however slow the machine (a plain `long` turn ends on
    // its own, and under load it could end before the screenshot or the click).
    const turn = ed.prompt(sid, 'a long turn please, hold it');
    await page.locator('.msg.user:has-text("a long turn please") ~ .msg.agent:has-text("tick 3")').waitFor();
    await looksRight(page, 'session-streaming');
    await page.click('#cancel');
    assert.equal((await turn).stopReason, 'cancelled');
    await page.locator('.session-view[data-busy="false"]').waitFor();
  }));

  it('session, asking permission', () => both(async (page) => {
    const turn = ed.prompt(sid, 'permission to look');
    const card = page.locator('.request.permission');
    await card.waitFor();
    await looksRight(page, 'permission');
    await card.locator('[data-option="allow"]').click();
    await turn;
    await page.locator('#transcript .msg.agent', { hasText: 'Permission granted' }).last().waitFor();
  }));

  it('files', () => both(async (page) => {
    await page.goto(filesUrl());
    await page.locator('[data-name="notes.txt"]').waitFor();
    await looksRight(page, 'files', { screenshot: false });
    // The listing came from the hub: the pill says so (it said "…" here).
    await page.locator('#conn', { hasText: 'online' }).waitFor();
    await looksRight(page, 'files');
  }));

  it('file view: a long file, a short one, and one with lines wider than the screen', () => both(async (page) => {
    await page.goto(filesUrl('&file=notes.txt'));
    await page.locator('.lines .line', { hasText: 'log line 200' }).waitFor();
    await page.locator('#conn', { hasText: 'online' }).waitFor();
    await looksRight(page, 'file-view');
    await page.goto(filesUrl('&file=short.txt'));
    await page.locator('.lines .line', { hasText: 'three' }).waitFor();
    await looksRight(page, 'file-view-short');
    await page.goto(filesUrl('&file=wide.js'));
    await page.locator('.lines .line', { hasText: 'let y = 1;' }).waitFor();
    await looksRight(page, 'file-view-wide');
  }));

  it('an unknown instance', () => both(async (page) => {
    await page.goto(`${stack.base}/s/999999/no-such-session?cwd=${encodeURIComponent(stack.project)}`);
    await page.locator('#conn[data-why="gone"]').waitFor();
    await looksRight(page, 'unknown-instance', { console: [STATUS(404), WS_404] });
  }));

  it('a stopped hub, on home and in a session', async () => {
    await both(async (page) => {
      // Home reads the hub every 250 ms here (every 4 s by default): it says the hub stopped
      // at its next read.
      await page.evaluate(() => localStorage.setItem('zcode-acp.test.homePollMs', '250'));
      await page.goto(`${stack.base}/`);
      await page.locator(`[data-instance="${ed.id}"]`).waitFor();
    });
    // A bridge that finds no hub starts one: the last bridge goes first, then the hub.
    await ed.close();
    await stack.stopHub();
    await both(async (page) => {
      await page.locator('#instances .error', { hasText: /hub|reach|network/i }).waitFor();
      // Nothing stale that invites a tap which cannot work: the projects and the directory
      // browser say they come back with the hub.
      await page.locator('#projects .offline').waitFor();
      await page.locator('#browse .offline').waitFor();
      assert.equal(await page.locator('#projects .project').count(), 0, 'stale projects shown');
      assert.equal(await page.locator('#browse button:not([disabled])', { hasText: 'Start a session here' }).count(), 0,
        '"Start a session here" enabled with the hub stopped');
      await looksRight(page, 'hub-stopped-home', { console: CUT });
      // The client is loaded: it opens a session without the hub (one of an instance this page
      // has no connection to yet, whose bridge may have been seen leaving: the hub is asked).
      await page.evaluate((u) => { history.pushState(null, '', u); dispatchEvent(new PopStateEvent('popstate')); },
        `/s/424242/${sid}?cwd=${encodeURIComponent(stack.project)}`);
      await page.locator('.conn-banner[data-why="down"]', { hasText: 'not answering' }).waitFor();
      await looksRight(page, 'hub-stopped-session', { console: CUT });
    });
  });
});
