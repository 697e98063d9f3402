// The service worker: the app shell offline, and Web Push notifications.
//
// Shell: every asset of the client is cached at install, in a cache named after this build of
// the client (the hub's build writes a fingerprint of its assets into VERSION, and the page
// names every asset under /assets/VERSION/): a hub with another client serves another worker,
// which the browser installs (fetching the new assets) and which drops the old cache. So the assets are served from the cache first,
// and a start with no answering network (a dead tunnel, one that accepts and never answers, one
// that answers its own "502" page) opens the app at once; its own error UI then says the hub
// is unreachable. The API and the ACP socket are never cached or answered here: they always
// reach the hub, or fail.
//
// Only the hub's own bytes are ever kept or served: the hub's build writes the SHA-256 of every
// asset into HASHES, and an asset is cached only when its bytes hash to that (at install,
// every one must, or the install fails and the worker already in place stays; later, a
// missing one is fetched and checked the same way). So whoever else answers on this
// origin (another user's program holding the port while the hub is down, a tunnel's page)
// never becomes the app shell: an answer that does not match is refused, never cached. The
// cached page is served with this worker's own Content-Security-Policy (and carries the same
// policy in a <meta>). What this cannot stop is a new sw.js served by someone else at an update
// check: see docs/SECURITY.md.
//
// Push: the hub sends a small JSON payload, {title, body, url, tag, kind, pending, answer?};
// the `push` handler shows it as a system notification (`kind: "withdraw"` closes the one
// under its tag instead: answered elsewhere) and sets the app badge to `pending`. A click opens
// (or focuses) the session it names; a permission's Allow and Deny actions post the answer to
// the hub's route (`answer.path`) without opening anything. A device with a key (js/api.js)
// hands over no token: the worker signs a fresh challenge with the same non-extractable key and
// uses the short-lived token it buys once, keeping it nowhere. Only a browser that keeps a token
// anyway (no WebCrypto: plain http from another machine) hands that over (kept in the STATE
// cache, the same origin's storage as its localStorage). A watch device's page says it cannot
// answer, and its notifications get no actions. No transcript is kept here.
//
// When the browser renews the push subscription (`pushsubscriptionchange`), the worker takes
// the new one (or subscribes again with the old one's key) and hands it to the page, which
// holds the token the hub's route needs: every open window is told at once, and the renewal is
// also kept in a small cache so a window opened later sends it (push.js).
//
// Another machine's notifications (machines.js): the page registers this same script once more
// per paired machine, with the scope `/push/<hostId>/` (no page lives there), because a
// registration holds one push subscription, for one hub's VAPID key. Such a worker caches and
// serves nothing; it reads its machine (`{id, name, origin, deviceId, key | token}`, written by
// push.js into STATE at `/machine/<hostId>`), names it in the title, opens the session as this
// page's `?m=<hostId>` route, and answers Allow or Deny at that machine's origin with that
// machine's own key (`machine:<origin>#<deviceId>` in IndexedDB, as machines.js keeps it).

/** This build of the client (written by the hub; the placeholder when served from elsewhere). */
const VERSION = '__ZCODE_WEB_VERSION__';
const CACHE = `zcode-acp-shell-${VERSION}`;
/** Each asset's SHA-256 (hex) as this build's hub serves it (written by the hub; empty elsewhere: nothing is cached). */
const HASHES = {/*__ZCODE_WEB_HASHES__*/};
/** The page's policy, as the hub sends it (written by the hub). */
const CSP = "__ZCODE_WEB_CSP__";
/** What the worker hands to a page that opens later (a renewed subscription); kept across versions. */
const STATE = 'zcode-acp-state';
/** The key, in STATE, of a renewal no page has sent to the hub yet. */
const RENEWED = '/push-renewed';
/** The key, in STATE, of the token a page handed over for answering from a notification. */
const TOKEN = '/answer-token';
/** What install caches: the page, every text asset at this build's URL (written by the hub's build). */
const SHELL = [/*__ZCODE_WEB_SHELL__*/];
/** The paired machine whose notifications this registration carries (its scope `/push/<hostId>/`); '' for the page's own hub. */
const MACHINE = (() => {
  const m = /^\/push\/([^/]+)\/$/.exec(new URL(self.registration.scope).pathname);
  return m ? decodeURIComponent(m[1]) : '';
})();

self.addEventListener('install', (event) => {
  // A machine's worker serves no page: nothing to cache.
  if (MACHINE) return void event.waitUntil(self.skipWaiting());
  event.waitUntil((async () => {
    // Every asset fetched and checked before anything is kept: one that is not the hub's fails
    // the install, and the worker (and cache) in place stay.
    // The page is revalidated; a versioned asset (its URL names this build) may come from the
    // HTTP cache, and is fetched anew when what the cache holds is not this build's bytes.
    const verified = await Promise.all(SHELL.map((p) => (p.startsWith('/assets/')
      ? fetchVerified(p, new Request(p)).catch(() => fetchVerified(p, new Request(p, { cache: 'reload' })))
      : fetchVerified(p, new Request(p, { cache: 'no-cache' })))));
    const cache = await caches.open(CACHE);
    for (let i = 0; i < SHELL.length; i++) await cache.put(SHELL[i], verified[i]);
    await self.skipWaiting();
  })());
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    // The shell's caches are the page worker's to drop, never a machine worker's.
    if (!MACHINE) for (const key of await caches.keys()) if (key !== CACHE && key !== STATE) await caches.delete(key);
    await self.clients.claim();
  })());
});

/** Whether a request is the API or the relay socket (never served from here). */
function isApi(path) {
  return path === '/api' || path.startsWith('/api/') || path === '/acp' || path.startsWith('/acp/');
}

self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET' || MACHINE) return;
  const url = new URL(req.url);
  if (url.origin !== self.location.origin || isApi(url.pathname)) return;
  // Every client route is the page itself (client-side routing).
  const key = req.mode === 'navigate' ? '/' : url.pathname;
  // Not an asset of this build: the network's, never kept.
  if (!Object.prototype.hasOwnProperty.call(HASHES, key)) return;
  event.respondWith(shell(req, key));
});

/** The hex SHA-256 of `buf`. */
async function sha256(buf) {
  const d = new Uint8Array(await crypto.subtle.digest('SHA-256', buf));
  return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * Fetches `req` (the asset `key`) and returns it rebuilt from its bytes, once they hash to what
 * HASHES says: the hub's own, with the hub's policy. Anything else (another status, other
 * bytes, no hash known) throws.
 */
async function fetchVerified(key, req) {
  const want = HASHES[key];
  if (!want) throw new Error(`${key}: no hash for it in this worker`);
  const resp = await fetch(req);
  if (resp.status !== 200 || resp.type !== 'basic') throw new Error(`${key}: HTTP ${resp.status}`);
  const buf = await resp.arrayBuffer();
  if ((await sha256(buf)) !== want) throw new Error(`${key}: not the bytes this build's hub serves`);
  const headers = new Headers({ 'Content-Type': resp.headers.get('Content-Type') || 'application/octet-stream' });
  headers.set('Content-Security-Policy', CSP);
  headers.set('X-Content-Type-Options', 'nosniff');
  headers.set('Referrer-Policy', 'no-referrer');
  return new Response(buf, { status: 200, headers });
}

/**
 * The cached copy of `key` (an asset of this build); when there is none, the network's answer
 * checked against its hash and kept; an answer that does not match is refused (503), never
 * served or kept.
 */
async function shell(req, key) {
  const cache = await caches.open(CACHE);
  const cached = await cache.match(key);
  if (cached) return cached;
  let verified;
  try {
    verified = await fetchVerified(key, key === '/' ? new Request('/', { cache: 'no-cache' }) : req);
  } catch (e) {
    if (e instanceof TypeError) throw e; // no answer at all: the page's own UI says so
    return new Response(`This answer is not your hub's (${e.message}). Reload when the hub runs again.`, {
      status: 503, headers: { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Security-Policy': CSP },
    });
  }
  await cache.put(key, verified.clone()).catch(() => {});
  return verified;
}

/** The hub's JSON payload of a push; one that is not JSON still says something. */
function payloadOf(data) {
  let p = {};
  try { p = data ? data.json() : {}; } catch { p = { body: data ? data.text() : '' }; }
  return p && typeof p === 'object' ? p : {};
}

/**
 * This worker's machine as push.js wrote it (`{id, name, origin, deviceId, key | token,
 * canAnswer}`), or null: the page's own hub, or a machine forgotten since.
 */
async function machineRecord() {
  if (!MACHINE) return null;
  try {
    const r = await (await caches.open(STATE)).match(`/machine/${encodeURIComponent(MACHINE)}`);
    const m = r ? await r.json() : null;
    return m && m.id === MACHINE && typeof m.origin === 'string' && /^https?:\/\//.test(m.origin) ? m : null;
  } catch { return null; }
}

/** A push's tag as shown: another machine's are its own (tags replace each other across the origin). */
function tagOf(tag) {
  const t = typeof tag === 'string' ? tag.slice(0, 200) : '';
  return t && MACHINE ? `${MACHINE}:${t}` : t;
}

/** `path` (this page's route) on this worker's machine: its session screens get `?m=<hostId>`, as machines.js's withMachine. */
function onMachine(path) {
  if (!MACHINE || !/^\/[nscf]\//.test(path) || /[?&]m=/.test(path)) return path;
  const [rest, hash = ''] = path.split('#');
  return `${rest}${rest.includes('?') ? '&' : '?'}m=${encodeURIComponent(MACHINE)}${hash ? `#${hash}` : ''}`;
}

/** The notification a push payload asks for (with Allow and Deny when this device may answer); `machine`: whose it is when not the page's own hub's. */
function notificationOf(p, canAnswer, machine = null) {
  const text = (v, max) => (typeof v === 'string' ? v.slice(0, max) : '');
  const answer = canAnswer ? answerOf(p.answer) : null;
  const title = text(p.title, 120) || 'An agent is waiting for you';
  const tag = tagOf(p.tag);
  return {
    title: machine ? `${String(machine.name || 'Another machine').slice(0, 64)}: ${title}` : title,
    options: {
      body: text(p.body, 300),
      tag: tag || undefined,
      renotify: Boolean(tag),
      icon: '/icons/icon-192.png',
      badge: '/icons/icon-192.png',
      data: { url: onMachine(sameOriginPath(p.url)), answer, tag },
      actions: answer ? [{ action: 'allow', title: 'Allow' }, { action: 'deny', title: 'Deny' }] : undefined,
    },
  };
}

/** A payload's `answer` ({path, allow, deny}) when its path is this hub's permission route. */
function answerOf(a) {
  if (!a || typeof a !== 'object' || typeof a.path !== 'string') return null;
  if (!/^\/api\/instances\/[^/?#]+\/sessions\/[^/?#]+\/permissions\/[0-9]+$/.test(a.path)) return null;
  if (typeof a.allow !== 'string' || typeof a.deny !== 'string') return null;
  return { path: a.path, allow: a.allow, deny: a.deny };
}

/** `url` as a path of this origin; anything else becomes the home screen. */
function sameOriginPath(url) {
  try {
    const u = new URL(typeof url === 'string' ? url : '/', self.location.origin);
    if (u.origin === self.location.origin) return u.pathname + u.search + u.hash;
  } catch { /* not a URL */ }
  return '/';
}

/**
 * The app badge: how many requests wait for an answer on every paired machine. Each worker (the
 * page's own and one per other machine) keeps its hub's last count in the shared STATE cache
 * under `/badge/<machine>` and sets the badge to their sum.
 */
async function setBadge(n) {
  if (typeof n !== 'number' || !Number.isFinite(n) || !self.navigator) return;
  try {
    const state = await caches.open(STATE);
    await state.put(`/badge/${encodeURIComponent(MACHINE || 'self')}`, new Response(String(Math.max(0, Math.floor(n)))));
    let sum = 0;
    for (const key of await state.keys()) {
      if (!new URL(key.url).pathname.startsWith('/badge/')) continue;
      const r = await state.match(key);
      sum += Number(r ? await r.text() : 0) || 0;
    }
    if (sum > 0 && self.navigator.setAppBadge) await self.navigator.setAppBadge(sum);
    else if (sum <= 0 && self.navigator.clearAppBadge) await self.navigator.clearAppBadge();
  } catch { /* no badge here */ }
}

/** The token and scope a page handed over ({token, canAnswer}), or nothing. */
async function answerCredential() {
  try {
    const r = await (await caches.open(STATE)).match(TOKEN);
    return r ? await r.json() : null;
  } catch { return null; }
}

self.addEventListener('message', (event) => {
  const d = event.data;
  if (!d || d.type !== 'zcode-answer-token') return;
  const keep = (async () => {
    const state = await caches.open(STATE);
    const key = d.key === true && typeof d.deviceId === 'string' && d.deviceId;
    const token = typeof d.token === 'string' ? d.token : '';
    if (!key && !token) return state.delete(TOKEN);
    // A device with a key hands over no token: the worker signs with the key when it answers.
    const body = JSON.stringify(key ? { key: true, deviceId: d.deviceId, canAnswer: d.canAnswer !== false }
      : { token, canAnswer: d.canAnswer !== false });
    return state.put(TOKEN, new Response(body, { headers: { 'Content-Type': 'application/json' } }));
  })();
  extend(event, keep);
});

self.addEventListener('push', (event) => {
  const p = payloadOf(event.data);
  event.waitUntil((async () => {
    // The badge counts every paired machine's waits: this hub's count beside the others'.
    await setBadge(p.pending);
    if (p.kind === 'withdraw') {
      // Answered elsewhere: its notification goes (nothing new is shown).
      const tag = tagOf(p.tag);
      for (const n of await self.registration.getNotifications(tag ? { tag } : {})) if (n.tag === tag) n.close();
      return;
    }
    const machine = await machineRecord();
    const cred = MACHINE ? machine : await answerCredential();
    const { title, options } = notificationOf(p, Boolean(cred && (cred.token || cred.key) && cred.canAnswer !== false), machine);
    await self.registration.showNotification(title, options);
  })());
});

/**
 * Keeps `event` alive until `work` ends. A trusted event is extended with `waitUntil`; one
 * dispatched by script cannot be (the browser throws), and its work simply runs.
 */
function extend(event, work) {
  try { event.waitUntil(work); } catch { /* not a browser-dispatched event */ }
}

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  const data = event.notification.data || {};
  if ((event.action === 'allow' || event.action === 'deny') && data.answer) {
    extend(event, answerFromNotification(data, event.action));
    return;
  }
  const path = sameOriginPath(data.url);
  extend(event, openSession(new URL(path, self.location.origin).href));
});

/**
 * A short-lived access token for device `deviceId`, bought with a signature of the device's own
 * non-extractable key (IndexedDB `zcode-acp-keys`, as js/api.js keeps it) over a fresh challenge
 * of the hub's; '' when there is no such key or the hub refuses. Kept nowhere. `machine`:
 * another machine's hub (its key, as machines.js keeps it, and its origin).
 */
async function signedToken(deviceId, machine = null) {
  const name = machine ? `machine:${machine.origin}#${deviceId}` : 'device';
  const at = machine ? machine.origin : '';
  try {
    const rec = await new Promise((resolve, reject) => {
      const open = indexedDB.open('zcode-acp-keys', 1);
      open.onupgradeneeded = () => open.result.createObjectStore('keys');
      open.onerror = () => reject(open.error);
      open.onsuccess = () => {
        const db = open.result;
        const req = db.transaction('keys', 'readonly').objectStore('keys').get(name);
        req.onsuccess = () => { db.close(); resolve(req.result); };
        req.onerror = () => { db.close(); reject(req.error); };
      };
    });
    if (!rec || rec.deviceId !== deviceId) return '';
    const post = async (path, json) => {
      const r = await fetch(at + path, { method: 'POST', cache: 'no-store', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(json) });
      return r.ok ? r.json() : null;
    };
    const c = await post('/api/pair/challenge', {});
    if (!c || typeof c.challenge !== 'string') return '';
    const data = new TextEncoder().encode('zcode-acp device token:' + c.challenge);
    const sig = new Uint8Array(await crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, rec.privateKey, data));
    let bin = '';
    for (const b of sig) bin += String.fromCharCode(b);
    const signature = btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
    const t = await post('/api/pair/token', { deviceId, challenge: c.challenge, signature });
    return t && typeof t.token === 'string' ? t.token : '';
  } catch {
    return '';
  }
}

/** Posts Allow or Deny to the hub without opening the app; says so in a notification when it did not go through. */
async function answerFromNotification(data, action) {
  const answer = answerOf(data.answer);
  if (!answer) return;
  const optionId = action === 'allow' ? answer.allow : answer.deny;
  const machine = await machineRecord();
  const cred = MACHINE ? machine : await answerCredential();
  let said = '';
  const bearer = cred && (cred.key ? await signedToken(cred.deviceId, machine) : cred.token);
  if (!bearer) {
    said = MACHINE && !machine ? 'Not answered: that machine is no longer paired with this browser.' : 'Not answered: open the app once on this device, then try again.';
  } else {
    try {
      const r = await fetch((machine ? machine.origin : '') + answer.path, {
        method: 'POST', cache: 'no-store',
        headers: { Authorization: `Bearer ${bearer}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ optionId }),
      });
      if (r.ok) return;
      let body = {};
      try { body = await r.json(); } catch { /* not JSON */ }
      said = r.status === 409
        ? `It was already answered${body.answeredBy ? ` (by ${body.answeredBy})` : ''}.`
        : r.status === 403 ? 'Not answered: this device can only watch.'
          : `Not answered: ${typeof body.error === 'string' ? body.error : `the hub said HTTP ${r.status}`}.`;
    } catch {
      said = 'Not answered: the hub could not be reached. Tap to open the session.';
    }
  }
  await self.registration.showNotification(said.startsWith('It was already') ? 'Already answered' : 'Not answered', {
    body: said, tag: data.tag || undefined, icon: '/icons/icon-192.png', badge: '/icons/icon-192.png', data: { url: data.url },
  });
}

/** Shows `target` (a page of the app): in a window of the app if one is open, else a new one. */
async function openSession(target) {
  const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  const same = windows.find((c) => c.url === target) || windows.find((c) => new URL(c.url).origin === self.location.origin);
  if (!same) {
    await self.clients.openWindow(target);
    return;
  }
  let win = same;
  // Focus needs the click's user activation; without it the window still goes to the session.
  try { win = (await same.focus()) || same; } catch { /* not focusable from here */ }
  if (win.url === target) return;
  // Only the worker controlling a window may navigate it: a machine's worker (which controls
  // none) asks the page to go there itself (push.js).
  if (MACHINE) win.postMessage({ type: 'zcode-open', path: new URL(target).pathname + new URL(target).search });
  else if ('navigate' in win) await win.navigate(target).catch(() => {});
}

self.addEventListener('pushsubscriptionchange', (event) => {
  extend(event, renewed(event.oldSubscription || null, event.newSubscription || null));
});

/** Hands a renewed subscription to the pages (and keeps it for one that opens later). */
async function renewed(old, fresh) {
  let sub = fresh;
  if (!sub) {
    const key = old && old.options && old.options.applicationServerKey;
    if (!key) return; // nothing to renew with: the user subscribes again from the home screen
    sub = await self.registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
  }
  const note = { type: 'zcode-push-renewed', subscription: sub.toJSON(), old: old ? old.endpoint : null, machine: MACHINE };
  const state = await caches.open(STATE);
  await state.put(MACHINE ? `${RENEWED}/${encodeURIComponent(MACHINE)}` : RENEWED, new Response(JSON.stringify(note), { headers: { 'Content-Type': 'application/json' } }));
  for (const c of await self.clients.matchAll({ type: 'window', includeUncontrolled: true })) c.postMessage(note);
}
