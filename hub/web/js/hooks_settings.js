// The hooks tree of this machine's config.json (`/settings/hooks`): every event and entry
// shown; the whole tree and each entry toggled; an entry's command and timeout edited. The
// contract allows nothing more (no adding or removing). Writes are `needs-restart`: a bridge
// reads the tree when its agent (re)starts, and the screen says so. Text nodes only.
import { h, clear } from './dom.js';
import { api, getJson } from './api.js';

const BASE = '/api/settings/hooks';
const EVENTS = ['SessionStart', 'UserPromptSubmit', 'PreToolUse', 'PermissionRequest', 'PostToolUse', 'PostToolUseFailure', 'Stop'];

/** Mounts the screen in `root`. */
export function hooksSettingsView(root, app) {
  app.setTitle('Hooks');
  const status = h('p', { class: 'muted', id: 'hooks-status', role: 'status', text: 'Loading…' });
  const body = h('div', { class: 'stack', id: 'hooks' });
  // Inside `.home`: the screen's padding, so the card keeps off the phone's edges.
  clear(root, h('div', { class: 'home' }, h('section', { class: 'card', 'aria-labelledby': 'hooks-h' },
    h('div', { class: 'card-head' }, h('h2', { id: 'hooks-h', text: 'Hooks' })),
    h('p', { class: 'muted', text: 'Commands the bridge runs on its agent\'s events. Changes apply when an agent restarts.' }),
    status, body)));
  const say = (text, bad) => { status.textContent = text; status.className = bad ? 'error' : 'muted'; };
  // An answer comes back after the person may have moved on: one older than the newest write
  // says nothing, and the tree is drawn again from it only when nothing was typed since (that
  // would wipe what is being typed in another entry).
  let writes = 0;
  let typed = false;
  body.addEventListener('input', () => { typed = true; });
  const write = async (method, path, json, done) => {
    const mine = ++writes;
    typed = false;
    try {
      const r = await api(`${BASE}${path}`, { method, json, what: 'Saving the hooks', expectJson: true });
      if (mine !== writes) return;
      say(`${done} Applies when an agent restarts.`);
      if (!typed) render(r.hooks);
    } catch (e) {
      if (mine === writes) say(e.message, true);
    }
  };
  const render = (tree) => {
    const events = tree && typeof tree.events === 'object' && tree.events ? tree.events : {};
    const toggle = h('label', { class: 'row' },
      h('input', { type: 'checkbox', id: 'hooks-enabled', checked: tree.enabled !== false,
        onchange: (e) => write('POST', '/enabled', { enabled: e.target.checked }, e.target.checked ? 'Hooks on.' : 'Hooks off.') }),
      'Run hooks');
    const names = [...EVENTS, ...Object.keys(events).filter((e) => !EVENTS.includes(e))];
    const sections = names.map((event) => [event, events[event]]).map(([event, groups]) => {
      let index = 0;
      const rows = [];
      for (const g of Array.isArray(groups) ? groups : []) {
        const matcher = typeof g.matcher === 'string' && g.matcher && g.matcher !== '*' ? `tools matching ${g.matcher}` : 'every time';
        for (const hook of Array.isArray(g.hooks) ? g.hooks : []) rows.push(entryRow(event, index++, hook, matcher, tree, write));
      }
      return h('section', { class: 'hook-event', dataset: { event } }, h('h3', { text: event }),
        rows.length ? h('ul', { class: 'rows' }, rows) : h('p', { class: 'muted', text: 'No hooks.' }));
    });
    clear(body, toggle, sections);
  };
  // The header's connection pill says what the last request to the hub found (every screen
  // sets it: left alone it kept the previous screen's state, or `connecting` on a fresh load).
  getJson(BASE, 'The hooks').then((r) => {
    app.setConn('open', 'Hub reachable');
    say('');
    render(r.hooks || {});
  }).catch((e) => {
    if (e.kind === 'auth') return app.pair(e.message);
    app.setConn('waiting', e.message, e.kind === 'network' ? 'down' : e.kind);
    say(e.message, true);
  });
  return null;
}

function entryRow(event, index, hook, matcher, tree, write) {
  const path = `/${encodeURIComponent(event)}/${index}`;
  const command = h('input', { type: 'text', class: 'hook-command', value: String(hook.command ?? ''), 'aria-label': `${event} hook ${index + 1} command`, spellcheck: 'false' });
  const timeout = h('input', { type: 'number', class: 'hook-timeout', min: '1', inputmode: 'numeric', value: hook.timeoutMs ?? '',
    placeholder: String(tree.timeoutMs ?? ''), 'aria-label': `${event} hook ${index + 1} timeout (ms)` });
  const enabled = h('input', { type: 'checkbox', class: 'hook-enabled', checked: hook.enabled !== false, 'aria-label': `${event} hook ${index + 1} enabled`,
    onchange: (e) => write('PUT', path, { enabled: e.target.checked }, `${event} hook ${index + 1} ${e.target.checked ? 'on' : 'off'}.`) });
  const save = h('button', { type: 'button', class: 'hook-save', onclick: () => {
    const patch = { command: command.value };
    if (timeout.value !== '') patch.timeoutMs = Number(timeout.value);
    write('PUT', path, patch, `${event} hook ${index + 1} saved.`);
  } }, 'Save');
  return h('li', { class: 'hook-entry' }, h('div', {},
    h('div', { class: 'muted', text: `${matcher}${hook.type && hook.type !== 'command' ? ` · ${hook.type}` : ''}` }),
    h('div', {}, h('label', {}, enabled, ' on '), command),
    h('div', {}, h('span', { class: 'muted', text: 'Timeout (ms) ' }), timeout, ' ', save)));
}
