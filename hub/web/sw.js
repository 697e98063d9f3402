// The service worker: the app shell offline, and Web Push notifications.
//
// Shell: every asset of the client is cached at install. Requests for it go to the network
// first (so an updated hub is seen at once; the hub answers 304 while nothing changed) and fall
// back to the cache when the hub cannot be reached, so the app still opens and its own error
// UI says the hub is unreachable. The API and the ACP socket are never cached or answered here:
// they always reach the hub, or fail.
//
// Push: the hub sends a small JSON payload, {title, body, url, tag}; the `push` handler shows
// it as a system notification, and a click opens (or focuses) the session it names. Nothing
// secret is kept here: no token, no transcript.

const CACHE = 'zcode-acp-shell-v1';
const SHELL = [
  '/',
  '/app.css',
  '/icon.svg',
  '/manifest.webmanifest',
  '/icons/icon-192.png',
  '/js/app.js',
  '/js/api.js',
  '/js/conn.js',
  '/js/dom.js',
  '/js/md.js',
  '/js/home.js',
  '/js/projects.js',
  '/js/session.js',
  '/js/transcript.js',
  '/js/composer.js',
  '/js/files.js',
  '/js/push.js',
  '/js/inbox.js',
  '/js/board.js',
  '/js/about.js',
];
// How long a request for the shell waits for the hub before the cached copy is used (a tunnel
// that hangs rather than refuses).
const NETWORK_MS = 4000;

self.addEventListener('install', (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await cache.addAll(SHELL.map((p) => new Request(p, { cache: 'no-cache' })));
    await self.skipWaiting();
  })());
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const key of await caches.keys()) if (key !== CACHE) await caches.delete(key);
    await self.clients.claim();
  })());
});

/** Whether a request is the API or the relay socket (never served from here). */
function isApi(path) {
  return path === '/api' || path.startsWith('/api/') || path === '/acp' || path.startsWith('/acp/');
}

self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET') return;
  const url = new URL(req.url);
  if (url.origin !== self.location.origin || isApi(url.pathname)) return;
  // Every client route is the page itself (client-side routing).
  const key = req.mode === 'navigate' ? '/' : url.pathname;
  event.respondWith(shell(req, key));
});

/** The network's answer for `req`, kept as `key`; the cached copy when the hub is unreachable. */
async function shell(req, key) {
  const cache = await caches.open(CACHE);
  let timer;
  const late = new Promise((resolve) => { timer = setTimeout(resolve, NETWORK_MS, null); });
  const net = fetch(req).then((resp) => {
    if (resp.ok && resp.type === 'basic') cache.put(key, resp.clone()).catch(() => {});
    return resp;
  });
  try {
    const first = await Promise.race([net, late]);
    if (first) return first;
    const cached = await cache.match(key);
    return cached || await net;
  } catch (e) {
    const cached = await cache.match(key);
    if (cached) return cached;
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

/** The notification a push payload asks for; a payload that is not the hub's JSON still says something. */
function notificationOf(data) {
  let p = {};
  try { p = data ? data.json() : {}; } catch { p = { body: data ? data.text() : '' }; }
  if (!p || typeof p !== 'object') p = {};
  const text = (v, max) => (typeof v === 'string' ? v.slice(0, max) : '');
  return {
    title: text(p.title, 120) || 'An agent is waiting for you',
    options: {
      body: text(p.body, 300),
      tag: text(p.tag, 200) || undefined,
      renotify: Boolean(p.tag),
      icon: '/icons/icon-192.png',
      badge: '/icons/icon-192.png',
      data: { url: sameOriginPath(p.url) },
    },
  };
}

/** `url` as a path of this origin; anything else becomes the home screen. */
function sameOriginPath(url) {
  try {
    const u = new URL(typeof url === 'string' ? url : '/', self.location.origin);
    if (u.origin === self.location.origin) return u.pathname + u.search + u.hash;
  } catch { /* not a URL */ }
  return '/';
}

self.addEventListener('push', (event) => {
  const { title, options } = notificationOf(event.data);
  event.waitUntil(self.registration.showNotification(title, options));
});

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  const path = sameOriginPath(event.notification.data && event.notification.data.url);
  const target = new URL(path, self.location.origin).href;
  event.waitUntil((async () => {
    const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
    const same = windows.find((c) => c.url === target) || windows.find((c) => new URL(c.url).origin === self.location.origin);
    if (same) {
      const focused = await same.focus();
      if (same.url !== target && 'navigate' in focused) await focused.navigate(target).catch(() => {});
      return;
    }
    await self.clients.openWindow(target);
  })());
});
