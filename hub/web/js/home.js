// The home screen: what waits for an answer (inbox.js), what runs (board.js), the live
// instances and their sessions (all three read in one `GET /api/home`, polled every 4 s while
// the page is visible), with every other paired machine's live sessions in the same list
// (fleet.js: each row labelled with its machine), then the projects and the directory browser
// (projects.js), and the About sheet (about.js). No session is attached from here: the inbox and the board are the
// hub's reads, so headless bridges idle out. The last list of live sessions is kept
// (localStorage) and shown at once when the page starts, marked "as of …", until the hub
// answers (a start waits for no sign-in and no answer to show it; an error replaces it).

import { h, clear, ago, baseName, short } from './dom.js';
import { getJson } from './api.js';
import { pool } from './conn.js';
import { projectsSection, browseSection } from './projects.js';
import { notifyCard } from './push.js';
import { composer } from './composer.js';
import { usageLink } from './usage.js';
import { quotaCard } from './quota.js';
import { inboxSection } from './inbox.js';
import { boardSection } from './board.js';
import { aboutSection } from './about.js';
import { fleetSection } from './fleet.js';

/** How often the home screen re-reads `/api/home` (test-only knob: `zcode-acp.test.homePollMs`). */
const POLL_MS = (() => {
  let v = NaN;
  try { v = Number(localStorage.getItem('zcode-acp.test.homePollMs')); } catch { /* no storage */ }
  return Number.isFinite(v) && v > 0 ? v : 4000;
})();

/** Where the last list of live sessions is kept: `{at, instances}`. */
const KEPT_KEY = 'zcode-acp.home';

/** The kept list of live sessions, `{at, instances}`, or null. */
function keptList() {
  try {
    const v = JSON.parse(localStorage.getItem(KEPT_KEY) || 'null');
    if (v && Array.isArray(v.instances) && Number(v.at) > 0) return v;
  } catch { /* none, or private mode */ }
  return null;
}

function keepList(instances) {
  try {
    if (instances) localStorage.setItem(KEPT_KEY, JSON.stringify({ at: Date.now(), instances }));
    else localStorage.removeItem(KEPT_KEY);
  } catch { /* storage full or refused: the next start waits for the answer */ }
}

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
  // One whose agent cannot start is shown all the same: its error is the news.
  return originLabel(inst) === 'serve' && !sessions.length && !inst.agentError;
}

/** Mounts the home screen; returns its cleanup. */
export function homeView(root, app) {
  // Every other paired machine's rows join this machine's, each labelled (fleet.js).
  let fleet = null;
  const selfLabel = () => (fleet && fleet.selfName() ? h('span', { class: 'badge machine', text: fleet.selfName() }) : null);
  const inbox = inboxSection(app, { items: () => (fleet ? fleet.waitingItems() : []), label: selfLabel });
  const board = boardSection(app, { runs: () => (fleet ? fleet.runItems() : { active: [], recent: [] }), label: selfLabel });
  const about = aboutSection(app);
  // Connections a session view left open would keep its bridge busy: the home needs none.
  for (const id of [...pool.conns.keys()]) pool.drop(id);
  const live = h('section', { class: 'card', id: 'instances', 'aria-labelledby': 'instances-h' },
    h('h2', { id: 'instances-h', text: 'Live sessions' }), h('p', { class: 'muted', text: 'Looking for instances…' }));
  const projects = projectsSection(app);
  const browse = browseSection(app);
  let othersShown = '';
  fleet = fleetSection(app, () => {
    renderLive();
    projects.machinesChanged();
    browse.machinesChanged();
    const sig = fleet.signature();
    if (sig === othersShown) return;
    othersShown = sig;
    inbox.redraw();
    board.redraw();
  });
  clear(root, h('div', { class: 'home' }, inbox.node, board.node, live, fleet.node, quotaCard(), projects.node, browse.node, notifyCard(), usageLink(), about.node));
  app.setTitle('');

  let list = app.instances || null;
  let failure = null; // the page's own hub's last error, while it has one
  // What was kept from the last answer (this page's first home): shown until the hub answers.
  let keptAt = 0;
  if (!list) {
    const kept = keptList();
    if (kept) ({ instances: list, at: keptAt } = kept);
  }
  let keptWritten = 0;
  let timer = 0;
  let stopped = false;

  async function poll() {
    clearTimeout(timer);
    try {
      const state = await getJson('/api/home', 'The instance list');
      if (stopped) return;
      list = state && state.instances;
      if (!Array.isArray(list)) throw new Error('The instance list is not a list (a proxy page?).');
      // Kept again when it changed, or a minute on (what "as of" says is when it was seen).
      if (keptAt || Date.now() - keptWritten > 60000 || JSON.stringify(list) !== JSON.stringify(app.instances)) {
        keepList(list);
        keptWritten = Date.now();
      }
      keptAt = 0;
      app.instances = list;
      failure = null;
      app.setConn('open', 'Hub reachable');
      projects.online();
      browse.online();
      inbox.show(state.attention);
      board.show(state.overview);
      renderLive();
    } catch (e) {
      if (stopped) return;
      if (e.kind === 'auth') {
        keepList(null);
        return app.pair(e.message);
      }
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

  function sessionUrl(inst, s) {
    return `/s/${encodeURIComponent(inst.id)}/${encodeURIComponent(s.sessionId)}?cwd=${encodeURIComponent(inst.workspace || '')}`;
  }

  /**
   * The one list of live sessions: this page's machine's instances, then every other paired
   * machine's (fleet.js), each row labelled with its machine once there are several.
   */
  let shown = '';
  function renderLive() {
    if (stopped) return;
    const sig = JSON.stringify([list, failure && failure.message, inbox.signature(), fleet.signature(), keptAt]);
    if (sig === shown) return;
    shown = sig;
    live.dataset.kept = keptAt ? 'yes' : '';
    clear(live, h('div', { class: 'card-head' }, h('h2', { id: 'instances-h', text: 'Live sessions' }),
      keptAt ? h('span', { class: 'muted kept', text: `as of ${ago(keptAt)}` }) : null,
      h('button', { type: 'button', class: 'link', onclick: () => poll() }, 'Refresh')));
    const mine = selfLabel();
    if (failure) {
      live.append(h('p', { class: 'error', role: 'alert', text: failure.message }),
        h('button', { type: 'button', onclick: () => poll() }, 'Retry now'),
        list ? h('p', { class: 'muted', text: 'Showing nothing stale: the list comes back as soon as the hub answers.' }) : null);
    } else if (!list) {
      live.append(h('p', { class: 'muted', text: 'Looking for instances…' }));
    }
    // A headless bridge the hub started to serve a project's history (or one whose sessions
    // all ended) holds nothing to open: its history is under Projects.
    const shownList = failure || !list ? [] : list.filter((inst) => !isIncubator(inst));
    if (list && !failure && !shownList.length) {
      live.append(h('p', { class: 'muted' }, mine ? mine.cloneNode(true) : null, mine ? ' ' : null, 'No instance is running. Start one with ', h('code', { text: 'zcode-acp up' }),
        ', open an agent in your editor, or create a session in a project below.'));
    }
    for (const inst of shownList) {
      const sessions = Array.isArray(inst.sessions) ? inst.sessions : [];
      live.append(h('div', { class: 'instance', dataset: { instance: String(inst.id) } },
        h('div', { class: 'instance-head' },
          mine ? mine.cloneNode(true) : null,
          h('strong', { text: baseName(inst.workspace) }),
          h('span', { class: 'badge origin', text: originLabel(inst) }),
          inst.agent ? h('span', { class: 'badge agent', title: `Agent: ${inst.agent}`, text: String(inst.agent) }) : null,
          h('span', { class: 'muted path', text: String(inst.workspace || '') }),
          h('a', { class: 'button', href: `/n/${encodeURIComponent(inst.id)}?cwd=${encodeURIComponent(inst.workspace || '')}`, 'data-nav': '' }, 'New session')),
        // Its agent cannot start (or crashed): said in the bridge's words, stderr tail included.
        inst.agentError ? h('p', { class: 'error agent-error', text: String(inst.agentError) }) : null,
        sessions.length ? h('ul', { class: 'rows sessions' }, sessions.map((s) => {
          const waitingHere = inbox.countOf(inst.id, s.sessionId);
          const status = s.status === 'running' || s.status === 'idle' ? s.status : 'unknown';
          return h('li', { dataset: { session: s.sessionId } }, h('a', { href: sessionUrl(inst, s), 'data-nav': '' },
            mine ? mine.cloneNode(true) : null,
            h('span', { class: `badge ${status}`, text: status }),
            waitingHere ? h('span', { class: 'badge warn', text: 'waiting for you' }) : null,
            h('span', { class: 'title', text: short(s.title) || 'Untitled session' }),
            h('span', { class: 'muted', text: ago(s.updatedAt) })));
        })) : h('p', { class: 'muted', text: 'No live session on this instance.' })));
    }
    live.append(...fleet.liveNodes());
  }

  function renderError(e) {
    failure = e;
    shown = '';
    keptAt = 0;
    live.dataset.kept = '';
    renderLive();
  }

  if (list) renderLive();
  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisibility);
    inbox.stop();
    board.stop();
    about.stop();
    fleet.stop();
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
    // An agent that cannot start is said here, not only in the header's tooltip.
    if (conn.why === 'agent') {
      problem.textContent = conn.message;
      problem.hidden = false;
    } else if (problem.dataset.agent) problem.hidden = true;
    problem.dataset.agent = conn.why === 'agent' ? '1' : '';
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
