// The home screen's inbox ("Waiting for you"): every permission request and question pending
// on this machine, read from the hub's `GET /api/attention` (each bridge's memory; no session
// is attached for it, so headless bridges still idle out while a home screen is open).
// A permission is answered in place: the inbox attaches to its session with metadata only
// (`session/load`, limit 0), which hands it the pending request under the row's `requestId`,
// answers it, and closes the connection again if it opened it. A question opens its session.

import { h, clear, ago } from './dom.js';
import { getJson } from './api.js';
import { pool } from './conn.js';

/** What the page-wide waiting count (push.js) reads while the home screen shows the inbox. */
export const inboxState = { active: false, count: 0 };

const ANSWER_TIMEOUT_MS = 15000;

/** The options a person picks from in place: allow once, reject once (the first of each). */
function quickOptions(params) {
  const opts = Array.isArray(params && params.options) ? params.options : [];
  const pick = (kind) => opts.find((o) => o && o.kind === kind);
  return [pick('allow_once') || pick('allow_always'), pick('reject_once') || pick('reject_always')].filter(Boolean);
}

/** Answers permission `row` with `optionId` through a metadata-only attach of its session. */
async function answer(row, optionId) {
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

/** The inbox section; `refresh()` re-reads it. */
export function inboxSection(app) {
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
      const a = await getJson('/api/attention', 'The inbox');
      if (stopped) return;
      rows = Array.isArray(a.pending) ? a.pending : [];
      errors = Array.isArray(a.errors) ? a.errors : [];
      inboxState.count = rows.length;
      render();
    } catch (e) {
      if (e.kind === 'auth' && !stopped) app.pair(e.message);
    }
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
    node.hidden = !rows.length && !errors.length;
    if (node.hidden) return;
    node.append(h('h2', { text: 'Waiting for you' }));
    const items = rows.map((r) => {
      const permission = r.method === 'session/request_permission';
      const p = r.params || {};
      const what = permission
        ? `asks permission: ${String((p.toolCall && p.toolCall.title) || 'a tool call')}`
        : `has a question: ${String(p.message || '')}`;
      const key = keyOf(r);
      const opts = permission ? quickOptions(p) : [];
      return h('li', { class: 'inbox-row', dataset: { inboxSession: String(r.sessionId), request: String(r.requestId) } },
        h('a', { href: sessionUrl(r), 'data-nav': '' },
          h('span', { class: 'badge warn', text: 'waiting' }), ' ',
          h('strong', { text: r.title || 'Untitled session' }), ' ', h('span', { text: what })),
        h('span', { class: 'muted', text: ago(r.since) }),
        opts.length ? h('div', { class: 'inbox-actions' }, opts.map((o) => h('button', {
          type: 'button',
          class: String(o.kind || '').startsWith('allow') ? 'primary' : '',
          disabled: busy.has(key),
          dataset: { option: String(o.optionId) },
          onclick: () => pick(r, o),
        }, String(o.name || o.optionId)))) : h('a', { class: 'button', href: sessionUrl(r), 'data-nav': '' }, 'Answer'),
        problems.has(key) ? h('p', { class: 'error', role: 'alert', text: problems.get(key) }) : null);
    });
    node.append(h('ul', { class: 'rows' }, items));
    for (const e of errors) {
      node.append(h('p', { class: 'muted', text: `An instance did not answer (${String(e.error || 'unknown')}).` }));
    }
  }

  return {
    node,
    refresh,
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
