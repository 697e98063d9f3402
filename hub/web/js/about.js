// The About sheet at the bottom of the home screen: the hub's version, build fingerprint, start
// and machine id (`GET /api/version?disk=1`), each instance's version, and "Update hub" when the
// binary on disk is newer than the running hub (`POST /api/upgrade`; the hub restarts and the
// sheet waits for the new one to answer).

import { h, clear, ago, baseName } from './dom.js';
import { getJson, api } from './api.js';

const RESTART_WAIT_MS = 30000;

/** The About section (a closed disclosure, read when opened). */
export function aboutSection(app) {
  const body = h('div', { class: 'about-body' }, h('p', { class: 'muted', text: 'Loading…' }));
  const node = h('details', { class: 'card about', id: 'about' }, h('summary', { text: 'About this hub' }), body);
  let stopped = false;
  node.addEventListener('toggle', () => { if (node.open) load(); });

  async function load(note) {
    try {
      const v = await getJson('/api/version?disk=1', 'The hub\'s version');
      if (stopped) return;
      const dl = h('dl', { class: 'facts' },
        h('dt', { text: 'Hub version' }), h('dd', { id: 'about-version', text: String(v.version || '?') }),
        h('dt', { text: 'On disk' }), h('dd', { id: 'about-disk', text: v.diskVersion ? String(v.diskVersion) : 'unknown' }),
        h('dt', { text: 'Build' }), h('dd', { class: 'mono', text: String(v.fingerprint || '').replace(/^sha256:/, '').slice(0, 12) }),
        h('dt', { text: 'Started' }), h('dd', { text: ago(v.startedAt) }),
        h('dt', { text: 'Machine' }), h('dd', { class: 'mono', text: String(v.hostId || '').slice(0, 12) }));
      const insts = Array.isArray(app.instances) ? app.instances : [];
      const list = insts.length ? h('ul', { class: 'rows' }, insts.map((i) => h('li', {},
        h('span', { class: 'title', text: baseName(i.workspace) }),
        h('span', { class: 'muted', text: `${i.origin === 'serve' ? 'serve' : 'editor'} ${i.version ? `v${i.version}` : ''}` })))) : null;
      const update = v.updateAvailable
        ? h('div', { class: 'row' }, h('p', { text: `A newer hub is on disk (${String(v.reason || '')}).` }),
          h('button', { type: 'button', class: 'primary', id: 'update-hub', onclick: () => upgrade(v.startedAt) }, 'Update hub'))
        : h('p', { class: 'muted', id: 'about-current', text: 'The hub runs the binary on disk.' });
      clear(body, note ? h('p', { role: 'status', text: note }) : null, dl, update,
        list ? h('h3', { text: 'Instances' }) : null, list);
    } catch (e) {
      if (!stopped) clear(body, h('p', { class: 'error', role: 'alert', text: e.message }));
    }
  }

  async function upgrade(startedAt) {
    clear(body, h('p', { role: 'status', text: 'Updating: the hub restarts…' }));
    try {
      const r = await api('/api/upgrade', { method: 'POST', what: 'The update', expectJson: true });
      if (!r.restarting) return load(`Nothing to update (${String(r.reason || '')}).`);
    } catch (e) {
      return clear(body, h('p', { class: 'error', role: 'alert', text: e.message }));
    }
    const deadline = Date.now() + RESTART_WAIT_MS;
    while (!stopped && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 500));
      try {
        const v = await getJson('/api/version', 'The hub\'s version');
        if (v.startedAt !== startedAt) return load('Updated: the new hub is running.');
      } catch { /* restarting */ }
    }
    if (!stopped) clear(body, h('p', { class: 'error', role: 'alert', text: 'The hub did not come back: see its log on the machine.' }));
  }

  return { node, stop() { stopped = true; } };
}
