// The real stack for the browser tests: a `zcode-acp hub` on a port the OS picked (its port
// file tells which) with a private ZCODE_ACP_HOME, bridges over the demo agent with the test as their editor (JSON-RPC over the
// bridge's stdio), and Debian's chromium driven by the pinned playwright-core.
//
// Environment: ZCODE_ACP_BIN (the binary; default target/debug/zcode-acp), CHROMIUM (default
// /usr/bin/chromium), CHROMIUM_SHELL (default /usr/bin/chromium-headless-shell when it is
// installed, else CHROMIUM), WEB_SCREENSHOTS (default target/web-screenshots).

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { createRequire } from 'node:module';

export const ROOT = path.resolve(import.meta.dirname, '../..');
const require = createRequire(path.join(ROOT, 'tests/peers/package.json'));
const { chromium } = require('playwright-core');

export const BIN = process.env.ZCODE_ACP_BIN || path.join(ROOT, 'target/debug/zcode-acp');
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
/**
 * Chromium's headless shell: the same engine without the browser's own UI, which costs the full
 * browser more CPU than the page under test (on two cores the browser files took 289 s of CPU
 * with it, the shell less than half). It has no notifications, push or app install: the files
 * that test those launch the full browser (`launchBrowser({ full: true })`).
 */
export const CHROMIUM_SHELL = process.env.CHROMIUM_SHELL
  || (fs.existsSync('/usr/bin/chromium-headless-shell') ? '/usr/bin/chromium-headless-shell' : CHROMIUM);
export const SHOTS = process.env.WEB_SCREENSHOTS || path.join(ROOT, 'target/web-screenshots');
export const TOKEN = 'zcode-web-test-token-0123456789abcdef';
export const WAIT = 20000;
/**
 * The ACP SDK's offline example agent (`@agentclientprotocol/sdk` 1.9.0, bundled with acpx):
 * text, a read tool call, an edit tool call behind a permission, with the same tool call ids
 * (`call_1`, `call_2`) every turn and about a second between updates.
 */
export const SDK_AGENT = ['node', [
  'tests/peers/node_modules/@agentclientprotocol/sdk/dist/examples/agent.js',
  'tests/peers/node_modules/acpx/node_modules/@agentclientprotocol/sdk/dist/examples/agent.js',
].map((p) => path.join(ROOT, p)).find((p) => fs.existsSync(p)) || 'the SDK example agent is not installed (scripts/install-test-deps)'];
/**
 * The same agent with 200 ms instead of a second between its updates (`sdk_agent_quick.mjs`),
 * for a test that waits on its turns, not inside them.
 */
export const SDK_AGENT_QUICK = [SDK_AGENT[0], '--import', path.join(import.meta.dirname, 'sdk_agent_quick.mjs'), SDK_AGENT[1]];

/** Waits until `fn()` returns a truthy value (polled every 20 ms); returns it. */
export async function until(what, fn, ms = WAIT) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Starts chromium headless with a fresh profile (playwright creates one per launch): the headless
 * shell, or the full browser with `full` (notifications, push, app install).
 */
export function launchBrowser({ full = false } = {}) {
  return chromium.launch({
    executablePath: full ? CHROMIUM : CHROMIUM_SHELL,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/**
 * A test file's stack (`opts` as for `Stack.start`) and its one browser, started together in
 * its `before`; `stopStack` in its `after` closes them (the browser first: its pages stop
 * talking to the stack).
 */
export function startStack(opts, browserOpts) {
  return Promise.all([Stack.start(opts), launchBrowser(browserOpts)]);
}

export async function stopStack(stack, browser) {
  await browser?.close();
  await stack?.stop();
}

/**
 * A page in a new context of `browser` (`options`: the context's) paired with `stack` (its
 * token in localStorage), whose waits time out at `WAIT`: { context, page, errors } (`errors`:
 * its console errors, see `watchConsole`).
 */
export async function pairedPage(browser, stack, options = {}) {
  const context = await browser.newContext(options);
  context.setDefaultTimeout(WAIT);
  await context.addInitScript((t) => localStorage.setItem('zcode-acp.token', t), stack.token);
  const page = await context.newPage();
  return { context, page, errors: watchConsole(page) };
}

/** The test's own end of a bridge: its editor, speaking JSON-RPC over the bridge's stdio. */
export class Editor {
  constructor(child) {
    this.child = child;
    this.nextId = 1;
    this.calls = new Map();
    this.requests = []; // agent→editor requests, in arrival order
    this.notes = []; // notifications
    this.exited = new Promise((r) => child.once('exit', r));
    readline.createInterface({ input: child.stdout }).on('line', (line) => this.receive(line));
  }

  receive(line) {
    let msg;
    try { msg = JSON.parse(line); } catch { return; }
    if (msg.method === undefined && msg.id !== undefined) {
      const c = this.calls.get(msg.id);
      this.calls.delete(msg.id);
      if (c) (msg.error ? c.reject(new Error(JSON.stringify(msg.error))) : c.resolve(msg.result));
      return;
    }
    if (msg.id !== undefined) this.requests.push(msg);
    else this.notes.push(msg);
  }

  send(msg) {
    this.child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...msg })}\n`);
  }

  call(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { resolve, reject });
      this.send({ id, method, params });
    });
  }

  answer(id, result) {
    this.send({ id, result });
  }

  /** Waits for an agent request matching `pred` and not yet taken. */
  async request(pred) {
    const found = await until('an agent request to the editor', () => this.requests.find((r) => !r.taken && pred(r)));
    found.taken = true;
    return found;
  }

  /** Initializes and creates a session in `cwd`; returns its id. */
  async newSession(cwd) {
    if (!this.initialized) {
      await this.call('initialize', { protocolVersion: 1, clientCapabilities: { elicitation: { form: {} } }, clientInfo: { name: 'web-test-editor', version: '1' } });
      this.initialized = true;
    }
    const r = await this.call('session/new', { cwd, mcpServers: [] });
    return r.sessionId;
  }

  prompt(sessionId, text) {
    return this.call('session/prompt', { sessionId, prompt: [{ type: 'text', text }] });
  }

  /** Closes stdin: the bridge exits. */
  async close() {
    this.child.stdin.end();
    await Promise.race([this.exited, new Promise((r) => setTimeout(r, 3000))]);
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

/** A private home, a hub, and the bridges of one test file (given the hub's port). */
export class Stack {
  /** `opts.env(home)`: extra environment for every process of the stack. */
  static async start(opts = {}) {
    const s = new Stack();
    s.home = fs.mkdtempSync(path.join(os.tmpdir(), 'zcode-web-'));
    s.extraEnv = opts.env ? opts.env(s.home) : {};
    s.project = path.join(s.home, 'project');
    fs.mkdirSync(path.join(s.project, 'sub'), { recursive: true });
    s.port = null; // the first hub's, once it runs
    s.token = TOKEN;
    s.editors = [];
    await s.startHub();
    return s;
  }

  get base() {
    return `http://127.0.0.1:${this.port}`;
  }

  env(extra = {}) {
    const env = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('ZCODE_ACP_')) env[k] = v;
    return Object.assign(env, {
      ZCODE_ACP_HOME: this.home, ZCODE_ACP_HUB_PORT: String(this.port), ZCODE_ACP_REMOTE_PORT: '0',
      ZCODE_ACP_REMOTE_TOKEN: this.token, ZCODE_ACP_HEARTBEAT_MS: '200', ZCODE_ACP_INSTANCE_TTL_MS: '3000',
      ZCODE_ACP_PROBE_GRACE_MS: '1000', ZCODE_ACP_HUB_SPAWN_THROTTLE_MS: '600000',
      ZCODE_ACP_SERVE_IDLE_MS: '5000',
      // The stack stops its hubs itself; a hub that idled out after the last bridge closed
      // would leave a page served by its service worker talking to nobody.
      ZCODE_ACP_HUB_IDLE_MS: '600000',
    }, this.extraEnv, extra);
  }

  /**
   * Starts the hub; returns once it answers. The first one listens on a port the OS picks
   * (ZCODE_ACP_HUB_PORT=0) and names it in `run/hub.port`: no port is bound, released and
   * hoped to be free still. Later ones take the same port again, where the open pages (and
   * the bridges, which are given it) look for the hub.
   */
  async startHub() {
    const logPath = path.join(this.home, `hub-${Date.now()}.log`);
    const log = fs.openSync(logPath, 'a');
    const env = this.env({ ZCODE_ACP_HUB_PORT: this.port ? String(this.port) : '0' });
    this.hub = spawn(BIN, ['hub'], { env, stdio: ['ignore', 'ignore', log] });
    this.hubExited = new Promise((r) => this.hub.once('exit', r));
    if (!this.port) {
      const portFile = path.join(this.home, 'run/hub.port');
      this.port = await until('the hub to write its port file', () => {
        if (this.hub.exitCode !== null) throw new Error(`the hub exited (${this.hub.exitCode}): see ${this.home}`);
        try { return Number(fs.readFileSync(portFile, 'utf8').trim()) || null; } catch { return null; }
      });
    }
    try {
      await until('the hub to answer', async () => (await this.fetch('/api/health').catch(() => null))?.status === 200);
    } catch (e) {
      // What the hub said (the home is removed with the stack): why it did not come up.
      e.message += `\n  its log (${logPath}, exit ${this.hub.exitCode}):\n${fs.readFileSync(logPath, 'utf8')}`;
      throw e;
    }
  }

  /** Stops the hub (SIGTERM) and waits for it. */
  async stopHub() {
    this.hub.kill('SIGTERM');
    await this.hubExited;
  }

  fetch(p, init = {}) {
    return fetch(`${this.base}${p}`, init);
  }

  async api(p, init = {}) {
    const r = await this.fetch(p, { ...init, headers: { Authorization: `Bearer ${this.token}`, ...(init.headers || {}) } });
    if (!r.ok) throw new Error(`${p}: HTTP ${r.status} ${await r.text()}`);
    return r.json();
  }

  /**
   * Starts `zcode-acp bridge -- <agent>` in the project (default: the demo agent; `SDK_AGENT`
   * for the ACP SDK's example agent), with `env` added to its environment; waits until listed.
   */
  async bridge(agent = [BIN, 'demo-agent', '--delay-ms', '5'], env = {}) {
    const child = spawn(BIN, ['bridge', '--', ...agent], {
      cwd: this.project, env: this.env(env), stdio: ['pipe', 'pipe', 'ignore'],
    });
    const ed = new Editor(child);
    ed.id = String(child.pid);
    this.editors.push(ed);
    await until('the bridge to register', async () => (await this.api('/api/instances')).some((i) => i.id === ed.id));
    return ed;
  }

  /** Waits until instance `id` lists session `sid`; returns the row. */
  listed(id, sid) {
    return until(`session ${sid} to be listed`, async () => {
      const inst = (await this.api('/api/instances')).find((i) => i.id === id);
      return inst && inst.sessions.find((s) => s.sessionId === sid);
    });
  }

  /**
   * Kills a hub that a bridge started on its own (`hub --background`, detached, not our
   * child) when it found none: the home's pid file names it.
   */
  killSpawnedHub() {
    let pid = 0;
    try { pid = Number(fs.readFileSync(path.join(this.home, 'run/hub.pid'), 'utf8').trim()); } catch { return; }
    if (pid && pid !== this.hub.pid) {
      try { process.kill(pid, 'SIGKILL'); } catch { /* gone already */ }
    }
  }

  async stop() {
    // Bridges the hub started (serve) are not our children: stop every one this home has
    // (registered, or named by its port file under run/).
    const ours = new Set(this.editors.map((e) => e.id));
    const pids = new Set((await this.api('/api/instances').catch(() => [])).map((i) => String(i.pid)));
    try {
      for (const f of fs.readdirSync(path.join(this.home, 'run'))) {
        const m = /^bridge-(\d+)\.port$/.exec(f);
        if (m) pids.add(m[1]);
      }
    } catch { /* no run dir */ }
    const alive = (pid) => { try { process.kill(pid, 0); return true; } catch { return false; } };
    const theirs = [...pids].map(Number).filter((pid) => pid > 0 && !ours.has(String(pid)));
    for (const pid of theirs) try { process.kill(pid, 'SIGTERM'); } catch { /* gone */ }
    // They write to the home until they are gone (journal, logs): it is removed after them.
    const deadline = Date.now() + 5000;
    while (theirs.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    for (const pid of theirs.filter(alive)) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
    await Promise.all(this.editors.map((e) => e.close()));
    this.killSpawnedHub();
    if (this.hub.exitCode === null) {
      this.hub.kill('SIGTERM');
      await Promise.race([this.hubExited, new Promise((r) => setTimeout(r, 3000))]);
      if (this.hub.exitCode === null) this.hub.kill('SIGKILL');
    }
    fs.rmSync(this.home, { recursive: true, force: true });
  }
}

/**
 * Opens the home screen at `base` and waits until its cards have filled in. Each fills when
 * its own request comes back (the live sessions after the hub has probed every bridge, the
 * board, the quota, the projects, the directory listing), and a card growing between a
 * press's aim and the press moves what was aimed at from under it: on a loaded machine a
 * press landed elsewhere ("New session" never left home, a project's Delete opened no dialog).
 * A person waits for the page to settle; so do the tests.
 */
export async function settledHome(page, base) {
  await page.goto(`${base}/`);
  await page.locator('#instances:not([data-kept="yes"]) .card-head').waitFor();
  await page.locator('#board > :not(h2):not(.asking)').first().waitFor({ state: 'attached' });
  await page.locator('#quota[data-state]').waitFor({ state: 'attached' });
  await page.locator('#projects', { hasText: 'Loading projects…' }).waitFor({ state: 'detached' });
  await page.locator('#browse', { hasText: 'Listing…' }).waitFor({ state: 'detached' });
}

/** Collects a page's console errors and uncaught exceptions. */
export function watchConsole(page) {
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(`uncaught: ${e.message}`));
  page.on('dialog', (d) => { errors.push(`dialog: ${d.message()}`); d.dismiss(); });
  return errors;
}
