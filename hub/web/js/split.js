// The split view: on a screen 900 px wide or more, a session's screen keeps the list of live
// sessions beside it (`#side`), so another one is a tap away. The list is read once per
// session opened (`/api/instances`, no probe), not polled: the home screen is the live one.

import { h, clear, $, short } from './dom.js';
import { getJson } from './api.js';

const WIDE = '(min-width: 900px)';
let current = null; // { instance, sid } of the session shown, or null on other screens
let listening = false;

/** Called on every route: `at` is the session shown ({instance, sid}), or null. */
export function splitFor(app, at) {
  current = at;
  if (!listening && typeof matchMedia === 'function') {
    listening = true;
    matchMedia(WIDE).addEventListener('change', () => show(app, false));
  }
  show(app, true);
}

function show(app, fetch) {
  const side = $('#side');
  if (!side) return;
  const on = !!current && typeof matchMedia === 'function' && matchMedia(WIDE).matches;
  document.body.classList.toggle('split', on);
  side.hidden = !on;
  if (!on) return;
  render(side, app.instances || []);
  if (fetch) {
    getJson('/api/instances', 'The instance list').then((list) => {
      if (!Array.isArray(list)) return;
      app.instances = list;
      if (document.body.classList.contains('split')) render(side, list);
    }).catch(() => { /* the list stays as it was; the session view says what is wrong */ });
  }
}

function render(side, list) {
  const rows = [];
  for (const inst of list) {
    for (const s of Array.isArray(inst.sessions) ? inst.sessions : []) {
      const here = current && String(current.instance) === String(inst.id) && current.sid === s.sessionId;
      const cwd = inst.workspace || '';
      rows.push(h('li', { dataset: { session: s.sessionId } }, h('a', {
        href: `/s/${encodeURIComponent(inst.id)}/${encodeURIComponent(s.sessionId)}${cwd ? `?cwd=${encodeURIComponent(cwd)}` : ''}`,
        'data-nav': '', 'aria-current': here ? 'page' : false, class: here ? 'current' : '',
      }, h('span', { class: 'title', text: short(s.title, 60) || 'Untitled session' }),
      h('span', { class: 'muted path', text: String(inst.workspace || '').split('/').filter(Boolean).pop() || '/' }))));
    }
  }
  clear(side, h('h2', { text: 'Live sessions' }),
    rows.length ? h('ul', { class: 'rows side-list' }, rows) : h('p', { class: 'muted', text: 'No other live session.' }),
    h('a', { href: '/', 'data-nav': '', class: 'button' }, 'All sessions and projects'));
}
