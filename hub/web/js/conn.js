// One ACP connection per bridge instance: `/acp?instance=<id>` over WebSocket, JSON-RPC on top,
// `initialize` first. The credential (api.js's: a device's short-lived access token, or a
// stored token) rides the subprotocol list (`zcode-acp`, and
// `zcode-acp.token.<base64url of the token>`; the hub answers `zcode-acp`), never the URL: a
// tunnel logs URLs, and a browser cannot set headers on a WebSocket. It reconnects by itself
// with a backoff (0.5 s doubling to 5 s while the page is visible, 15 s while hidden; reset by
// a successful initialize; at once on the browser's `online` event and when the page shows
// again) and, when a connection fails, asks the hub why: a stopped hub, an instance that is
// gone and a rejected token each end in their own state. An `initialize` the bridge refuses
// (its agent cannot start: "claude: command not found: …") is said in those words, and
// retried like the rest.
//
// A stalled line (open, nothing moving) is noticed: while the page is visible and nothing has
// arrived for a while, the client sends `$/ping` (the bridge answers `{}` at once, whatever its
// agent does; any answer counts) and treats no answer within PING_TIMEOUT_MS as a drop. It
// pings at once when the page becomes visible and on `online`.
//
// Replays: while a `session/load` or `session/load_earlier` is in flight, that session's
// updates are collected rather than dispatched; the bridge sends the replay batch right before
// the answer, so the answer says which of the collected updates were the replay (the last
// `replayedMessages`, plus the state updates that follow a load) and which were live.
// Turn-end records (`_zcode/turn_end`) are collected and dispatched with them, in order.
//
// Numbers (docs/PROTOCOL.md, "Resume by number"): the bridge numbers every message of a
// session (`params._meta.zcode.seq`, `.epoch`); an update carries its number as `u[SEQ]`, a
// request as its params' `_meta`. A load can ask to resume after a number (`resume`): the
// collected updates are then exactly what followed it, and the view (session.js) applies them
// to what it shows.

import { credential, diagnose, targetMachine } from './api.js';

const INIT_TIMEOUT_MS = 15000;
/** The subprotocol the hub answers with, and the prefix of the one carrying the token. */
const SUBPROTOCOL = 'zcode-acp';
const TOKEN_PREFIX = 'zcode-acp.token.';
const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 15000;
/**
 * The longest wait between attempts while the page is visible (test-only knob: localStorage
 * `zcode-acp.test.backoffMs`, which the browser tests shorten where a line comes back).
 */
const BACKOFF_VISIBLE_MS = knob('zcode-acp.test.backoffMs', 5000);
/**
 * How long a `$/ping` may wait for its answer before the line counts as dropped. Test-only:
 * the browser tests shorten it with localStorage `zcode-acp.test.pingTimeoutMs`.
 */
const PING_TIMEOUT_MS = knob('zcode-acp.test.pingTimeoutMs', 10000);
/** How long the line may stay quiet before it is checked (test-only knob: `zcode-acp.test.quietMs`). */
const QUIET_MS = knob('zcode-acp.test.quietMs', Math.min(5000, PING_TIMEOUT_MS));

/** A test-only number from localStorage (`fallback` when unset or not a positive number). */
function knob(key, fallback) {
  let v = NaN;
  try { v = Number(localStorage.getItem(key)); } catch { /* no storage */ }
  return Number.isFinite(v) && v > 0 ? v : fallback;
}

const visible = () => typeof document === 'undefined' || document.visibilityState !== 'hidden';
/**
 * How long after the hub answers again an instance it does not list is still awaited: a hub
 * that (re)started knows its bridges only as they re-register, every 10 s (the contract).
 */
const REREGISTER_MS = 15000;

/**
 * The bridge's turn-end record (`_zcode/turn_end`: stopReason, startedAt, endedAt, promptedBy),
 * sent live to every remote client when a turn ends and replayed right after the turn's last
 * message. It reaches the views as a pseudo-update of this `sessionUpdate`, in stream order.
 */
export const TURN_END = '_zcode/turn_end';

/** Where an update carries its number: `{seq, epoch}` (not enumerable by JSON, not cloned). */
export const SEQ = Symbol('seq');

/** The number of a message's `params` (`{seq, epoch}`), or null when it has none. */
export function numberOf(params) {
  const z = params && params._meta && params._meta.zcode;
  return z && Number.isSafeInteger(z.seq) && typeof z.epoch === 'string' ? { seq: z.seq, epoch: z.epoch } : null;
}

/** The update kinds the bridge sends after a load's messages (the session's latest state). */
export const STATE_KINDS = new Set(['available_commands_update', 'current_mode_update',
  'config_option_update', 'session_info_update', 'usage_update']);

/** A failed JSON-RPC call or a call cut by a closed connection. */
export class RpcError extends Error {
  constructor(code, message, data) {
    super(message);
    this.code = code;
    this.data = data;
  }
}

/** The key of a JSON-RPC id (numbers and strings kept apart). */
export const idKey = (id) => `${typeof id}:${id}`;

/** `s` as unpadded base64url of its UTF-8 bytes: a valid subprotocol, whatever `s` holds. */
export function base64url(s) {
  let bin = '';
  for (const b of new TextEncoder().encode(s)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

export class Conn {
  /**
   * A connection to instance `id` (not opened until `start`) of the page's own hub, or of
   * `machine` (machines.js: another machine's hub, its origin and credential).
   */
  constructor(id, machine = targetMachine()) {
    this.id = String(id);
    this.machine = machine;
    this.state = 'idle'; // idle | connecting | open | waiting | failed | closed
    this.message = '';
    this.why = '';
    this.attempt = 0;
    this.retryAt = 0;
    this.hubLost = false; // the hub did not answer (or something else did) during this outage
    this.hubBack = 0; // when it answered again after that
    this.downSince = 0; // when the last open connection was lost (0: not lost since)
    this.heard = 0; // when the open connection last carried anything
    this.pinging = false;
    this.ws = null;
    this.nextId = 1;
    this.calls = new Map();
    this.pending = new Map(); // agent requests awaiting our answer: idKey → message
    this.replays = new Map(); // sessionId → updates collected during a load
    this.watched = new Map(); // sessionId → cwd: attached with limit 0 after every (re)connect
    this.viewing = null; // the session a view loads itself
    this.listeners = new Set();
    this.timer = null;
    this.initResult = null;
    this.agentError = ''; // why the bridge refused the last `initialize` (its agent is down)
    this.refused = false; // this attempt's `initialize` was refused
  }

  /** Subscribes `fn(event)`; returns the unsubscribe function. */
  listen(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  emit(event) {
    // The page-wide waiting count (push.js) follows every connection's pending requests.
    if (event.type === 'pending' && pool.onPending) pool.onPending();
    for (const fn of [...this.listeners]) {
      try { fn(event); } catch (e) { console.warn('listener failed', e); }
    }
  }

  setState(state, message = '', why = '') {
    this.state = state;
    this.message = message;
    this.why = why;
    this.emit({ type: 'state' });
  }

  /** Opens the connection unless it is open, opening, or has failed for good. */
  start() {
    if (this.state === 'idle' || this.state === 'closed') this.connect();
  }

  /** Retries at once (after a failure, or while waiting for the next attempt). */
  retryNow() {
    if (this.state === 'open' || this.state === 'connecting') return;
    clearTimeout(this.timer);
    this.connect();
  }

  async connect() {
    clearTimeout(this.timer);
    const opening = (this.opening = (this.opening || 0) + 1);
    const at = this.machine ? new URL(this.machine.origin) : location;
    const proto = at.protocol === 'https:' ? 'wss:' : 'ws:';
    const url = `${proto}//${at.host}/acp?instance=${encodeURIComponent(this.id)}`;
    const trying = this.attempt ? `Reconnecting (attempt ${this.attempt + 1})…` : 'Connecting…';
    // The agent's error stays in view while the next attempt is made.
    if (this.agentError) this.setState('connecting', `${this.agentText()}\n${trying}`, 'agent');
    else this.setState('connecting', trying);
    this.refused = false;
    let ws;
    try {
      const t = this.machine ? await this.machine.credential() : await credential();
      // Closed, or another attempt started, while the credential was being had.
      if (opening !== this.opening || this.state !== 'connecting') return;
      ws = new WebSocket(url, [SUBPROTOCOL, TOKEN_PREFIX + base64url(t)]);
    } catch {
      if (opening !== this.opening || this.state !== 'connecting') return;
      this.failed();
      return;
    }
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.call('initialize', {
        protocolVersion: 1,
        clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false, elicitation: { form: {} } },
        clientInfo: { name: 'zcode-acp-web', title: 'zcode-acp web client', version: '0.1.0' },
      }, INIT_TIMEOUT_MS).then((r) => {
        if (this.ws !== ws) return;
        this.initResult = r;
        this.agentError = '';
        this.attempt = 0;
        this.hubLost = false;
        this.hubBack = 0;
        this.downSince = 0;
        this.heard = Date.now();
        this.setState('open', 'Connected');
        for (const [sid, cwd] of this.watched) if (sid !== this.viewing) this.attachQuietly(sid, cwd);
        this.emit({ type: 'open' });
      }, (e) => {
        if (this.ws !== ws) return;
        // The bridge's own answer (not a cut connection or our timeout): its agent is down.
        if (e instanceof RpcError && e.code !== -32099 && e.code !== -32098) {
          this.agentError = e.message;
          this.refused = true;
        }
        this.lost(ws, 'the connection to the hub was lost');
      });
    };
    ws.onmessage = (e) => {
      this.heard = Date.now();
      this.receive(e.data);
    };
    ws.onclose = () => this.lost(ws, opened ? 'the connection to the hub was lost' : 'could not connect');
  }

  /** `ws` is over (closed, or stalled): every call on it fails, and the next attempt starts. */
  lost(ws, why) {
    if (this.ws !== ws) return;
    this.ws = null;
    ws.onclose = null;
    ws.onmessage = null;
    // A stalled socket's close handshake may never end: it is not waited for.
    try { ws.close(); } catch { /* closed already */ }
    if (this.state === 'open' && !this.downSince) this.downSince = Date.now();
    this.dropCalls(why);
    if (this.state === 'closed') return;
    this.failed();
  }

  /**
   * Checks the open line: `$/ping`, a drop when no answer comes in time. `force`: even if
   * something arrived lately (the page was hidden, the network came back).
   */
  check(force = false) {
    const ws = this.ws;
    if (this.state !== 'open' || !ws || this.pinging || !visible()) return;
    if (!force && Date.now() - this.heard < QUIET_MS) return;
    this.pinging = true;
    this.call('$/ping', {}, PING_TIMEOUT_MS).catch((e) => {
      // An error answer is an answer; only silence (or the call cut) says the line is gone.
      if (e instanceof RpcError && e.code === -32098) this.lost(ws, 'the connection to the hub stalled');
    }).finally(() => { this.pinging = false; });
  }

  /** The connection ended: find out why, then retry or give up. */
  async failed() {
    if (this.refused) this.setState('waiting', `${this.agentText()}\nChecking the hub…`, 'agent');
    else this.setState('waiting', 'Connection lost: checking the hub…');
    let d = await diagnose(this.id, this.machine);
    if (this.state === 'closed' || this.state === 'open' || this.state === 'connecting') return;
    if (d.why === 'down' || d.why === 'garbage') this.hubLost = true;
    else if (this.hubLost && !this.hubBack) this.hubBack = Date.now();
    // Not listed by a hub that has just come back is not gone: its bridge re-registers soon.
    if (d.why === 'gone' && this.hubBack && Date.now() - this.hubBack < REREGISTER_MS) d = { why: 'registering' };
    if (d.why === 'auth') return this.setState('failed', d.message, 'auth');
    if (d.why === 'gone') return this.setState('failed', d.message, 'gone');
    const agent = this.refused && d.why !== 'down' && d.why !== 'garbage';
    if (!agent) this.agentError = '';
    const delay = Math.min(visible() ? BACKOFF_VISIBLE_MS : BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** this.attempt);
    this.attempt++;
    this.retryAt = Date.now() + delay;
    const why = agent ? `${this.agentText()}\n`
      : d.why === 'down' ? 'The hub is not answering (stopped, or the network is down).'
      : d.why === 'garbage' ? d.message
        : d.why === 'registering' ? 'The hub is back; waiting for this instance to register with it again.'
          : 'The connection dropped.';
    const retry = `Retrying in ${(delay / 1000).toFixed(1)} s.`;
    this.setState('waiting', agent ? why + retry : `${why} ${retry}`, agent ? 'agent' : d.why);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  /** The refused `initialize`'s error, worded for the banner. */
  agentText() {
    return `The agent could not start: ${this.agentError.replace(/; it restarts on the next request/, '.')}`;
  }

  /** Closes for good (the view or instance went away). */
  close() {
    clearTimeout(this.timer);
    this.setState('closed');
    const ws = this.ws;
    this.ws = null;
    this.dropCalls('closed');
    if (ws) ws.close();
  }

  dropCalls(why) {
    for (const c of this.calls.values()) c.reject(new RpcError(-32099, why));
    this.calls.clear();
    this.replays.clear(); // their calls were rejected above; each one's `finally` wakes its waiters
    if (this.pending.size) {
      // The bridge re-sends what is still pending when we attach again.
      this.pending.clear();
      this.emit({ type: 'pending' });
    }
  }

  send(msg) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) throw new RpcError(-32099, 'not connected');
    this.ws.send(JSON.stringify(msg));
  }

  /** A request; resolves with its result, rejects with an RpcError. */
  call(method, params, timeoutMs = 0) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      try {
        this.send({ jsonrpc: '2.0', id, method, params });
      } catch (e) {
        reject(e);
        return;
      }
      const entry = { resolve, reject, method };
      if (timeoutMs) {
        entry.timer = setTimeout(() => {
          this.calls.delete(id);
          reject(new RpcError(-32098, `${method}: no answer in ${timeoutMs / 1000} s`));
        }, timeoutMs);
      }
      this.calls.set(id, entry);
    });
  }

  /** A notification. */
  notify(method, params) {
    this.send({ jsonrpc: '2.0', method, params });
  }

  /** Answers agent request `id` (a result, or an `error` object). */
  respond(id, result, error) {
    this.pending.delete(idKey(id));
    this.emit({ type: 'pending' });
    this.send(error ? { jsonrpc: '2.0', id, error } : { jsonrpc: '2.0', id, result });
  }

  receive(data) {
    let msg;
    try { msg = JSON.parse(data); } catch { return; } // not JSON-RPC: nothing to do with it
    if (!msg || typeof msg !== 'object') return;
    if (msg.method === undefined && msg.id !== undefined) {
      const c = this.calls.get(msg.id);
      if (!c) return;
      this.calls.delete(msg.id);
      clearTimeout(c.timer);
      if (msg.error) c.reject(new RpcError(msg.error.code, msg.error.message || 'error', msg.error.data));
      else c.resolve(msg.result);
      return;
    }
    if (typeof msg.method !== 'string') return;
    const params = msg.params || {};
    if (msg.id !== undefined && msg.id !== null) {
      if (msg.method === 'session/request_permission' || msg.method === 'elicitation/create') {
        // A request still pending comes again on a resume, with its id: it is one request.
        const again = this.pending.has(idKey(msg.id));
        this.pending.set(idKey(msg.id), msg);
        if (!again) this.emit({ type: 'pending' });
        this.emit({ type: 'request', msg, again });
      } else {
        // Nothing else is ours to serve (we advertise no fs or terminal).
        try { this.send({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: `${msg.method} is not supported by the web client` } }); } catch { /* closed */ }
      }
      return;
    }
    if (msg.method === '$/cancel_request') {
      const key = idKey(params.requestId);
      const had = this.pending.delete(key);
      if (had) this.emit({ type: 'pending' });
      this.emit({ type: 'cancel', requestId: params.requestId, had });
      return;
    }
    if (msg.method === TURN_END && typeof params.sessionId === 'string') {
      const u = { ...params, sessionUpdate: TURN_END };
      const n = numberOf(params);
      if (n) u[SEQ] = n;
      const buf = this.replays.get(params.sessionId);
      if (buf) { buf.push(u); return; }
      this.emit({ type: 'update', sid: params.sessionId, update: u });
      return;
    }
    if (msg.method === 'session/update' && params.update && typeof params.update === 'object') {
      const n = numberOf(params);
      if (n) params.update[SEQ] = n;
      const buf = this.replays.get(params.sessionId);
      if (buf) { buf.push(params.update); return; }
      this.emit({ type: 'update', sid: params.sessionId, update: params.update });
      return;
    }
    this.emit({ type: 'notification', msg });
  }

  /**
   * Loads `sid` with `_meta.zcode.limit` = `limit`, resuming after number `resume.seq` of
   * numbering `resume.epoch` when given. Resolves with `{result, replay, live, all}`: the
   * replayed updates (messages then state), the live ones that arrived meanwhile, and every
   * collected update in arrival order (what a resume that worked gave: `result.replayMeta.resumed`).
   */
  async load(sid, cwd, limit, resume = null) {
    const zcode = resume ? { limit, afterSeq: resume.seq, epoch: resume.epoch } : { limit };
    return this.replay(sid, 'session/load', {
      sessionId: sid, cwd: cwd || '/', mcpServers: [], _meta: { zcode },
    }, true);
  }

  /** One page older than `before`, as `{result, replay, live}`. */
  async loadEarlier(sid, before, limit) {
    return this.replay(sid, 'session/load_earlier', { sessionId: sid, before, limit }, false);
  }

  async replay(sid, method, params, isLoad) {
    // One replay per session at a time: its updates are told apart by arriving in between.
    while (this.replays.has(sid)) await this.replays.get(sid).done;
    const buf = [];
    let finish;
    buf.done = new Promise((res) => { finish = res; });
    this.replays.set(sid, buf);
    try {
      const result = await this.call(method, params);
      const meta = (result && result.replayMeta) || {};
      let end = buf.length;
      if (isLoad) while (end > 0 && STATE_KINDS.has(buf[end - 1].sessionUpdate)) end--;
      // `replayedMessages` counts messages; the turn-end records between them ride along.
      let n = Number(meta.replayedMessages) || 0;
      let start = end;
      while (start > 0 && n > 0) if (buf[--start].sessionUpdate !== TURN_END) n--;
      const replay = buf.slice(start);
      const live = buf.slice(0, start);
      return { result: result || {}, replay, live, all: buf.slice() };
    } finally {
      if (this.replays.get(sid) === buf) this.replays.delete(sid);
      finish();
    }
  }

  /** Keeps `sid` attached (metadata only) across reconnects, for its pending requests. */
  watch(sid, cwd) {
    if (this.watched.has(sid)) return;
    this.watched.set(sid, cwd);
    this.start();
    if (this.state === 'open' && sid !== this.viewing) this.attachQuietly(sid, cwd);
  }

  /** Stops keeping `sid` attached: it was deleted, and a watch's attach must not revive it. */
  unwatch(sid) {
    this.watched.delete(sid);
  }

  attachQuietly(sid, cwd) {
    this.load(sid, cwd, 0).then(({ replay }) => {
      for (const u of replay) this.emit({ type: 'update', sid, update: u, quiet: true });
    }, () => { /* a session that went away: the next listing drops it */ });
  }

  /** Pending agent requests (permission, elicitation) of `sid`, oldest first. */
  pendingOf(sid) {
    return [...this.pending.values()].filter((m) => !sid || (m.params && m.params.sessionId === sid));
  }
}

/** A connection's key in the pool: its instance, and its machine when not the page's own. */
function keyOf(id) {
  const m = targetMachine();
  const key = String(id);
  return m && !key.includes('|') ? `${m.id}|${key}` : key;
}

/** The connections of this page, one per instance. */
export const pool = {
  /** Checks every open line now, and retries every waiting one (the network is back, the page shows). */
  wake() {
    for (const c of this.conns.values()) {
      if (c.state === 'open') c.check(true);
      else if (c.state === 'waiting') {
        c.attempt = 0;
        c.retryNow();
      }
    }
  },
  conns: new Map(),
  /** Called when any connection's pending requests change (set by push.js). */
  onPending: null,
  /** The connection to instance `id` (created, not started), on the route's machine. */
  get(id) {
    const key = keyOf(id);
    let c = this.conns.get(key);
    if (!c || c.state === 'closed') {
      c = new Conn(id);
      this.conns.set(key, c);
    }
    return c;
  },
  /** Closes and forgets the connection to `id`. */
  drop(id) {
    const c = this.conns.get(keyOf(id));
    if (c) c.close();
    this.conns.delete(keyOf(id));
  },
};

// The line is checked while the page is visible, and at once when it shows again or the
// browser says the network is back (a reconnect starts at once then, whatever the backoff).
if (typeof window !== 'undefined') {
  setInterval(() => { for (const c of pool.conns.values()) c.check(); }, Math.min(2500, Math.max(250, QUIET_MS / 2)));
  window.addEventListener('online', () => pool.wake());
  document.addEventListener('visibilitychange', () => { if (visible()) pool.wake(); });
}
