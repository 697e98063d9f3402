// The Settings screen: MCP servers (add, edit, enable, delete), the default model of an agent,
// subagents and skills (enable, edit), backups (restore), and the "restart the agent" action
// after a needs-restart write, which says in words the turns it would cancel before the user
// confirms and confirms once the agent is back; the screen's layout on a phone (one title, the
// scope explained, spaced cards, the chosen MCP transport's fields only, subagents only where
// there are some).
// Checked at phone size, light and dark.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { until, ROOT, startStack, stopStack } from './harness.mjs';
import { sharedPhonePage, looksRight } from './look.mjs';

const SCRIPTED = path.join(ROOT, 'tests/peers/scripted_agent.py');

describe('web client settings', () => {
  let stack; let browser; let ed; let log; let user;

  before(async () => {
    [stack, browser] = await startStack({ env: (home) => ({ HOME: path.join(home, 'user') }) });
    user = path.join(stack.home, 'user');
    fs.mkdirSync(path.join(user, '.claude/agents'), { recursive: true });
    fs.mkdirSync(path.join(user, '.claude/skills/pdf'), { recursive: true });
    fs.writeFileSync(path.join(user, '.claude/agents/reviewer.md'), '---\nname: reviewer\ndescription: Reviews code\n---\nYou review.\n');
    fs.writeFileSync(path.join(user, '.claude/skills/pdf/SKILL.md'), '---\nname: pdf\ndescription: Reads PDFs\n---\n');
    log = path.join(stack.home, 'agent.log');
    ed = await stack.bridge(['python3', SCRIPTED, '--log', log, '--models', 'fast,smart']);
  });

  after(() => stopStack(stack, browser));

  const config = () => JSON.parse(fs.readFileSync(path.join(stack.home, 'config.json'), 'utf8'));
  const agentLog = () => (fs.existsSync(log) ? fs.readFileSync(log, 'utf8').trim().split('\n').map((l) => JSON.parse(l)) : []);

  it('adds an MCP server and restarts the agent, showing the turn it cancels first', async () => {
    const sid = await ed.newSession(stack.project);
    const turn = ed.prompt(sid, 'wait for the restart');
    await until('the turn to run', () => agentLog().some((e) => e.method === 'session/prompt'));
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/settings/${ed.id}`);
    await page.locator('#mcp-card', { hasText: 'No MCP servers yet.' }).waitFor();
    await page.click('#mcp-add');
    await page.fill('#mcp-name', 'files');
    await page.fill('#mcp-command', 'mcp-files');
    await page.fill('#mcp-args', '--read-only\n/srv');
    await page.fill('#mcp-env', 'TOKEN_FILE=/tmp/t');
    await page.click('dialog button[value="save"]');
    await page.locator('#mcp-card li[data-mcp="files"]').waitFor();
    assert.deepEqual(config().mcpServers.files, { type: 'stdio', command: 'mcp-files', args: ['--read-only', '/srv'], env: { TOKEN_FILE: '/tmp/t' } });
    await page.locator('#restart-agent').waitFor();
    await looksRight(page, 'settings-restart-needed', { fullPage: true });
    await page.click('#restart-agent');
    const preview = page.locator('#restart-preview');
    await preview.waitFor();
    // In words, no field names.
    assert.equal(await preview.textContent(), '1 running turn will be cancelled.');
    assert.doesNotMatch(await page.locator('dialog').innerText(), /cancelledTurns/);
    await looksRight(page, 'settings-restart-confirm');
    await page.click('dialog button[value="go"]');
    // A confirmation that stays until read, once the agent is back.
    await page.locator('#restart-done', { hasText: 'The agent is back' }).waitFor();
    assert.match(await page.locator('#restart-done').textContent(), /1 turn was cancelled\./);
    await looksRight(page, 'settings-restart-done');
    assert.equal((await turn).stopReason, 'cancelled');
    await until('the restart card to go', async () => !(await page.locator('#restart-agent').isVisible()));
    // The next prompt runs on a new agent process, with the server just added.
    const done = await ed.prompt(sid, 'after the restart');
    assert.equal(done.stopReason, 'end_turn');
    const load = agentLog().filter((e) => e.method === 'session/load').pop();
    assert.deepEqual(load.params.mcpServers.map((s) => s.name), ['files']);
    await page.close();
  });

  it('edits, disables and deletes an MCP server', async () => {
    const page = await sharedPhonePage(browser, 'dark', stack.token);
    await page.goto(`${stack.base}/settings/${ed.id}`);
    const row = page.locator('#mcp-card li[data-mcp="files"]');
    await row.locator('button', { hasText: 'Edit' }).click();
    await page.fill('#mcp-command', 'mcp-files-2');
    await page.click('dialog button[value="save"]');
    await until('the edit to land', () => config().mcpServers.files.command === 'mcp-files-2');
    await page.locator('#mcp-card li[data-mcp="files"]').locator('input[type=checkbox]').uncheck();
    await until('the server to be disabled', () => config().mcpServers.files.enabled === false);
    await looksRight(page, 'settings-mcp', { fullPage: true });
    await page.locator('#mcp-card li[data-mcp="files"] button', { hasText: 'Delete' }).click();
    await page.click('dialog button[value="ok"]');
    await until('the server to be gone', () => !config().mcpServers.files);
    await page.close();
  });

  it('sets the default model, toggles and edits subagents and skills, restores a backup', async () => {
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/settings/${ed.id}`);
    const provider = page.locator('#models-card li[data-provider="scripted"]');
    await provider.waitFor();
    await provider.locator('select').selectOption('smart');
    await until('the default model to be saved', () => config().models?.scripted?.defaultModel === 'smart');
    // Applied at the next session start through the agent's own call.
    await ed.newSession(stack.project);
    await until('session/set_model smart', () => agentLog().some((e) => e.method === 'session/set_model' && e.params.modelId === 'smart'));

    const agents = path.join(user, '.claude/agents');
    await page.locator('#agents-card li[data-subagent="reviewer"] input[type=checkbox]').uncheck();
    await until('the subagent to be disabled', () => fs.existsSync(path.join(agents, 'reviewer.md.disabled')));
    await page.locator('#agents-card li[data-subagent="reviewer"] button', { hasText: 'Edit' }).click();
    await page.fill('#agent-description', 'Reviews code carefully');
    await page.fill('#agent-model', 'smart');
    await page.click('dialog button[value="save"]');
    await until('the subagent file to change', () => {
      const t = fs.readFileSync(path.join(agents, 'reviewer.md.disabled'), 'utf8');
      return t.includes('description: Reviews code carefully') && t.includes('model: smart') && t.endsWith('You review.\n');
    });
    assert.equal(await page.locator('#agents-card li[data-subagent="Explore"] input[type=checkbox]').count(), 0, 'a built-in has no switch');

    await page.locator('#skills-card li[data-skill="pdf"] input[type=checkbox]').uncheck();
    await until('the skill to be disabled', () => fs.existsSync(path.join(user, '.claude/skills/pdf/SKILL.md.disabled')));
    await looksRight(page, 'settings-sections', { fullPage: true });

    const before = JSON.stringify(config());
    const restore = page.locator('#backups-card li[data-file="config.json"] button', { hasText: 'Restore' }).first();
    await restore.click();
    await page.click('dialog button[value="ok"]');
    await page.locator('.toast', { hasText: 'Restored.' }).waitFor();
    assert.notEqual(JSON.stringify(config()), before, 'the restore changed config.json back');
    await page.close();
  });

  it('is reachable from the header and works without an agent (the hub mount)', async () => {
    const page = await sharedPhonePage(browser, 'dark', stack.token);
    await page.goto(`${stack.base}/`);
    await page.click('#settings-link');
    await page.waitForURL(/\/settings$/);
    await page.locator('#mcp-card').waitFor();
    // The hub's own mount: no agent to restart, but the providers the live bridges' agents
    // reported, as on the bridge's own mount (issue 29: it used to list none).
    const reported = (await stack.api(`/api/instances/${ed.id}/settings/models`)).providers.map((p) => p.id);
    assert.ok(reported.length > 0);
    for (const id of reported) await page.locator(`#models-card li[data-provider="${id}"]`).waitFor();
    assert.equal(await page.locator('#settings-instance').inputValue(), '');
    assert.equal(await page.locator('#restart-agent').count(), 0);
    await looksRight(page, 'settings-hub', { fullPage: true });
    await page.close();
  });

  /** The hub's own settings screen on a light phone, loaded. */
  async function hubSettings() {
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/settings`);
    await page.locator('#models-card').waitFor();
    return page;
  }

  it('says "Settings" once (the bar), not as the bar, the header link and a heading', async () => {
    const page = await hubSettings();
    const said = await page.evaluate(() => [...document.querySelectorAll('body *')]
      .filter((n) => n.checkVisibility() && [...n.childNodes].some((c) => c.nodeType === 3 && c.data.trim() === 'Settings')).length);
    assert.equal(said, 1, 'the word "Settings" as a title, shown times');
    await looksRight(page, 'settings-layout', { fullPage: true });
    await page.close();
  });

  it('explains "This machine (no agent)" and an agent\'s scope', async () => {
    const page = await hubSettings();
    assert.match(await page.locator('#settings-scope').innerText(), /This machine \(no agent\): .*every agent/);
    await page.selectOption('#settings-instance', String(ed.id));
    await page.locator('#settings-scope', { hasText: 'This agent' }).waitFor();
    await page.close();
  });

  it('spaces the cards apart', async () => {
    const page = await hubSettings();
    const gaps = await page.evaluate(() => {
      const cards = [...document.querySelectorAll('.settings section.card')].filter((c) => c.checkVisibility()).map((c) => c.getBoundingClientRect());
      return cards.slice(1).map((r, i) => Math.round(r.top - cards[i].bottom));
    });
    assert.ok(gaps.length >= 4 && gaps.every((g) => g >= 8), `gaps between cards: ${gaps}`);
    await page.close();
  });

  it('shows only the chosen transport\'s fields in the MCP form', async () => {
    const page = await hubSettings();
    await page.click('#mcp-add');
    const visible = async () => Object.fromEntries(await Promise.all(['#mcp-command', '#mcp-args', '#mcp-env', '#mcp-url', '#mcp-headers']
      .map(async (id) => [id, await page.locator(id).isVisible()])));
    assert.deepEqual(await visible(), { '#mcp-command': true, '#mcp-args': true, '#mcp-env': true, '#mcp-url': false, '#mcp-headers': false });
    await page.selectOption('#mcp-type', 'http');
    assert.deepEqual(await visible(), { '#mcp-command': false, '#mcp-args': false, '#mcp-env': false, '#mcp-url': true, '#mcp-headers': true });
    await looksRight(page, 'settings-mcp-http');
    await page.close();
  });

  it('lists subagents only for an agent that has some', async () => {
    const page = await sharedPhonePage(browser, 'dark', stack.token);
    await page.goto(`${stack.base}/settings/${ed.id}`);
    await page.locator('#agents-card li[data-subagent="reviewer"]').waitFor();
    // Without a file, no card: the built-ins alone say nothing about this agent.
    const agents = path.join(user, '.claude/agents');
    fs.renameSync(agents, `${agents}.away`);
    try {
      await page.reload();
      await page.locator('#skills-card').waitFor();
      assert.equal(await page.locator('#agents-card').count(), 0, 'a Subagents card for an agent without subagents');
      assert.doesNotMatch(await page.locator('.settings').innerText(), /general-purpose|Explore/);
      await looksRight(page, 'settings-no-subagents', { fullPage: true });
    } finally {
      fs.renameSync(`${agents}.away`, agents);
    }
    await page.close();
  });

  it('links to the hooks screen and the token usage view, with their summaries', async () => {
    const file = path.join(stack.home, 'config.json');
    const cfg = config();
    cfg.hooks = { events: { Stop: [{ hooks: [{ type: 'command', command: 'echo linked' }] }] } };
    fs.writeFileSync(file, JSON.stringify(cfg, null, 2));
    const page = await sharedPhonePage(browser, 'light', stack.token);
    await page.goto(`${stack.base}/settings/${ed.id}`);
    const more = page.locator('#more-card');
    await more.locator('li', { hasText: '1 hook configured.' }).waitFor();
    const usageNote = await more.locator('li', { has: page.locator('#settings-usage-link') }).textContent();
    assert.match(usageNote, /Nothing recorded yet\.|tokens in the last 7 days\./, usageNote);
    await more.scrollIntoViewIfNeeded();
    await looksRight(page, 'settings-links');
    await page.click('#settings-hooks-link');
    await page.waitForURL(/\/settings\/hooks$/);
    await page.locator('[data-event="Stop"] .hook-entry').waitFor();
    assert.equal(await page.locator('.hook-entry').count(), 1);
    await looksRight(page, 'settings-to-hooks', { fullPage: true });
    await page.goBack();
    await page.waitForURL(new RegExp(`/settings/${ed.id}$`));
    await page.click('#settings-usage-link');
    await page.waitForURL(/\/usage$/);
    await page.locator('#usage-empty, #usage-total').first().waitFor();
    await looksRight(page, 'settings-to-usage', { fullPage: true });
    await page.close();
    // Dark: the card itself, on the hub's own mount.
    const dark = await sharedPhonePage(browser, 'dark', stack.token);
    await dark.goto(`${stack.base}/settings`);
    await dark.locator('#more-card li', { hasText: '1 hook configured.' }).waitFor();
    await dark.locator('#more-card').scrollIntoViewIfNeeded();
    await looksRight(dark, 'settings-links');
    await dark.close();
  });
});
