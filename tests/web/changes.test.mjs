// A session's changes on a phone: from the session's Changes button to the changed files
// (branch, ahead/behind, +/−), a file's diff (line numbers, word marks, colouring, folded
// context), a remark on a line sent to the agent as one prompt quoting `path:line` and the hunk,
// a long-press, a binary file's placeholder, and a session outside any git repository.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { startStack, stopStack, until } from './harness.mjs';
import { phonePage, looksRight } from './look.mjs';

/** git in `dir`, without the test's own GIT_* environment. */
function git(dir, ...args) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('GIT_')));
  return execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'init.defaultBranch=main', ...args], { cwd: dir, env }).toString().trim();
}

describe('changes: review the agent\'s changes on a phone', () => {
  let stack; let browser;

  before(async () => {
    [stack, browser] = await startStack();
  });

  after(() => stopStack(stack, browser));

  it('lists the changes, shows a diff with word marks and sends a remark to the agent', async () => {
    const p = stack.project;
    const body = Array.from({ length: 40 }, (_, i) => `const value${i + 1} = ${i + 1}; // line ${i + 1}`);
    body[1] = 'const greeting = "hello world";';
    fs.writeFileSync(path.join(p, 'app.js'), `${body.join('\n')}\n`);
    fs.writeFileSync(path.join(p, 'gone.txt'), 'bye\n');
    fs.writeFileSync(path.join(p, 'data.bin'), Buffer.from([0, 1, 2, 0]));
    git(p, 'init', '-q');
    git(p, 'add', '-A');
    git(p, 'commit', '-qm', 'first');
    body[1] = 'const greeting = "hello brave world";';
    body[30] = 'const value31 = 310; // line 31';
    fs.writeFileSync(path.join(p, 'app.js'), `${body.join('\n')}\n`);
    fs.rmSync(path.join(p, 'gone.txt'));
    fs.writeFileSync(path.join(p, 'data.bin'), Buffer.from([0, 9, 9, 0]));
    fs.writeFileSync(path.join(p, 'notes.md'), '# notes\none\ntwo\n');
    const plain = fs.mkdtempSync(path.join(stack.home, 'plain-'));

    const ed = await stack.bridge();
    const sid = await ed.newSession(p);
    const plainSid = await ed.newSession(plain);
    const page = await phonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/s/${ed.id}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(p)}`);
    // The toolbar is drawn again once the session answers (its menu closed): open it then.
    await page.locator('#changes-btn:not([disabled])').waitFor({ state: 'attached' });
    await until('the More menu to show Changes', async () => {
      if (!(await page.locator('#changes-btn').isVisible())) await page.locator('#more summary').click();
      return page.locator('#changes-btn:not([disabled])').isVisible();
    });
    await page.locator('#changes-btn').click();
    await page.waitForURL(/\/c\//);

    // The list: branch, every change with its counts.
    const rows = page.locator('#changes-files li');
    await rows.first().waitFor();
    assert.equal(await rows.count(), 4);
    assert.equal(await page.locator('#changes-branch').innerText(), 'main');
    assert.match(await page.locator('#changes-track').innerText(), /no upstream/);
    const row = (f) => page.locator(`#changes-files li[data-path="${f}"]`);
    assert.equal(await row('app.js').getAttribute('data-status'), 'modified');
    assert.match(await row('app.js').innerText(), /\+2\s+−2/);
    assert.equal(await row('gone.txt').getAttribute('data-status'), 'deleted');
    assert.equal(await row('notes.md').getAttribute('data-status'), 'untracked');
    assert.match(await row('notes.md').innerText(), /\+3\s+−0/);
    assert.match(await row('data.bin').innerText(), /binary/);
    const box = await row('app.js').locator('a').boundingBox();
    assert.ok(box.height >= 44, `a file row is ${box.height}px tall`);
    await looksRight(page, 'changes-list');

    // A diff: line numbers, the changed words marked, colouring, the long unchanged run folded.
    await row('app.js').locator('a').click();
    await page.locator('#diff-view').waitFor();
    const added = page.locator('#diff-view .dl.add').first();
    assert.equal(await added.getAttribute('data-new'), '2');
    assert.deepEqual(await added.locator('mark.wd').allInnerTexts(), ['brave ']);
    assert.deepEqual(await page.locator('#diff-view .dl.del').first().locator('mark.wd').count(), 0, 'nothing was removed from that line');
    assert.deepEqual(await page.locator('#diff-view .dl.add').nth(1).locator('mark.wd').allInnerTexts(), ['310']);
    assert.ok(await page.locator('#diff-view .dl .tok-kw').count() > 0, 'keywords coloured');
    const fold = page.locator('#diff-view .fold').first();
    assert.match(await fold.innerText(), /unchanged lines/);
    await looksRight(page, 'changes-diff');
    await page.emulateMedia({ colorScheme: 'dark' });
    await looksRight(page, 'changes-diff');
    await page.emulateMedia({ colorScheme: 'light' });
    const before = await page.locator('#diff-view .dl').count();
    await fold.click();
    assert.ok(await page.locator('#diff-view .dl').count() > before, 'the fold opened');

    // A long press opens the remark at once (then cancelled).
    const lineBox = await page.locator('#diff-view .dl.del').first().boundingBox();
    await page.mouse.move(lineBox.x + 100, lineBox.y + lineBox.height / 2);
    await page.mouse.down();
    await page.locator('#remark').waitFor();
    await page.mouse.up();
    assert.match(await page.locator('#remark-spot').innerText(), /^app\.js:2 \(before the change\)$/);
    await page.locator('#remark-cancel').click();
    await page.locator('#remark').waitFor({ state: 'detached' });

    // A hunk's own Comment button quotes its range.
    await page.locator('#diff-view .hunk-comment').nth(1).click();
    assert.equal(await page.locator('#remark-spot').innerText(), 'app.js:21-40');
    await page.locator('#remark-cancel').click();
    await page.locator('#remark').waitFor({ state: 'detached' });

    // A tap selects a line; its Comment button opens the remark; Send goes to the agent.
    await added.click();
    await added.locator('.line-comment').click();
    await page.locator('#remark').waitFor();
    assert.equal(await page.locator('#remark-spot').innerText(), 'app.js:2');
    await page.fill('#remark-input', 'Say hello to everyone instead');
    await looksRight(page, 'changes-remark');
    await page.locator('#remark-send').click();
    await page.waitForURL(/\/s\//);
    await page.locator('.msg.agent', { hasText: /You said: "About app\.js:2: Say hello to everyone instead/ }).waitFor();
    const echoed = await until('the prompt at the agent', () => ed.notes.find((n) => n.params?.update?.sessionUpdate === 'user_message_chunk'
      && String(n.params.update.content?.text).includes('app.js:2')));
    const text = echoed.params.update.content.text;
    assert.match(text, /^About `app\.js:2`: Say hello to everyone instead\n\n```diff\n@@ -1,/);
    assert.match(text, /\n-const greeting = "hello world";\n\+const greeting = "hello brave world";\n/);
    assert.match(text, /```$/);
    await looksRight(page, 'changes-sent');

    // A binary file's placeholder; a session outside any repository.
    await page.goto(`${stack.base}/c/${ed.id}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(p)}&file=data.bin`);
    await page.locator('#diff-binary').waitFor();
    await page.goto(`${stack.base}/c/${ed.id}/${encodeURIComponent(plainSid)}?cwd=${encodeURIComponent(plain)}`);
    await page.locator('#not-git').waitFor();
    assert.match(await page.locator('#not-git').innerText(), /not in a git repository/);
    await looksRight(page, 'changes-not-git');
    await page.context().close();
  });
});
