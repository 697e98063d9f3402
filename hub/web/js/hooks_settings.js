// The hooks tree of this machine's config.json (`/settings/hooks`): every event and entry
// shown; the whole tree and each entry toggled; an entry's command and timeout edited; entries
// added (`POST hooks/{event}`) and removed (`DELETE hooks/{event}/{index}`), both beyond the
// contract, validated by the hub as every write is. Writes are `needs-restart`: a bridge reads
// the tree when its agent (re)starts, and the screen says so. Text nodes only.
import { h, clear, modal } from './dom.js';
import { api, getJson } from './api.js';

const BASE = '/api/settings/hooks';
const EVENTS = ['SessionStart', 'UserPromptSubmit', 'PreToolUse', 'PermissionRequest', 'PostToolUse', 'PostToolUseFailure', 'Stop'];
/** The events about a tool call: only their hooks have a matcher. */
const TOOL_EVENTS = ['PreToolUse', 'PermissionRequest', 'PostToolUse', 'PostToolUseFailure'];

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
        for (const hook of Array.isArray(g.hooks) ? g.hooks : []) rows.push(entryRow(event, index++, hook, matcher, tree, write, removeEntry));
      }
      return h('section', { class: 'hook-event', dataset: { event } },
        h('div', { class: 'card-head' }, h('h3', { text: event }),
          h('button', { type: 'button', class: 'hook-add', 'aria-label': `Add a ${event} hook`, onclick: () => addEntry(event, tree) }, 'Add')),
        rows.length ? h('ul', { class: 'rows' }, rows) : h('p', { class: 'muted', text: 'No hooks.' }));
    });
    clear(body, toggle, sections);
  };
  /** A form for a new entry; the hub's answer (a refusal says which key is wrong) stays in it. */
  const addEntry = async (event, tree) => {
    const command = h('input', { type: 'text', id: 'hook-new-command', spellcheck: 'false', autocomplete: 'off' });
    const matcher = h('input', { type: 'text', id: 'hook-new-matcher', spellcheck: 'false', autocomplete: 'off', placeholder: 'every tool' });
    const timeout = h('input', { type: 'number', id: 'hook-new-timeout', min: '1', inputmode: 'numeric', placeholder: String(tree.timeoutMs ?? '') });
    const field = (label, control) => h('label', { class: 'field' }, h('span', { text: label }), control);
    const tools = TOOL_EVENTS.includes(event);
    await modal(`Add a ${event} hook`, h('div', { class: 'form' },
      field('Command (run with sh -c)', command),
      tools ? field('Tools matching (a regular expression; empty: every tool)', matcher) : null,
      field('Timeout (ms; empty: the default)', timeout)),
    [{ label: 'Cancel', value: '' }, { label: 'Add', value: 'add', kind: 'primary' }], async () => {
      if (!command.value.trim()) return 'A command is needed.';
      const json = { command: command.value };
      if (tools && matcher.value.trim()) json.matcher = matcher.value.trim();
      if (timeout.value !== '') json.timeoutMs = Number(timeout.value);
      const mine = ++writes;
      try {
        const r = await api(`${BASE}/${encodeURIComponent(event)}`, { method: 'POST', json, what: 'Adding the hook', expectJson: true });
        if (mine === writes) { say(`${event} hook added. Applies when an agent restarts.`); render(r.hooks); }
      } catch (e) { return e.message; }
      return '';
    });
  };
  const removeEntry = async (event, index, command) => {
    const ok = await modal(`Remove this ${event} hook?`, h('p', { class: 'muted', text: command }),
      [{ label: 'Cancel', value: '' }, { label: 'Remove', value: 'remove', kind: 'danger' }]);
    if (ok === 'remove') write('DELETE', `/${encodeURIComponent(event)}/${index}`, undefined, `${event} hook ${index + 1} removed.`);
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

function entryRow(event, index, hook, matcher, tree, write, removeEntry) {
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
    h('div', {}, h('span', { class: 'muted', text: 'Timeout (ms) ' }), timeout, ' ', save, ' ',
      h('button', { type: 'button', class: 'hook-remove danger', 'aria-label': `Remove ${event} hook ${index + 1}`,
        onclick: () => removeEntry(event, index, String(hook.command ?? '')) }, 'Remove'))));
}
