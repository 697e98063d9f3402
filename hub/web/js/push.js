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

import { h, clear, toast } from './dom.js';
import { api, getJson, workerCredential, canWrite } from './api.js';
import { pool } from './conn.js';
import { inboxState } from './inbox.js';

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
    });
    pendingRenewal();
    handTokenToWorker();
  }
  watchWaiting();
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
    const reg = await navigator.serviceWorker.getRegistration('/');
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
 */
let sending = null;
async function sendRenewed(note) {
  if (sending) return sending;
  sending = (async () => {
    try {
      const sub = note && note.subscription;
      if (!sub || typeof sub.endpoint !== 'string') return;
      const notifyTurnEnd = localStorage.getItem(TURN_END_KEY) === '1';
      await api('/api/push/subscriptions', { method: 'POST', json: { ...sub, notifyTurnEnd }, what: 'Renewing the notification subscription' });
      if (typeof note.old === 'string' && note.old !== sub.endpoint) {
        await api('/api/push/subscriptions', { method: 'DELETE', json: { endpoint: note.old }, what: 'Removing the old subscription' }).catch(() => {});
      }
      const state = await caches.open('zcode-acp-state');
      await state.delete('/push-renewed');
    } catch (e) {
      console.warn('the renewed push subscription could not be sent to the hub yet', e && e.message);
    } finally {
      sending = null;
    }
  })();
  return sending;
}

/** A renewal the worker kept while no page was open: sent now. */
async function pendingRenewal() {
  try {
    if (!('caches' in window)) return;
    const state = await caches.open('zcode-acp-state');
    const r = await state.match('/push-renewed');
    if (r) await sendRenewed(await r.json());
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
  const reg = await registration();
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
  await api('/api/push/subscriptions', { method: 'POST', json: { ...sub.toJSON(), notifyTurnEnd }, what: 'Saving the subscription' });
  try { localStorage.setItem(TURN_END_KEY, notifyTurnEnd ? '1' : '0'); } catch { /* a renewal then asks without turn ends */ }
  await handTokenToWorker();
}

/** Unsubscribes this device, here and at the hub. */
async function unsubscribe() {
  const reg = await registration();
  const sub = await reg.pushManager.getSubscription();
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
      await fn();
      await render(done);
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
      head(h('p', { text: 'This device gets a notification when an agent waits for you, also while the app is closed.' }),
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
