// The home screen's "Running now" board: every turn on this machine that runs, waits for a
// person or is queued, and the last turns that finished (stop reason, how long), from the
// hub's `GET /api/workflow-overview` (one read of every bridge's memory and the journal); a
// finished turn's row shows its own first prompt under the session's title.

import { h, clear, ago, baseName, short } from './dom.js';
import { getJson } from './api.js';

const STATUS_LABEL = { running: 'running', waiting: 'waiting for you', pending: 'queued' };

/** "12 s", "3 min", "1 h 5 min". */
function duration(ms) {
  const s = Math.max(0, Math.round(Number(ms) / 1000));
  if (!Number.isFinite(s)) return '';
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** Who started a turn, in a word or two. */
function who(run) {
  if (run.promptedBy === 'editor') return run.clientName ? `editor (${run.clientName})` : 'editor';
  if (String(run.promptedBy || '').startsWith('hook')) return 'hook';
  return run.clientName ? String(run.clientName) : 'remote client';
}

const link = (run) => (run.ownerInstanceId
  ? `/s/${encodeURIComponent(run.ownerInstanceId)}/${encodeURIComponent(run.sessionId)}?cwd=${encodeURIComponent(run.workspace || '')}`
  : null);

/**
 * The board section; `refresh()` re-reads it. `others`: the other machines' (fleet.js):
 * `runs()`, their rows `{active, recent}`, listed after this machine's; `label()`, this
 * machine's badge (null while it is the only one).
 */
export function boardSection(app, others = { runs: () => ({ active: [], recent: [] }), label: () => null }) {
  const node = h('section', { class: 'card board', id: 'board', 'aria-labelledby': 'board-h' },
    h('h2', { id: 'board-h', text: 'Running now' }), h('p', { class: 'muted asking', text: 'Asking what runs…' }));
  let stopped = false;
  let shown = '';
  let last = null;
  // Whether the person opened "Recent turns": kept here, across redraws (read off the old
  // node it was always false, the node being cleared first, and a click that landed on a node
  // just replaced was lost too).
  let recentOpen = false;

  /** Shows `o`, the body of `GET /api/workflow-overview` (the home screen reads it in `/api/home`). */
  function show(o) {
    if (stopped || !o) return;
    last = o;
    const sig = JSON.stringify([o.activeRuns, o.recentRuns, (o.groups || []).map((g) => g.error)]);
    if (sig !== shown) { shown = sig; render(o); }
  }

  async function refresh() {
    try {
      show(await getJson('/api/workflow-overview', 'The turn board'));
    } catch (e) {
      if (stopped) return;
      if (e.kind === 'auth') return app.pair(e.message);
      shown = '';
      clear(node, h('h2', { id: 'board-h', text: 'Running now' }), h('p', { class: 'muted', text: e.message }));
    }
  }

  function row(run, extra) {
    const url = link(run);
    // A finished turn is told apart from the session's other turns by its own first prompt.
    const prompt = typeof run.prompt === 'string' && run.prompt ? short(run.prompt, 100) : '';
    const body = [others.label(), h('span', { class: `badge ${extra.cls}`, text: extra.badge }),
      h('span', { class: 'title', text: short(run.title) || 'Untitled session' }),
      prompt ? h('span', { class: 'prompt', text: `“${prompt}”` }) : null,
      h('span', { class: 'muted', text: `${baseName(run.workspace)} · ${extra.when}` })];
    return h('li', { dataset: { runSession: String(run.sessionId), status: String(run.status || '') } },
      url ? h('a', { href: url, 'data-nav': '' }, body) : h('span', { class: 'row-body' }, body));
  }

  function render(o) {
    const active = Array.isArray(o.activeRuns) ? o.activeRuns : [];
    const recent = Array.isArray(o.recentRuns) ? o.recentRuns : [];
    const more = others.runs();
    clear(node, h('h2', { id: 'board-h', text: 'Running now' }));
    node.append(active.length || more.active.length
      ? h('ul', { class: 'rows board-active' }, active.map((r) => row(r, {
        cls: r.status === 'waiting' ? 'warn' : r.status === 'pending' ? 'queued' : 'running',
        badge: STATUS_LABEL[r.status] || String(r.status || ''),
        when: `${who(r)}, ${r.status === 'pending' ? 'queued' : 'started'} ${ago(r.startedAt)}`,
      })), more.active)
      : h('p', { class: 'muted', text: others.label() ? 'Nothing is running on any machine.' : 'Nothing is running on this machine.' }));
    for (const g of Array.isArray(o.groups) ? o.groups : []) {
      if (g.error) node.append(h('p', { class: 'muted', text: `${baseName(g.workspace)}: ${String(g.error)}` }));
    }
    if (recent.length || more.recent.length) {
      // Open stays open across redraws (a person reading it).
      node.append(h('details', { class: 'board-recent', open: recentOpen, ontoggle: (e) => { recentOpen = e.currentTarget.open; } }, h('summary', { text: `Recent turns (${recent.length + more.recent.length})` }),
        h('ul', { class: 'rows' }, recent.map((r) => row(r, {
          cls: r.stopReason === 'end_turn' ? 'idle' : r.stopReason === 'error' ? 'failed' : 'warn',
          badge: String(r.stopReason || 'finished').replace(/_/g, ' '),
          when: `${duration(r.durationMs)}, ended ${ago(r.endedAt)}`,
        })), more.recent)));
    }
  }

  /** Draws it again (the other machines' rows changed). */
  const redraw = () => { if (!stopped && last) render(last); };
  return { node, refresh, show, redraw, stop() { stopped = true; } };
}
