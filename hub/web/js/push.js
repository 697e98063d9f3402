// The installable app's page side: registers the service worker (/sw.js: the offline shell
// and the push handler), offers "Notify me when an agent waits" (permission asked only on that
// click; Web Push subscribed with the hub's VAPID key and sent to the hub), and shows the count
// of requests waiting for an answer in the tab title and the app badge.
//
// Hub routes (token-gated): GET /api/push/vapid-public-key → {publicKey} (base64url, an
// uncompressed P-256 point); POST /api/push/subscriptions with PushSubscription.toJSON() plus
// {notifyTurnEnd}; DELETE /api/push/subscriptions with {endpoint}; POST /api/push/mute with
// {endpoint, sessionId?, muted?} (a session's menu: mute or follow it on this device). Nothing
// is stored here: the browser keeps the subscription, the hub keeps its copy.
//
// A notification's Allow and Deny answer without opening the app: the worker posts the answer
// itself, with this page's token, which the page hands it (and whether this device may answer:
// a watch device's notifications carry no actions).
//
// Every paired machine (machines.js) notifies too: "Notify me" subscribes at each machine's hub
// as well, with that hub's own VAPID key, through a registration of sw.js of its own (scope
// `/push/<hostId>/`: a registration holds one subscription, for one key). Its worker learns
// its machine from what is written into the `zcode-acp-state` cache (`/machine/<hostId>`).
// A machine added later, or one that could not be reached then, is subscribed at the next page
// load; a forgotten one is unsubscribed there and its registration dropped.

import { h, clear, toast } from './dom.js';
import { api, getJson, workerCredential, canWrite, targetMachine } from './api.js';
import { pool } from './conn.js';
import { inboxState } from './inbox.js';
import { machines, machineById } from './machines.js';

const READY_MS = 10000;
/**
 * How long the browser's push service may take to give a subscription. A browser that cannot
 * reach it (offline, blocked, a build without one) would otherwise leave "Notify me" spinning
 * for good. Tests set `window.zcodePushSubscribeMs`.
 */
const SUBSCRIBE_MS = 10000;

/** Whether this browser can receive Web Push here (a secure context with a service worker). */
export function pushSupported() {
  return window.isSecureContext && 'serviceWorker' in navigator && 'PushManager' in window && 'Notification' in window;
}

/** Registers the service worker and starts the waiting-count display. Called once at boot. */
export function startApp() {
  if (window.isSecureContext && 'serviceWorker' in navigator) {
    navigator.serviceWorker.register('/sw.js', { scope: '/' }).catch((e) => console.warn('service worker not registered', e));
    navigator.serviceWorker.addEventListener('message', (e) => {
      if (e.data && e.data.type === 'zcode-push-renewed') sendRenewed(e.data);
      // Another machine's notification tapped (sw.js): its session, on this page.
      if (e.data && e.data.type === 'zcode-open' && typeof e.data.path === 'string' && /^\/[^/\\]/.test(e.data.path)) {
        history.pushState(null, '', e.data.path);
        window.dispatchEvent(new PopStateEvent('popstate'));
      }
    });
    pendingRenewal();
    handTokenToWorker();
    syncMachines().catch((e) => console.warn('notifications of the other machines', e && e.message));
  }
  watchWaiting();
}

/** Where machine `m`'s registration lives: its own scope, where no page ever is. */
const scopeOf = (m) => `/push/${encodeURIComponent(m.id)}/`;

/** Machine `m`'s own registration, or null (`getRegistration` alone would answer the page's, whose scope holds it). */
async function machineRegistration(m) {
  const reg = await navigator.serviceWorker.getRegistration(scopeOf(m));
  return reg && reg.scope === new URL(scopeOf(m), location.origin).href ? reg : null;
}

/** Writes machine `m` where its worker reads it (sw.js `machineRecord`): never a function, never an access token. */
async function tellWorker(m) {
  const { credential, ...plain } = m;
  const state = await caches.open('zcode-acp-state');
  await state.put(`/machine/${encodeURIComponent(m.id)}`, new Response(JSON.stringify({ ...plain, canAnswer: true }), { headers: { 'Content-Type': 'application/json' } }));
}

/**
 * Keeps the other machines' notifications in step with the machines paired here: a registration
 * whose machine was forgotten goes; while this device is subscribed at its own hub, a machine
 * with no subscription yet (added since, or unreachable then) is subscribed, and every other
 * one's worker is told its machine again (a new name) and checked for an update.
 */
async function syncMachines() {
  const list = machines();
  if (!pushSupported()) return;
  for (const reg of await navigator.serviceWorker.getRegistrations()) {
    const id = /^\/push\/([^/]+)\/$/.exec(new URL(reg.scope).pathname);
    if (id && !list.some((m) => m.id === decodeURIComponent(id[1]))) await reg.unregister();
  }
  const own = await navigator.serviceWorker.getRegistration('/');
  if (!list.length || !own || !(await own.pushManager.getSubscription()) || Notification.permission !== 'granted') return;
  const turnEnd = localStorage.getItem(TURN_END_KEY) === '1';
  await Promise.all(list.map(async (m) => {
    const reg = await machineRegistration(m);
    if (reg && (await reg.pushManager.getSubscription())) {
      await tellWorker(m);
      reg.update().catch(() => {});
    } else {
      await subscribeMachine(m, turnEnd).catch((e) => console.warn(`notifications of ${m.name}`, e && e.message));
    }
  }));
}

/** A machine just paired: it notifies this device too when this device gets notifications. */
export async function followMachine(m) {
  if (!pushSupported() || Notification.permission !== 'granted') return;
  const own = await navigator.serviceWorker.getRegistration('/');
  if (own && (await own.pushManager.getSubscription())) await subscribeMachine(m, localStorage.getItem(TURN_END_KEY) === '1');
}

/** Machine `m` is being forgotten: its hub drops this device's subscription (while its credential still works), its registration goes. */
export async function unfollowMachine(m) {
  if (!pushSupported()) return;
  const reg = await machineRegistration(m);
  if (!reg) return;
  const sub = await reg.pushManager.getSubscription();
  if (sub) {
    await api('/api/push/subscriptions', { machine: m, method: 'DELETE', json: { endpoint: sub.endpoint }, what: `${m.name}: removing the subscription`, timeout: 5000 }).catch(() => {});
    await sub.unsubscribe().catch(() => {});
  }
  await reg.unregister();
  const state = await caches.open('zcode-acp-state');
  // Its record and its share of the app badge go with it.
  await state.delete(`/machine/${encodeURIComponent(m.id)}`).catch(() => {});
  await state.delete(`/badge/${encodeURIComponent(m.id)}`).catch(() => {});
}

/** Subscribes this device at machine `m` (its hub's key, its own registration) and tells that hub. */
async function subscribeMachine(m, notifyTurnEnd) {
  let key;
  try {
    const r = await api('/api/push/vapid-public-key', { machine: m, what: `${m.name}: its notification key`, expectJson: true, timeout: 5000 });
    key = fromBase64url(String(r && r.publicKey));
  } catch (e) {
    if (e.kind === 'missing') throw new Error(`${m.name} does not send notifications (its zcode-acp is older than this page: update it there).`);
    throw e;
  }
  if (key.length !== 65) throw new Error(`${m.name}'s notification key is not a P-256 public key.`);
  await tellWorker(m);
  const reg = await navigator.serviceWorker.register('/sw.js', { scope: scopeOf(m) });
  await activated(reg);
  const sub = await subscribeWith(reg, key);
  await api('/api/push/subscriptions', { machine: m, method: 'POST', json: { ...sub.toJSON(), notifyTurnEnd }, what: `${m.name}: saving the subscription` });
}

/** Resolves once `reg` has an active worker (a subscription needs one). */
function activated(reg) {
  if (reg.active) return Promise.resolve(reg);
  const w = reg.installing || reg.waiting;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('The service worker did not start: reload the page and try again.')), READY_MS);
    w.addEventListener('statechange', () => {
      if (w.state === 'activated') { clearTimeout(timer); resolve(reg); }
      if (w.state === 'redundant') { clearTimeout(timer); reject(new Error('The service worker could not be installed: reload the page and try again.')); }
    });
  });
}

/**
 * Tells the worker how this device answers from a notification: with its device key (the worker
 * signs a challenge itself; no token is handed over) or, where keys cannot be had, its token.
 */
export async function handTokenToWorker() {
  try {
    const reg = await registration();
    const to = reg.active || navigator.serviceWorker.controller;
    if (to) to.postMessage({ type: 'zcode-answer-token', ...workerCredential(), canAnswer: canWrite() });
  } catch { /* no worker yet: the next page load hands it */ }
}

/** The session menu's "Mute notifications" / "Follow notifications" (hidden until this device is subscribed). */
export function muteItem(instance, sid, done) {
  const button = h('button', { type: 'button', id: 'mute-btn', hidden: true });
  let endpoint = '';
  let muted = false;
  const show = () => {
    button.textContent = muted ? 'Follow notifications' : 'Mute notifications';
    button.dataset.muted = muted ? '1' : '0';
    button.hidden = false;
  };
  button.onclick = async () => {
    done();
    try {
      const r = await api('/api/push/mute', { method: 'POST', json: { endpoint, sessionId: sid, muted: !muted }, what: 'Notifications' });
      muted = Array.isArray(r.muted) && r.muted.includes(sid);
      show();
      toast(muted ? 'This device no longer gets notifications of this session.' : 'This device gets notifications of this session again.');
    } catch (e) {
      toast(e.message, 'error');
    }
  };
  (async () => {
    if (!sid || !pushSupported()) return;
    // Another machine's session: this device's subscription there (its own registration).
    const m = targetMachine();
    const reg = m ? await machineRegistration(m) : await navigator.serviceWorker.getRegistration('/');
    const sub = reg ? await reg.pushManager.getSubscription() : null;
    if (!sub) return;
    endpoint = sub.endpoint;
    const r = await api('/api/push/mute', { method: 'POST', json: { endpoint }, what: 'Notifications' });
    muted = Array.isArray(r.muted) && r.muted.includes(sid);
    show();
  })().catch(() => { /* not subscribed here, or an older hub: no item */ });
  return button;
}

/** Whether this device asked for turn ends too (not secret: kept to renew its subscription). */
const TURN_END_KEY = 'zcode-acp.notifyTurnEnd';

/**
 * The browser renewed this device's push subscription (the worker's `pushsubscriptionchange`):
 * the hub gets the new one, with this device's choice about turn ends, and forgets the old.
 * `note.machine`: another machine's registration renewed it, so that machine's hub.
 */
const sending = new Map();
/** After a renewal could not be sent (the hub unreachable, busy): the waits before each next try. */
const RENEW_RETRY_MS = [2000, 5000, 15000, 60000];
async function sendRenewed(note, tries = 0) {
  const id = note && typeof note.machine === 'string' ? note.machine : '';
  if (sending.has(id)) return sending.get(id);
  const kept = id ? `/push-renewed/${encodeURIComponent(id)}` : '/push-renewed';
  const run = (async () => {
    try {
      const sub = note && note.subscription;
      if (!sub || typeof sub.endpoint !== 'string') return;
      const machine = id ? machineById(id) : null;
      if (id && !machine) return; // forgotten here since: its registration goes at the next load
      const notifyTurnEnd = localStorage.getItem(TURN_END_KEY) === '1';
      await api('/api/push/subscriptions', { machine, method: 'POST', json: { ...sub, notifyTurnEnd }, what: 'Renewing the notification subscription' });
      if (typeof note.old === 'string' && note.old !== sub.endpoint) {
        await api('/api/push/subscriptions', { machine, method: 'DELETE', json: { endpoint: note.old }, what: 'Removing the old subscription' }).catch(() => {});
      }
      const state = await caches.open('zcode-acp-state');
      await state.delete(kept);
    } catch (e) {
      // Kept (the worker's copy stays until it is sent) and tried again, later each time: a
      // renewal lost here would leave this device without notifications until it next opened.
      const wait = RENEW_RETRY_MS[Math.min(tries, RENEW_RETRY_MS.length - 1)];
      console.warn(`the renewed push subscription could not be sent to the hub yet (again in ${wait / 1000} s)`, e && e.message);
      setTimeout(() => sendRenewed(note, tries + 1), wait);
    } finally {
      sending.delete(id);
    }
  })();
  sending.set(id, run);
  return run;
}

/** A renewal the worker kept while no page was open (this hub's, or another machine's): sent now. */
async function pendingRenewal() {
  try {
    if (!('caches' in window)) return;
    const state = await caches.open('zcode-acp-state');
    for (const key of ['/push-renewed', ...machines().map((m) => `/push-renewed/${encodeURIComponent(m.id)}`)]) {
      const r = await state.match(key);
      if (r) await sendRenewed(await r.json());
    }
  } catch { /* nothing kept */ }
}

// The waiting count: permissions and questions pending on every connection of the page (the
// home screen watches every listed session; a session view watches its own).
let waitingCount = 0;

function countWaiting() {
  let n = 0;
  for (const c of pool.conns.values()) n += c.pendingOf().length;
  // The home screen attaches to nothing: its inbox (the hub's list) says what waits.
  return inboxState.active ? Math.max(n, inboxState.count) : n;
}

/** Sets the tab title's "(n) " prefix and the app badge to the current count. */
function showWaiting() {
  const n = countWaiting();
  const bare = document.title.replace(/^\(\d+\) /, '');
  const want = n ? `(${n}) ${bare}` : bare;
  if (document.title !== want) document.title = want;
  if (n === waitingCount) return;
  waitingCount = n;
  try {
    if (n && navigator.setAppBadge) navigator.setAppBadge(n).catch(() => {});
    else if (!n && navigator.clearAppBadge) navigator.clearAppBadge().catch(() => {});
  } catch { /* no badge here */ }
}

function watchWaiting() {
  // The pool has no page-wide event, and reading it costs nothing: check it twice a second,
  // and whenever the views retitle the page (the prefix is put back on the new title).
  setInterval(showWaiting, 500);
  pool.onPending = showWaiting;
  const title = document.querySelector('title');
  if (title) new MutationObserver(showWaiting).observe(title, { childList: true, characterData: true, subtree: true });
  showWaiting();
}

/** `s` (base64url) as bytes. */
function fromBase64url(s) {
  const b = atob(s.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (s.length % 4)) % 4));
  return Uint8Array.from(b, (c) => c.charCodeAt(0));
}

function sameKey(a, b) {
  if (!a || !b) return false;
  const x = new Uint8Array(a);
  return x.length === b.length && x.every((v, i) => v === b[i]);
}

/** The service worker's registration, once active (it may still be installing on a first visit). */
async function registration() {
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('The service worker did not start: reload the page and try again.')), READY_MS));
  return Promise.race([navigator.serviceWorker.ready, timeout]);
}

/** Subscribes this device and tells the hub. */
async function subscribe(notifyTurnEnd) {
  const permission = await Notification.requestPermission();
  if (permission !== 'granted') {
    throw new Error(permission === 'denied'
      ? 'Notifications are blocked for this site: allow them in the browser\'s site settings, then try again.'
      : 'Notifications were not allowed.');
  }
  let key;
  try {
    const r = await getJson('/api/push/vapid-public-key', 'The notification key');
    key = fromBase64url(String(r && r.publicKey));
  } catch (e) {
    if (e.kind === 'missing') throw new Error('This hub does not send notifications (it is older than this page: update zcode-acp).');
    throw e;
  }
  if (key.length !== 65) throw new Error('The hub\'s notification key is not a P-256 public key.');
  const sub = await subscribeWith(await registration(), key);
  await api('/api/push/subscriptions', { method: 'POST', json: { ...sub.toJSON(), notifyTurnEnd }, what: 'Saving the subscription' });
  try { localStorage.setItem(TURN_END_KEY, notifyTurnEnd ? '1' : '0'); } catch { /* a renewal then asks without turn ends */ }
  await handTokenToWorker();
  // Every other machine too, each with its own key; one that fails is said, the rest stand.
  const failed = [];
  await Promise.all(machines().map((m) => subscribeMachine(m, notifyTurnEnd).catch((e) => failed.push(`${m.name}: ${e.message}`))));
  return failed.length ? `Notifications are on for this device, but not yet from ${failed.join('; ')} (tried again when the app next opens).` : '';
}

/** The push subscription of `reg` for the VAPID public `key` (made now when it has none for that key). */
async function subscribeWith(reg, key) {
  let sub = await reg.pushManager.getSubscription();
  if (sub && !sameKey(sub.options.applicationServerKey, key)) {
    await sub.unsubscribe(); // made for another hub key: a push with the new key would be refused
    sub = null;
  }
  if (!sub) {
    const ms = Number(window.zcodePushSubscribeMs) || SUBSCRIBE_MS;
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`This browser's push service did not answer within ${ms < 1000 ? `${ms} ms` : `${Math.round(ms / 1000)} s`}: it cannot be reached from here (offline, blocked by a network or a setting, or a browser without one). Try again later, or from another browser.`)), ms);
    });
    try {
      sub = await Promise.race([
        reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key }).catch((e) => {
          throw new Error(`The browser's push service refused the subscription (${e.message || e}). Is this browser online?`);
        }),
        late,
      ]);
    } finally {
      clearTimeout(timer);
    }
  }
  return sub;
}

/** Unsubscribes this device, here and at the hub, and at every other machine. */
async function unsubscribe() {
  const reg = await registration();
  const sub = await reg.pushManager.getSubscription();
  await Promise.all(machines().map((m) => unfollowMachine(m).catch(() => {})));
  if (!sub) return;
  await api('/api/push/subscriptions', { method: 'DELETE', json: { endpoint: sub.endpoint }, what: 'Removing the subscription' });
  await sub.unsubscribe();
}

/** The "Notify me when an agent waits" card: returns its node. */
export function notifyCard() {
  const card = h('section', { class: 'card', id: 'notify', 'aria-labelledby': 'notify-h' });
  const status = h('p', { class: 'muted', id: 'notify-status', role: 'status' });
  const turnEnd = h('input', { type: 'checkbox', id: 'notify-turn-end' });
  let busy = false;

  function head(...rest) {
    clear(card, h('h2', { id: 'notify-h', text: 'Notifications' }), ...rest);
  }

  async function act(fn, done) {
    if (busy) return;
    busy = true;
    status.className = 'muted';
    status.textContent = 'Working…';
    try {
      const said = await fn();
      await render(said || done);
    } catch (e) {
      await render('');
      status.className = 'error';
      status.textContent = e && e.message ? e.message : String(e);
    } finally {
      busy = false;
    }
  }

  async function render(said) {
    status.className = 'muted';
    status.textContent = said || '';
    if (!pushSupported()) {
      head(h('p', { class: 'muted', text: window.isSecureContext
        ? 'This browser cannot show notifications for a web app. On an iPhone, add this page to the home screen first, then open it from there.'
        : 'Notifications need the app opened over https (a tunnel) or on this computer at localhost.' }));
      return;
    }
    let sub = null;
    try {
      const reg = await navigator.serviceWorker.getRegistration('/');
      sub = reg ? await reg.pushManager.getSubscription() : null;
    } catch { /* not registered yet: offer to subscribe */ }
    if (sub && Notification.permission === 'granted') {
      head(h('p', { text: machines().length
        ? 'This device gets a notification when an agent waits for you on this machine or another paired one, also while the app is closed.'
        : 'This device gets a notification when an agent waits for you, also while the app is closed.' }),
        h('button', { type: 'button', id: 'notify-off', onclick: () => act(unsubscribe, 'Notifications are off for this device.') }, 'Turn off notifications'),
        status);
      return;
    }
    head(h('p', { class: 'muted', text: 'Get a system notification when a permission or a question waits for you, also while the app is closed.' }),
      h('p', {}, h('label', { class: 'check' }, turnEnd, ' Also when a turn ends')),
      h('button', { type: 'button', class: 'primary', id: 'notify-on', onclick: () => act(() => subscribe(turnEnd.checked), 'Notifications are on for this device.') }, 'Notify me when an agent waits'),
      status);
    if (Notification.permission === 'denied' && !said) status.textContent = 'Notifications are blocked for this site in the browser\'s settings.';
  }

  render('');
  return card;
}
