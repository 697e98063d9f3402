// The home screen: what waits for an answer, the live instances and their sessions (polled
// every 4 s with `?probe=1`), then the projects and the directory browser (projects.js).
// Every listed session is watched (attached with limit 0) so a permission it asks for shows
// here, with the session it belongs to.

import { h, clear, ago, baseName } from './dom.js';
import { getJson } from './api.js';
import { pool } from './conn.js';
import { projectsSection, browseSection } from './projects.js';
import { notifyCard } from './push.js';
import { composer } from './composer.js';
import { usageLink } from './usage.js';
import { quotaCard } from './quota.js';

const POLL_MS = 4000;

/**
 * What started an instance, in a word: `editor`, `up` (the bridge `zcode-acp up` runs: the
 * contract's origin is `serve`, its `launcher` says `up`), or `serve` (one the hub started).
 */
function originLabel(inst) {
  if (inst.launcher === 'up') return 'up';
  return inst.origin === 'serve' ? 'serve' : 'editor';
}

/** A headless instance the hub started (not `up`'s) with no live session. */
function isIncubator(inst) {
  const sessions = Array.isArray(inst.sessions) ? inst.sessions : [];
  return originLabel(inst) === 'serve' && !sessions.length;
}

/** Mounts the home screen; returns its cleanup. */
export function homeView(root, app) {
  const waiting = h('section', { class: 'card waiting', id: 'waiting', 'aria-label': 'Waiting for you', hidden: true });
  const live = h('section', { class: 'card', id: 'instances', 'aria-labelledby': 'instances-h' },
    h('h2', { id: 'instances-h', text: 'Live sessions' }), h('p', { class: 'muted', text: 'Looking for instances…' }));
  const projects = projectsSection(app);
  const browse = browseSection(app);
  clear(root, h('div', { class: 'home' }, waiting, live, quotaCard(), projects.node, browse.node, notifyCard(), usageLink()));
  app.setTitle('');

  let list = app.instances || null;
  let timer = 0;
  let stopped = false;
  const unlisten = [];

  async function poll() {
    clearTimeout(timer);
    try {
      list = await getJson('/api/instances?probe=1', 'The instance list');
      if (!Array.isArray(list)) throw new Error('The instance list is not a list (a proxy page?).');
      app.instances = list;
      app.setConn('open', 'Hub reachable');
      projects.online();
      browse.online();
      watchAll();
      renderLive();
    } catch (e) {
      if (stopped) return;
      if (e.kind === 'auth') return app.pair(e.message);
      app.setConn('waiting', e.message, e.kind === 'network' ? 'down' : e.kind);
      if (e.kind === 'network' || e.kind === 'gateway' || e.kind === 'garbage') {
        projects.offline(e);
        browse.offline(e);
      }
      renderError(e);
    }
    schedule();
  }

  // A hidden page does not poll (a phone in a pocket, a background tab): it polls again at
  // once when shown.
  function schedule() {
    clearTimeout(timer);
    if (!stopped && document.visibilityState !== 'hidden') timer = setTimeout(poll, POLL_MS);
  }

  function onVisibility() {
    if (stopped) return;
    if (document.visibilityState === 'hidden') clearTimeout(timer);
    else poll();
  }
  document.addEventListener('visibilitychange', onVisibility);

  function watchAll() {
    const ids = new Set(list.map((i) => String(i.id)));
    for (const [id] of pool.conns) if (!ids.has(id)) pool.drop(id);
    for (const inst of list) {
      const sessions = Array.isArray(inst.sessions) ? inst.sessions : [];
      if (!sessions.length) continue;
      const conn = pool.get(inst.id);
      if (!unlisten.some((u) => u.id === conn)) {
        const off = conn.listen((ev) => { if (ev.type === 'pending') { renderWaiting(); renderLive(); } });
        unlisten.push({ id: conn, off });
      }
      for (const s of sessions) conn.watch(s.sessionId, inst.workspace);
    }
    renderWaiting();
  }

  function sessionUrl(inst, s) {
    return `/s/${encodeURIComponent(inst.id)}/${encodeURIComponent(s.sessionId)}?cwd=${encodeURIComponent(inst.workspace || '')}`;
  }

  function renderWaiting() {
    clear(waiting);
    const rows = [];
    for (const inst of list || []) {
      const conn = pool.conns.get(String(inst.id));
      if (!conn) continue;
      for (const m of conn.pendingOf()) {
        const sid = m.params && m.params.sessionId;
        const s = (inst.sessions || []).find((x) => x.sessionId === sid) || { sessionId: sid };
        const what = m.method === 'elicitation/create' ? 'has a question' : `asks permission: ${String((m.params.toolCall && m.params.toolCall.title) || '')}`;
        rows.push(h('li', {}, h('a', { href: sessionUrl(inst, s), 'data-nav': '' },
          h('span', { class: 'badge warn', text: 'waiting' }), ' ',
          h('strong', { text: s.title || 'Untitled session' }), ' ', h('span', { text: what }))));
      }
    }
    waiting.hidden = !rows.length;
    if (rows.length) waiting.append(h('h2', { text: 'Waiting for you' }), h('ul', { class: 'rows' }, rows));
  }

  let shown = '';
  function renderLive() {
    const sig = JSON.stringify([list, [...pool.conns.values()].map((c) => c.pending.size)]);
    if (sig === shown) return;
    shown = sig;
    clear(live, h('div', { class: 'card-head' }, h('h2', { id: 'instances-h', text: 'Live sessions' }),
      h('button', { type: 'button', class: 'link', onclick: () => poll() }, 'Refresh')));
    // A headless bridge the hub started to serve a project's history (or one whose sessions
    // all ended) holds nothing to open: its history is under Projects.
    const shownList = list.filter((inst) => !isIncubator(inst));
    if (!shownList.length) {
      live.append(h('p', { class: 'muted' }, 'No instance is running. Start one with ', h('code', { text: 'zcode-acp up' }),
        ', open an agent in your editor, or create a session in a project below.'));
      return;
    }
    for (const inst of shownList) {
      const conn = pool.conns.get(String(inst.id));
      const sessions = Array.isArray(inst.sessions) ? inst.sessions : [];
      live.append(h('div', { class: 'instance', dataset: { instance: String(inst.id) } },
        h('div', { class: 'instance-head' },
          h('strong', { text: baseName(inst.workspace) }),
          h('span', { class: 'badge origin', text: originLabel(inst) }),
          h('span', { class: 'muted path', text: String(inst.workspace || '') }),
          h('a', { class: 'button', href: `/n/${encodeURIComponent(inst.id)}?cwd=${encodeURIComponent(inst.workspace || '')}`, 'data-nav': '' }, 'New session')),
        sessions.length ? h('ul', { class: 'rows sessions' }, sessions.map((s) => {
          const waitingHere = conn ? conn.pendingOf(s.sessionId).length : 0;
          const status = s.status === 'running' || s.status === 'idle' ? s.status : 'unknown';
          return h('li', { dataset: { session: s.sessionId } }, h('a', { href: sessionUrl(inst, s), 'data-nav': '' },
            h('span', { class: `badge ${status}`, text: status }),
            waitingHere ? h('span', { class: 'badge warn', text: 'waiting for you' }) : null,
            h('span', { class: 'title', text: s.title || 'Untitled session' }),
            h('span', { class: 'muted', text: ago(s.updatedAt) })));
        })) : h('p', { class: 'muted', text: 'No live session on this instance.' })));
    }
  }

  function renderError(e) {
    shown = '';
    clear(live, h('h2', { id: 'instances-h', text: 'Live sessions' }),
      h('p', { class: 'error', role: 'alert', text: e.message }),
      h('button', { type: 'button', onclick: () => poll() }, 'Retry now'),
      list ? h('p', { class: 'muted', text: 'Showing nothing stale: the list comes back as soon as the hub answers.' }) : null);
  }

  if (list) { watchAll(); renderLive(); }
  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisibility);
    for (const u of unlisten) u.off();
    projects.stop();
    browse.stop();
  };
}

/**
 * A new session on `instance` (route `/n/<instance>`), created lazily: the view is an empty
 * composer, and `session/new` goes out only with the first prompt, so opening "New session"
 * and leaving leaves no "Untitled session" behind. Once created, the session's own view takes
 * over (the address becomes `/s/…`) and sends the prompt.
 */
export function newSessionView(root, app, { instance, cwd }) {
  const conn = pool.get(instance);
  const note = h('p', { class: 'muted', id: 'new-note' }, 'A new session in ', h('code', { class: 'path', text: cwd || '(the instance\'s directory)' }),
    ': nothing is created until you send the first message.');
  const problem = h('p', { class: 'error', role: 'alert', hidden: true });
  const comp = composer({ onSend: (text) => create(text), onCancel: () => {} });
  clear(root, h('div', { class: 'session-view new-session' },
    h('div', { class: 'scroller', id: 'transcript-scroller' }, note, problem), comp.node));
  app.setTitle('New session');
  let creating = false;
  const ready = () => {
    app.setConn(conn.state, conn.message, conn.why);
    comp.setEnabled(conn.state === 'open' && !creating);
  };
  const unlisten = conn.listen((ev) => { if (ev.type === 'state' || ev.type === 'open') ready(); });
  conn.start();
  ready();
  comp.focus();

  async function create(text) {
    if (creating) return;
    creating = true;
    ready();
    problem.hidden = true;
    try {
      const r = await conn.call('session/new', { cwd: cwd || '/', mcpServers: [] });
      app.handOver(instance, r.sessionId, text);
      app.navigate(`/s/${encodeURIComponent(instance)}/${encodeURIComponent(r.sessionId)}?cwd=${encodeURIComponent(cwd || '')}`, { replace: true });
    } catch (e) {
      creating = false;
      comp.setText(text);
      problem.textContent = `Could not start the session: ${e.message}`;
      problem.hidden = false;
      ready();
    }
  }

  return () => unlisten();
}
