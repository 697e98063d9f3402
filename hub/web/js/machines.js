// The machines this browser is paired with besides the page's own hub ("Several machines" in
// the README). Each is another machine's hub, reached at its own origin (its tunnel's
// address) with its own device credential, which that hub alone issued and alone accepts:
// `{id (its hostId, which keeps it the same machine whatever its address), name, origin,
// token, deviceId}`, kept in localStorage. Adding one redeems a pairing link that
// `zcode-acp pair` printed on it (`https://<its tunnel>/#pair=CODE`) at that origin
// (`POST <origin>/api/pair`, CORS: credentials ride the Authorization header, never a cookie),
// then asks it what it is (`GET /api/version`: hostId, hostName). Nothing travels between
// machines: the page fetches from each what it shows.

import { api, ApiError, defaultDeviceName } from './api.js';

const KEY = 'zcode-acp.machines';
let memory = [];

/** Every other machine this browser is paired with, in the order they were added. */
export function machines() {
  try {
    const list = JSON.parse(localStorage.getItem(KEY) || '[]');
    if (Array.isArray(list)) return list.filter((m) => m && typeof m.id === 'string' && typeof m.origin === 'string');
  } catch { /* private mode, or a broken entry */ }
  return memory;
}

function save(list) {
  memory = list;
  try { localStorage.setItem(KEY, JSON.stringify(list)); } catch { /* private mode: for this page only */ }
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
  const at = { origin, token: '', name: new URL(origin).host };
  const r = await api('/api/pair', { machine: at, method: 'POST', json: { code, name: defaultDeviceName() }, noAuth: true, what: 'Pairing', expectJson: true, pairing: true });
  if (!r || typeof r.token !== 'string' || !r.token) throw new ApiError('garbage', 200, 'Pairing: that machine answered without a credential.');
  const m = { ...at, token: r.token, deviceId: String(r.deviceId || '') };
  const v = await api('/api/version', { machine: m, what: 'That machine', expectJson: true });
  m.id = String(v.hostId || '');
  if (!m.id) throw new Error('That machine did not say who it is (its hub is too old for several machines: upgrade it).');
  const mine = await selfMachine().catch(() => null);
  if (mine && mine.id === m.id) throw new Error('That link is for this page\'s own machine (reached at another address): it is paired already.');
  m.name = String(name || '').trim().slice(0, 64) || String(v.hostName || '') || m.name;
  save([...machines().filter((x) => x.id !== m.id), m]);
  return m;
}

/** Renames paired machine `id`. */
export function renameMachine(id, name) {
  save(machines().map((m) => (m.id === id ? { ...m, name: String(name).trim().slice(0, 64) || m.name } : m)));
}

/** Forgets machine `id` here (its hub keeps the device until it is removed there). */
export function removeMachine(id) {
  save(machines().filter((m) => m.id !== id));
}
