// The machines this browser is paired with besides the page's own hub ("Several machines" in
// the README). Each is another machine's hub, reached at its own origin (its tunnel's
// address) with its own device credential, which that hub alone issued and alone accepts:
// `{id (its hostId, which keeps it the same machine whatever its address), name, origin,
// deviceId, key | token}`, kept in localStorage. As for the page's own hub (api.js), the
// browser keeps no credential where it can keep a key: a non-extractable ECDSA key per
// machine in IndexedDB (`machine:<origin>#<deviceId>`), which signs that hub's challenges for
// 15-minute access tokens held in memory; elsewhere (no secure context) the device token.
// Adding one redeems a pairing link that `zcode-acp pair` printed on it
// (`https://<its tunnel>/#pair=CODE`) at that origin (`POST <origin>/api/pair`, CORS:
// credentials ride the Authorization header, never a cookie), then asks it what it is
// (`GET /api/version`: hostId, hostName). Nothing travels between machines: the page fetches
// from each what it shows.

import { api, ApiError, defaultDeviceName, keysPossible, idb, b64url, SIGNED_PREFIX } from './api.js';

const KEY = 'zcode-acp.machines';
let memory = [];

/** An access token is minted again this long before it expires (as api.js does). */
const RENEW_EARLY_MS = 60000;
/** Access tokens in memory, and the mints in progress, by key name. */
const access = new Map();
const minting = new Map();

/** Where machine `m`'s key is kept in IndexedDB. */
const keyName = (m) => `machine:${m.origin}#${m.deviceId}`;

/** `m` with `credential(fresh)`: what api.js and conn.js present to its hub. */
function live(m) {
  return { ...m, credential: (fresh = false) => credentialOf(m, fresh) };
}

/** The credential to present to machine `m` now: its token, or an access token its key signed for. */
function credentialOf(m, fresh) {
  if (m.token) return Promise.resolve(m.token);
  if (!m.key) return Promise.resolve('');
  const name = keyName(m);
  const a = access.get(name);
  if (!fresh && a && Date.now() < a.until) return Promise.resolve(a.token);
  if (!minting.has(name)) minting.set(name, mintAt(m).finally(() => minting.delete(name)));
  return minting.get(name);
}

/** Signs a fresh challenge of machine `m`'s hub with its key: a new access token in memory. */
async function mintAt(m) {
  const what = `${m.name}: signing in`;
  const rec = await idb('readonly', (st) => st.get(keyName(m))).catch(() => null);
  if (!rec) throw new ApiError('auth', 401, `This browser lost its key for "${m.name}" (its site data was cleared?): add that machine again with a new pairing link.`);
  const at = { ...m, credential: null };
  const c = await api('/api/pair/challenge', { machine: at, method: 'POST', noAuth: true, what, expectJson: true });
  const sig = await crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, rec.privateKey, new TextEncoder().encode(SIGNED_PREFIX + c.challenge));
  const r = await api('/api/pair/token', { machine: at, method: 'POST', noAuth: true, what, expectJson: true,
    json: { deviceId: m.deviceId, challenge: c.challenge, signature: b64url(sig) } });
  if (!r || typeof r.token !== 'string' || !r.token) throw new ApiError('garbage', 200, `${what}: the hub answered without a token.`);
  const life = Number(r.expiresIn) > 0 ? Number(r.expiresIn) * 1000 : 5 * 60000;
  access.set(keyName(m), { token: r.token, until: Date.now() + Math.max(life - RENEW_EARLY_MS, life / 2) });
  return r.token;
}

/** Every other machine this browser is paired with, in the order they were added. */
export function machines() {
  let list = memory;
  try {
    const kept = JSON.parse(localStorage.getItem(KEY) || '[]');
    if (Array.isArray(kept)) list = kept;
  } catch { /* private mode, or a broken entry */ }
  return list.filter((m) => m && typeof m.id === 'string' && typeof m.origin === 'string').map(live);
}

function save(list) {
  // What is kept: never a function, never an access token.
  const plain = list.map(({ credential, ...m }) => m);
  memory = plain;
  try { localStorage.setItem(KEY, JSON.stringify(plain)); } catch { /* private mode: for this page only */ }
}

/** The paired machine whose hostId is `id`, or null. */
export function machineById(id) {
  return machines().find((m) => m.id === id) || null;
}

/** `path` (a client route) marked as `machine`'s (`?m=`) when it is a screen of one of its sessions. */
export function withMachine(path, machine) {
  if (!machine || !/^\/[nscf]\//.test(path) || /[?&]m=/.test(path)) return path;
  return `${path}${path.includes('?') ? '&' : '?'}m=${encodeURIComponent(machine.id)}`;
}

/** A session's route on `machine` (null: the page's own hub). */
export function sessionRoute(machine, instance, sid, cwd) {
  return withMachine(`/s/${encodeURIComponent(instance)}/${encodeURIComponent(sid)}?cwd=${encodeURIComponent(cwd || '')}`, machine);
}

/** `{origin, code}` of a pairing link (`https://host/#pair=CODE`), or an Error saying what is wrong. */
export function parsePairingLink(text) {
  let url;
  try { url = new URL(String(text || '').trim()); } catch { throw new Error('That is not a link: paste the whole pairing link zcode-acp pair printed on that machine (https://…/#pair=CODE).'); }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new Error('A pairing link starts with https:// (or http:// on a local network).');
  const code = new URLSearchParams(url.hash.replace(/^#/, '')).get('pair');
  if (!code) throw new Error('That link has no pairing code in it (#pair=…): run zcode-acp pair on that machine for one.');
  return { origin: url.origin, code: code.trim() };
}

let self = null;
/** This page's own machine: `{id, name}` from its hub's `/api/version` (asked once). */
export async function selfMachine() {
  if (!self) {
    self = api('/api/version', { machine: null, what: 'This machine', expectJson: true, timeout: 5000 })
      .then((v) => ({ id: String(v.hostId || ''), name: String(v.hostName || location.host) }))
      .catch((e) => { self = null; throw e; });
  }
  return self;
}

/**
 * Pairs this browser with another machine by its pairing `link`, named `name` (default: the
 * machine's host name); returns the machine. The same machine paired again (its hostId) is
 * replaced, not added twice.
 */
export async function addMachine(link, name = '') {
  const { origin, code } = parsePairingLink(link);
  if (origin === location.origin) throw new Error('That link is for this page\'s own machine, which this browser is paired with already.');
  // The key is made before the code is spent: a browser that cannot keep one pairs with a token.
  let rec = null;
  if (keysPossible()) {
    try {
      const pair = await crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign']);
      rec = { privateKey: pair.privateKey, publicKey: b64url(await crypto.subtle.exportKey('raw', pair.publicKey)) };
    } catch (e) {
      console.warn('no key can be kept here', e);
    }
  }
  const at = { origin, name: new URL(origin).host, credential: null };
  const json = rec ? { code, name: defaultDeviceName(), publicKey: rec.publicKey } : { code, name: defaultDeviceName() };
  const r = await api('/api/pair', { machine: at, method: 'POST', json, noAuth: true, what: 'Pairing', expectJson: true, pairing: true });
  if (!r || typeof r.deviceId !== 'string' || !r.deviceId) throw new ApiError('garbage', 200, 'Pairing: that machine answered without a device.');
  const m = { origin, name: at.name, deviceId: r.deviceId };
  if (rec && typeof r.token !== 'string') {
    m.key = true;
    await idb('readwrite', (st) => st.put({ ...rec, deviceId: r.deviceId }, keyName(m)));
  } else if (typeof r.token === 'string' && r.token) {
    m.token = r.token;
  } else {
    throw new ApiError('garbage', 200, 'Pairing: that machine answered without a credential.');
  }
  const v = await api('/api/version', { machine: live(m), what: 'That machine', expectJson: true });
  m.id = String(v.hostId || '');
  if (!m.id) throw new Error('That machine did not say who it is (its hub is too old for several machines: upgrade it).');
  const mine = await selfMachine().catch(() => null);
  if (mine && mine.id === m.id) throw new Error('That link is for this page\'s own machine (reached at another address): it is paired already.');
  m.name = String(name || '').trim().slice(0, 64) || String(v.hostName || '') || m.name;
  const old = machines().filter((x) => x.id === m.id);
  save([...machines().filter((x) => x.id !== m.id), m]);
  for (const o of old) forgetKey(o);
  return live(m);
}

/** Drops machine `m`'s key and access token (when it had a key). */
function forgetKey(m) {
  access.delete(keyName(m));
  if (m.key && keysPossible()) idb('readwrite', (st) => st.delete(keyName(m))).catch(() => {});
}

/** Renames paired machine `id`. */
export function renameMachine(id, name) {
  save(machines().map((m) => (m.id === id ? { ...m, name: String(name).trim().slice(0, 64) || m.name } : m)));
}

/** Where fleet.js keeps what machine `id` last showed (localStorage). */
export const keptHomeKey = (id) => `zcode-acp.machineHome.${id}`;

/** Forgets machine `id` here (its hub keeps the device until it is removed there). */
export function removeMachine(id) {
  for (const m of machines()) if (m.id === id) forgetKey(m);
  try { localStorage.removeItem(keptHomeKey(id)); } catch { /* private mode */ }
  save(machines().filter((m) => m.id !== id));
}
