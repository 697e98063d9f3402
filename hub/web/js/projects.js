// Projects (`/api/projects`), a project's history with paging (`/api/projects/sessions`),
// resume, create (`POST /api/instances`), project delete (`POST /api/projects/delete`), and
// the directory browser (`/api/fs/list`) with create in a creatable directory. A hub that
// does not offer one of these says so in place; nothing else on the page depends on them.
// With several agents configured (`/api/agents`), a create picks one, and a resume runs the
// agent that made the session (on a bridge of the project that runs it, else a new one).
// With other machines paired (machines.js), the card's "Projects on" picks whose projects it
// shows: its calls then go to that machine's hub, and what it opens is that machine's (`?m=`).

import { h, clear, ago, baseName, toast, modal, plural, short } from './dom.js';
import { api, query } from './api.js';
import { machines, machineById, withMachine, selfMachine } from './machines.js';

/** GET JSON from `machine`'s hub (null: the page's own). */
const getOn = (machine, path, what) => api(path, { machine, what, expectJson: true });
/** POST JSON to `machine`'s hub (null: the page's own), expecting JSON back. */
const postOn = (machine, path, json, what) => api(path, { machine, json, what, expectJson: true });

const HISTORY_PAGE = 20;
const CREATE_WAIT_MS = 25000;

/** Explains a failed call in a section, with a retry. */
function failure(box, e, retry) {
  clear(box, h('p', { class: e.kind === 'missing' ? 'muted' : 'error', role: e.kind === 'missing' ? null : 'alert', text: e.message }),
    e.kind === 'missing' ? null : h('button', { type: 'button', onclick: retry }, 'Retry'));
}

const agentsCalls = new Map();
/** The agents a create on `machine` may name, `{default, agents: [{name, command}]}`, asked
 * once per visit home (a hub without the route offers only its default: no choice). */
function agents(machine) {
  const id = machine ? machine.id : '';
  if (!agentsCalls.has(id)) {
    agentsCalls.set(id, getOn(machine, '/api/agents', 'Agents').catch(() => {
      agentsCalls.delete(id);
      return { default: null, agents: [] };
    }));
  }
  return agentsCalls.get(id);
}

/**
 * An agent picker: `{node, value()}`. The `<select>` (default preselected) shows only when
 * more than one agent is configured; `value()` is `null` (the default) while it is hidden.
 */
function agentPicker(machine = null) {
  const select = h('select', { 'aria-label': 'Agent' });
  const node = h('label', { class: 'pick agent-pick', hidden: true }, 'Agent', select);
  agents(machine).then((a) => {
    const list = (Array.isArray(a.agents) ? a.agents : []).filter((x) => x && x.name);
    if (list.length < 2) return;
    select.replaceChildren(...list.map((x) => h('option', { value: String(x.name), title: String(x.command || '') }, String(x.name))));
    select.value = String(a.default);
    node.hidden = false;
  });
  return { node, value: () => (node.hidden ? null : select.value) };
}

/** Creates a session in `path` on `machine` (null: the page's own; a new instance running
 * `agent`, else the default), waits for it to register, opens it. */
export async function createIn(app, path, button, agent = null, machine = null) {
  if (button) button.disabled = true;
  toast(`Starting a session in ${baseName(path)}… (a window may open on ${machine ? machine.name : 'the machine'})`);
  try {
    const id = await startInstance(path, agent ? { agent } : {}, machine);
    app.navigate(withMachine(`/n/${encodeURIComponent(id)}${query({ cwd: path })}`, machine));
  } catch (e) {
    const msg = e.status === 403 ? `${path} is not a known project (nor under a configured project root).` : e.message;
    toast(`Could not create a session: ${msg}`, 'error', 9000);
  } finally {
    if (button) button.disabled = false;
  }
}

/** Resumes session `s` of `path` on a bridge that runs `agent`: a live one of the project,
 * else a new one (`POST /api/instances {sessionId, agent}`). */
async function resumeWith(app, path, s, agent, button, machine) {
  if (button) button.disabled = true;
  const open = (id) => app.navigate(withMachine(`/s/${encodeURIComponent(id)}/${encodeURIComponent(s.sessionId)}${query({ cwd: s.cwd || path })}`, machine));
  try {
    const list = await getOn(machine, '/api/instances', 'The instance list');
    const running = (Array.isArray(list) ? list : []).filter((i) => i.workspace === path && i.agent === agent)
      .sort((a, b) => (a.origin === 'serve' ? 0 : 1) - (b.origin === 'serve' ? 0 : 1));
    if (running.length) return open(String(running[0].id));
    toast(`Starting ${agent || 'the agent'} in ${baseName(path)}… (a window may open on ${machine ? machine.name : 'the machine'})`);
    open(await startInstance(path, { sessionId: s.sessionId, ...(agent ? { agent } : {}) }, machine));
  } catch (e) {
    toast(`Could not resume the session: ${e.message}`, 'error', 9000);
  } finally {
    if (button) button.disabled = false;
  }
}

/** `POST /api/instances` for `path` with `extra`; the new instance's id once it is listed. */
async function startInstance(path, extra, machine) {
  const r = await postOn(machine, '/api/instances', { workspacePath: path, ...extra }, 'Create');
  const id = String(r.id);
  const deadline = Date.now() + CREATE_WAIT_MS;
  for (;;) {
    const list = await getOn(machine, '/api/instances', 'The instance list');
    if (Array.isArray(list) && list.some((i) => String(i.id) === id)) return id;
    if (Date.now() > deadline) throw new Error('The new instance never registered with the hub.');
    await new Promise((res) => setTimeout(res, 300));
  }
}

/** A card's machine picker, put before `body` in `node` when other machines are paired (`ids`:
 * the select's id, label and accessible name; `at()`: the machine shown, null for the page's
 * own; `pick(m)`: shows machine `m`, also when the one shown was forgotten). Returns the
 * function to call when the paired machines change: it draws the picker again only then. */
function machinePick(node, body, ids, at, pick) {
  let drawnFor = '';
  return function redraw() {
    const others = machines();
    const old = node.querySelector('.machine-pick');
    const sig = JSON.stringify(others.map((m) => [m.id, m.name]));
    if (sig === drawnFor && (old || !others.length)) return;
    drawnFor = sig;
    if (old) old.remove();
    if (at() && !machineById(at().id)) pick(null);
    if (!others.length) return;
    const own = h('option', { value: '' }, 'this machine');
    selfMachine().then((s) => { own.textContent = `${s.name} (this machine)`; }, () => {});
    const select = h('select', { id: ids.id, 'aria-label': ids.aria, onchange: () => pick(machineById(select.value)) },
      own, ...others.map((m) => h('option', { value: m.id }, m.name)));
    select.value = at() ? at().id : '';
    body.before(h('label', { class: 'pick machine-pick' }, ids.label, select));
  };
}

/** The projects card: `{node, stop}`. */
export function projectsSection(app) {
  agentsCalls.clear(); // asked again on every visit home: the hub's config.json may have changed
  const body = h('div', {}, h('p', { class: 'muted', text: 'Loading projects…' }));
  let at = null; // whose projects show: null, the page's own machine
  const node = h('section', { class: 'card', id: 'projects', 'aria-labelledby': 'projects-h' },
    h('div', { class: 'card-head' }, h('h2', { id: 'projects-h', text: 'Projects' }),
      h('button', { type: 'button', class: 'link', onclick: () => load() }, 'Refresh')), body);
  let stopped = false;
  let away = false;
  let asked = 0;

  /** "Projects on": this machine or another paired one (none shown with no other machine). */
  const machinePicker = machinePick(node, body, { id: 'projects-machine', label: 'Projects on', aria: 'Whose projects' },
    () => at, (m) => {
      at = m;
      clear(body, h('p', { class: 'muted', text: 'Loading projects…' }));
      load();
    });
  machinePicker();

  async function load() {
    const mine = ++asked;
    const machine = at;
    try {
      const projects = await getOn(machine, '/api/projects', 'Projects');
      if (away && !machine) return;
      if (stopped || mine !== asked) return;
      clear(body);
      if (!Array.isArray(projects) || !projects.length) {
        body.append(h('p', { class: 'muted', id: 'no-projects', text: 'No known project yet: a directory becomes one when a session runs in it (directories under the system\'s temporary directory are not listed).' }));
        return;
      }
      body.append(h('ul', { class: 'rows projects' }, projects.map((p) => projectRow(p, machine))));
    } catch (e) {
      if (!stopped && mine === asked) failure(body, e, load);
    }
  }

  function projectRow(p, machine) {
    const path = String(p.workspacePath || '');
    const history = h('div', { class: 'history', hidden: true });
    const picker = agentPicker(machine);
    const create = h('button', { type: 'button', class: 'primary', onclick: () => createIn(app, path, create, picker.value(), machine) }, 'New session');
    return h('li', { class: 'project', dataset: { path, machine: machine ? machine.id : '' } },
      h('div', { class: 'project-head' },
        h('strong', { text: baseName(path) }), h('span', { class: 'muted path', text: path }),
        h('span', { class: 'muted', text: `${plural(p.sessions, 'session')} · ${ago(p.lastActive)}` })),
      h('div', { class: 'actions' },
        h('button', { type: 'button', 'aria-expanded': 'false', onclick: (e) => toggleHistory(e.currentTarget, path, history, picker, machine) }, 'History'),
        create, picker.node,
        h('button', { type: 'button', class: 'danger', onclick: () => deleteProject(path, machine) }, 'Delete')),
      history);
  }

  function toggleHistory(button, path, box, picker, machine) {
    const open = box.hidden;
    box.hidden = !open;
    button.setAttribute('aria-expanded', String(open));
    if (open && !box.childElementCount) historyPage(path, box, null, picker, machine);
  }

  async function historyPage(path, box, cursor, picker, machine) {
    const more = box.querySelector('.more');
    if (more) more.remove();
    const loading = h('p', { class: 'muted', text: 'Loading the history (a headless bridge may start)…' });
    box.append(loading);
    try {
      const page = await getOn(machine, `/api/projects/sessions${query({ workspacePath: path, limit: HISTORY_PAGE, before: cursor && cursor.before, beforeId: cursor && cursor.beforeId })}`, 'History');
      loading.remove();
      const inst = page.instance && page.instance.id;
      const rows = Array.isArray(page.sessions) ? page.sessions : [];
      const choice = await agents(machine);
      const names = (Array.isArray(choice.agents) ? choice.agents : []).map((a) => a && a.name);
      if (!rows.length && !cursor) box.append(h('p', { class: 'muted', text: 'No earlier session.' }));
      box.append(h('ul', { class: 'rows' }, rows.map((s) => {
        // The agent that made it (as recorded), else the one picked for the project when
        // Resume is pressed. The history's own bridge serves it when it runs that agent.
        const recorded = names.includes(s.agent) ? s.agent : null;
        const chosen = () => recorded || picker.value() || choice.default;
        const mine = (agent) => inst && (!page.instance.agent || !agent || page.instance.agent === agent);
        const onClick = (e) => {
          if (mine(chosen())) return; // the link does it
          e.preventDefault();
          resumeWith(app, path, s, chosen(), e.currentTarget, machine);
        };
        const resume = inst
          ? h('a', { class: 'button', 'data-nav': '', onclick: onClick, href: withMachine(`/s/${encodeURIComponent(inst)}/${encodeURIComponent(s.sessionId)}${query({ cwd: s.cwd || path })}`, machine) }, 'Resume')
          : h('button', { type: 'button', onclick: onClick }, 'Resume');
        return h('li', {},
          h('span', { class: 'title', text: short(s.title) || 'Untitled session' }),
          names.length > 1 && s.agent ? h('span', { class: 'badge agent', text: String(s.agent) }) : null,
          h('span', { class: 'muted', text: ago(s.updatedAt) }),
          resume);
      })));
      if (page.nextCursor) {
        box.append(h('button', { type: 'button', class: 'more', onclick: () => historyPage(path, box, page.nextCursor, picker, machine) }, 'Older sessions'));
      }
    } catch (e) {
      loading.remove();
      const msg = e.status === 403 ? 'This project is no longer known to the hub.' : e.message;
      box.append(h('p', { class: 'error', role: 'alert', text: msg }),
        h('button', { type: 'button', class: 'more', onclick: () => { clear(box); historyPage(path, box, cursor, picker, machine); } }, 'Retry'));
    }
  }

  function deleteProject(path, machine) {
    modal(`Delete ${baseName(path)}?`, [h('p', { text: `Every session of ${path} is hidden from every listing (a soft delete: nothing is removed from disk).` })],
      [{ label: 'Delete project', value: 'ok', kind: 'danger' }, { label: 'Keep it', value: '' }], async () => {
        try {
          const r = await postOn(machine, '/api/projects/delete', { workspacePath: path }, 'Delete project');
          toast(`Deleted ${baseName(path)} (${plural(r.deletedTasks, 'session')} hidden).`);
          load();
          return '';
        } catch (e) {
          return e.status === 409 ? 'A session of this project is live or running — close it first.' : e.message;
        }
      });
  }

  load();
  return { node, machinesChanged: machinePicker, stop: () => { stopped = true; }, ...awayWhileDown(body, 'Projects', () => { away = true; }, () => { away = false; load(); }) };
}

/**
 * `offline(e)`/`online()` for a card whose content the hub serves: while the hub does not
 * answer, the card says so instead of showing a stale list with buttons that cannot work;
 * when it answers again, the card loads afresh.
 */
function awayWhileDown(body, what, leave, come) {
  let down = false;
  return {
    offline() {
      if (down) return;
      down = true;
      leave();
      clear(body, h('p', { class: 'muted offline', text: `${what} come back when the hub answers again.` }));
    },
    online() {
      if (!down) return;
      down = false;
      come();
    },
  };
}

/** The directory browser card: `{node, machinesChanged, stop}`. With other machines paired,
 * "Start somewhere new on" picks whose directories are listed and where the session starts. */
export function browseSection(app) {
  const body = h('div', {});
  const hidden = h('input', { type: 'checkbox', id: 'show-hidden', onchange: () => show(current) });
  const node = h('section', { class: 'card', id: 'browse', 'aria-labelledby': 'browse-h' },
    h('div', { class: 'card-head' }, h('h2', { id: 'browse-h', text: 'Start somewhere new' }),
      h('label', { class: 'muted check' }, hidden, 'show hidden')), body);
  let current = null;
  let stopped = false;
  let away = false;
  let at = null; // whose directories: null, the page's own machine
  let asked = 0;
  // One picker per machine: a choice made stays while browsing.
  let picker = agentPicker();

  /** "Start somewhere new on": this machine or another paired one (none with no other). */
  const machinePicker = machinePick(node, body, { id: 'browse-machine', label: 'Start somewhere new on', aria: 'Whose directories' },
    () => at, (m) => pick(m));

  function pick(machine) {
    at = machine;
    current = null;
    picker = agentPicker(at);
    open('');
  }

  async function open(path) {
    const mine = ++asked;
    const machine = at;
    body.replaceChildren(h('p', { class: 'muted', text: 'Listing…' }));
    try {
      const dir = await getOn(machine, `/api/fs/list${query({ path })}`, 'Browse');
      if (stopped || mine !== asked) return;
      current = dir;
      if (!away) show(current);
    } catch (e) {
      if (!stopped && mine === asked) failure(body, e, () => open(path));
    }
  }

  function show(dir) {
    if (!dir || away) return;
    const entries = (Array.isArray(dir.entries) ? dir.entries : []).filter((e) => hidden.checked || !String(e.name).startsWith('.'));
    const base = String(dir.path || '/').replace(/\/$/, '');
    const create = h('button', {
      type: 'button', class: 'primary', disabled: !dir.creatable, 'aria-describedby': dir.creatable ? null : 'create-why',
      onclick: () => createIn(app, dir.path, create, picker.value(), at),
    }, 'Start a session here');
    // Said in the page, not in a tooltip: a phone cannot hover.
    const why = dir.creatable ? null : h('p', { class: 'muted why', id: 'create-why' },
      'A session can start only in a known project or under a configured project root: add this directory (or a parent) to ',
      h('code', { text: 'projectRoots' }), ' in the hub\'s config.json (or ', h('code', { text: 'ZCODE_ACP_PROJECT_ROOTS' }), ').');
    clear(body,
      h('div', { class: 'browse-head' },
        h('button', { type: 'button', disabled: !dir.parent, 'aria-label': 'Parent directory', onclick: () => open(dir.parent) }, '↑'),
        h('code', { class: 'path', text: String(dir.path || '') }), create, dir.creatable ? picker.node : null),
      why,
      h('ul', { class: 'rows dirs' }, entries.map((e) => h('li', {},
        h('button', { type: 'button', class: 'link', onclick: () => open(`${base}/${e.name}`) }, `${String(e.name)}/`)))),
      dir.truncated ? h('p', { class: 'muted', text: 'Only the first 2000 directories are listed.' }) : null);
  }

  machinePicker();
  open('');
  const reopen = () => { away = false; open(current ? String(current.path || '') : ''); };
  return { node, machinesChanged: machinePicker, stop: () => { stopped = true; }, ...awayWhileDown(body, 'Directories', () => { away = true; }, reopen) };
}
