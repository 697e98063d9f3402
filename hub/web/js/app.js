// The client's entry point: pairing (a one-time code arrives in the URL fragment as `#pair=`,
// is dropped from the address bar and exchanged for this device's own key or credential; a local
// tool's `#token=` is stored as it is), client-side routing over the history API, the header's
// connection indicator, and a catch-all so an unexpected error shows a message, never a blank
// page. When the hub refuses this device's credential (it was removed), every screen gives way
// to the pairing screen saying so, and nothing more is asked of the hub until it is paired again.
//
// Routes: /                      home (instances, sessions, projects, browse)
//         /s/<instance>/<sid>    a session   (?cwd=)
//         /n/<instance>          a new session on an instance (?cwd=)
//         /f/<instance>/<sid>    its files   (?cwd=&dir= or &file=)
//         /c/<instance>/<sid>    its uncommitted changes (?cwd=[&file=])
//         /usage                 token usage (?range=7d|30d|all)
//         /settings/hooks        the hooks tree (config.json)
//         /settings[/<instance>] settings (settings.js)
//         /devices               paired devices, pairing another, the audit trail (devices.js)
//         /pair                  pairing (a code, or paste a token)

import { h, clear, $, toast } from './dom.js';
import { hasCredential, setToken, takeTokenFromFragment, getJson, takePairCodeFromFragment, pairWithCode, device, onRevoked, refreshDevice, upgradeToKey, setTarget, targetMachine } from './api.js';
import { machineById, withMachine } from './machines.js';
import { homeView, newSessionView } from './home.js';
import { startApp } from './push.js';
import { usageView } from './usage.js';
import { splitFor } from './split.js';

const view = () => $('#view');
let cleanup = null;
/** The first prompt of a session created by the new-session view, for the session view. */
let handed = null;

export const app = {
  instances: null,

  /** Goes to `path` (a client route); `replace`: without a new history entry. */
  navigate(path, { replace = false } = {}) {
    // Within another machine's session (files, changes, a new session) it stays that machine's.
    path = withMachine(path, targetMachine());
    if (replace) history.replaceState(null, '', path); else history.pushState(null, '', path);
    route();
  },

  /** Hands the first prompt of a session just created (`/n/…`) to its view. */
  handOver(instance, sid, text) {
    handed = { instance: String(instance), sid, text };
  },

  /** Replaces the current address without re-rendering. */
  replace(path) {
    history.replaceState(null, '', path);
  },

  setTitle(title) {
    // Another machine's screen says whose it is.
    const m = targetMachine();
    if (m) title = `${m.name}: ${title || ''}`;
    $('#bar-title').textContent = title || '';
    document.title = title ? `${title} · zcode-acp` : 'zcode-acp';
  },

  /**
   * The header's connection indicator: state open | connecting (also `idle`: not started
   * yet) | waiting | failed | unpaired. Every screen sets it: a session from its WebSocket,
   * home, files, settings, hooks and usage from their last request to the hub, pairing as
   * `unpaired`. `since`: when an open connection was lost (a session's), so the pill says
   * "reconnecting…" and "offline since 12:03" rather than a fresh start's words.
   */
  setConn(state, message, why, since = 0) {
    const c = $('#conn');
    c.dataset.state = state;
    c.dataset.why = why || '';
    const at = since ? new Date(since).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }) : '';
    const label = state === 'open' ? 'online'
      : state === 'connecting' || state === 'idle' ? (since ? 'reconnecting…' : 'connecting')
        : state === 'unpaired' ? 'not paired'
          : why === 'auth' ? 'token rejected'
            : why === 'gone' ? 'instance gone'
              : why === 'agent' ? 'agent down'
              // Short enough for a phone's header; the detail says why.
              : at ? `offline since ${at}` : why === 'down' ? 'hub offline' : 'offline';
    c.textContent = label;
    c.dataset.detail = message || label;
    c.setAttribute('aria-label', `Connection: ${message || label}`);
    c.setAttribute('aria-expanded', String(!$('#conn-detail').hidden));
    if (!$('#conn-detail').hidden) showConnDetail();
  },

  /** The title the last instance listing gave a session. */
  titleOf(instance, sid) {
    const inst = (this.instances || []).find((i) => String(i.id) === String(instance));
    const s = inst && (inst.sessions || []).find((x) => x.sessionId === sid);
    return s ? s.title : '';
  },

  /** Shows the pairing screen with `message` (a rejected or missing token). */
  pair(message) {
    // Another machine refused this browser: that machine is to be added again, not this one.
    if (targetMachine()) {
      toast(message || 'That machine refused this browser.', 'error', 15000);
      return app.navigate('/');
    }
    const d = device();
    if (d && d.removed) setToken('', true); else setToken('');
    if (location.pathname !== '/pair') history.pushState(null, '', '/pair');
    mount((root) => pairView(root, message));
  },
};

// The pairing screen says the device was removed (its own words, from the kept device).
onRevoked(() => app.pair(''));

function mount(make) {
  if (cleanup) {
    try { cleanup(); } catch (e) { console.warn('cleanup failed', e); }
  }
  cleanup = null;
  try {
    cleanup = make(view()) || null;
  } catch (e) {
    showFatal(e);
  }
}

/**
 * A screen whose module (`file`, of js/) is loaded when first shown: the page preloads only
 * what the home screen needs (see hub/build.rs). The modules `file` imports are preloaded with
 * it, from the page's `zcode-lazy` map (`a.js=b.js c.js;…`, written by the build), so they all
 * arrive in one round trip. `show(module, root)` mounts the screen and returns its cleanup.
 */
function lazy(file, show) {
  return (root) => {
    let done = null;
    let gone = false;
    const map = ($('meta[name="zcode-lazy"]') || {}).content || '';
    const entry = map.split(';').find((e) => e.startsWith(`${file}=`)) || '';
    for (const dep of entry.slice(file.length + 1).split(' ').filter(Boolean)) {
      const href = new URL(`./${dep}`, import.meta.url).href;
      if (![...document.querySelectorAll('link[rel="modulepreload"]')].some((l) => l.href === href)) {
        document.head.append(h('link', { rel: 'modulepreload', href }));
      }
    }
    clear(root, h('p', { class: 'empty', text: 'Loading…' }));
    import(`./${file}`).then((m) => { if (!gone) done = show(m, root) || null; }, (e) => { if (!gone) showFatal(e); });
    return () => {
      gone = true;
      if (done) done();
    };
  };
}

function route() {
  const parts = location.pathname.split('/').filter(Boolean).map(decodeURIComponent);
  const q = new URLSearchParams(location.search);
  // `?m=<hostId>`: a screen of another paired machine (machines.js); none: this page's hub.
  const machine = q.get('m') ? machineById(q.get('m')) : null;
  setTarget(machine);
  if (q.get('m') && !machine) toast('That machine is not paired with this browser (any more).', 'error');
  if (parts[0] === 'pair' || !hasCredential()) return app.pair(hasCredential() ? '' : null);
  const cwd = q.get('cwd') || '';
  splitFor(app, parts[0] === 's' && parts.length === 3 ? { instance: parts[1], sid: parts[2] } : null);
  if (parts[0] === 's' && parts.length === 3) {
    const mine = handed && handed.instance === parts[1] && handed.sid === parts[2] ? handed.text : '';
    handed = null;
    return mount(lazy('session.js', (m, root) => m.sessionView(root, app, { instance: parts[1], sid: parts[2], cwd, prompt: mine })));
  }
  if (parts[0] === 'n' && parts.length === 2) return mount((root) => newSessionView(root, app, { instance: parts[1], cwd }));
  if (parts[0] === 'f' && parts.length === 3) {
    return mount(lazy('files.js', (m, root) => m.filesView(root, app, { instance: parts[1], sid: parts[2], cwd, dir: q.get('dir') || '', file: q.get('file') || '' })));
  }
  if (parts[0] === 'c' && parts.length === 3) {
    return mount(lazy('changes.js', (m, root) => m.changesView(root, app, { instance: parts[1], sid: parts[2], cwd, file: q.get('file') || '' })));
  }
  if (parts[0] === 'usage' && parts.length === 1) return mount((root) => usageView(root, app, { range: q.get('range') }));
  if (parts[0] === 'settings' && parts[1] === 'hooks') return mount(lazy('hooks_settings.js', (m, root) => m.hooksSettingsView(root, app)));
  if (parts[0] === 'devices' && parts.length === 1) return mount(lazy('devices.js', (m, root) => m.devicesView(root, app)));
  if (parts[0] === 'settings' && parts.length <= 2) return mount(lazy('settings.js', (m, root) => m.settingsView(root, app, { instance: parts[1] || '' })));
  if (location.pathname !== '/') history.replaceState(null, '', '/');
  return mount((root) => homeView(root, app));
}

/** Whether `text` looks like a pairing code (`XXXXX-XXXXX`, Crockford's base32) rather than a token. */
function isCode(text) {
  return /^[0-9A-Za-z]{5}[- ]?[0-9A-Za-z]{5}$/.test(text);
}

function pairView(root, message) {
  app.setTitle('Pair');
  const d = device();
  const removed = Boolean(d && d.removed);
  app.setConn('unpaired', removed ? 'This device was removed' : 'Not paired');
  const input = h('input', { type: 'password', id: 'token-input', autocomplete: 'off', spellcheck: 'false', 'aria-label': 'Pairing code or token', placeholder: 'Pairing code (XXXXX-XXXXX) or token' });
  const problem = h('p', { class: 'error', role: 'alert', id: 'pair-error', hidden: !message, text: message || '' });
  const form = h('form', { class: 'card pair', onsubmit: async (e) => {
    e.preventDefault();
    const t = input.value.trim();
    if (!t) return;
    problem.hidden = true;
    if (isCode(t)) {
      try {
        await pairWithCode(t);
        app.navigate('/');
      } catch (err) {
        problem.textContent = err.message;
        problem.hidden = false;
      }
      return;
    }
    setToken(t);
    try {
      await getJson('/api/instances', 'The instance list');
      app.navigate('/');
    } catch (err) {
      if (err.kind === 'auth') setToken('');
      problem.textContent = err.kind === 'auth' ? 'That token was rejected by the hub.' : err.message;
      problem.hidden = false;
    }
  } },
  h('h2', { id: 'pair-title', text: removed ? 'This device was removed' : 'Pair this browser' }),
  removed ? h('p', { id: 'pair-removed', text: `"${d.name || 'This browser'}" was removed from the hub (on another device, or by zcode-acp devices revoke on the machine): its credential no longer works. To use it again, pair it anew with a fresh code.` }) : null,
  h('p', { id: 'pair-help' }, 'Open a pairing link that ', h('code', { text: 'zcode-acp pair' }), ' or ', h('code', { text: 'zcode-acp up' }),
    ' prints on the machine (or scan its QR code, or use Devices on a paired phone), or type its code here. Each link works once, for 5 minutes; this browser then keeps its own credential.'),
  problem, h('div', { class: 'row' }, input, h('button', { type: 'submit', class: 'primary' }, removed ? 'Pair again' : 'Pair')));
  clear(root, form);
  input.focus();
}

/**
 * The pill's detail, shown by a tap (a touch screen has no hover): what the last request
 * found, in words, and a way to try again now.
 */
function showConnDetail() {
  const c = $('#conn');
  const box = $('#conn-detail');
  clear(box, h('span', { id: 'conn-detail-text', text: c.dataset.detail || c.textContent }),
    h('button', { type: 'button', id: 'conn-retry', onclick: () => { hideConnDetail(); route(); } }, 'Retry now'),
    h('button', { type: 'button', class: 'link', 'aria-label': 'Close', onclick: hideConnDetail }, '×'));
  box.hidden = false;
  c.setAttribute('aria-expanded', 'true');
}

function hideConnDetail() {
  $('#conn-detail').hidden = true;
  $('#conn').setAttribute('aria-expanded', 'false');
}

function showFatal(e) {
  console.warn('view failed', e);
  clear(view(), h('div', { class: 'card' },
    h('p', { class: 'error', role: 'alert', text: `Something went wrong in the page: ${e && e.message ? e.message : e}` }),
    h('button', { type: 'button', onclick: () => route() }, 'Try again'),
    ' ', h('a', { class: 'button', href: '/' }, 'Home')));
}

/**
 * A token that just came in a pairing link is tried with ONE request before any screen asks
 * for more: a wrong one then costs one attempt of the hub's per-address limit, not one per
 * part of the home screen (which would soon answer 429 to the right token's retry too).
 */
async function tryNewToken() {
  try {
    await getJson('/api/instances', 'Checking the token');
  } catch (e) {
    if (e.kind !== 'auth') return true;
    setToken('');
    app.pair(e.message);
    return false;
  }
  return true;
}

/**
 * A pairing link's one-time code (`#pair=`, already dropped from the address bar) is
 * exchanged for this device's credential; a refused code shows the pairing screen saying why.
 */
async function pairFromLink(code) {
  if (!code) {
    app.pair('The pairing link had no code in it.');
    return false;
  }
  app.setConn('connecting', 'Pairing…');
  clear(view(), h('p', { class: 'empty', text: 'Pairing this browser…' }));
  try {
    await pairWithCode(code);
    return true;
  } catch (e) {
    // A browser that works already keeps its credential: only the link was bad.
    const d = device();
    if (hasCredential() && !(d && d.removed)) {
      toast(e.message, 'error', 15000);
      return true;
    }
    app.pair(e.message);
    return false;
  }
}

async function boot() {
  startApp();
  const code = takePairCodeFromFragment();
  if (code !== null && !(await pairFromLink(code))) {
    listen();
    return;
  }
  const paired = code === null && takeTokenFromFragment();
  if (paired && !hasCredential()) return app.pair('The pairing link had an empty token.');
  if (paired && !(await tryNewToken())) return;
  // A device token kept from before keys existed is swapped for a key (then deleted).
  await upgradeToKey();
  listen();
  // What this device may do (its scope) as the hub says now; a removed one goes to pairing.
  if (device() && hasCredential()) refreshDevice().catch(() => {});
  route();
}

let listening = false;
function listen() {
  if (listening) return;
  listening = true;
  window.addEventListener('popstate', route);
  document.addEventListener('click', (e) => {
    const a = e.target.closest && e.target.closest('a[data-nav]');
    if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
    e.preventDefault();
    app.navigate(a.getAttribute('href'));
  });
  $('#conn').addEventListener('click', () => ($('#conn-detail').hidden ? showConnDetail() : hideConnDetail()));
  window.addEventListener('unhandledrejection', (e) => { console.warn('unhandled', e.reason); e.preventDefault(); });
  window.addEventListener('hashchange', async () => {
    const code = takePairCodeFromFragment();
    if (code !== null) {
      if (await pairFromLink(code)) app.navigate('/', { replace: true });
      return;
    }
    if (takeTokenFromFragment() && (await tryNewToken())) route();
  });
}

boot();
