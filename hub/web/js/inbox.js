// The home screen's inbox ("Waiting for you"): every permission request and question pending
// on this machine, read from the hub's `GET /api/attention` (each bridge's memory; no session
// is attached for it, so headless bridges still idle out while a home screen is open).
// A permission is answered in place with `POST /api/instances/{id}/sessions/{sid}/permissions/
// {requestId}` `{optionId}` (the first answer wins; a 409 says who answered first); an older
// bridge without that route is answered through a metadata-only attach of its session
// (`session/load`, limit 0, which hands it the pending request under the row's `requestId`).
// A question opens its session.
//
// The permission card's body (what is asked: the tool's kind, the command, the paths, the
// diff, the raw input behind a fold) and its option buttons ("Always allow" set apart from
// "Allow once") live here too: the session view uses them for its own cards.

import { h, clear, ago, diffNode } from './dom.js';
import { getJson, postJson, ApiError } from './api.js';
import { pool } from './conn.js';

/** What the page-wide waiting count (push.js) reads while the home screen shows the inbox. */
export const inboxState = { active: false, count: 0 };

const ANSWER_TIMEOUT_MS = 15000;

const KIND_LABEL = { read: 'Read', edit: 'Edit', delete: 'Delete', move: 'Move', search: 'Search', execute: 'Run a command', think: 'Think', fetch: 'Fetch', switch_mode: 'Switch mode', other: 'Tool' };

/** A tool call's command (`rawInput.command`, a string or an argv), or ''. */
function commandOf(input) {
  if (!input || typeof input !== 'object') return '';
  if (typeof input.command === 'string') return input.command;
  if (Array.isArray(input.command)) return input.command.map(String).join(' ');
  return '';
}

/**
 * What a permission asks: `body`, nodes for its kind and title (after `lead`, when given),
 * command, paths and diffs; `details`, the raw input folded (null without one), which goes
 * below the answers so that opening it never pushes them out of view.
 */
export function permissionParts(params, lead = null) {
  const tool = (params && params.toolCall) || {};
  const kind = String(tool.kind || 'other');
  const input = tool.rawInput && typeof tool.rawInput === 'object' ? tool.rawInput : null;
  const command = commandOf(input);
  const locations = (Array.isArray(tool.locations) ? tool.locations : []).filter((l) => l && l.path);
  const diffs = (Array.isArray(tool.content) ? tool.content : []).filter((c) => c && c.type === 'diff');
  const nodes = [h('div', { class: 'perm-what' }, lead,
    h('span', { class: 'perm-kind', dataset: { kind }, text: KIND_LABEL[kind] || kind.replace(/_/g, ' ') }),
    h('span', { class: 'perm-title', text: String(tool.title || 'The agent asks for permission') }))];
  if (command) nodes.push(h('pre', { class: 'perm-command', 'aria-label': 'Command' }, h('code', { text: command })));
  if (locations.length) {
    nodes.push(h('ul', { class: 'perm-paths', 'aria-label': 'Paths' }, locations.slice(0, 20).map((l) =>
      h('li', {}, h('code', { text: String(l.path) + (l.line ? `:${l.line}` : '') })))));
  }
  for (const d of diffs.slice(0, 5)) nodes.push(diffNode(d));
  const details = input ? h('details', { class: 'perm-details' }, h('summary', { text: 'Details' }),
    h('pre', { text: JSON.stringify(input, null, 2).slice(0, 20000) })) : null;
  return { body: nodes, details };
}

const OPTION_LOOK = {
  allow_once: { cls: 'primary', note: '' },
  allow_always: { cls: 'always', note: 'from now on' },
  reject_once: { cls: 'danger', note: '' },
  reject_always: { cls: 'danger always', note: 'from now on' },
};

/** The option buttons of a permission: each kind looks its own ("Always allow" is not "Allow once"). */
export function optionButtons(options, onPick, disabled = false) {
  return options.map((o) => {
    const kind = String((o && o.kind) || '');
    const look = OPTION_LOOK[kind] || { cls: kind.startsWith('reject') ? 'danger' : 'primary', note: '' };
    return h('button', {
      type: 'button', class: `option ${look.cls}`, disabled,
      dataset: { option: String(o.optionId), kind },
      onclick: () => onPick(o),
    }, h('span', { text: String(o.name || o.optionId) }), look.note ? h('small', { text: look.note }) : null);
  });
}

/** Answers `row` through the hub's route; an older bridge, through an attach (below). */
async function answer(row, optionId) {
  const path = `/api/instances/${encodeURIComponent(row.instanceId)}/sessions/${encodeURIComponent(row.sessionId)}/permissions/${encodeURIComponent(row.requestId)}`;
  try {
    await postJson(path, { optionId }, 'The answer');
  } catch (e) {
    if (e instanceof ApiError && e.status === 409) {
      let by = '';
      try { by = JSON.parse(e.body).answeredBy || ''; } catch { /* no JSON */ }
      throw new Error(`it was already answered${by ? ` (by ${by})` : ''}`);
    }
    if (e instanceof ApiError && e.kind === 'missing') return answerAttached(row, optionId);
    throw e;
  }
}

/** Answers permission `row` with `optionId` through a metadata-only attach of its session. */
async function answerAttached(row, optionId) {
  const had = pool.conns.has(String(row.instanceId)) && pool.conns.get(String(row.instanceId)).state !== 'closed';
  const conn = pool.get(row.instanceId);
  try {
    conn.start();
    if (conn.state !== 'open') {
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => { off(); reject(new Error('could not connect to the instance')); }, ANSWER_TIMEOUT_MS);
        const off = conn.listen((ev) => {
          if (ev.type === 'open') { clearTimeout(timer); off(); resolve(); }
          if (ev.type === 'state' && conn.state === 'failed') { clearTimeout(timer); off(); reject(new Error(conn.message || 'the instance is gone')); }
        });
      });
    }
    await conn.load(row.sessionId, row.workspace, 0);
    // The bridge hands an attaching client what is pending on the session.
    const deadline = Date.now() + 3000;
    let req = null;
    while (!(req = [...conn.pending.values()].find((m) => m.id === row.requestId)) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    if (!req) throw new Error('it was already answered (or withdrawn)');
    conn.respond(req.id, { outcome: { outcome: 'selected', optionId } });
    // The answer is written before the connection is let go.
    await new Promise((r) => setTimeout(r, 50));
  } finally {
    if (!had) pool.drop(row.instanceId);
  }
}

/**
 * The inbox section; `refresh()` re-reads it. `others`: the other machines' (fleet.js):
 * `items()`, their rows, listed after this machine's; `label()`, this machine's badge (null
 * while it is the only one).
 */
export function inboxSection(app, others = { items: () => [], label: () => null }) {
  const node = h('section', { class: 'card waiting', id: 'waiting', 'aria-label': 'Waiting for you', hidden: true });
  let rows = [];
  let errors = [];
  let stopped = false;
  const busy = new Set();
  const problems = new Map();
  inboxState.active = true;

  const keyOf = (r) => `${r.instanceId}/${r.requestId}`;
  const sessionUrl = (r) => `/s/${encodeURIComponent(r.instanceId)}/${encodeURIComponent(r.sessionId)}?cwd=${encodeURIComponent(r.workspace || '')}`;

  async function refresh() {
    try {
      show(await getJson('/api/attention', 'The inbox'));
    } catch (e) {
      if (e.kind === 'auth' && !stopped) app.pair(e.message);
    }
  }

  /** Shows `a`, the body of `GET /api/attention` (the home screen reads it in `/api/home`). */
  function show(a) {
    if (stopped) return;
    rows = Array.isArray(a && a.pending) ? a.pending : [];
    errors = Array.isArray(a && a.errors) ? a.errors : [];
    render();
  }

  async function pick(row, option) {
    const key = keyOf(row);
    busy.add(key);
    problems.delete(key);
    render();
    try {
      await answer(row, option.optionId);
    } catch (e) {
      problems.set(key, `Not answered: ${e.message}`);
    }
    busy.delete(key);
    await refresh();
  }

  function render() {
    clear(node);
    const more = others.items();
    // The tab title and the app badge count what waits on every machine the page shows.
    inboxState.count = rows.length + more.length;
    node.hidden = !rows.length && !errors.length && !more.length;
    if (node.hidden) return;
    node.append(h('h2', { text: 'Waiting for you' }));
    const items = rows.map((r) => {
      const permission = r.method === 'session/request_permission';
      const p = r.params || {};
      const what = permission
        ? 'asks permission'
        : `has a question: ${String(p.message || '')}`;
      const key = keyOf(r);
      const parts = permission ? permissionParts(p) : { body: [], details: null };
      const opts = permission && Array.isArray(p.options) ? p.options.filter((o) => o && o.optionId != null) : [];
      return h('li', { class: 'inbox-row', dataset: { inboxSession: String(r.sessionId), request: String(r.requestId) } },
        h('a', { href: sessionUrl(r), 'data-nav': '' }, others.label(),
          h('span', { class: 'badge warn', text: 'waiting' }), ' ',
          h('strong', { text: r.title || 'Untitled session' }), ' ', h('span', { text: what })),
        h('span', { class: 'muted', text: ago(r.since) }),
        permission ? h('div', { class: 'perm-body' }, parts.body) : null,
        opts.length ? h('div', { class: 'inbox-actions options' }, optionButtons(opts, (o) => pick(r, o), busy.has(key)))
          : h('a', { class: 'button', href: sessionUrl(r), 'data-nav': '' }, 'Answer'),
        parts.details,
        problems.has(key) ? h('p', { class: 'error', role: 'alert', text: problems.get(key) }) : null);
    });
    node.append(h('ul', { class: 'rows' }, items, more));
    for (const e of errors) {
      node.append(h('p', { class: 'muted', text: `An instance did not answer (${String(e.error || 'unknown')}).` }));
    }
  }

  return {
    node,
    refresh,
    show,
    /** Draws it again (the other machines' rows changed). */
    redraw: () => { if (!stopped) render(); },
    /** Requests pending on session `sid` of instance `id`. */
    countOf: (id, sid) => rows.filter((r) => String(r.instanceId) === String(id) && r.sessionId === sid).length,
    signature: () => rows.map(keyOf).join(','),
    stop() {
      stopped = true;
      inboxState.active = false;
      inboxState.count = 0;
    },
  };
}
