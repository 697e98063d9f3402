// A session's conversation: the messages as the contract counts them (a prompt, a merged run
// of agent or thought chunks, a tool call merged with its updates, a turn's plan), each with
// the absolute number of the turn it belongs to, and their DOM.
//
// Turn numbers are what make a re-attach exact: a tail replay covers the last `replayedTurns`
// of `totalTurns` turns, so everything shown from turn `totalTurns - replayedTurns + 1` on is
// replaced by the replay and everything older is kept: nothing is shown twice, whatever
// happened while the connection was down (a message streamed meanwhile included: it keeps its
// id while it grows). When the replay shows exactly what is shown, nothing is touched.
//
// Live equals replay: items are merged by the journal's rules (docs/ARCHITECTURE.md, "Replay
// equals the live stream"), so a turn watched live shows the same cards in the same order as
// its replay. A `tool_call` always starts a new card (agents reuse ids across turns: the SDK
// example agent sends `call_1` every turn); a `tool_call_update` goes to the newest card of its
// id. A text chunk without a messageId continues the current run of text; a new tool call, a
// new plan or an update of an unknown kind ends the run, an update of an existing card does not.
//
// A turn's end comes from the bridge's record (`_zcode/turn_end`, live and in replays, right
// after the turn's last message): the turn's prompt shows "stopped: <reason>" when it did not
// end normally, its last reply ends with a "stopped" marker, and its plan's open steps show as
// stopped. A new prompt also closes the plan of
// the turn before it (a replay does the same), so no plan stays "in progress" under a later
// turn.
//
// A re-render patches the item's node in place (`morph`): open `<details>` stay open, focus
// and text selection survive, and nothing is re-announced to a screen reader.
//
// Plans are pinned: each turn's plan stays an item (hidden in the list, so keys and replay
// equality hold), and `pin` (placed above the conversation by the view) shows the newest one,
// collapsible. Tool output with terminal colours shows them (highlight.js `ansi`), and a tool's
// title shows its `code` spans.

import { h, clear, diffNode } from './dom.js';
import { render as markdown, codeSpans } from './md.js';
import { ansi, hasAnsi } from './highlight.js';
import { STATE_KINDS, TURN_END } from './conn.js';
import { hookItem, hookNode } from './hooks.js';

const TEXT_KINDS = { user_message_chunk: 'user', agent_message_chunk: 'agent', agent_thought_chunk: 'thought' };
const IMAGE_TYPES = /^image\/(png|jpeg|gif|webp)$/;

export class Transcript {
  constructor(container, options = {}) {
    this.box = container;
    this.items = [];
    this.byKey = new Map();
    this.turn = 0;
    this.lastId = null;
    this.localSeq = 0;
    this.dirty = new Set();
    this.frame = 0;
    this.onOpenPath = options.onOpenPath || null;
    this.tools = new Map(); // toolCallId → the newest card of that id
    this.run = null; // the text item a chunk without messageId may continue
    this.seen = new Map(); // `${turn}:${toolCallId}` → how many cards of that id the turn has
    // The newest plan, above the conversation (the view places it).
    this.pin = h('details', { class: 'plan-pin', id: 'plan-pin', hidden: true });
    this.pinOpen = false; // whether the pin last asked to be open (a plan with steps to go)
    // One listener for every file link: a patched node keeps no stale per-node handler.
    container.addEventListener('click', (e) => {
      const b = e.target.closest && e.target.closest('button[data-path]');
      if (b && this.onOpenPath) this.onOpenPath(b.dataset.path);
    });
  }

  /** Whether nothing is shown yet. */
  get empty() {
    return this.items.length === 0;
  }

  /** Applies one live update; returns the item it created or changed (or null). */
  live(update) {
    const item = this.merge(update, this, (it) => this.push(it), (it) => this.touch(it));
    if (item) this.touch(item);
    return item;
  }

  /** The user's own prompt, shown at once (the bridge never echoes it back to us). */
  localPrompt(text, status, images = []) {
    closePlan(this, (it) => this.touch(it));
    this.turn++;
    this.run = null;
    const item = { key: `local:${++this.localSeq}`, kind: 'user', local: true, status, text, blocks: images.slice(), turn: this.turn };
    this.push(item);
    return item;
  }

  /** Changes a local prompt's status line ('' when it went through). */
  setStatus(item, status) {
    item.status = status;
    this.touch(item);
  }

  /**
   * Shows a `session/load` replay: the first time, all of it; on a re-attach, the turns it
   * covers replace what is shown of them (a message that grew while the line was down keeps
   * its id, so the replay is always applied, never judged by its last id). An item the replay
   * still has keeps its node, patched in place. Returns 'same' when nothing shown changed.
   */
  attach(updates, meta) {
    const total = Number(meta.totalTurns);
    const replayed = Number(meta.replayedTurns);
    const built = build(updates);
    const firstIsUser = built.length > 0 && built[0].kind === 'user';
    const base = Number.isFinite(total) && Number.isFinite(replayed) ? total - replayed : 0;
    let t = base;
    for (const it of built) {
      if (it.kind === 'user') t++;
      it.turn = t;
      rekey(it);
    }
    const firstTurn = firstIsUser ? base + 1 : base;
    const keep = this.empty ? [] : this.items.filter((it) => it.turn < firstTurn && !built.some((b) => b.key === it.key));
    const old = new Map(this.items.filter((it) => !keep.includes(it)).map((it) => [it.key, it]));
    const same = !this.empty && old.size === built.length
      && built.every((b) => old.has(b.key) && shown(old.get(b.key)) === shown(b));
    if (same) return 'same';
    const reused = new Set(built.map((b) => old.get(b.key)).filter(Boolean));
    for (const it of this.items) if (!keep.includes(it) && !reused.has(it) && it.node) it.node.remove();
    this.items = [];
    this.byKey.clear();
    this.tools.clear();
    for (const it of keep) this.index(it);
    for (const it of built) {
      const was = old.get(it.key);
      if (was && was.node && was.node.isConnected) {
        this.dirty.delete(was);
        it.node = morph(was.node, renderItem(it, this));
        this.items.push(it);
        this.index(it);
        this.box.append(it.node); // in replay order (a kept node moves, it is not redrawn)
      } else this.push(it);
    }
    this.run = built.run || null;
    this.seen = new Map();
    for (const it of this.items) if (it.kind === 'tool') this.seen.set(`${it.turn}:${it.id}`, it.rep + 1);
    this.turn = Number.isFinite(total) ? Math.max(total, t) : t;
    this.lastId = meta.lastMessageId || this.lastId;
    this.renderPin();
    return 'changed';
  }

  /** Prepends one `session/load_earlier` page (oldest first); returns how many were added. */
  prepend(updates) {
    const all = build(updates);
    const first = this.items[0];
    let t = first ? (first.kind === 'user' ? first.turn - 1 : first.turn) : 0;
    for (let i = all.length - 1; i >= 0; i--) {
      all[i].turn = t;
      rekey(all[i]);
      if (all[i].kind === 'user') t--;
    }
    const built = all.filter((it) => !this.byKey.has(it.key));
    if (!built.length) return 0;
    for (const it of built) if (it.kind === 'plan' && it.turn < this.turn && !it.ended) it.ended = 'ended';
    const anchor = this.box.firstChild;
    for (const it of built) {
      this.byKey.set(it.key, it);
      if (it.kind === 'tool' && !this.tools.has(it.id)) this.tools.set(it.id, it);
      it.node = renderItem(it, this);
      this.box.insertBefore(it.node, anchor);
    }
    this.items = built.concat(this.items);
    this.renderPin();
    return built.length;
  }

  /** Removes everything. */
  reset() {
    this.items = [];
    this.byKey.clear();
    this.tools.clear();
    this.seen.clear();
    this.run = null;
    this.turn = 0;
    this.lastId = null;
    clear(this.box);
    this.renderPin();
  }

  /** Shows the newest plan in `pin` (hidden when there is none). */
  renderPin() {
    let plan = null;
    for (let i = this.items.length - 1; i >= 0 && !plan; i--) if (this.items[i].kind === 'plan') plan = this.items[i];
    this.pin.hidden = !plan;
    if (!plan) return;
    // Open while steps are to go, folded once they are done (a reader who opens a finished
    // plan keeps it open).
    const fresh = pinNode(plan);
    const open = fresh.open;
    morph(this.pin, fresh);
    if (this.pinOpen && !open) this.pin.open = false;
    this.pinOpen = open;
  }

  index(it) {
    this.byKey.set(it.key, it);
    if (it.kind === 'tool') this.tools.set(it.id, it);
  }

  push(it) {
    if (it.turn === undefined) it.turn = this.turn;
    this.items.push(it);
    this.index(it);
    it.node = renderItem(it, this);
    this.box.append(it.node);
  }

  /**
   * Merges `u` into the items of `ctx` (its byKey, items, turn); `add` places a new item.
   * Shared by the live stream and by replays (built into a scratch list).
   */
  merge(u, ctx, add, changed = () => {}) {
    if (!u || typeof u !== 'object') return null;
    if (u.sessionUpdate === TURN_END) return endOf(ctx, u, changed);
    const kind = TEXT_KINDS[u.sessionUpdate];
    const id = typeof u.messageId === 'string' ? u.messageId : null;
    if (kind) {
      let item = id ? ctx.byKey.get(`${kind}:${id}`) : null;
      const run = ctx.run;
      if (!item && !id && run && run.kind === kind && !run.id && !run.local) item = run;
      if (!item) {
        if (kind === 'user') {
          closePlan(ctx, changed);
          ctx.turn++;
        }
        item = { key: id ? `${kind}:${id}` : `${kind}:~${ctx.items.length}:${Math.random()}`, kind, id, text: '', blocks: [], turn: ctx.turn };
        add(item);
      }
      ctx.run = item;
      addContent(item, u.content);
      if (id) ctx.lastId = id;
      return item;
    }
    if (u.sessionUpdate === 'tool_call' || u.sessionUpdate === 'tool_call_update') {
      const tid = String(u.toolCallId ?? '');
      let item = u.sessionUpdate === 'tool_call_update' ? ctx.tools.get(tid) : null;
      if (!item) {
        const seenKey = `${ctx.turn}:${tid}`;
        const rep = ctx.seen.get(seenKey) || 0;
        ctx.seen.set(seenKey, rep + 1);
        item = { kind: 'tool', id: tid, rep, data: {}, turn: ctx.turn };
        rekey(item);
        ctx.tools.set(tid, item);
        ctx.run = null;
        add(item);
      }
      for (const [k, v] of Object.entries(u)) if (k !== 'sessionUpdate' && v !== undefined) item.data[k] = v;
      if (tid) ctx.lastId = tid;
      return item;
    }
    if (u.sessionUpdate === 'plan') {
      let item = ctx.byKey.get(`plan:${ctx.turn}`);
      if (!item) {
        item = { key: `plan:${ctx.turn}`, kind: 'plan', data: {}, turn: ctx.turn };
        ctx.run = null;
        add(item);
      }
      item.data = u;
      item.ended = null;
      return item;
    }
    if (u.sessionUpdate === 'zcode_hook_run') {
      const item = hookItem(u, ctx);
      ctx.run = null;
      add(item);
      return item;
    }
    // An update of a kind this client does not show still ends a run of text, as in the journal.
    if (typeof u.sessionUpdate === 'string' && !STATE_KINDS.has(u.sessionUpdate)) ctx.run = null;
    return null;
  }

  /** The last turn turns out to be still running (seen after a re-attach): its plan is live. */
  reopenTurn() {
    for (let i = this.items.length - 1; i >= 0 && this.items[i].turn === this.turn; i--) {
      const it = this.items[i];
      if (it.kind === 'plan' && it.ended) {
        it.ended = null;
        this.touch(it);
      }
    }
  }

  /**
   * The running turn is over (`why`: its stopReason, when known): a plan of it that still has
   * open steps shows them as stopped.
   */
  endTurn(why) {
    for (let i = this.items.length - 1; i >= 0; i--) {
      const it = this.items[i];
      if (it.turn !== this.turn) break;
      if (it.kind === 'plan' && !it.ended) {
        it.ended = why || 'ended';
        this.touch(it);
      }
    }
  }

  /** Marks `item` for a re-render at the next frame (streaming stays cheap). */
  touch(item) {
    this.dirty.add(item);
    if (!this.frame) {
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        for (const it of this.dirty) {
          if (!it.node || !it.node.isConnected) continue;
          it.node = morph(it.node, renderItem(it, this));
        }
        if ([...this.dirty].some((it) => it.kind === 'plan')) this.renderPin();
        this.dirty.clear();
        if (this.onRendered) this.onRendered();
      });
    }
  }
}

/** Items from a list of replayed updates (each already merged by the journal). */
function build(updates) {
  const scratch = { items: [], byKey: new Map(), tools: new Map(), seen: new Map(), run: null, turn: 0, lastId: null };
  const proto = Transcript.prototype;
  for (const u of updates) {
    proto.merge(u, scratch, (it) => { scratch.items.push(it); scratch.byKey.set(it.key, it); });
  }
  // A replay's plans of turns before the last are of finished turns.
  const last = scratch.turn;
  for (const it of scratch.items) if (it.kind === 'plan' && it.turn < last && !it.ended) it.ended = 'ended';
  scratch.items.run = scratch.run;
  return scratch.items;
}

/** What an item shows, as a string: two items with the same one look the same. */
function shown(it) {
  return JSON.stringify([it.kind, it.text, it.blocks, it.data, it.status || '', it.stop || '', it.ended || null, it.local || false]);
}

/** A new turn starts: the plan of the one before it is over (`changed`: it was re-marked). */
function closePlan(ctx, changed) {
  const plan = ctx.byKey.get(`plan:${ctx.turn}`);
  if (plan && !plan.ended) {
    plan.ended = 'ended';
    changed(plan);
  }
}

/**
 * A turn-end record: the current turn's prompt says how it stopped (nothing for `end_turn`)
 * and its plan is over. Returns the prompt's item (or null).
 */
function endOf(ctx, u, changed) {
  const why = typeof u.stopReason === 'string' ? u.stopReason : '';
  const mark = stopMark(why);
  let prompt = null;
  let reply = null;
  for (let i = ctx.items.length - 1; i >= 0 && ctx.items[i].turn === ctx.turn; i--) {
    const it = ctx.items[i];
    if (it.kind === 'plan' && !it.ended) {
      it.ended = why || 'ended';
      changed(it);
    }
    if (it.kind === 'agent' && !reply) reply = it;
    if (it.kind === 'user') prompt = it;
  }
  // The reply that was cut short ends with a visible marker, not only its prompt's status.
  if (reply && (reply.stop || '') !== mark) {
    reply.stop = mark;
    changed(reply);
  }
  if (!prompt) return null;
  const status = stopStatus(why, u.error);
  if ((prompt.status || '') !== status) prompt.status = status;
  return prompt;
}

/** The marker at the end of a turn's reply when it did not end normally ('' when it did). */
export function stopMark(why) {
  if (!why || why === 'end_turn') return '';
  if (why === 'error') return 'not completed';
  return why === 'cancelled' ? 'stopped' : `stopped: ${why.replace(/_/g, ' ')}`;
}

/** What a prompt says under it once its turn ended with `why` ('' when it ended normally). */
export function stopStatus(why, error) {
  if (!why || why === 'end_turn') return '';
  if (why === 'error') return `not completed: ${String(error || 'the agent failed')}`;
  return `stopped: ${why}`;
}

/** An item's key from its (absolute) turn: plans are one per turn, tool ids repeat. */
function rekey(it) {
  if (it.kind === 'plan') it.key = `plan:${it.turn}`;
  else if (it.kind === 'tool') it.key = `tool:${it.turn}:${it.rep}:${it.id}`;
}

/**
 * Makes `old` look like `fresh`, keeping every node that can stay (text nodes are edited,
 * elements of the same tag get `fresh`'s attributes and children); returns the node in the
 * page. A `<details>` keeps the reader's open state; it only opens when the render starts
 * asking for it to be open (a tool call that failed, say).
 */
export function morph(old, fresh) {
  if (old.nodeType !== fresh.nodeType || old.nodeName !== fresh.nodeName) {
    old.replaceWith(fresh);
    return fresh;
  }
  if (old.nodeType !== Node.ELEMENT_NODE) {
    if (old.nodeValue !== fresh.nodeValue) old.nodeValue = fresh.nodeValue;
    return old;
  }
  for (const a of [...old.attributes]) if (a.name !== 'open' && !fresh.hasAttribute(a.name)) old.removeAttribute(a.name);
  for (const a of fresh.attributes) if (a.name !== 'open' && old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
  if (old.nodeName === 'DETAILS') {
    const wanted = old.zWanted === undefined ? old.open : old.zWanted;
    if (fresh.open && !wanted) old.open = true;
    old.zWanted = fresh.open;
  }
  const was = [...old.childNodes];
  const now = [...fresh.childNodes];
  now.forEach((n, i) => { if (i < was.length) morph(was[i], n); else old.append(n); });
  for (let i = now.length; i < was.length; i++) was[i].remove();
  return old;
}

function addContent(item, c) {
  if (!c || typeof c !== 'object') return;
  if (c.type === 'text') item.text += String(c.text ?? '');
  else item.blocks.push(c);
}

/** The DOM of one item. Every string from the agent goes through a text node or `markdown`. */
export function renderItem(it, t) {
  try {
    switch (it.kind) {
      case 'user': return userNode(it);
      case 'agent': return h('article', { class: 'msg agent', dataset: { key: it.key } }, h('div', { class: 'md' }, markdown(it.text)), blocksNode(it.blocks, 'image from the agent'),
        it.stop ? h('div', { class: 'stop-mark', text: `■ ${it.stop}` }) : null);
      case 'thought': return h('details', { class: 'msg thought', dataset: { key: it.key } },
        h('summary', { text: 'Thinking' }), h('div', { class: 'md' }, markdown(it.text)));
      case 'tool': return toolNode(it, t);
      case 'plan': return planNode(it);
      case 'hook': return hookNode(it);
      default: return h('div', { hidden: true });
    }
  } catch (e) {
    console.warn('cannot render', it, e);
    return h('div', { class: 'msg error', text: 'A message of the agent could not be shown.' });
  }
}

function userNode(it) {
  return h('article', { class: `msg user${it.local ? ' local' : ''}`, dataset: { key: it.key } },
    h('div', { class: 'bubble' }, it.text ? h('div', { class: 'plain', text: it.text }) : null, blocksNode(it.blocks, 'your image')),
    it.status ? h('div', { class: `status ${it.status.startsWith('not') ? 'bad' : ''}`, text: it.status }) : null);
}

function blocksNode(blocks, alt = 'image') {
  if (!blocks || !blocks.length) return null;
  return h('div', { class: 'blocks' }, blocks.map((b) => {
    if (b.type === 'image' && IMAGE_TYPES.test(String(b.mimeType)) && typeof b.data === 'string') {
      return h('img', { class: 'inline-img', alt, src: `data:${b.mimeType};base64,${b.data.replace(/[^A-Za-z0-9+/=]/g, '')}` });
    }
    if (b.type === 'resource_link') return h('div', { class: 'chip', text: `link: ${b.name || b.uri || 'resource'}` });
    if (b.type === 'resource' && b.resource) {
      return h('details', { class: 'resource' }, h('summary', { text: String(b.resource.uri || 'resource') }),
        h('pre', { text: String(b.resource.text ?? '(binary)') }));
    }
    return h('div', { class: 'chip', text: `[${String(b.type || 'content')}]` });
  }));
}

function toolNode(it, t) {
  const d = it.data;
  const status = String(d.status || 'pending');
  const content = Array.isArray(d.content) ? d.content : [];
  const locations = Array.isArray(d.locations) ? d.locations : [];
  const body = [];
  for (const c of content) {
    if (c && c.type === 'diff') body.push(diffNode(c));
    else if (c && c.type === 'content' && c.content) {
      if (c.content.type === 'text') body.push(outputNode(String(c.content.text ?? '')));
      else body.push(blocksNode([c.content]));
    } else if (c && c.type === 'terminal') body.push(h('div', { class: 'chip', text: `terminal ${String(c.terminalId || '')}` }));
  }
  const locs = locations.map((l) => {
    const p = String((l && l.path) || '');
    return t && t.onOpenPath
      ? h('button', { type: 'button', class: 'link path', dataset: { path: p }, text: p + (l.line ? `:${l.line}` : '') })
      : h('code', { text: p });
  });
  return h('article', { class: `msg tool ${status}`, dataset: { key: it.key, status } },
    h('details', { open: status === 'failed' || content.some((c) => c && c.type === 'diff') },
      h('summary', {},
        h('span', { class: 'kind', text: String(d.kind || 'tool').replace('_', ' ') }),
        h('span', { class: 'title' }, codeSpans(String(d.title || d.kind || 'Tool call'))),
        h('span', { class: `badge ${status}`, text: status.replace('_', ' ') })),
      locs.length ? h('div', { class: 'locations' }, locs) : null,
      body));
}

/** A tool's text output: monospace, with its terminal colours when it has any. */
function outputNode(text) {
  if (!hasAnsi(text)) return h('pre', { class: 'tool-text', text });
  return h('pre', { class: 'tool-text terminal' }, ansi(text));
}


const PLAN_MARKS = { completed: '☑', in_progress: '◐', pending: '☐' };

/**
 * A turn's plan, kept in the list but hidden there (the pin shows the newest): once the turn is
 * over, a step that is not completed shows as stopped.
 */
function planNode(it) {
  const { stopped, title, list } = planParts(it);
  return h('article', { class: `msg plan${stopped ? ' stopped' : ''}`, hidden: true, dataset: { key: it.key } },
    h('div', { class: 'plan-title', text: title }), list);
}

/** The pinned plan: its title and progress as the summary, its steps inside. */
function pinNode(it) {
  const { stopped, title, list, done, total } = planParts(it);
  return h('details', { class: `plan-pin${stopped ? ' stopped' : ''}`, id: 'plan-pin', open: !it.ended && done < total, dataset: { key: it.key } },
    h('summary', {}, h('span', { class: 'plan-title', text: title }), h('span', { class: 'muted', text: ` · ${done} of ${total} done` })),
    list);
}

function planParts(it) {
  const entries = Array.isArray(it.data.entries) ? it.data.entries : [];
  const stopped = !!it.ended && entries.some((e) => e && e.status !== 'completed');
  const why = it.ended && it.ended !== 'ended' ? `: ${String(it.ended).replace(/_/g, ' ')}` : '';
  const done = entries.filter((e) => e && e.status === 'completed').length;
  const list = h('ul', {}, entries.map((e) => {
      const status = String((e && e.status) || 'pending');
      const open = stopped && status !== 'completed';
      return h('li', { class: open ? 'stopped' : status },
        h('span', { class: 'mark', 'aria-hidden': 'true', text: open ? '⊘' : PLAN_MARKS[status] || '☐' }),
        h('span', { text: String((e && e.content) ?? '') }),
        open ? h('span', { class: 'visually-hidden', text: ' (not done)' }) : null);
  }));
  return { stopped, title: stopped ? `Plan (stopped${why})` : 'Plan', list, done, total: entries.length };
}

/**
 * The "Jump to latest" button of a conversation being read further up while it grows:
 * `sync(follow, grew)` after a scroll (grew false) or a render (grew true); `busy()` says
 * whether a turn runs. Pressing it calls `onJump` (the view scrolls to the end and follows).
 */
export function jumpToLatest(onJump, busy) {
  let unseen = false;
  const node = h('button', { type: 'button', class: 'jump-latest', id: 'jump-latest', hidden: true, onclick: () => {
    unseen = false;
    node.hidden = true;
    onJump();
  } }, '↓ Jump to latest');
  return {
    node,
    sync(follow, grew) {
      if (follow) unseen = false;
      else if (grew) unseen = true;
      node.hidden = follow || !(unseen || busy());
    },
  };
}
