// The hub's HTTP API: the credential (sent as a Bearer header), requests with a timeout, and
// errors sorted into what a person can act on. A tunnel's HTML error page, a 502 or a dropped
// connection never surfaces as a blank page: each becomes an ApiError with a readable message
// and a `retry` hint.
//
// A browser paired with a one-time code (`pairWithCode`) keeps NO credential in its storage: it
// makes a non-extractable ECDSA P-256 key (WebCrypto), keeps that CryptoKey in IndexedDB (a
// structured clone stays non-extractable), and registers the public half with the hub. For
// requests it signs a fresh challenge of the hub's and gets an access token that works 15
// minutes, held in this page's memory only, minted again when it is close to expiry or refused
// (a restarted hub forgot it). A browser paired before keys existed swaps its stored device
// token for a key at start (`upgradeToKey`), then deletes the token. Where WebCrypto or
// IndexedDB are missing (a page served over plain http from another machine is not a secure
// context), the device token is kept in localStorage as before. A token pasted or given as
// `#token=` (the machine's, for local tools) is kept there too. See docs/SECURITY.md.
//
// `device()` says which device this browser is, and its scope. When the hub refuses this
// device (its token, or its key's signature), the device was removed: `onRevoked` is told
// once, and the app stops asking (no loop of 401s).

const TOKEN_KEY = 'zcode-acp.token';
/** This browser's device: {id, name, scope, key?, removed?} as JSON, or absent (a pasted token). */
const DEVICE_KEY = 'zcode-acp.device';
const TIMEOUT_MS = 15000;
/**
 * How long `diagnose`'s health check waits: on a stalled line it waits all of it (test-only
 * knob: localStorage `zcode-acp.test.healthTimeoutMs`).
 */
const HEALTH_TIMEOUT_MS = (() => {
  let v = NaN;
  try { v = Number(localStorage.getItem('zcode-acp.test.healthTimeoutMs')); } catch { /* no storage */ }
  return Number.isFinite(v) && v > 0 ? v : 5000;
})();
/** What a device signs before the hub's challenge (hub/src/devices/keys.rs). */
export const SIGNED_PREFIX = 'zcode-acp device token:';
/** An access token is minted again this long before it expires. */
const RENEW_EARLY_MS = 60000;

/** The token kept in localStorage (a pasted one, or a device's where keys cannot be had), or ''. */
function storedToken() {
  try { return localStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

/**
 * What the service worker may answer a notification with: this browser's stored token, or that
 * it has a device key (the worker signs a challenge with the same non-extractable key itself and
 * keeps no token), or nothing.
 */
export function workerCredential() {
  const d = device();
  if (d && d.key && !d.removed) return { key: true, deviceId: d.id };
  const t = storedToken() || memoryToken;
  return t ? { token: t } : {};
}

/** Whether this browser has something to ask the hub with (a token, or its device's key). */
export function hasCredential() {
  const d = device();
  return Boolean(storedToken() || memoryToken || (d && d.key && !d.removed));
}

/**
 * Stores (or, with '', forgets) the token. A token given this way is not a device's (pasted,
 * or `#token=`): the device this browser was (and its key) is forgotten, unless `keepDevice`.
 */
export function setToken(t, keepDevice = false) {
  try {
    if (t) localStorage.setItem(TOKEN_KEY, t); else localStorage.removeItem(TOKEN_KEY);
    if (!keepDevice) localStorage.removeItem(DEVICE_KEY);
  } catch { /* private mode: the token lives for this page only */ }
  memoryToken = t;
  access = { token: '', until: 0 };
  if (!keepDevice) {
    memoryDevice = null;
    dropKey().catch(() => {});
  }
  showScope();
}
let memoryToken = '';
let memoryDevice = null;
/** The access token a keyed device's signature bought: this page's memory only. */
let access = { token: '', until: 0 };
/** The mint in progress (one at a time, whoever asks). */
let minting = null;

export function b64url(buf) {
  let bin = '';
  for (const b of new Uint8Array(buf)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** Whether this browser can hold a non-extractable key (WebCrypto needs a secure context). */
export function keysPossible() {
  return typeof isSecureContext !== 'undefined' && isSecureContext && typeof crypto !== 'undefined'
    && Boolean(crypto.subtle) && typeof indexedDB !== 'undefined';
}

/** One IndexedDB request on the `keys` store (machines.js keeps other machines' keys there too) of database `zcode-acp-keys` (its own: saved.js owns `zcode-acp`): its result. */
export function idb(mode, fn) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open('zcode-acp-keys', 1);
    open.onupgradeneeded = () => open.result.createObjectStore('keys');
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      let req;
      try {
        const tx = db.transaction('keys', mode);
        req = fn(tx.objectStore('keys'));
        tx.oncomplete = () => { db.close(); resolve(req && req.result); };
        tx.onerror = tx.onabort = () => { db.close(); reject(tx.error); };
      } catch (e) {
        db.close();
        reject(e);
      }
    };
  });
}
/** The kept key: {deviceId, privateKey (a non-extractable CryptoKey), publicKey (base64url)}. */
const loadKey = () => idb('readonly', (st) => st.get('device'));
const saveKey = (rec) => idb('readwrite', (st) => st.put(rec, 'device'));
function dropKey() {
  return keysPossible() ? idb('readwrite', (st) => st.delete('device')) : Promise.resolve();
}

/** A new non-extractable signing key, kept in IndexedDB for `deviceId` before it is used. */
async function newKey(deviceId) {
  const pair = await crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign']);
  const rec = { deviceId, privateKey: pair.privateKey, publicKey: b64url(await crypto.subtle.exportKey('raw', pair.publicKey)) };
  await saveKey(rec);
  return rec;
}

/** Signs a fresh challenge of the hub's with the kept key: a new access token in memory (this page's own hub, whatever machine the route shows). */
async function mint() {
  const d = device();
  const rec = await loadKey().catch(() => null);
  if (!d || !rec || rec.deviceId !== d.id) {
    throw new ApiError('auth', 401, 'This browser lost its key (its site data was cleared?): pair it again with a new code.');
  }
  let r;
  for (let tries = 1; ; tries++) {
    const c = await api('/api/pair/challenge', { machine: null, method: 'POST', noAuth: true, what: 'Signing in', expectJson: true });
    let sig;
    try {
      sig = await crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, rec.privateKey, new TextEncoder().encode(SIGNED_PREFIX + c.challenge));
    } catch {
      throw new ApiError('auth', 401, 'This browser cannot use its key any more: pair it again with a new code.');
    }
    try {
      r = await api('/api/pair/token', { machine: null, method: 'POST', noAuth: true, what: 'Signing in', expectJson: true,
        json: { deviceId: d.id, challenge: c.challenge, signature: b64url(sig) } });
      break;
    } catch (e) {
      // A challenge that expired on the way (a very slow line) is asked again, once; any other
      // 401 means the hub no longer knows this key.
      if (!(e.status === 401 && /challenge/.test(e.body) && tries < 2)) throw e;
    }
  }
  if (!r || typeof r.token !== 'string' || !r.token) throw new ApiError('garbage', 200, 'Signing in: the hub answered without a token.');
  const life = Number(r.expiresIn) > 0 ? Number(r.expiresIn) * 1000 : 5 * 60000;
  access = { token: r.token, until: Date.now() + Math.max(life - RENEW_EARLY_MS, life / 2) };
  return r.token;
}

/**
 * The credential to present now: the stored token, or this device's access token (minted when
 * there is none, it is about to expire, or `fresh`). Rejects with an ApiError; a device whose
 * signature the hub refuses was removed (`onRevoked` is told).
 */
export async function credential(fresh = false) {
  const t = storedToken() || memoryToken;
  const d = device();
  if (t || !(d && d.key && !d.removed)) return t;
  if (!fresh && access.token && Date.now() < access.until) return access.token;
  if (fresh) access = { token: '', until: 0 };
  if (!minting) {
    minting = mint().catch((e) => {
      if (e.kind === 'auth') revoked(e);
      throw e;
    }).finally(() => { minting = null; });
  }
  return minting;
}

/** This device's credential was refused: forget it, and tell the app (once). */
function revoked(err) {
  const d = device();
  if (!d || d.removed) return;
  forgetRevoked();
  if (revokedHandler) {
    const fn = revokedHandler;
    queueMicrotask(() => fn(err.message));
  }
}

/**
 * A device that still keeps its token in storage (paired before keys existed) swaps it for a
 * key: registers the key with the token (`POST /api/pair/key`), then deletes the token. Does
 * nothing where keys cannot be had; a failure leaves the token (tried again at the next start).
 */
export async function upgradeToKey() {
  const d = device();
  const t = storedToken();
  if (!d || d.removed || d.key || !d.id || !t || !keysPossible()) return;
  try {
    let rec = await loadKey().catch(() => null);
    if (!rec || rec.deviceId !== d.id) rec = await newKey(d.id);
    try {
      await api('/api/pair/key', { machine: null, method: 'POST', json: { publicKey: rec.publicKey }, what: 'Keeping a key', expectJson: true });
    } catch (e) {
      // A key registered by an earlier try whose answer was lost: it is the one kept.
      if (e.status !== 409 || !/key already/.test(e.message)) throw e;
    }
    setDevice({ ...device(), key: true });
    try { localStorage.removeItem(TOKEN_KEY); } catch { /* private mode */ }
    memoryToken = '';
  } catch (e) {
    console.warn('could not swap the device token for a key', e);
  }
}

/** This browser's paired device, {id, name, scope, removed?}, or null (a pasted token). */
export function device() {
  try {
    const d = JSON.parse(localStorage.getItem(DEVICE_KEY) || 'null');
    if (d && typeof d === 'object') return d;
  } catch { /* none, or private mode */ }
  return memoryDevice;
}

function setDevice(d) {
  memoryDevice = d;
  try {
    if (d) localStorage.setItem(DEVICE_KEY, JSON.stringify(d)); else localStorage.removeItem(DEVICE_KEY);
  } catch { /* private mode */ }
  showScope();
}

/** Updates what is known of this device (`patch`: name, scope). */
export function noteDevice(patch) {
  const d = device();
  if (d && !d.removed) setDevice({ ...d, ...patch });
}

/** Whether this browser may change things (a `watch` device may not). */
export function canWrite() {
  const d = device();
  return !(d && d.scope === 'watch');
}

/** Marks the page with this device's scope (`html[data-scope]`: the styles hide what a watch device cannot do). */
function showScope() {
  if (typeof document === 'undefined') return;
  document.documentElement.dataset.scope = canWrite() ? 'full' : 'watch';
}
showScope();

/** The words a watch device's refused action is met with. */
export const WATCH_ONLY = 'This device can only watch: sending, stopping, answering and changing things need a device paired with full access.';

let revokedHandler = null;
/** `fn()` is called (once per credential) when the hub says this device's own token is no longer valid. */
export function onRevoked(fn) {
  revokedHandler = fn;
}

/** Forgets the removed device's token, remembering that it was removed (the pairing screen says so). */
export function forgetRevoked() {
  const d = device();
  try { localStorage.removeItem(TOKEN_KEY); } catch { /* private mode */ }
  memoryToken = '';
  access = { token: '', until: 0 };
  dropKey().catch(() => {});
  setDevice(d ? { ...d, removed: true, key: false } : null);
}

/** A name for this browser from its user agent ("Chrome on Android"); the person can change it. */
export function defaultDeviceName() {
  const ua = (typeof navigator !== 'undefined' && navigator.userAgent) || '';
  const browser = /Edg\//.test(ua) ? 'Edge' : /Firefox\//.test(ua) ? 'Firefox'
    : /(Chrome|Chromium|CriOS)\//.test(ua) ? 'Chrome' : /Safari\//.test(ua) ? 'Safari' : 'Browser';
  const os = /iPhone/.test(ua) ? 'iPhone' : /iPad/.test(ua) ? 'iPad' : /Android/.test(ua) ? 'Android'
    : /Mac OS X/.test(ua) ? 'Mac' : /Windows/.test(ua) ? 'Windows' : /CrOS/.test(ua) ? 'ChromeOS' : /Linux/.test(ua) ? 'Linux' : '';
  return os ? `${browser} on ${os}` : browser;
}

/**
 * Pairs this browser with a one-time `code` (`POST /api/pair`, no token). Where it can, the
 * browser registers a new non-extractable key and keeps no credential (see the top); else the
 * device token the hub returns is kept. Rejects with an ApiError whose message says why (a
 * used, expired or unknown code in the hub's words).
 */
export async function pairWithCode(code, name = defaultDeviceName()) {
  // The key is kept before the code is spent: a browser that cannot keep one pairs with a token.
  const rec = keysPossible() ? await newKey('').catch((e) => { console.warn('no key can be kept here', e); return null; }) : null;
  const json = rec ? { code, name, publicKey: rec.publicKey } : { code, name };
  const r = await api('/api/pair', { machine: null, method: 'POST', json, noAuth: true, what: 'Pairing', expectJson: true, pairing: true });
  if (!r || typeof r.deviceId !== 'string' || !r.deviceId) throw new ApiError('garbage', 200, 'Pairing: the hub answered without a device.');
  const id = r.deviceId;
  if (rec && typeof r.token !== 'string') {
    await saveKey({ ...rec, deviceId: id });
    try { localStorage.removeItem(TOKEN_KEY); } catch { /* private mode */ }
    memoryToken = '';
    access = { token: '', until: 0 };
    setDevice({ id, name: String(r.name || name), scope: 'full', key: true });
  } else {
    if (typeof r.token !== 'string' || !r.token) throw new ApiError('garbage', 200, 'Pairing: the hub answered without a credential.');
    if (rec) dropKey().catch(() => {});
    try { localStorage.setItem(TOKEN_KEY, r.token); } catch { /* private mode */ }
    memoryToken = r.token;
    setDevice({ id, name: String(r.name || name), scope: 'full' });
  }
  // The scope is the code's: the hub tells it in the device list.
  await refreshDevice().catch(() => {});
  return r;
}

/** Reads this device's row from `GET /api/devices` (its scope, its name); returns the list. */
export async function refreshDevice() {
  const list = await api('/api/devices', { machine: null, what: 'The device list', expectJson: true });
  const rows = (list && Array.isArray(list.devices)) ? list.devices : [];
  const me = rows.find((d) => d && d.current);
  if (me) noteDevice({ id: String(me.id), name: String(me.name || ''), scope: me.scope === 'watch' ? 'watch' : 'full' });
  return rows;
}

/**
 * Reads `#pair=CODE` from the address and removes it from the address bar (and history) at
 * once, whatever becomes of it. Returns the code, or null.
 */
export function takePairCodeFromFragment() {
  const frag = location.hash.replace(/^#/, '');
  const params = new URLSearchParams(frag);
  const code = params.get('pair');
  if (code === null) return null;
  params.delete('pair');
  const rest = params.toString();
  history.replaceState(history.state, '', location.pathname + location.search + (rest ? `#${rest}` : ''));
  return code.trim();
}

/**
 * Reads `#token=…` from the address, stores it and removes it from the address bar (and from
 * history), so it is never shown, bookmarked or sent anywhere. Returns whether one was found.
 */
export function takeTokenFromFragment() {
  const frag = location.hash.replace(/^#/, '');
  const params = new URLSearchParams(frag);
  const t = params.get('token');
  if (t === null) return false;
  setToken(t.trim());
  params.delete('token');
  const rest = params.toString();
  history.replaceState(history.state, '', location.pathname + location.search + (rest ? `#${rest}` : ''));
  return true;
}

/** An API failure: `kind` is network | auth | limited | garbage | gateway | missing | http. */
export class ApiError extends Error {
  constructor(kind, status, message, body = '') {
    super(message);
    this.kind = kind;
    this.status = status;
    this.body = body;
  }
  /** Whether trying again later may help. */
  get retry() {
    return ['network', 'garbage', 'gateway', 'limited'].includes(this.kind);
  }
}

/** A short server message worth showing (plain text or a JSON `error`, one line, not HTML). */
function serverText(body, type) {
  if (!body || /html/i.test(type) || /^\s*</.test(body)) return '';
  if (/json/i.test(type) || /^\s*\{/.test(body)) {
    try {
      const e = JSON.parse(body).error;
      if (typeof e === 'string' && e && e.length <= 300) return e;
      if (e && typeof e.message === 'string' && e.message.length <= 300) return e.message;
    } catch { /* not JSON after all */ }
  }
  const line = body.trim().split('\n')[0];
  return line.length <= 200 ? line : '';
}

/** Sorts a non-2xx answer into an ApiError. */
export function errorFor(status, body, type, what, pairing = false) {
  const said = serverText(body, type);
  if (pairing && (status === 401 || status === 429 || status === 409)) {
    return new ApiError(status === 401 ? 'code' : status === 429 ? 'limited' : 'http', status, said || `${what}: HTTP ${status}`, body);
  }
  const d = device();
  if (status === 401 && d && !d.removed) {
    return new ApiError('auth', 401, `This device ("${d.name || 'this browser'}") was removed from the hub, or its credential is no longer valid. Pair it again with a new code.`, body);
  }
  if (status === 403 && !canWrite()) return new ApiError('watch', 403, `${what}: ${WATCH_ONLY}`, body);
  if (status === 401) return new ApiError('auth', 401, 'The hub rejected the token (it was rotated, or it is wrong). Pair again with a fresh link.', body);
  if (status === 429) return new ApiError('limited', 429, 'Too many wrong tokens from this address: wait a minute, then retry.', body);
  if (/html/i.test(type) || /^\s*<(!doctype|html)/i.test(body)) {
    return new ApiError('garbage', status, `Something between you and the hub answered with a web page instead of the hub's API (HTTP ${status}): a tunnel or proxy error?`, body);
  }
  if (status === 502 || status === 503 || status === 504) {
    return new ApiError('gateway', status, `${what}: the hub could not reach its bridge, or the tunnel could not reach the hub (HTTP ${status}${said ? `: ${said}` : ''}).`, body);
  }
  if (status === 404 && (!said || said === 'not found')) {
    return new ApiError('missing', 404, `${what}: this hub does not offer that (HTTP 404).`, body);
  }
  return new ApiError('http', status, `${what}: ${said || `HTTP ${status}`}`, body);
}

/**
 * The machine (machines.js: `{id, name, origin, token}`) calls go to when they name none: set
 * while a route shows another machine's session (`?m=`); null for the page's own hub.
 */
let target = null;
export function setTarget(m) {
  target = m && m.origin ? m : null;
}
export function targetMachine() {
  return target;
}

/**
 * Calls the hub. `opts`: method, json (a body to send as JSON), raw (return the Response),
 * what (a label for error messages), noAuth, machine (another machine's hub: its origin and
 * its own credential; null: this page's own hub; default: the route's). Resolves with parsed JSON (or text for text/*
 * answers), rejects with an ApiError.
 */
export async function api(path, opts = {}) {
  const what = opts.what || path.split('?')[0];
  const headers = {};
  const m = opts.machine !== undefined ? opts.machine : target;
  const t = opts.noAuth ? '' : m ? await m.credential(opts.fresh) : await credential(opts.fresh);
  if (t) headers.Authorization = `Bearer ${t}`;
  const sentDevice = !m && !opts.noAuth && t && device() && !device().removed;
  const sentAccess = Boolean(t) && (m ? Boolean(m.key) : t === access.token);
  let body;
  if (opts.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.json);
  }
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), opts.timeout || TIMEOUT_MS);
  let resp;
  try {
    resp = await fetch(m ? m.origin + path : path, { method: opts.method || (body ? 'POST' : 'GET'), headers, body, signal: ctl.signal, cache: 'no-store' });
  } catch (e) {
    clearTimeout(timer);
    const timedOut = e && e.name === 'AbortError';
    throw new ApiError('network', 0, timedOut
      ? `${what}: the hub did not answer in time.`
      : `${what}: cannot reach the hub (it is stopped, or the network is down).`);
  }
  try {
    if (opts.raw && resp.ok) return resp;
    const type = resp.headers.get('content-type') || '';
    const text = await resp.text();
    if (!resp.ok) {
      // An access token refused (expired, or a restarted hub forgot it): sign for a new one, once.
      if (resp.status === 401 && sentAccess && !opts.fresh) {
        clearTimeout(timer);
        return api(path, { ...opts, fresh: true });
      }
      if (m && resp.status === 401 && !opts.pairing) {
        throw new ApiError('auth', 401, `${what}: "${m.name}" no longer accepts this browser (it was removed there): add that machine again with a new pairing link.`, text);
      }
      const err = errorFor(resp.status, text, type, what, opts.pairing);
      // This device's own credential refused, and still the one kept: it was removed.
      if (resp.status === 401 && sentDevice && (storedToken() || memoryToken || access.token) === t) revoked(err);
      throw err;
    }
    if (/json/i.test(type)) {
      try { return JSON.parse(text); } catch { /* fall through */ }
      throw new ApiError('garbage', resp.status, `${what}: the answer was cut short or is not JSON.`, text);
    }
    if (opts.expectJson) {
      throw new ApiError('garbage', resp.status, `${what}: expected the hub's JSON, got ${type || 'something else'} (a tunnel or proxy page?).`, text);
    }
    return text;
  } catch (e) {
    if (e instanceof ApiError) throw e;
    throw new ApiError('network', 0, `${what}: the connection broke while reading the answer.`);
  } finally {
    clearTimeout(timer);
  }
}

/** GET JSON (an answer that is not JSON is an error). */
export function getJson(path, what) {
  return api(path, { what, expectJson: true });
}

/** POST a JSON body, expecting JSON back. */
export function postJson(path, json, what) {
  return api(path, { json, what, expectJson: true });
}

/**
 * Why the hub or an instance cannot be used right now: 'down' (nothing answers), 'garbage'
 * (something that is not the hub answers), 'auth', 'gone' (the instance is not listed), or
 * 'ok' (all looks fine: a transient failure).
 */
export async function diagnose(instanceId, machine = null) {
  const at = { machine };
  try {
    const health = await api('/api/health', { ...at, noAuth: true, what: 'Health check', timeout: HEALTH_TIMEOUT_MS });
    if (typeof health !== 'string' || health.trim() !== 'ok') return { why: 'garbage', message: 'Something that is not the hub answers at this address (a tunnel error page?).' };
  } catch (e) {
    return { why: e.kind === 'network' ? 'down' : 'garbage', message: e.message };
  }
  try {
    const list = await api('/api/instances?probe=1', { ...at, what: 'The instance list', expectJson: true });
    if (instanceId && Array.isArray(list) && !list.some((i) => String(i.id) === String(instanceId))) {
      return { why: 'gone', message: 'This instance is gone: its editor or bridge was closed.' };
    }
    return { why: 'ok' };
  } catch (e) {
    return { why: e.kind === 'auth' ? 'auth' : e.kind === 'network' ? 'down' : 'garbage', message: e.message };
  }
}

/** `?a=b&c=d` from an object (skipping empty values). */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}
