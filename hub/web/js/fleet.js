// The home screen's "Machines" card: every other machine this browser is paired with
// (machines.js), each asked in parallel, with its own timeout, for what the home shows of the
// page's own machine, in one `GET /api/home` each: what waits for an answer (a permission
// answered in place), its live sessions, its turn board and recent turns. They join the home's
// lists beside the page's own machine's (`liveNodes` in "Live sessions", `waitingItems` in
// "Waiting for you", `runItems` in "Running now"); this card keeps each machine's state. Every row
// names its machine; a machine that does not answer in time shows as offline without holding
// up the others. Rows open that machine's session on this page (`?m=<hostId>`: its hub, its
// credential, its relay WebSocket). "Add a machine" takes another machine's pairing link.
// What each machine last showed is kept (localStorage) and shown at once on the next start,
// marked "as of …", while that machine is asked afresh: a warm start does not wait for the
// slowest machine's sign-in and answer.

import { h, clear, ago, baseName, short, toast } from './dom.js';
import { api } from './api.js';
import { Conn } from './conn.js';
import { machines, addMachine, removeMachine, sessionRoute, withMachine, selfMachine, keptHomeKey } from './machines.js';
import { followMachine, unfollowMachine } from './push.js';

const POLL_MS = 4000;
/** How long one machine may take to answer before it counts as offline (test knob: localStorage). */
const MACHINE_TIMEOUT_MS = (() => {
  let v = NaN;
  try { v = Number(localStorage.getItem('zcode-acp.test.machineTimeoutMs')); } catch { /* no storage */ }
  return Number.isFinite(v) && v > 0 ? v : 4000;
})();
const ANSWER_TIMEOUT_MS = 15000;
/** How many of a machine's live sessions show before "Show all". */
const FEW = 10;

/** What one machine shows: `{state: 'online', instances, attention, overview}` (its `GET /api/home`). */
async function readMachine(m) {
  const home = await api('/api/home', { machine: m, what: `${m.name}: the home screen`, expectJson: true, timeout: MACHINE_TIMEOUT_MS });
  const instances = home && home.instances;
  if (!Array.isArray(instances)) throw new Error(`${m.name}: its answer is not the home screen's (a proxy page?).`);
  return { state: 'online', instances, attention: home.attention || {}, overview: home.overview || {} };
}

/** Machine `m`'s live sessions, the latest first: `[{inst, s}]`. */
function latestFirst(instances) {
  return instances.flatMap((inst) => (Array.isArray(inst.sessions) ? inst.sessions : []).map((s) => ({ inst, s })))
    .sort((x, y) => (Number(y.s.updatedAt) || 0) - (Number(x.s.updatedAt) || 0));
}

/** What was kept of machine `m`'s last answer, as `{state: 'cached', at, instances, attention, overview}`, or null. */
function keptHome(m) {
  try {
    const v = JSON.parse(localStorage.getItem(keptHomeKey(m.id)) || 'null');
    if (v && Array.isArray(v.instances) && Number(v.at) > 0) {
      return { state: 'cached', at: Number(v.at), instances: v.instances, attention: v.attention || {}, overview: v.overview || {} };
    }
  } catch { /* none, or private mode */ }
  return null;
}

/** Keeps what machine `m` answered (`r`, online), its FEW latest sessions only: what a start shows. */
function keepHome(m, r) {
  const few = new Set(latestFirst(r.instances).slice(0, FEW).map(({ s }) => s));
  const instances = r.instances.map((inst) => ({ ...inst, sessions: (Array.isArray(inst.sessions) ? inst.sessions : []).filter((s) => few.has(s)) }));
  try {
    localStorage.setItem(keptHomeKey(m.id), JSON.stringify({ at: Date.now(), instances, attention: r.attention, overview: r.overview }));
  } catch { /* storage full or refused: the next start waits for the answer */ }
}

/** Answers permission `row` of machine `m` through a metadata-only attach of its session there. */
async function answerOn(m, row, optionId) {
  const conn = new Conn(row.instanceId, m);
  try {
    conn.start();
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => { off(); reject(new Error('could not connect to that machine\'s instance')); }, ANSWER_TIMEOUT_MS);
      const off = conn.listen((ev) => {
        if (ev.type === 'open') { clearTimeout(timer); off(); resolve(); }
        if (ev.type === 'state' && conn.state === 'failed') { clearTimeout(timer); off(); reject(new Error(conn.message || 'the instance is gone')); }
      });
    });
    await conn.load(row.sessionId, row.workspace, 0);
    const deadline = Date.now() + 3000;
    let req = null;
    while (!(req = [...conn.pending.values()].find((x) => x.id === row.requestId)) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    if (!req) throw new Error('it was already answered (or withdrawn)');
    conn.respond(req.id, { outcome: { outcome: 'selected', optionId } });
    await new Promise((r) => setTimeout(r, 50));
  } finally {
    conn.close();
  }
}

/**
 * The card: `{node, stop(), liveNodes(), waitingItems(), runItems(), signature(), selfName()}`;
 * `changed()` is called when what they show may have changed (a machine answered, or was added
 * or forgotten, or an answer is under way).
 */
export function fleetSection(app, changed = () => {}) {
  const node = h('section', { class: 'card fleet', id: 'fleet', 'aria-labelledby': 'fleet-h' });
  const seen = new Map(); // machine id → what it last showed
  for (const m of machines()) {
    const kept = keptHome(m);
    if (kept) seen.set(m.id, kept);
  }
  const busy = new Set();
  const expanded = new Set(); // machines whose every live session shows
  let stopped = false;
  let timer = 0;
  let selfName = '';
  // Only a page paired with other machines asks its own hub who it is.
  if (machines().length) selfMachine().then((s) => { selfName = s.name; render(); changed(); }, () => {});

  function poll() {
    clearTimeout(timer);
    const list = machines();
    for (const id of [...seen.keys()]) if (!list.some((m) => m.id === id)) seen.delete(id);
    // Each machine renders as soon as it answers (or times out): none waits for another.
    Promise.allSettled(list.map((m) => readMachine(m).then((r) => { keepHome(m, r); return r; }, (e) => ({ state: 'offline', error: e.message }))
      .then((r) => { if (!stopped) { seen.set(m.id, r); renderOne(m); changed(); } })))
      .then(() => { if (!stopped && list.length && document.visibilityState !== 'hidden') timer = setTimeout(poll, POLL_MS); });
    render();
  }

  const label = (m) => h('span', { class: 'badge machine', text: m.name });
  /** Whether what machine `m` showed is there to list: fresh, or kept from its last answer. */
  const shows = (r) => r && (r.state === 'online' || r.state === 'cached');
  const stateText = (r) => (r.state === 'cached' ? `as of ${ago(r.at)}` : r.state);

  function machineBlock(m) {
    const r = seen.get(m.id) || { state: 'checking' };
    const head = h('div', { class: 'instance-head' }, h('strong', { text: m.name }),
      h('span', { class: `badge ${r.state === 'online' ? 'idle' : r.state === 'offline' ? 'failed' : ''}`, dataset: { machineState: r.state }, text: stateText(r) }),
      h('span', { class: 'muted path', text: new URL(m.origin).host }),
      h('button', { type: 'button', class: 'link', onclick: async () => {
        // Its notifications stop first, while its hub still takes this browser's credential.
        await unfollowMachine(m).catch(() => {});
        removeMachine(m.id);
        toast(`Forgot ${m.name} here (remove this browser on that machine's Devices screen too).`);
        poll();
        changed();
      } }, 'Forget'));
    const block = h('div', { class: 'machine-block', dataset: { machine: m.id } }, head);
    if (r.state === 'offline') block.append(h('p', { class: 'muted', text: `Offline: ${r.error}` }));
    return block;
  }

  /** What waits on the other machines, as rows of the home's one "Waiting for you" list (inbox.js). */
  function waitingItems() {
    return machines().flatMap((m) => {
      const r = seen.get(m.id);
      if (!shows(r)) return [];
      const pending = Array.isArray(r.attention && r.attention.pending) ? r.attention.pending : [];
      return pending.map((p) => {
        const permission = p.method === 'session/request_permission';
        const params = p.params || {};
        const key = `${m.id}/${p.instanceId}/${p.requestId}`;
        // Kept from the last answer: shown as it was then, nothing to press that needs it fresh.
        const opts = permission && r.state === 'online' ? (Array.isArray(params.options) ? params.options : []).filter((o) => o && /^(allow|reject)_once$/.test(o.kind)) : [];
        return h('li', { class: 'inbox-row', dataset: { inboxSession: String(p.sessionId), machine: m.id } },
          h('a', { href: sessionRoute(m, p.instanceId, p.sessionId, p.workspace), 'data-nav': '' }, label(m),
            h('span', { class: 'badge warn', text: 'waiting' }), h('strong', { text: p.title || 'Untitled session' }),
            h('span', { text: permission ? `asks permission: ${String((params.toolCall && params.toolCall.title) || 'a tool call')}` : `has a question: ${String(params.message || '')}` })),
          h('span', { class: 'muted', text: ago(p.since) }),
          opts.length ? h('div', { class: 'inbox-actions' }, opts.map((o) => h('button', {
            type: 'button', class: o.kind.startsWith('allow') ? 'primary' : '', disabled: busy.has(key), dataset: { option: String(o.optionId) },
            onclick: async () => {
              busy.add(key);
              changed();
              try { await answerOn(m, p, o.optionId); } catch (e) { toast(`Not answered: ${e.message}`, 'error'); }
              busy.delete(key);
              poll();
            },
          }, String(o.name || o.optionId)))) : null);
      });
    });
  }

  /** What runs and ran on the other machines, as rows of the home's one turn board (board.js): `{active, recent}`. */
  function runItems() {
    const all = { active: [], recent: [] };
    for (const m of machines()) {
      const r = seen.get(m.id);
      if (!shows(r)) continue;
      const o = r.overview || {};
      const runRow = (run, badge, when) => h('li', { dataset: { runSession: String(run.sessionId), machine: m.id } },
        h('a', { href: sessionRoute(m, run.ownerInstanceId || '', run.sessionId, run.workspace), 'data-nav': '' }, label(m),
          h('span', { class: 'badge', text: badge }), h('span', { class: 'title', text: short(run.title) || 'Untitled session' }),
          h('span', { class: 'muted', text: when })));
      for (const run of Array.isArray(o.activeRuns) ? o.activeRuns : []) all.active.push(runRow(run, String(run.status || 'running'), `started ${ago(run.startedAt)}`));
      for (const run of Array.isArray(o.recentRuns) ? o.recentRuns : []) {
        all.recent.push(runRow(run, String(run.stopReason || 'finished').replace(/_/g, ' '), `ended ${ago(run.endedAt)}`));
      }
    }
    return all;
  }

  function addForm() {
    const link = h('input', { type: 'url', id: 'machine-link', placeholder: 'https://…/#pair=XXXXX-XXXXX', 'aria-label': 'Pairing link of the other machine', autocomplete: 'off' });
    const name = h('input', { type: 'text', id: 'machine-name', maxlength: 64, placeholder: 'Name (default: its host name)', 'aria-label': 'Name of the machine' });
    const problem = h('p', { class: 'error', role: 'alert', id: 'machine-error', hidden: true });
    const go = h('button', { type: 'submit', class: 'primary', id: 'machine-add' }, 'Add');
    const form = h('form', { onsubmit: async (e) => {
      e.preventDefault();
      problem.hidden = true;
      go.disabled = true;
      try {
        const m = await addMachine(link.value, name.value);
        toast(`Paired with ${m.name}.`);
        selfMachine().then((s) => { selfName = s.name; render(); changed(); }, () => {});
        followMachine(m).catch((err) => toast(`${m.name} will not notify this device yet: ${err.message}`, 'error'));
        adding = false;
        if (document.activeElement) document.activeElement.blur();
        poll();
      } catch (err) {
        problem.textContent = err.message;
        problem.hidden = false;
      } finally {
        go.disabled = false;
      }
    } }, h('p', { class: 'muted' }, 'On the other machine run ', h('code', { text: 'zcode-acp pair' }),
      ' and paste the link it prints (or scan its QR code and copy the link). This browser gets its own credential from that machine; nothing is copied between machines.'),
    link, name, problem, h('div', { class: 'row' }, go));
    return h('details', { id: 'machine-add-box', open: adding }, h('summary', { text: 'Add a machine' }), form);
  }

  /**
   * Redraws machine `m`'s block alone when what it shows changed (a machine that answers does
   * not redraw the others, and an unchanged one keeps its open "Recent turns").
   */
  const shown = new Map(); // machine id → what its block shows, as JSON
  function renderOne(m) {
    const old = [...node.querySelectorAll('.machine-block')].find((b) => b.dataset.machine === m.id);
    if (!old) return render();
    const r = seen.get(m.id);
    const sig = JSON.stringify([m.name, r && r.state, r && r.error]);
    if (shown.get(m.id) === sig) return;
    shown.set(m.id, sig);
    old.replaceWith(machineBlock(m));
  }

  let adding = false;
  function render() {
    shown.clear();
    // A form being typed in is not redrawn under the person's fingers.
    const box = node.querySelector('#machine-add-box');
    if (box && box.open && box.contains(document.activeElement)) {
      adding = true;
      for (const b of node.querySelectorAll('.machine-block')) b.remove();
      for (const m of machines()) box.before(machineBlock(m));
      return;
    }
    if (box) adding = box.open;
    const list = machines();
    clear(node, h('h2', { id: 'fleet-h', text: list.length ? 'Machines' : 'Several machines' }),
      list.length && selfName ? h('p', { class: 'muted', id: 'fleet-self', text: `${selfName}: this page's own machine.` }) : null,
      ...list.map(machineBlock), addForm());
  }

  // A hidden page does not poll; shown again, it asks every machine at once.
  const onVisibility = () => {
    if (stopped) return;
    if (document.visibilityState === 'hidden') clearTimeout(timer);
    else if (machines().length) poll();
  };
  /**
   * Each other machine's live sessions, for the home's one list: a group per machine, labelled
   * with it, its latest few sessions (the rest on request), a new session in its first
   * instance's directory; offline (and why) when it did not answer in time.
   */
  function liveNodes() {
    return machines().map((m) => {
      const r = seen.get(m.id) || { state: 'checking' };
      const head = h('div', { class: 'instance-head' }, label(m),
        r.state === 'online' ? null : h('span', { class: `badge ${r.state === 'offline' ? 'failed' : ''}`, dataset: { machineState: r.state }, text: stateText(r) }),
        shows(r) && r.instances[0] ? h('a', { class: 'button', href: withMachine(`/n/${encodeURIComponent(r.instances[0].id)}?cwd=${encodeURIComponent(r.instances[0].workspace || '')}`, m), 'data-nav': '' },
          `New session in ${baseName(r.instances[0].workspace)}`) : null);
      const group = h('div', { class: 'instance machine-group', dataset: { machine: m.id } }, head);
      if (r.state === 'offline') group.append(h('p', { class: 'muted', text: `${m.name} does not answer: its sessions show again when it does (why: under Machines).` }));
      if (!shows(r)) return group;
      // The latest few first; the rest on request (a phone's home is no place for hundreds).
      const all = latestFirst(r.instances);
      const rows = expanded.has(m.id) ? all : all.slice(0, FEW);
      group.append(all.length ? h('ul', { class: 'rows sessions' }, rows.map(({ inst, s }) => {
        const status = s.status === 'running' || s.status === 'idle' ? s.status : 'unknown';
        return h('li', { dataset: { session: s.sessionId, machine: m.id } }, h('a', { href: sessionRoute(m, inst.id, s.sessionId, inst.workspace), 'data-nav': '' },
          label(m), h('span', { class: `badge ${status}`, text: status }),
          h('span', { class: 'title', text: short(s.title) || 'Untitled session' }),
          h('span', { class: 'muted', text: `${baseName(inst.workspace)} · ${ago(s.updatedAt)}` })));
      })) : h('p', { class: 'muted', text: `No live session on ${m.name}.` }));
      if (rows.length < all.length) {
        group.append(h('button', { type: 'button', class: 'link fleet-more', onclick: () => { expanded.add(m.id); changed(); } },
          `Show all ${all.length} sessions`));
      }
      return group;
    });
  }

  document.addEventListener('visibilitychange', onVisibility);
  poll();
  return {
    node,
    liveNodes,
    waitingItems,
    runItems,
    /** What `liveNodes` shows, to compare. */
    signature: () => JSON.stringify([selfName, [...seen.entries()], [...expanded], [...busy]]),
    /** This page's own machine's name, once known (only asked when other machines are paired). */
    selfName: () => selfName,
    stop() {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisibility);
    },
  };
}
