// The Settings screen (/settings, /settings/<instance>): MCP servers, the default model per
// agent, subagents, skills and backups, through the contract's settings API; links to the
// hooks screen (/settings/hooks) and the token usage view (/usage) with their summaries. With an instance
// chosen, everything goes through its bridge (`/api/instances/{id}/settings/*`: the models its
// agent reports, whether the agent takes each MCP server, its pending restart); without one,
// through the hub's own mount. After a `needs-restart` write the screen offers to restart that
// instance's agent, saying in words how many running turns it would cancel before the user
// confirms, and confirming once the agent is back.

import { h, clear, toast, modal, baseName } from './dom.js';
import { api, getJson } from './api.js';

/** Mounts the screen; returns its cleanup. */
export function settingsView(root, app, { instance }) {
  app.setTitle('Settings');
  let stopped = false;
  let current = instance || '';
  const picker = h('select', { id: 'settings-instance', 'aria-label': 'Settings of' });
  const banner = h('section', { class: 'card restart', id: 'restart-card', hidden: true, 'aria-live': 'polite' });
  const body = h('div', { class: 'settings-body' }, h('p', { class: 'muted', text: 'Loading the settings…' }));
  const scope = h('p', { class: 'muted small', id: 'settings-scope' });
  // The bar already says "Settings": no heading repeats it, and the header's link to this
  // screen is hidden while it is open.
  const headerLink = document.getElementById('settings-link');
  if (headerLink) headerLink.hidden = true;
  clear(root, h('div', { class: 'home settings' },
    h('section', { class: 'card' }, h('label', { class: 'field' }, h('span', { text: 'Settings of' }), picker), scope),
    banner, body));
  const explain = () => {
    scope.textContent = current
      ? 'This agent: the models it offers, which MCP servers it takes, and a restart to apply changes.'
      : 'This machine (no agent): the files every agent on this machine reads at its start. Choose an agent to see its models and to restart it.';
  };

  const base = () => (current ? `/api/instances/${encodeURIComponent(current)}/settings` : '/api/settings');

  async function call(method, path, json, what) {
    const r = await api(`${base()}/${path}`, { method, json, what: what || 'Settings', expectJson: true });
    if (r && r.effect === 'needs-restart') await refreshPending();
    return r;
  }

  async function fillPicker() {
    let list = [];
    try { list = await getJson('/api/instances', 'The instance list'); } catch (e) { if (e.kind === 'auth') return app.pair(e.message); }
    if (stopped) return;
    app.instances = Array.isArray(list) ? list : app.instances;
    const opts = [h('option', { value: '', text: 'This machine (no agent)' })];
    for (const inst of Array.isArray(list) ? list : []) {
      const label = `${baseName(inst.workspace || '') || 'instance'} · ${inst.launcher === 'up' ? 'up' : inst.origin || ''} (${inst.id})`;
      opts.push(h('option', { value: String(inst.id), text: label }));
    }
    if (current && !opts.some((o) => o.value === current)) opts.push(h('option', { value: current, text: `instance ${current} (gone?)` }));
    clear(picker, ...opts);
    picker.value = current;
  }

  picker.addEventListener('change', () => {
    current = picker.value;
    explain();
    app.replace(current ? `/settings/${encodeURIComponent(current)}` : '/settings');
    load();
  });

  /** Reads the pending restart; `after` a restart: until the bridge answers without one. */
  async function refreshPending(after = false) {
    if (after) {
      for (let i = 0; i < 40 && !stopped; i++) {
        try {
          const p = await getJson(`${base()}/pending-restart`, 'Pending restart');
          if (!p.pendingRestart) return;
        } catch { /* the bridge is still busy with its restart */ }
        await new Promise((res) => setTimeout(res, 250));
      }
      return;
    }
    if (!current) {
      clear(banner, h('p', { text: 'Saved. MCP servers and subagents are read when an agent starts: choose an agent above to restart it.' }));
      banner.hidden = false;
      return;
    }
    try {
      const p = await getJson(`${base()}/pending-restart`, 'Pending restart');
      showRestart(Boolean(p.pendingRestart));
    } catch { showRestart(false); }
  }

  function showRestart(pending) {
    banner.classList.remove('done');
    banner.hidden = !pending;
    if (!pending) return;
    clear(banner, h('p', { text: 'Some changes are read only when the agent starts.' }),
      h('button', { type: 'button', class: 'primary', id: 'restart-agent', onclick: restartAgent }, 'Restart the agent'));
  }

  async function restartAgent() {
    let running = 0;
    try {
      const st = await getJson(`/api/instances/${encodeURIComponent(current)}/status`, 'The instance status');
      running = (st.sessions || []).filter((s) => s.status === 'running').length;
    } catch { /* the restart itself will say what is wrong */ }
    const what = running === 0 ? 'No turn is running: nothing will be cancelled.'
      : running === 1 ? '1 running turn will be cancelled.' : `${running} running turns will be cancelled.`;
    const ok = await modal('Restart the agent?', [h('p', { id: 'restart-preview', text: what }),
      h('p', { class: 'muted', text: 'The agent stops and starts again with the new settings. Conversations stay attached.' })],
    [{ label: 'Cancel', value: '' }, { label: 'Restart', value: 'go', kind: 'danger' }]);
    if (ok !== 'go') return;
    const id = current;
    let r;
    try {
      r = await api(`/api/instances/${encodeURIComponent(id)}/backend/restart`, { method: 'POST', json: {}, what: 'Restart', expectJson: true });
    } catch (e) { toast(e.message, 'error'); return refreshPending(); }
    if (!r.closed) { toast('The old agent did not stop: try again.', 'error'); return refreshPending(); }
    const n = Number(r.cancelledTurns) || 0;
    const cancelled = n === 0 ? '' : n === 1 ? ' 1 turn was cancelled.' : ` ${n} turns were cancelled.`;
    clear(banner, h('p', { id: 'restart-progress', text: `Restarting the agent…${cancelled}` }));
    banner.hidden = false;
    await refreshPending(true);
    if (stopped || id !== current) return;
    clear(banner, h('p', { id: 'restart-done', text: `The agent is back: its next prompt runs with the new settings.${cancelled}` }),
      h('button', { type: 'button', onclick: () => { banner.hidden = true; } }, 'OK'));
    banner.classList.add('done');
    banner.hidden = false;
  }

  async function load() {
    clear(body, h('p', { class: 'muted', text: 'Loading the settings…' }));
    let all;
    try {
      all = await getJson(`${base()}/all`, 'The settings');
    } catch (e) {
      if (e.kind === 'auth') return app.pair(e.message);
      app.setConn('waiting', e.message, e.kind);
      return clear(body, h('section', { class: 'card' }, h('p', { class: 'error', role: 'alert', text: e.message }),
        h('button', { type: 'button', onclick: load }, 'Try again')));
    }
    if (stopped) return;
    app.setConn('open', 'Hub reachable');
    clear(body, mcpCard(all.mcp || {}), modelsCard(all.models || {}), agentsCard(all.agents), skillsCard(all.skills),
      moreCard(all.hooks, all.usage), backupsCard(all.backups || {}));
    if (current) showRestart(Boolean(all.pendingRestart));
  }

  /** Runs a write; shows its error; reloads. */
  async function write(method, path, json, done) {
    try {
      await call(method, path, json);
      if (done) toast(done);
    } catch (e) {
      toast(e.message, 'error');
    }
    load();
  }

  /** The sections with screens of their own: hooks and token usage, each with its summary. */
  function moreCard(hooks, usage) {
    let entries = 0;
    for (const groups of Object.values((hooks && hooks.events) || {})) {
      for (const g of Array.isArray(groups) ? groups : []) entries += Array.isArray(g && g.hooks) ? g.hooks.length : 0;
    }
    const hooksNote = !hooks ? '' : hooks.enabled === false ? 'Off.'
      : entries === 1 ? '1 hook configured.' : `${entries} hooks configured.`;
    let usageNote = '';
    if (usage && usage.error) usageNote = 'The usage store cannot be read.';
    else if (usage && usage.available === false) usageNote = 'Nothing recorded yet.';
    else if (usage && usage.summary) usageNote = `${Number(usage.summary.totalTokens || 0).toLocaleString()} tokens in the last 7 days.`;
    return h('section', { class: 'card', id: 'more-card' }, h('h2', { text: 'Hooks, usage and devices' }),
      h('ul', { class: 'rows' },
        h('li', {}, h('span', { class: 'title' }, h('a', { class: 'button', href: '/settings/hooks', 'data-nav': '', id: 'settings-hooks-link' }, 'Hooks →'),
          ' ', h('span', { class: 'muted', text: hooksNote }))),
        h('li', {}, h('span', { class: 'title' }, h('a', { class: 'button', href: '/usage', 'data-nav': '', id: 'settings-usage-link' }, 'Token usage →'),
          ' ', h('span', { class: 'muted', text: usageNote }))),
        h('li', {}, h('span', { class: 'title' }, h('a', { class: 'button', href: '/devices', 'data-nav': '', id: 'settings-devices-link' }, 'Devices →'),
          ' ', h('span', { class: 'muted', text: 'Paired phones and browsers, pairing a new one, activity.' })))));
  }

  function mcpCard(mcp) {
    const rows = (mcp.servers || []).map((s) => h('li', { dataset: { mcp: s.name } },
      h('span', { class: 'title' }, h('strong', { text: s.name }), ' ', h('span', { class: 'muted', text: `${s.type || ''} ${s.command || s.url || ''}` }),
        s.agentAccepts === false ? h('span', { class: 'error block', text: `Not given to this agent: ${s.agentSkipReason || ''}` }) : null,
        s.error ? h('span', { class: 'error block', text: s.error }) : null),
      toggle(`Enable ${s.name}`, s.enabled !== false, (on) => write('POST', 'mcp/enable', { name: s.name, enable: on })),
      h('button', { type: 'button', onclick: () => editServer(s) }, 'Edit'),
      h('button', { type: 'button', class: 'danger', onclick: () => confirmThen(`Delete ${s.name}?`, () => write('DELETE', `mcp/${encodeURIComponent(s.name)}`)) }, 'Delete')));
    return h('section', { class: 'card', id: 'mcp-card' },
      h('div', { class: 'card-head' }, h('h2', { text: 'MCP servers' }), h('button', { type: 'button', id: 'mcp-add', onclick: () => editServer(null) }, 'Add')),
      rows.length ? h('ul', { class: 'rows' }, rows) : h('p', { class: 'muted', text: 'No MCP servers yet.' }));
  }

  async function editServer(s) {
    const f = {
      name: input('mcp-name', s ? s.name : '', { disabled: Boolean(s) }),
      type: select('mcp-type', ['stdio', 'http', 'sse'], (s && s.type) || 'stdio'),
      command: input('mcp-command', (s && s.command) || ''),
      args: area('mcp-args', ((s && s.args) || []).join('\n')),
      url: input('mcp-url', (s && s.url) || ''),
      env: area('mcp-env', Object.entries((s && s.env) || {}).map(([k, v]) => `${k}=${v}`).join('\n')),
      headers: area('mcp-headers', Object.entries((s && s.headers) || {}).map(([k, v]) => `${k}: ${v}`).join('\n')),
    };
    // Only the chosen transport's fields are shown: stdio runs a command, http and sse reach a URL.
    const local = [labelled('Command', f.command), labelled('Arguments (one a line)', f.args), labelled('Environment (KEY=value a line)', f.env)];
    const remote = [labelled('URL', f.url), labelled('Headers (Name: value a line)', f.headers)];
    const shown = () => {
      for (const l of local) l.hidden = f.type.value !== 'stdio';
      for (const l of remote) l.hidden = f.type.value === 'stdio';
    };
    f.type.addEventListener('change', shown);
    shown();
    const form = h('div', { class: 'form' }, labelled('Name', f.name), labelled('Type', f.type), local, remote);
    await modal(s ? `Edit ${s.name}` : 'Add an MCP server', form, [{ label: 'Cancel', value: '' }, { label: 'Save', value: 'save', kind: 'primary' }], async () => {
      const name = f.name.value.trim();
      if (!name) return 'A name is needed.';
      // Start from what was read: keys this screen does not know are kept.
      const server = {};
      for (const [k, v] of Object.entries(s || {})) if (!['name', 'source', 'agentAccepts', 'agentSkipReason', 'error'].includes(k)) server[k] = v;
      server.type = f.type.value;
      if (server.type === 'stdio') {
        server.command = f.command.value.trim();
        server.args = lines(f.args.value);
        server.env = pairs(f.env.value, '=');
        delete server.url; delete server.headers;
      } else {
        server.url = f.url.value.trim();
        server.headers = pairs(f.headers.value, ':');
        delete server.command; delete server.args; delete server.env;
      }
      try {
        await call('PUT', `mcp/${encodeURIComponent(name)}`, server);
      } catch (e) { return e.message; }
      return '';
    });
    load();
  }

  function modelsCard(models) {
    const rows = (models.providers || []).map((p) => {
      const choices = (p.models || []).filter((m) => m.enabled !== false);
      const sel = select(`default-${p.id}`, [''].concat(choices.map((m) => m.id)), p.defaultModel || '',
        (v) => (v ? (choices.find((m) => m.id === v) || {}).name || v : "The agent's own default"));
      sel.addEventListener('change', () => write('PUT', `providers/${encodeURIComponent(p.id)}`, { defaultModel: sel.value || null }, 'Default model saved.'));
      return h('li', { dataset: { provider: p.id } }, h('span', { class: 'title' }, h('strong', { text: p.name || p.id }),
        p.currentModel ? h('span', { class: 'muted block', text: `In use: ${p.currentModel}` }) : null),
      labelled('Default model', sel));
    });
    return h('section', { class: 'card', id: 'models-card' }, h('h2', { text: 'Models' }),
      rows.length ? h('ul', { class: 'rows' }, rows)
        : h('p', { class: 'muted', text: current ? 'This agent has not reported any models yet: start a session on it first.' : 'Choose an agent above to see the models it offers.' }));
  }

  function agentsCard(agents) {
    // Subagents are files in the agent's own directory: an agent with none gets no card (the
    // two built-in rows come with every answer and say nothing about this agent).
    if (!agents || !(agents.agents || []).some((a) => !a.builtIn)) return null;
    const rows = (agents.agents || []).map((a) => h('li', { dataset: { subagent: a.id } },
      h('span', { class: 'title' }, h('strong', { text: a.name || a.id }), a.builtIn ? h('span', { class: 'muted', text: ' built in' }) : null,
        a.description ? h('span', { class: 'muted block', text: a.description }) : null),
      a.builtIn ? null : toggle(`Enable ${a.id}`, a.enabled, (on) => write('POST', `agents/${encodeURIComponent(a.id)}/enable`, { enable: on })),
      a.builtIn ? null : h('button', { type: 'button', onclick: () => editAgent(a) }, 'Edit')));
    return h('section', { class: 'card', id: 'agents-card' }, h('h2', { text: 'Subagents' }),
      h('p', { class: 'muted small', text: agents.dir || '' }), h('ul', { class: 'rows' }, rows));
  }

  async function editAgent(a) {
    const keys = ['name', 'description', 'color', 'model', 'thoughtLevel'];
    const f = Object.fromEntries(keys.map((k) => [k, input(`agent-${k}`, a[k] || '')]));
    const form = h('div', { class: 'form' }, keys.map((k) => labelled(k, f[k])));
    await modal(`Edit ${a.id}`, form, [{ label: 'Cancel', value: '' }, { label: 'Save', value: 'save', kind: 'primary' }], async () => {
      const patch = {};
      for (const k of keys) patch[k] = f[k].value.trim() || null;
      if (!patch.description) return 'A description is needed.';
      try { await call('PUT', `agents/${encodeURIComponent(a.id)}`, patch); } catch (e) { return e.message; }
      return '';
    });
    load();
  }

  function skillsCard(skills) {
    if (!skills) return h('section', { class: 'card' }, h('h2', { text: 'Skills' }), h('p', { class: 'muted', text: 'No skills directory (HOME is not set).' }));
    const rows = (skills.skills || []).map((s) => h('li', { dataset: { skill: s.name } },
      h('span', { class: 'title' }, h('strong', { text: s.name }), s.description ? h('span', { class: 'muted block', text: s.description }) : null),
      toggle(`Enable ${s.name}`, s.enabled, (on) => write('POST', 'skills/enable', { path: s.path, enable: on }))));
    return h('section', { class: 'card', id: 'skills-card' }, h('h2', { text: 'Skills' }),
      h('p', { class: 'muted small', text: skills.dir || '' }),
      rows.length ? h('ul', { class: 'rows' }, rows) : h('p', { class: 'muted', text: 'No skills.' }));
  }

  function backupsCard(backups) {
    const rows = (backups.backups || []).map((b) => h('li', { dataset: { file: baseName(b.file) } },
      h('span', { class: 'title' }, h('strong', { text: baseName(b.file) }), h('span', { class: 'muted block', text: b.createdAt })),
      h('button', { type: 'button', onclick: () => confirmThen(`Restore ${baseName(b.file)} as of ${b.createdAt}? The current file is backed up first.`, () => write('POST', 'backups/restore', { path: b.path }, 'Restored.')) }, 'Restore')));
    return h('section', { class: 'card', id: 'backups-card' }, h('h2', { text: 'Backups' }),
      rows.length ? h('ul', { class: 'rows' }, rows) : h('p', { class: 'muted', text: 'No backups yet: one is taken before every change.' }));
  }

  explain();
  fillPicker().then(load);
  return () => { stopped = true; if (headerLink) headerLink.hidden = false; };
}

async function confirmThen(question, then) {
  const ok = await modal(question, h('p', { class: 'muted', text: 'This changes the file on the machine.' }),
    [{ label: 'Cancel', value: '' }, { label: 'OK', value: 'ok', kind: 'primary' }]);
  if (ok === 'ok') then();
}

function toggle(label, on, change) {
  const box = h('input', { type: 'checkbox', 'aria-label': label, checked: Boolean(on) });
  box.addEventListener('change', () => change(box.checked));
  return h('label', { class: 'switch' }, box, h('span', { text: on ? 'on' : 'off' }));
}

function input(id, value, extra = {}) {
  return h('input', { id, type: 'text', value, autocomplete: 'off', spellcheck: 'false', ...extra });
}

function area(id, value) {
  const t = h('textarea', { id, rows: 2, spellcheck: 'false' });
  t.value = value;
  return t;
}

function select(id, values, value, label = (v) => v) {
  const s = h('select', { id }, values.map((v) => h('option', { value: v, text: label(v) })));
  s.value = value;
  return s;
}

function labelled(text, control) {
  return h('label', { class: 'field' }, h('span', { text }), control);
}

function lines(text) {
  return text.split('\n').map((l) => l.trim()).filter(Boolean);
}

function pairs(text, sep) {
  const out = {};
  for (const l of lines(text)) {
    const i = l.indexOf(sep);
    if (i > 0) out[l.slice(0, i).trim()] = l.slice(i + 1).trim();
  }
  return out;
}
