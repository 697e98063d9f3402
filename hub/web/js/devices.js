// The Devices screen (/devices): every paired device (name, scope, when paired, last seen;
// this one marked), renaming any and removing the others (after a confirmation: the hub
// closes everything that device holds at once), pairing a new one (a one-time code, its link
// and its QR code, full or watch-only), and the audit trail, newest first. A watch-only
// device sees the list and the trail; changing anything is not offered to it.

import { h, clear, toast, ago, modal } from './dom.js';
import { getJson, postJson, api, device, canWrite, refreshDevice, WATCH_ONLY } from './api.js';
import { qrSvg } from './qr.js';

/** Audit entries shown, at most (the newest). */
const AUDIT_LIMIT = 50;
/** The list and the trail are read again this often while the screen is open. */
const POLL_MS = 3000;

const ACTIONS = {
  pair: 'paired', 'pairing.code': 'made a pairing code', 'device.key': 'swapped its stored token for a key', 'device.revoke': 'removed a device', 'device.rename': 'renamed a device',
  'session.create': 'created a session', 'session.close': 'closed a session', 'session.rename': 'renamed a session',
  'session.delete': 'deleted a session', 'project.delete': 'deleted a project', 'settings.write': 'changed a setting',
  'backend.restart': 'restarted an agent', 'hub.upgrade': 'upgraded the hub', 'token.rotate': 'rotated the machine token',
};

function when(ms) {
  if (!ms) return 'never';
  const d = new Date(Number(ms));
  return Number.isNaN(d.getTime()) ? 'unknown' : d.toLocaleString([], { dateStyle: 'medium', timeStyle: 'short' });
}

export function devicesView(root, app) {
  app.setTitle('Devices');
  let stopped = false;
  let timer = null;
  let rows = [];
  let shown = '';
  const me = h('section', { class: 'card', id: 'this-device' });
  const list = h('section', { class: 'card', id: 'device-list' }, h('h2', { text: 'Paired devices' }), h('p', { class: 'muted', text: 'Loading…' }));
  const pairing = h('section', { class: 'card', id: 'pair-new' });
  const audit = h('section', { class: 'card', id: 'audit' }, h('h2', { text: 'Activity' }), h('p', { class: 'muted', text: 'Loading…' }));
  clear(root, h('div', { class: 'devices' },
    h('p', {}, h('a', { href: '/settings', 'data-nav': '' }, '← Settings')), me, list, pairing, audit));
  renderPairing();

  async function load() {
    try {
      rows = await refreshDevice();
      app.setConn('open', 'Connected');
      renderList();
    } catch (e) {
      if (e.kind === 'auth') return; // the app shows the pairing screen
      app.setConn('failed', e.message, e.kind);
      clear(list, h('h2', { text: 'Paired devices' }), h('p', { class: 'error', role: 'alert', text: e.message }));
    }
    try {
      const a = await getJson(`/api/audit?limit=${AUDIT_LIMIT}`, 'The activity');
      renderAudit(Array.isArray(a && a.entries) ? a.entries : []);
    } catch (e) {
      if (e.kind !== 'auth') clear(audit, h('h2', { text: 'Activity' }), h('p', { class: 'error', text: e.message }));
    }
  }

  async function poll() {
    if (stopped) return;
    await load();
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  }

  function renderMe() {
    const d = device();
    const mine = rows.find((r) => r.current);
    if (!d || !mine) {
      clear(me, h('h2', { text: 'This browser' }),
        h('p', { id: 'this-device-note', text: 'This browser uses the machine\'s token (as local tools do), not a credential of its own. Pair it with a code to have it listed here and removable on its own.' }));
      return;
    }
    clear(me, h('h2', { text: 'This device' }),
      h('p', {}, h('strong', { id: 'this-device-name', text: String(mine.name) }), ' ', scopeBadge(mine.scope)),
      mine.scope === 'watch' ? h('p', { class: 'muted', id: 'watch-note', text: WATCH_ONLY }) : null);
  }

  function scopeBadge(scope) {
    return h('span', { class: `badge ${scope === 'watch' ? 'warn' : 'idle'}`, text: scope === 'watch' ? 'watch only' : 'full' });
  }

  function renderList() {
    // Unchanged: left as it is (a button about to be pressed stays where it is).
    const key = JSON.stringify([rows, canWrite()]);
    if (key === shown) return;
    shown = key;
    renderMe();
    const write = canWrite();
    const items = rows.map((r) => h('li', { dataset: { device: String(r.id) }, class: r.current ? 'current' : '' },
      h('span', { class: 'title' },
        h('strong', { class: 'device-name', text: String(r.name) }), ' ', scopeBadge(r.scope),
        r.current ? h('span', { class: 'badge running this-device', text: 'this device' }) : null,
        h('span', { class: 'block muted', text: `paired ${when(r.createdAt)} · last seen ${r.lastSeenAt ? ago(r.lastSeenAt) : 'never'}` })),
      write ? h('span', { class: 'device-actions' },
        h('button', { type: 'button', class: 'rename', onclick: () => rename(r) }, 'Rename'),
        r.current ? null : h('button', { type: 'button', class: 'danger revoke', onclick: () => revoke(r) }, 'Remove')) : null));
    clear(list, h('h2', { text: 'Paired devices' }),
      items.length ? h('ul', { class: 'rows' }, items) : h('p', { class: 'muted', id: 'no-devices', text: 'No device is paired yet: pair one below.' }));
  }

  function renderAudit(entries) {
    const items = entries.slice(0, AUDIT_LIMIT).map((e) => h('li', { dataset: { action: String(e.action || '') } },
      h('span', { class: 'title' },
        h('strong', { text: String(e.deviceName || 'unknown') }), ' ', h('span', { text: ACTIONS[e.action] || String(e.action || '') }),
        e.target ? h('span', { class: 'block muted', text: String(e.target) }) : null),
      h('span', { class: 'muted', text: `${when(e.at)}${e.status && Number(e.status) >= 400 ? ` · refused (${e.status})` : ''}` })));
    clear(audit, h('h2', { text: 'Activity' }),
      items.length ? h('ul', { class: 'rows', id: 'audit-list' }, items) : h('p', { class: 'muted', text: 'Nothing recorded yet.' }));
  }

  function renderPairing() {
    if (!canWrite()) {
      clear(pairing, h('h2', { text: 'Pair a new device' }), h('p', { class: 'muted', text: WATCH_ONLY }));
      return;
    }
    const full = h('input', { type: 'radio', name: 'pair-scope', value: 'full', id: 'pair-scope-full', checked: true });
    const watch = h('input', { type: 'radio', name: 'pair-scope', value: 'watch', id: 'pair-scope-watch' });
    const name = h('input', { type: 'text', id: 'pair-name', maxlength: 64, placeholder: 'Its name (optional)', 'aria-label': 'Name of the new device' });
    const out = h('div', { id: 'pair-out' });
    const go = h('button', { type: 'submit', class: 'primary', id: 'pair-make' }, 'Show a pairing code');
    const form = h('form', { onsubmit: async (e) => {
      e.preventDefault();
      go.disabled = true;
      try {
        const body = { scope: watch.checked ? 'watch' : 'full' };
        if (name.value.trim()) body.name = name.value.trim();
        const c = await postJson('/api/pairing', body, 'A pairing code');
        showCode(out, c);
      } catch (err) {
        clear(out, h('p', { class: 'error', role: 'alert', text: err.message }));
      } finally {
        go.disabled = false;
      }
    } },
    h('fieldset', { class: 'scope' }, h('legend', { text: 'What it may do' }),
      h('label', {}, full, ' Full: send, stop, answer, change settings'),
      h('label', {}, watch, ' Watch only: read sessions and get notified')),
    name, go);
    clear(pairing, h('h2', { text: 'Pair a new device' }),
      h('p', { class: 'muted', text: 'Open the link on the new device, or scan the QR code with its camera. It works once, for 5 minutes; the device then has its own credential, which you can remove here.' }),
      form, out);
  }

  function showCode(out, c) {
    const url = String(c.url || '');
    let qr;
    try { qr = qrSvg(url, 'QR code of the pairing link'); } catch (e) { qr = h('p', { class: 'error', text: `No QR code: ${e.message}` }); }
    const until = c.expiresAt ? new Date(Number(c.expiresAt)).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }) : '';
    clear(out,
      h('div', { class: 'qr-box', id: 'pair-qr' }, qr),
      h('p', {}, 'Code ', h('strong', { id: 'pair-code', text: String(c.code || '') }),
        c.scope === 'watch' ? ' (watch only)' : ' (full)', until ? ` · works once, until ${until}` : ''),
      h('p', { class: 'pair-url' }, h('code', { id: 'pair-url', text: url })),
      h('button', { type: 'button', id: 'pair-copy', onclick: async () => {
        try { await navigator.clipboard.writeText(url); toast('Link copied.'); } catch { toast('Copy it by hand: the browser refused the clipboard.', 'error'); }
      } }, 'Copy the link'));
    load();
  }

  function rename(r) {
    const input = h('input', { type: 'text', id: 'device-rename-input', value: String(r.name), maxlength: 64, 'aria-label': 'New name' });
    modal('Rename device', [input], [{ label: 'Rename', value: 'ok', kind: 'primary' }, { label: 'Cancel', value: '' }], async () => {
      try {
        await api(`/api/devices/${encodeURIComponent(r.id)}`, { method: 'PATCH', json: { name: input.value }, what: 'Rename' });
        toast('Renamed.');
        load();
        return '';
      } catch (e) {
        return e.message;
      }
    });
  }

  function revoke(r) {
    modal(`Remove "${r.name}"?`, [h('p', { text: 'Its credential stops working now and everything it has open is closed. To use it again it must be paired anew.' })],
      [{ label: 'Remove', value: 'ok', kind: 'danger' }, { label: 'Keep it', value: '' }], async () => {
        try {
          await api(`/api/devices/${encodeURIComponent(r.id)}`, { method: 'DELETE', what: 'Remove' });
          toast(`Removed ${r.name}.`);
          load();
          return '';
        } catch (e) {
          return e.message;
        }
      });
  }

  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
