// The session view: attach with the tail (`_meta.zcode.limit: 50`), page back with
// `session/load_earlier` when scrolled to the top, stream live updates, answer permissions and
// elicitations, send, queue and cancel prompts, switch modes and config options, and rename,
// close or delete the session. Its draft and its queued prompts are kept per session
// in localStorage (across navigation and reload): a prompt sent while the line is down waits
// in the queue ("will send when back", removable) and goes, in order, once re-attached.
//
// Resume by number (docs/PROTOCOL.md): the view keeps the last `seq` and `epoch` it showed.
// After a reconnect, and at once when the live stream skips a number (a lost message), it
// loads with `afterSeq`: when the bridge resumes, what followed is applied to what is shown,
// as live updates are; otherwise (`resumed: false`) the tail replay replaces the transcript
// (transcript.js: nothing twice), a follower stays at the bottom and a reader keeps the
// message they looked at in place. The echo of this page's own prompt is numbered but never
// sent to it: that one skip per prompt is expected, and the echo is left out of a resume.

import { h, clear, toast, modal, $ } from './dom.js';
import { pool, STATE_KINDS, TURN_END, SEQ, numberOf } from './conn.js';
import { api, postJson, query, ApiError } from './api.js';
import { Transcript, stopStatus, jumpToLatest } from './transcript.js';
import { composer } from './composer.js';
import { render as markdown } from './md.js';
import { savedCopy, saveCopy, forgetCopy } from './saved.js';
import { permissionParts, optionButtons } from './inbox.js';
import { muteItem } from './push.js';

const TAIL = 50;
const TEXT_CHUNKS = new Set(['user_message_chunk', 'agent_message_chunk', 'agent_thought_chunk']);
const PAGE = 50;
// Whether another device's turn runs is seen from its echoed prompt, and its end from the
// bridge's turn-end record (`_zcode/turn_end`); the status route is asked once per attach,
// for a turn that was already running then.

/** `turn` when the replay ends with a turn-end record (its last turn is over), else -1. */
function lastEnded(messages, turn) {
  const last = messages[messages.length - 1];
  return last && last.sessionUpdate === TURN_END ? turn : -1;
}

/**
 * What the page keeps of a session across navigation and reload (localStorage): its draft, and
 * the prompts queued while the line was down or a turn ran (sent in order once it is back).
 */
const keptKey = (kind, instance, sid) => `zcode-acp.${kind}.${instance}/${sid}`;

function kept(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return typeof v === typeof fallback && Array.isArray(v) === Array.isArray(fallback) ? v : fallback;
  } catch {
    return fallback;
  }
}

function keep(key, value) {
  try {
    if (!value || !value.length) localStorage.removeItem(key);
    else localStorage.setItem(key, JSON.stringify(value));
  } catch { /* storage full or refused: kept for this page only */ }
}

/** Human messages for the lifecycle routes' errors (the contract's status codes). */
export function lifecycleError(action, e) {
  if (!(e instanceof ApiError)) return String(e && e.message || e);
  if (e.status === 409) {
    return action === 'delete' ? 'This session is live on its bridge — close it first.' : 'A turn is running — cancel it first.';
  }
  if (e.status === 404 && e.kind !== 'missing') return 'This session (or its instance) is gone.';
  if (e.status === 404) return `${action}: this hub does not offer that (HTTP 404).`;
  if (e.status === 400) return `${action}: ${e.message.replace(/^[^:]*: /, '')}`;
  if (e.status === 503) return `${action}: the tasks index is unavailable — try again.`;
  return e.message;
}

/** Mounts the view for `instance`/`sid` (sid null: create one in `cwd`); returns cleanup. */
export function sessionView(root, app, { instance, sid, cwd, prompt }) {
  const conn = pool.get(instance);
  const st = {
    sid, cwd, title: app.titleOf(instance, sid) || '', cursor: null, hasMore: false, loadingEarlier: false,
    attached: false, myTurn: null, running: false, queue: [], modes: null, config: [], usage: null,
    follow: true, firstUpdatePending: false,
    // The numbering shown (null: none, the next attach replaces), and this page's prompts
    // (their items) whose echo's number it has not seen skipped yet.
    epoch: null, seq: 0, echoes: [], catching: false,
  };
  const scroller = h('div', { class: 'scroller', id: 'transcript-scroller', tabindex: '0', 'aria-label': 'Conversation' });
  const top = h('div', { class: 'top-note' });
  // Not aria-live: a streamed message is patched many times a second and would be read again
  // and again. `said` (visually hidden) announces what matters once: a new card, a turn's end.
  const list = h('div', { class: 'transcript', id: 'transcript', role: 'log', 'aria-live': 'off' });
  const said = h('div', { class: 'visually-hidden', id: 'session-status', role: 'status', 'aria-live': 'polite' });
  const jump = jumpToLatest(() => { st.follow = true; stick(); }, () => view.dataset.busy === 'true');
  scroller.append(top, list, jump.node);
  const t = new Transcript(list, { onOpenPath: (p) => app.navigate(filesUrl(p)) });
  t.onRendered = () => { stick(); jump.sync(st.follow, true); };
  const banner = h('div', { class: 'conn-banner', role: 'status', hidden: true });
  const requests = h('section', { class: 'requests', 'aria-label': 'Waiting for your answer' });
  const queueBox = h('ul', { class: 'queue', 'aria-label': 'Queued prompts', hidden: true });
  const toolbar = h('div', { class: 'toolbar' });
  const comp = composer({ onSend: (text, images) => send(images && images.length ? { text, images } : text), onCancel: () => cancelTurn() });
  if (sid) {
    st.queue = kept(keptKey('queue', instance, sid), []).filter((q) => typeof q === 'string' || (q && typeof q.text === 'string' && Array.isArray(q.images)));
    comp.setText(kept(keptKey('draft', instance, sid), ''));
  }
  comp.input.addEventListener('input', () => keepDraft());
  const view = h('div', { class: 'session-view' }, toolbar, banner, t.pin, scroller, said, requests, queueBox, comp.node);
  clear(root, view);
  app.setTitle(st.title || 'Session');

  const cards = new Map();
  conn.viewing = sid;
  const unlisten = conn.listen(onEvent);
  conn.start();
  showConn();
  if (conn.state === 'open') attach();
  scroller.addEventListener('scroll', onScroll, { passive: true });
  // A request card or the composer growing shrinks the conversation: keep its end in view.
  const resized = new ResizeObserver(() => stick());
  resized.observe(scroller);
  let alive = true;
  renderToolbar();
  renderQueue();
  if (prompt) send(prompt); // the first prompt of a session the new-session view created

  function keepDraft() {
    if (st.sid) keep(keptKey('draft', instance, st.sid), comp.input.value);
  }

  /**
   * Whether Send takes a prompt: once attached (a prompt typed while the line is down waits in
   * the queue), and after a first connection failed (a reload while offline); not while a
   * first attach is still under way.
   */
  function sendable() {
    return st.attached || st.everAttached || !['open', 'connecting', 'idle'].includes(conn.state);
  }

  function filesUrl(path) {
    return `/f/${encodeURIComponent(instance)}/${encodeURIComponent(st.sid || '')}${query({ cwd: st.cwd, file: path })}`;
  }

  function stick() {
    if (!st.follow) return;
    scroller.scrollTop = scroller.scrollHeight;
    st.stuckAt = scroller.scrollTop;
  }

  function onScroll() {
    // The event of our own scroll arrives after the layout may have changed again (a request
    // card shrank the scroller): it says nothing about where the reader wants to be.
    if (scroller.scrollTop === st.stuckAt) return;
    st.follow = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 60;
    jump.sync(st.follow, false);
    if (scroller.scrollTop < 300 && st.hasMore && !st.loadingEarlier && st.attached) loadEarlier();
  }

  function onEvent(ev) {
    if (ev.type === 'state') return showConn();
    if (ev.type === 'open') return attach();
    if (ev.type === 'request' || ev.type === 'notification') {
      const p = ev.msg.params;
      if (p && p.sessionId === st.sid && !conn.replays.has(st.sid)) inOrder(numberOf(p));
    }
    if (ev.type === 'pending' || ev.type === 'request') return renderRequests();
    if (ev.type === 'cancel') {
      if (ev.had !== false && cards.has(String(ev.requestId))) toast('That request was answered elsewhere.');
      return renderRequests();
    }
    if (ev.type === 'update' && ev.sid === st.sid) onLive(ev.update);
  }

  /** A live update: applied when it is the next number (or not numbered). */
  function onLive(u) {
    if (inOrder(u[SEQ])) applyUpdate(u);
  }

  /**
   * Checks a live message's number against the last one shown; true when it is to be shown.
   * A number seen already is not; a jump past this page's own prompts' echoes is a loss: the
   * view resumes at once (the resume brings this message too).
   */
  function inOrder(n) {
    if (!n || st.epoch === null) return true;
    if (st.epoch === '') st.epoch = n.epoch; // a session this view created: numbered from 1
    if (n.epoch !== st.epoch || n.seq > st.seq + 1 + st.echoes.length) {
      catchUp();
      return false;
    }
    if (n.seq <= st.seq) return false;
    for (const it of st.echoes.splice(0, n.seq - st.seq - 1)) it.echoed = true;
    st.seq = n.seq;
    return true;
  }

  /** Resumes after the last number shown (a message was lost on the live stream). */
  function catchUp() {
    if (st.catching || conn.state !== 'open') return;
    st.catching = true;
    loadConversation(false).catch(() => { /* the connection dropped: the reconnect resumes */ })
      .finally(() => { st.catching = false; });
  }

  /** The saved copy of this conversation follows what is shown (saved a moment after). */
  function logUpdate(u) {
    if (!st.log) return;
    const list = st.log.updates;
    const last = list[list.length - 1];
    // A streamed message's chunks are kept as one (as the journal merges them).
    if (u && last && TEXT_CHUNKS.has(u.sessionUpdate) && u.sessionUpdate === last.sessionUpdate && u.messageId
      && u.messageId === last.messageId && u.content?.type === 'text' && last.content?.type === 'text') {
      list[list.length - 1] = { ...last, content: { ...last.content, text: last.content.text + u.content.text } };
    } else if (u) list.push(u);
    clearTimeout(st.saveTimer);
    st.saveTimer = setTimeout(() => saveCopy(keptKey('copy', instance, st.sid), st.log.updates, st.log.meta), 1000);
  }

  /** Shows the saved copy while the line is down and nothing else is shown (read-only, marked). */
  async function showSaved() {
    if (!st.sid || st.attached || !t.empty || st.savedShown) return;
    st.savedShown = true;
    const copy = await savedCopy(keptKey('copy', instance, st.sid));
    if (!alive || !copy || st.attached || !t.empty) return;
    t.attach(copy.updates, copy.meta || {});
    st.offlineCopy = copy.at;
    st.follow = true;
    stick();
    setTop();
  }

  /** Shows one update (`batch`: one of a resumed batch, which follows the end once). */
  function applyUpdate(u, batch = false) {
    if (!STATE_KINDS.has(u.sessionUpdate)) logUpdate(u);
    if (STATE_KINDS.has(u.sessionUpdate)) return applyState(u);
    if (u.sessionUpdate === TURN_END) return onTurnEnd(u);
    if (u.sessionUpdate === 'user_message_chunk' && !st.myTurn) st.running = true;
    if (st.firstUpdatePending && st.myTurn) {
      st.firstUpdatePending = false;
      t.setStatus(st.myTurn, '');
    }
    const before = t.items.length;
    const item = t.live(u);
    if (item && item.kind === 'tool' && t.items.length > before) say(`Tool call: ${String(item.data.title || item.data.kind || 'tool')}`);
    if (batch) return;
    stick();
    updateButtons();
  }

  /**
   * A turn ended, whoever prompted it (the bridge's record). This client's own turn is
   * finished by the prompt's answer, which follows; another device's turn ends here.
   */
  function onTurnEnd(u) {
    t.live(u);
    st.endedTurn = t.turn;
    if (st.myTurn) return;
    st.running = false;
    st.cancelling = false;
    turnEnded(u.stopReason);
    updateButtons();
    pump();
  }

  /** Announces `text` to a screen reader (once; the transcript itself is not live). */
  function say(text) {
    said.textContent = text;
  }

  /** The running turn ended (`why`: its stopReason when this client knows it). */
  function turnEnded(why) {
    t.endTurn(why);
    const last = [...t.items].reverse().find((it) => it.kind === 'agent' && it.turn === t.turn);
    const stopped = why && why !== 'end_turn' ? `The turn stopped: ${why.replace(/_/g, ' ')}.` : 'The agent finished.';
    say(last ? `${stopped} ${last.text.slice(0, 400)}` : stopped);
  }

  function applyState(u) {
    switch (u.sessionUpdate) {
      case 'available_commands_update': comp.setCommands(u.availableCommands); break;
      case 'current_mode_update':
        if (st.modes) st.modes.currentModeId = u.currentModeId;
        else st.modes = { currentModeId: u.currentModeId, availableModes: [] };
        break;
      case 'config_option_update': if (Array.isArray(u.configOptions)) st.config = u.configOptions; break;
      case 'session_info_update':
        if (typeof u.title === 'string' && u.title) { st.title = u.title; app.setTitle(u.title); }
        break;
      case 'usage_update': st.usage = u; break;
      default: break;
    }
    renderToolbar();
  }

  function applyResult(r) {
    if (r && r.modes && Array.isArray(r.modes.availableModes)) st.modes = r.modes;
    if (r && Array.isArray(r.configOptions)) st.config = r.configOptions;
    renderToolbar();
  }

  async function attach() {
    st.attached = false;
    comp.setEnabled(sendable());
    try {
      if (!st.sid) {
        top.textContent = 'Starting a new session…';
        const r = await conn.call('session/new', { cwd: st.cwd || '/', mcpServers: [] });
        st.sid = r.sessionId;
        conn.viewing = st.sid;
        app.replace(`/s/${encodeURIComponent(instance)}/${encodeURIComponent(st.sid)}${query({ cwd: st.cwd })}`);
        applyResult(r);
        setTop('This is a new session: say something.');
        t.turn = 0;
        // Numbered from 1: the first message's number says the epoch.
        st.epoch = '';
        st.seq = 0;
      } else {
        setTop('Loading the conversation…');
        await loadConversation(true);
      }
      await checkRunning();
      st.attached = true;
      st.everAttached = true;
      renderQueue();
      if (st.cancelQueued) {
        st.cancelQueued = false;
        if (st.running || st.myTurn) cancelTurn();
      }
      comp.setEnabled(true);
      comp.setImages(!!conn.initResult?.agentCapabilities?.promptCapabilities?.image);
      renderRequests();
      updateButtons();
      pump();
      if (st.hasMore && scroller.scrollHeight <= scroller.clientHeight + 10) loadEarlier();
    } catch (e) {
      if (conn.state !== 'open') return; // the reconnect will attach again
      setTop(`Could not open this session: ${e.message}`, true);
    }
  }

  /**
   * Loads the conversation: resumes after the last number shown when there is one (what
   * followed is applied to what is shown), else (or when the bridge cannot resume) the tail
   * replay replaces it. `reconnected`: on a new connection (a prompt of the old one that was
   * not echoed by now never will be).
   */
  async function loadConversation(reconnected) {
    const resume = st.epoch && !t.empty && !st.offlineCopy ? { seq: st.seq, epoch: st.epoch } : null;
    let got;
    try {
      got = await conn.load(st.sid, st.cwd, TAIL, resume);
    } catch (e) {
      // A bridge that refuses the numbers (an older one's rules): the tail replay.
      if (!resume || e.code !== -32602) throw e;
      st.epoch = null;
      return loadConversation(reconnected);
    }
    const { result, replay, live, all } = got;
    const meta = result.replayMeta || {};
    applyResult(result);
    if (resume && meta.resumed === true) applyResumed(all);
    else replaceWith(result, replay, live);
    if (reconnected || meta.resumed !== true) st.echoes = [];
    const last = Number(meta.lastSeq);
    st.epoch = typeof meta.epoch === 'string' && Number.isSafeInteger(last) ? meta.epoch : null;
    st.seq = st.epoch === null ? 0 : last;
    setTop();
  }

  /**
   * A resume's messages (what followed the last number shown), applied as live updates are:
   * in number order, each once, this page's own prompt's echo left out (its local copy shows).
   */
  function applyResumed(all) {
    const next = all.filter((u) => u[SEQ] && u[SEQ].epoch === st.epoch && u[SEQ].seq > st.seq)
      .sort((a, b) => a[SEQ].seq - b[SEQ].seq);
    let last = st.seq;
    for (const u of next) {
      if (u[SEQ].seq === last) continue; // it came live too, just before the resume's batch
      last = u[SEQ].seq;
      const c = u.content;
      if (u.sessionUpdate === 'user_message_chunk' && st.echoes.length && c && ((c.type === 'text' && c.text === st.echoes[0].text)
        || (c.type === 'image' && st.echoes[0].blocks.some((b) => b.data === c.data)))) {
        st.echoes.shift().echoed = true;
        continue;
      }
      applyUpdate(u, true);
    }
    // A prompt the bridge echoed went through, whatever its call's cut answer said.
    for (const it of t.items) if (it.local && it.echoed && /^not confirmed/.test(it.status || '')) t.setStatus(it, '');
    if (next.length) {
      stick();
      updateButtons();
    }
  }

  /** A tail replay replaces what is shown; a reader who scrolled up keeps what they looked at. */
  function replaceWith(result, replay, live) {
    for (const u of live) if (STATE_KINDS.has(u.sessionUpdate)) applyState(u);
    const meta = result.replayMeta || {};
    const messages = replay.filter((u) => !STATE_KINDS.has(u.sessionUpdate));
    const first = t.empty || !!st.offlineCopy;
    const anchor = first || st.follow ? null : looking();
    const outcome = t.attach(messages, meta);
    st.offlineCopy = 0;
    st.log = { updates: messages.slice(), meta };
    logUpdate(null);
    st.endedTurn = lastEnded(messages, t.turn);
    for (const u of replay) if (STATE_KINDS.has(u.sessionUpdate)) applyState(u);
    st.cursor = meta.cursor || null;
    st.hasMore = !!meta.hasMore;
    if (outcome !== 'changed') return;
    if (first) st.follow = true;
    if (anchor) lookAgain(anchor);
    else stick();
  }

  /** The first message in view: its key, place and distance from the top of the view. */
  function looking() {
    const top = scroller.getBoundingClientRect().top;
    const nodes = list.children;
    for (let i = 0; i < nodes.length; i++) {
      const r = nodes[i].getBoundingClientRect();
      if (r.bottom > top) return { key: nodes[i].dataset.key, index: i, offset: r.top - top };
    }
    return null;
  }

  /**
   * Scrolls so the message `looking` found is where it was (the same key, or the same place):
   * Safari has no CSS scroll anchoring, and a replace changes heights above it.
   */
  function lookAgain(a) {
    const node = [...list.children].find((n) => a.key && n.dataset.key === a.key) || list.children[a.index];
    if (!node) return;
    scroller.scrollTop += node.getBoundingClientRect().top - scroller.getBoundingClientRect().top - a.offset;
  }

  function setTop(text, isError) {
    clear(top);
    if (!text && st.offlineCopy) {
      const at = new Date(st.offlineCopy).toLocaleString([], { dateStyle: 'short', timeStyle: 'short', hourCycle: 'h23' });
      top.append(h('span', { class: 'saved-copy', text: `Saved copy from ${at}, read-only until the hub answers.` }));
      return;
    }
    if (text) {
      top.append(h('span', { class: isError ? 'error' : '', text }));
      if (isError) top.append(' ', h('button', { type: 'button', onclick: () => attach() }, 'Retry'));
      return;
    }
    if (st.hasMore) {
      top.append(h('button', { type: 'button', class: 'link', id: 'load-earlier', onclick: () => loadEarlier() }, 'Load earlier messages'));
    } else if (!t.empty) {
      top.append(h('span', { class: 'muted', text: 'The beginning of this conversation.' }));
    }
  }

  async function loadEarlier() {
    if (st.loadingEarlier || !st.cursor || conn.state !== 'open') return;
    st.loadingEarlier = true;
    setTop('Loading earlier messages…');
    try {
      const { result, replay, live } = await conn.loadEarlier(st.sid, st.cursor, PAGE);
      for (const u of live) onLive(u);
      const before = scroller.scrollHeight;
      const keep = scroller.scrollTop;
      t.prepend(replay);
      scroller.scrollTop = keep + (scroller.scrollHeight - before);
      const meta = result.replayMeta || {};
      st.cursor = meta.cursor || null;
      st.hasMore = !!meta.hasMore && !!st.cursor;
      setTop();
    } catch (e) {
      if (/cursor expired/i.test(e.message)) {
        t.reset();
        st.loadingEarlier = false;
        return attach();
      }
      setTop(`Could not load earlier messages: ${e.message}`, true);
    } finally {
      st.loadingEarlier = false;
    }
  }

  function send(text) {
    keepDraft();
    if (!st.attached || st.myTurn || st.running || st.queue.length) {
      st.queue.push(text);
      renderQueue();
      pump();
      return;
    }
    start(text);
  }

  /** Sends a prompt: its text, or `{text, images}` (ACP image blocks) with photos. */
  function start(prompt) {
    const text = typeof prompt === 'string' ? prompt : prompt.text;
    const images = typeof prompt === 'string' ? [] : prompt.images;
    st.cancelling = false;
    // The bridge never echoes our own prompt to us: the saved copy gets its text here.
    logUpdate({ sessionUpdate: 'user_message_chunk', content: { type: 'text', text } });
    const item = t.localPrompt(text, 'sending…', images);
    const blocks = (text ? [{ type: 'text', text }] : []).concat(images);
    // Its echo is numbered but not sent to this page: one number per block to see skipped.
    if (st.epoch !== null) for (let i = 0; i < blocks.length; i++) st.echoes.push(item);
    st.myTurn = item;
    st.firstUpdatePending = true;
    st.follow = true;
    stick();
    updateButtons();
    conn.call('session/prompt', { sessionId: st.sid, prompt: blocks }).then((r) => {
      const why = r && r.stopReason;
      t.setStatus(item, stopStatus(why));
      if (t.turn === item.turn) turnEnded(why);
    }, (e) => {
      if (e.code === -32099) {
        t.setStatus(item, 'not confirmed: the connection dropped while it ran');
        // The turn goes on at the bridge: Stop stays until the re-attach says it is over.
        if (t.turn === item.turn) st.running = true;
      } else {
        t.setStatus(item, `not completed: ${e.message}`);
      }
    }).finally(() => {
      if (st.myTurn === item) st.myTurn = null;
      st.cancelling = false;
      updateButtons();
      pump();
    });
  }

  function pump() {
    if (!st.queue.length || st.myTurn || st.running || !st.attached || conn.state !== 'open') return;
    start(st.queue.shift());
    renderQueue();
  }

  function renderQueue() {
    if (st.sid) keep(keptKey('queue', instance, st.sid), st.queue);
    clear(queueBox);
    queueBox.hidden = !st.queue.length;
    const back = st.attached && conn.state === 'open';
    st.queue.forEach((q, i) => queueBox.append(h('li', { class: 'queued' },
      h('span', { class: 'badge', text: back ? 'queued' : 'will send when back' }),
      h('span', { class: 'plain', text: typeof q === 'string' ? q : `${q.text}${q.text ? ' ' : ''}(+${q.images.length} image${q.images.length === 1 ? '' : 's'})` }),
      h('button', { type: 'button', class: 'link', 'aria-label': 'Remove from the queue', onclick: () => { st.queue.splice(i, 1); renderQueue(); } }, '×'))));
  }

  function cancelTurn() {
    if (conn.state !== 'open' || !st.attached) {
      // Sent when the line is back (after the re-attach, if the turn still runs then).
      st.cancelQueued = true;
      st.cancelling = true;
      updateButtons();
      say('The turn stops when the connection is back.');
      return;
    }
    try {
      conn.notify('session/cancel', { sessionId: st.sid });
      // Said in place (the Stop button, the status region), not by a toast over the transcript.
      st.cancelling = true;
      updateButtons();
      say('Stopping the turn…');
    } catch (e) {
      toast(`Cannot cancel: ${e.message}`, 'error');
    }
  }

  /**
   * Asks the status route whether a turn runs now (a turn started before this attach shows
   * as a prompt with no turn-end record yet). A turn whose record was seen is over whatever
   * a status read before it said.
   */
  async function checkRunning() {
    if (!st.sid || st.myTurn) return;
    let running = false;
    try {
      const s = await api(`/api/instances/${encodeURIComponent(instance)}/status`, { what: 'Status', expectJson: true, timeout: 5000 });
      const row = (s.sessions || []).find((x) => x.sessionId === st.sid);
      running = !!row && row.status === 'running';
      if (row && row.title && !st.title) { st.title = row.title; app.setTitle(row.title); }
    } catch {
      // Without a status, never hold a queued prompt back: the bridge serializes turns anyway.
    }
    if (!alive || st.myTurn) return;
    st.running = running && !(st.endedTurn >= t.turn);
    if (st.running) t.reopenTurn();
    else {
      t.endTurn(null);
      st.cancelling = false;
    }
    updateButtons();
  }

  function updateButtons() {
    const busy = !!st.myTurn || st.running;
    comp.setBusy(busy, busy && st.cancelling);
    view.dataset.busy = busy ? 'true' : 'false';
  }

  function showConn() {
    const s = conn.state;
    app.setConn(s, conn.message, conn.why, conn.downSince);
    // Down, the view is not attached: a prompt typed now waits in the queue for the re-attach.
    if (s !== 'open') st.attached = false;
    if (s === 'waiting' || s === 'failed') showSaved();
    comp.setEnabled(sendable());
    renderQueue();
    banner.hidden = s === 'open' || s === 'idle';
    clear(banner);
    if (banner.hidden) return;
    banner.dataset.state = s;
    banner.dataset.why = conn.why || '';
    banner.append(h('span', { text: conn.message || 'Connecting…' }));
    if (s === 'waiting' || (s === 'failed' && conn.why !== 'auth' && conn.why !== 'gone')) {
      banner.append(' ', h('button', { type: 'button', onclick: () => conn.retryNow() }, 'Retry now'));
    }
    if (conn.why === 'auth') banner.append(' ', h('button', { type: 'button', onclick: () => app.pair(conn.message) }, 'Pair again'));
    if (conn.why === 'gone') banner.append(' ', h('button', { type: 'button', onclick: () => app.navigate('/') }, 'Back to the list'));
  }

  function renderRequests() {
    const pending = conn.pendingOf(st.sid);
    const live = new Set(pending.map((m) => String(m.id)));
    for (const [id, node] of cards) if (!live.has(id)) { node.remove(); cards.delete(id); }
    for (const m of pending) {
      const id = String(m.id);
      if (cards.has(id)) continue;
      const node = m.method === 'elicitation/create' ? elicitationCard(m) : permissionCard(m);
      cards.set(id, node);
      requests.append(node);
    }
    requests.hidden = cards.size === 0;
  }

  function answer(m, result) {
    try {
      conn.respond(m.id, result);
    } catch (e) {
      toast(`Could not answer: ${e.message}`, 'error');
    }
  }

  function permissionCard(m) {
    const p = m.params || {};
    const options = Array.isArray(p.options) ? p.options : [];
    const parts = permissionParts(p, h('span', { class: 'badge warn', text: 'permission' }));
    return h('div', { class: 'request permission', role: 'group', 'aria-label': 'Permission request', dataset: { id: String(m.id) } },
      h('div', { class: 'perm-body' }, parts.body),
      h('div', { class: 'options' }, optionButtons(options, (o) => answer(m, { outcome: { outcome: 'selected', optionId: o.optionId } }))),
      parts.details);
  }

  function elicitationCard(m) {
    const p = m.params || {};
    const props = (p.requestedSchema && p.requestedSchema.properties) || {};
    const required = new Set((p.requestedSchema && p.requestedSchema.required) || []);
    const fields = Object.entries(props).map(([name, s]) => {
      const label = String((s && (s.title || s.description)) || name);
      let input;
      if (s && Array.isArray(s.enum)) input = h('select', { name }, s.enum.map((v) => h('option', { value: String(v) }, String(v))));
      else if (s && s.type === 'boolean') input = h('input', { type: 'checkbox', name });
      else input = h('input', { type: s && (s.type === 'number' || s.type === 'integer') ? 'number' : 'text', name, required: required.has(name) });
      return h('label', { class: 'field' }, h('span', { text: label }), input);
    });
    const form = h('form', { class: 'request elicitation', 'aria-label': 'Question from the agent', dataset: { id: String(m.id) } },
      h('div', { class: 'request-title' }, h('span', { class: 'badge warn', text: 'question' })),
      h('div', { class: 'md' }, markdown(String(p.message || ''))), fields,
      h('div', { class: 'options' },
        h('button', { type: 'submit', class: 'primary' }, 'Answer'),
        h('button', { type: 'button', onclick: () => answer(m, { action: 'decline' }) }, 'Decline'),
        h('button', { type: 'button', class: 'danger', onclick: () => answer(m, { action: 'cancel' }) }, 'Cancel')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const content = {};
      for (const [name, s] of Object.entries(props)) {
        const el = form.elements[name];
        if (!el) continue;
        if (s && s.type === 'boolean') content[name] = el.checked;
        else if (s && (s.type === 'number' || s.type === 'integer')) content[name] = el.value === '' ? null : Number(el.value);
        else content[name] = el.value;
      }
      answer(m, { action: 'accept', content });
    });
    return form;
  }

  function renderToolbar() {
    clear(toolbar);
    const base = `/api/instances/${encodeURIComponent(instance)}/sessions/${encodeURIComponent(st.sid || '')}`;
    const modes = st.modes && Array.isArray(st.modes.availableModes) ? st.modes.availableModes : [];
    if (modes.length) {
      toolbar.append(h('label', { class: 'pick' }, h('span', { text: 'Mode' }), h('select', {
        id: 'mode', onchange: (e) => conn.call('session/set_mode', { sessionId: st.sid, modeId: e.target.value }).catch((err) => toast(`Mode: ${err.message}`, 'error')),
      }, modes.map((m) => h('option', { value: String(m.id), selected: m.id === st.modes.currentModeId }, String(m.name || m.id))))));
    }
    for (const opt of st.config) {
      if (!opt || opt.type !== 'select' || !Array.isArray(opt.options)) continue;
      const flat = opt.options.flatMap((o) => (Array.isArray(o.options) ? o.options : [o]));
      toolbar.append(h('label', { class: 'pick' }, h('span', { text: String(opt.name || opt.id) }), h('select', {
        dataset: { config: String(opt.id) },
        onchange: (e) => conn.call('session/set_config_option', { sessionId: st.sid, configId: opt.id, value: e.target.value })
          .then((r) => { if (r && Array.isArray(r.configOptions)) { st.config = r.configOptions; renderToolbar(); } })
          .catch((err) => toast(`${opt.name || opt.id}: ${err.message}`, 'error')),
      }, flat.map((o) => h('option', { value: String(o.value), selected: o.value === opt.currentValue }, String(o.name || o.value))))));
    }
    if (st.usage && Number(st.usage.size)) {
      toolbar.append(h('span', { class: 'muted usage', title: 'Context used', text: `${Math.round((Number(st.usage.used) / Number(st.usage.size)) * 100)}% context` }));
    }
    const menu = h('details', { class: 'menu', id: 'more' });
    const item = (id, label, fn, cls) => h('button', { type: 'button', id, class: cls || '', disabled: !st.sid, onclick: () => { menu.open = false; fn(base); } }, label);
    menu.append(h('summary', { 'aria-label': 'More actions' }, 'More'), h('div', { class: 'menu-items' },
      // The session's uncommitted changes (changes.js).
      item('changes-btn', 'Changes', () => app.navigate(`/c/${encodeURIComponent(instance)}/${encodeURIComponent(st.sid || '')}${query({ cwd: st.cwd })}`)),
      item('rename-btn', 'Rename', rename), muteItem(instance, st.sid, () => { menu.open = false; }),
      item('close-btn', 'Close', closeSession), item('delete-btn', 'Delete', deleteSession, 'danger')));
    toolbar.append(h('span', { class: 'spacer' }),
      h('button', { type: 'button', id: 'files-btn', disabled: !st.sid, onclick: () => app.navigate(filesUrl('')) }, 'Files'), menu);
  }

  function rename(base) {
    const input = h('input', { type: 'text', id: 'rename-input', value: st.title, maxlength: 200, 'aria-label': 'New title' });
    modal('Rename session', [input], [{ label: 'Rename', value: 'ok', kind: 'primary' }, { label: 'Cancel', value: '' }], async () => {
      try {
        const r = await postJson(`${base}/rename`, { title: input.value }, 'Rename');
        st.title = r.title || input.value;
        app.setTitle(st.title);
        toast('Renamed.');
        return '';
      } catch (e) {
        return lifecycleError('Rename', e);
      }
    });
  }

  function closeSession(base) {
    modal('Close this session?', [h('p', { text: 'It leaves the list of live sessions; its history stays and can be resumed.' })],
      [{ label: 'Close session', value: 'ok', kind: 'primary' }, { label: 'Keep it', value: '' }], async () => {
        try {
          await postJson(`${base}/close`, {}, 'Close');
          toast('Session closed.');
          app.navigate('/');
          return '';
        } catch (e) {
          return lifecycleError('close', e);
        }
      });
  }

  function deleteSession(base) {
    modal('Delete this session?', [h('p', { text: 'It is closed, then hidden from every listing (a soft delete: the history is kept on the machine).' })],
      [{ label: 'Delete', value: 'ok', kind: 'danger' }, { label: 'Keep it', value: '' }], async () => {
        try {
          await postJson(`${base}/close`, {}, 'Close');
        } catch (e) {
          if (!(e instanceof ApiError && e.status === 404 && e.kind !== 'missing')) return lifecycleError('close', e);
        }
        try {
          await postJson(`${base}/delete`, {}, 'Delete');
          // Gone: leaving the view must not watch it (nor a reconnect re-attach it).
          st.deleted = true;
          conn.unwatch(st.sid);
          // Nothing of it stays on this device either.
          clearTimeout(st.saveTimer);
          st.log = null;
          forgetCopy(keptKey('copy', instance, st.sid));
          for (const kind of ['draft', 'queue']) keep(keptKey(kind, instance, st.sid), '');
          toast('Session deleted.');
          app.navigate('/');
          return '';
        } catch (e) {
          return lifecycleError('delete', e);
        }
      });
  }

  return () => {
    alive = false;
    resized.disconnect();
    unlisten();
    if (conn.viewing === st.sid) conn.viewing = null;
    if (st.sid && !st.deleted) conn.watch(st.sid, st.cwd);
    const bar = $('#bar-title');
    if (bar) bar.textContent = '';
  };
}
