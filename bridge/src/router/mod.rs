//! The router: ONE task that owns all routing state and reacts to a closed [`Event`] enum.
//!
//! Connections (the editor's stdio, each remote WebSocket, the agent's stdio) have reader tasks
//! that parse frames and send events here, and writer tasks fed by outboxes. Nothing else
//! touches routing state, so there are no locks around it.
//!
//! Handlers are split by where a message comes from: [`from_client`] and [`from_agent`];
//! [`agent`] is the link to the upstream process.

mod account;
mod agent;
pub mod client;
mod from_agent;
mod from_client;
mod glance;
mod hooks;
mod lifecycle;
mod listing;
mod replay;
mod session;
pub mod settings;
pub mod trace;
mod turns;
mod usage_hook;

pub use agent::{AgentHealth, AgentSpec};
pub use client::{ClientId, ClientKind, EDITOR, Outbox, OutboxReader, REMOTE_QUEUE_LIMIT};
pub use glance::{Glance, PendingRow, TurnRow};
pub use hooks::HookReport;
pub use lifecycle::{Lifecycle, LifecycleReply};

use crate::journal::{Journal, ReadError, Slice};
use crate::local::LocalService;
use agent::AgentLink;
use bytes::Bytes;
use client::Client;
use serde_json::{Value, json};
use session::Session;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use zcode_shared::jsonrpc::{self, Id, ParseError, RawMessage, RpcError};

/// Everything the router reacts to.
pub enum Event {
    /// A client connected (the editor once, remotes any number of times).
    Connected {
        /// Its id.
        client: ClientId,
        /// Editor or remote.
        kind: ClientKind,
        /// Where its messages go (and how it is dropped: [`Outbox::kill`]).
        outbox: Outbox,
    },
    /// A frame from a client, parsed (or not).
    Frame {
        /// Who sent it.
        client: ClientId,
        /// The message.
        msg: Result<RawMessage, ParseError>,
    },
    /// A client's connection ended.
    Closed {
        /// Who.
        client: ClientId,
    },
    /// A line from the agent of generation `generation`.
    Agent {
        /// Which agent process (a restarted agent is a new generation).
        generation: u64,
        /// The message.
        msg: Result<RawMessage, ParseError>,
    },
    /// The agent process of `generation` exited.
    AgentExited {
        /// Which agent process.
        generation: u64,
        /// How it ended, for error messages.
        reason: String,
    },
    /// The bridge's own answer to an agent's fs/terminal request.
    Local {
        /// Which agent process asked.
        generation: u64,
        /// The agent's request id.
        id: Id,
        /// The method, to learn terminal ids.
        method: String,
        /// The answer.
        result: Result<Value, RpcError>,
    },
    /// A replay slice read from the journal for a client.
    Replay {
        /// Who asked.
        client: ClientId,
        /// Its request id.
        id: Id,
        /// The session.
        session: String,
        /// The load's result to carry `replayMeta` (`None`: load_earlier).
        base: Option<Value>,
        /// The slice.
        result: Result<Slice, ReadError>,
    },
    /// A `session/list` answer, as the tasks index sees it, for the client that asked.
    Listed {
        /// Who asked.
        client: ClientId,
        /// Its request id.
        id: Id,
        /// The listing.
        result: Value,
    },
    /// The bridge's own answer to a client's request, computed off the router (quota).
    Answer {
        /// Who asked.
        client: ClientId,
        /// Its request id.
        id: Id,
        /// The result or the error.
        result: Result<Value, RpcError>,
    },
    /// `GET /status`: the listed sessions, from memory.
    Status(oneshot::Sender<Vec<SessionStatus>>),
    /// `GET /attention`, `GET /turns`: pending requests and turns, from memory.
    Glance(oneshot::Sender<Glance>),
    /// Close, rename or delete a session (the loopback lifecycle routes).
    Lifecycle {
        /// The session.
        session: String,
        /// What to do.
        op: Lifecycle,
        /// Where the answer goes.
        reply: LifecycleReply,
    },
    /// The root directory of a session live here (`/fs/*`), `None` if it is not.
    SessionRoot {
        /// The session.
        session: String,
        /// Where the answer goes.
        reply: oneshot::Sender<Option<std::path::PathBuf>>,
    },
    /// Hooks finished (`crate::hooks`).
    Hook(HookReport),
    /// The settings API: a backend restart and its steps.
    Settings(settings::SettingsEvent),
    /// Stop: kill the agent, close every client.
    Shutdown,
}

impl From<crate::upstream::UpstreamEvent> for Event {
    fn from(e: crate::upstream::UpstreamEvent) -> Event {
        use crate::upstream::UpstreamEvent;
        match e {
            UpstreamEvent::Line { generation, msg } => Event::Agent { generation, msg },
            UpstreamEvent::Exited { generation, reason } => Event::AgentExited { generation, reason },
        }
    }
}

/// One row of `/status` and of the registration's `sessions`.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionStatus {
    /// The ACP session id.
    pub session_id: String,
    /// Its title, if one is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `running` while a turn is in flight or queued, else `idle`.
    pub status: &'static str,
    /// Last activity, epoch ms.
    pub updated_at: u64,
    /// A permission or elicitation of this session waits for a client. Registration reports
    /// it (`waiting`, which the hub turns into a push); `/status` keeps the contract's two values.
    #[serde(skip)]
    pub waiting: bool,
}

/// Who serves an agent's terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TerminalOwner {
    Editor,
    Local,
}

/// An agent→client request the router is routing (permission, elicitation, fs, terminal…).
struct AgentRequest {
    /// The agent's id for it.
    upstream_id: Id,
    /// Which agent process asked.
    generation: u64,
    /// Its session, if it names one.
    session: Option<String>,
    /// The request as received.
    msg: RawMessage,
    /// Clients holding a copy (sent with id = the request's key).
    copies: Vec<ClientId>,
    /// `true`: to every attached client, first answer wins. `false`: to the editor only.
    broadcast: bool,
    /// When it arrived, epoch ms.
    since: u64,
}

/// Unknown-session updates held until the session appears (bounded).
const ORPHAN_LIMIT: usize = 1000;

/// The router's state. See the module docs.
pub struct Router {
    events: mpsc::Receiver<Event>,
    events_tx: mpsc::Sender<Event>,
    /// Boxed: the table's slots are as big as an entry, and there are more slots than
    /// clients (a grown table is up to half empty), thousands of them behind the hub.
    clients: HashMap<ClientId, Box<Client>>,
    sessions: HashMap<String, Session>,
    agent: AgentLink,
    requests: HashMap<u64, AgentRequest>,
    next_key: u64,
    terminals: HashMap<String, TerminalOwner>,
    local: Arc<LocalService>,
    /// Agent requests being served locally, by agent id (a cancelled one is removed).
    local_inflight: HashSet<Id>,
    orphans: HashMap<String, Vec<Bytes>>,
    orphan_count: usize,
    echo_seq: u64,
    journal: Journal,
    /// `editor` or `serve`, recorded in the tasks index.
    origin: String,
    /// When a serve bridge whose last session was closed ends: a moment after the close, so
    /// the client's follow-up (a delete of that session) still lands.
    stop_at: Option<tokio::time::Instant>,
    /// Session roots pinned to this directory (serve bridges).
    pin_cwd: Option<std::path::PathBuf>,
    /// Headless: how long it may stay idle.
    idle_exit: Option<std::time::Duration>,
    /// Since when nobody is connected and no turn runs.
    idle_since: Option<tokio::time::Instant>,
    /// Poked when what discovery lists changes, so registration tells the hub at once.
    status_nudge: Arc<tokio::sync::Notify>,
    /// The listing's signature at the last poke ([`Router::status_signature`]).
    status_sig: u64,
    /// Token usage recording ([`crate::usage`]).
    usage: crate::usage::Tracker,
    /// Hooks: the tree read at agent start, prompts and tool calls they follow.
    hooks: hooks::Gate,
    /// MCP servers and default model from the settings, pending restarts, backend restart.
    settings: settings::SettingsState,
    /// Where `account/usage_stats` gets its payload.
    quota: Arc<crate::quota::QuotaSource>,
    /// The agent's readiness, for [`Router::agent_health`].
    health: tokio::sync::watch::Sender<AgentHealth>,
    /// Start the agent before any client asks.
    eager: bool,
}

/// How the router behaves beyond routing.
#[derive(Clone, Debug)]
pub struct RouterOptions {
    /// `editor` or `serve`, recorded in the tasks index.
    pub origin: &'static str,
    /// Pin every session's cwd here.
    pub pin_cwd: Option<std::path::PathBuf>,
    /// Exit after this long with no client and no turn (headless serve bridges).
    pub idle_exit: Option<std::time::Duration>,
    /// Where token usage is recorded.
    pub usage: crate::usage::Recorder,
    /// `config.json`, whose `hooks` tree is read at every agent start (`None`: no hooks).
    pub hooks_config: Option<std::path::PathBuf>,
    /// Where the settings API's files are (`None`: the bridge adds no settings).
    pub settings: Option<zcode_shared::settings::Settings>,
    /// Where `account/usage_stats` gets its payload (the hub, else the providers here).
    pub quota: Arc<crate::quota::QuotaSource>,
    /// Start the agent at once rather than on a client's first need (`up`, which reports
    /// whether it came up before printing its banner).
    pub start_agent: bool,
    /// Where the agent's readiness is published (`None`: a channel of the router's own).
    pub health: Option<tokio::sync::watch::Sender<AgentHealth>>,
}

impl Router {
    /// A router for `spec` journaling into `journal`, with the channel its connections send
    /// events on.
    pub fn new(spec: AgentSpec, journal: Journal, opts: RouterOptions) -> (Router, mpsc::Sender<Event>) {
        let (events_tx, events) = mpsc::channel(4096);
        let health = opts.health.unwrap_or_else(|| tokio::sync::watch::channel(AgentHealth::Unknown).0);
        let router = Router {
            events,
            events_tx: events_tx.clone(),
            clients: HashMap::new(),
            sessions: HashMap::new(),
            agent: AgentLink::new(spec, health.clone()),
            health,
            eager: opts.start_agent,
            requests: HashMap::new(),
            next_key: 1,
            terminals: HashMap::new(),
            local: LocalService::new(),
            local_inflight: HashSet::new(),
            orphans: HashMap::new(),
            orphan_count: 0,
            echo_seq: 0,
            journal,
            origin: opts.origin.to_owned(),
            pin_cwd: opts.pin_cwd,
            idle_exit: opts.idle_exit,
            idle_since: None,
            stop_at: None,
            status_nudge: Arc::new(tokio::sync::Notify::new()),
            status_sig: 0,
            usage: crate::usage::Tracker::new(opts.usage),
            hooks: hooks::Gate::new(opts.hooks_config),
            settings: settings::SettingsState::new(opts.settings),
            quota: opts.quota,
        };
        (router, events_tx)
    }

    /// Notified whenever the listed sessions or their status (running, idle, title) change:
    /// registration sends a heartbeat then instead of at its next period.
    pub fn status_nudge(&self) -> Arc<tokio::sync::Notify> {
        self.status_nudge.clone()
    }

    /// Whether the agent is up, or why not (registration's `agentError`).
    pub fn agent_health(&self) -> tokio::sync::watch::Receiver<AgentHealth> {
        self.health.subscribe()
    }

    /// What the loopback settings mount reads (the agent's report, pending restarts).
    pub fn settings_handle(&self) -> settings::SettingsHandle {
        self.settings.handle()
    }

    /// Runs until [`Event::Shutdown`] (or every sender is gone), then kills the agent and
    /// drops every client.
    pub async fn run(mut self) {
        if self.eager {
            self.start_agent();
        }
        let mut health = self.health.subscribe();
        let mut spans = trace::Spans::default();
        loop {
            let deadline = match (self.idle_deadline(), self.stop_deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let event = match deadline {
                Some(at) => tokio::select! {
                    e = self.events.recv() => e,
                    () = tokio::time::sleep_until(at) => {
                        tracing::info!("idle, or the last session was closed: exiting");
                        break;
                    }
                },
                None => self.events.recv().await,
            };
            let Some(event) = event else { break };
            // Handled inside its client's, session's or agent's span; synchronously: the guard
            // is never held across an await.
            let span = spans.of(&event);
            let _in = span.enter();
            match event {
                Event::Shutdown => break,
                Event::Connected { client, kind, outbox } => {
                    self.clients.insert(client, Box::new(Client::new(kind, outbox)));
                }
                Event::Frame { client, msg } => self.on_frame(client, msg),
                Event::Closed { client } => {
                    if self.on_closed(client) == ClientKind::Editor {
                        break;
                    }
                }
                Event::Agent { generation, msg } => self.on_agent_frame(generation, msg),
                Event::AgentExited { generation, reason } => self.on_agent_exited(generation, &reason),
                Event::Local { generation, id, method, result } => {
                    self.on_local_done(generation, &id, &method, result);
                }
                Event::Replay { client, id, session, base, result } => {
                    self.on_replay(client, &id, &session, base, result);
                }
                Event::Listed { client, id, result } => self.reply(client, &id, Ok(result)),
                Event::Answer { client, id, result } => self.reply(client, &id, result),
                Event::Status(reply) => {
                    let _ = reply.send(self.status());
                }
                Event::Hook(report) => self.on_hook(report),
                Event::Glance(reply) => {
                    let _ = reply.send(self.glance());
                }
                Event::Lifecycle { session, op, reply } => self.on_lifecycle(&session, op, reply),
                Event::Settings(ev) => self.on_settings(ev),
                Event::SessionRoot { session, reply } => {
                    let root =
                        self.sessions.get(&session).filter(|s| s.upstream != session::Upstream::Loading);
                    let _ = reply.send(root.map(|s| s.cwd.clone()));
                }
            }
            self.settings_restart_progress();
            let sig = self.status_signature();
            // A failed or recovered agent is news for the hub's list too.
            if sig != self.status_sig || health.has_changed().unwrap_or(false) {
                health.mark_unchanged();
                self.status_sig = sig;
                self.status_nudge.notify_one();
            }
        }
        for client in self.clients.values() {
            client.outbox.kill();
        }
        self.local.kill_all();
        self.agent.terminate().await;
        let journal = self.journal.clone();
        let _ = tokio::task::spawn_blocking(move || journal.flush()).await;
    }

    /// When a headless bridge will exit if nothing happens: its idle timeout after the moment
    /// the last client left and the last turn ended.
    /// The pending exit after a serve bridge's last close, unless a session came back to life.
    fn stop_deadline(&mut self) -> Option<tokio::time::Instant> {
        if self.sessions.values().any(|s| !s.closed && s.listed()) {
            self.stop_at = None;
        }
        self.stop_at
    }

    fn idle_deadline(&mut self) -> Option<tokio::time::Instant> {
        let limit = self.idle_exit?;
        let idle = self.clients.is_empty() && !self.sessions.values().any(session::Session::busy);
        if !idle {
            self.idle_since = None;
            return None;
        }
        let since = *self.idle_since.get_or_insert_with(tokio::time::Instant::now);
        Some(since + limit)
    }

    /// What registration advertises, as one number: a session listed or unlisted, a turn
    /// starting or ending, a new title. Order-free (the map's order may change), and cheap
    /// enough for every event (no allocation); `updatedAt` is left out, or every streamed frame
    /// would count as a change.
    fn status_signature(&self) -> u64 {
        use std::hash::BuildHasher;
        let state = std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
        self.sessions.values().filter(|s| s.listed()).fold(1, |acc: u64, s| {
            acc.wrapping_add(state.hash_one((&s.id, s.busy(), s.requests.is_empty(), &s.title)))
        })
    }

    fn status(&self) -> Vec<SessionStatus> {
        let mut rows: Vec<SessionStatus> = self
            .sessions
            .values()
            .filter(|s| s.listed())
            .map(|s| SessionStatus {
                session_id: s.id.clone(),
                title: s.title.clone(),
                status: if s.busy() { "running" } else { "idle" },
                updated_at: s.updated_at,
                waiting: !s.requests.is_empty(),
            })
            .collect();
        rows.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.session_id.cmp(&b.session_id)));
        rows
    }

    /// Sends one line to a client, or holds it while a replay is read for that client.
    fn send_to(&mut self, client: ClientId, line: Bytes) {
        let Some(c) = self.clients.get_mut(&client) else { return };
        if c.holds > 0 {
            c.held_bytes += line.len();
            c.held.push(line);
            if c.outbox.limit().is_some_and(|l| c.held_bytes > l) {
                self.drop_slow(client);
            }
            return;
        }
        self.push(client, line);
    }

    /// Queues a replay batch for a client; one that asks for replays faster than it reads them
    /// is disconnected ([`Outbox::send_batch`]).
    fn push_batch(&mut self, client: ClientId, lines: Vec<Bytes>) {
        let Some(c) = self.clients.get(&client) else { return };
        if !c.outbox.send_batch(lines) {
            self.drop_slow(client);
        }
    }

    fn drop_slow(&mut self, client: ClientId) {
        let Some(c) = self.clients.get(&client) else { return };
        tracing::warn!(client, "client is not reading (queue over its limit): disconnecting it");
        c.outbox.kill();
        self.on_closed(client);
    }

    /// Queues one line to a client now; a remote client over its queue limit is disconnected.
    fn push(&mut self, client: ClientId, line: Bytes) {
        let Some(c) = self.clients.get(&client) else { return };
        if !c.outbox.send(line) {
            self.drop_slow(client);
        }
    }

    fn send_msg(&mut self, client: ClientId, msg: &Value) {
        self.send_to(client, Bytes::from(msg.to_string()));
    }

    fn reply(&mut self, client: ClientId, id: &Id, result: Result<Value, RpcError>) {
        let msg = match result {
            Ok(v) => jsonrpc::response(id, v),
            Err(e) => {
                tracing::debug!(%id, code = e.code, "request refused: {}", e.message.escape_debug());
                jsonrpc::error_response(Some(id), &e)
            }
        };
        self.send_msg(client, &msg);
    }

    /// Answers `id` with a result already serialised (passed byte for byte).
    fn reply_raw(&mut self, client: ClientId, id: &Id, result: &serde_json::value::RawValue) {
        self.send_to(client, Bytes::from(jsonrpc::response_line(id, Ok(result))));
    }

    /// Sends `line` to every client attached to `session` except `except`.
    fn fan_out(&mut self, session: &str, line: &Bytes, except: Option<ClientId>) {
        let targets: Vec<ClientId> = match self.sessions.get(session) {
            Some(s) => s.attached.iter().copied().filter(|c| Some(*c) != except).collect(),
            None => return,
        };
        for c in targets {
            self.send_to(c, line.clone());
        }
    }

    /// Records a `session/update` line in the session's history (the journal).
    fn record(&mut self, session: &str, line: &Bytes) {
        if let Some(s) = self.sessions.get_mut(session) {
            s.updated_at = zcode_shared::time::now_ms();
        }
        self.journal.update(session, line.clone(), false);
    }

    /// Tells the tasks index where a session lives, `client` having used it. Only an editor or
    /// CLI on stdio (`chat` is one) revives a tombstoned session: a remote (a phone, the web
    /// client that deleted it) never does (ARCHITECTURE.md's invariant).
    fn record_meta(&self, session: &str, client: Option<ClientId>, revive: bool) {
        let revive = revive
            && client.is_some_and(|c| self.clients.get(&c).is_some_and(|c| c.kind == ClientKind::Editor));
        let Some(s) = self.sessions.get(session) else { return };
        let cwd = s.cwd.display().to_string();
        let workspace =
            std::fs::canonicalize(&s.cwd).map_or_else(|_| cwd.clone(), |p| p.display().to_string());
        self.journal.meta(
            zcode_shared::store::SessionMeta {
                session_id: session.to_owned(),
                workspace,
                cwd,
                origin: self.origin.clone(),
                agent: Some(self.agent.name().to_owned()),
            },
            revive,
        );
    }

    /// Attaches a client to a session and hands it the session's pending agent requests.
    fn attach(&mut self, client: ClientId, session: &str) {
        let Some(s) = self.sessions.get_mut(session) else { return };
        s.attached.insert(client);
        let pending = s.requests.clone();
        let Some(c) = self.clients.get_mut(&client) else { return };
        c.sessions.insert(session.to_owned());
        for key in pending {
            self.deliver_copy(key, client);
        }
    }

    /// Sends a copy of agent request `key` to `client` (if it has none yet).
    fn deliver_copy(&mut self, key: u64, client: ClientId) {
        let Some(req) = self.requests.get_mut(&key) else { return };
        if !req.broadcast || req.copies.contains(&client) {
            return;
        }
        if !self
            .clients
            .get(&client)
            .is_some_and(|c| c.caps.accepts(req.msg.method(), &req.msg.params_value()))
        {
            return;
        }
        req.copies.push(client);
        let line = Bytes::from(req.msg.line_with_id(Some(&Id::from(key))));
        if let Some(c) = self.clients.get_mut(&client) {
            c.copies.insert(key);
        }
        self.send_to(client, line);
    }

    /// Withdraws agent request `key` from every client holding a copy (`$/cancel_request`).
    fn withdraw(&mut self, key: u64, except: Option<ClientId>) -> Option<AgentRequest> {
        let req = self.requests.remove(&key)?;
        if let Some(s) = req.session.as_ref().and_then(|s| self.sessions.get_mut(s)) {
            s.requests.retain(|k| *k != key);
        }
        let cancel = jsonrpc::notification("$/cancel_request", json!({"requestId": key}));
        for &c in &req.copies {
            if let Some(client) = self.clients.get_mut(&c) {
                client.copies.remove(&key);
            }
            if Some(c) != except {
                self.send_msg(c, &cancel);
            }
        }
        Some(req)
    }

    fn on_closed(&mut self, client: ClientId) -> ClientKind {
        let Some(c) = self.clients.remove(&client) else { return ClientKind::Remote };
        for sid in &c.sessions {
            if let Some(s) = self.sessions.get_mut(sid) {
                s.attached.remove(&client);
            }
        }
        // Requests it held stay pending on their sessions: the next client to attach gets them.
        for key in c.copies {
            if let Some(req) = self.requests.get_mut(&key) {
                req.copies.retain(|x| *x != client);
            }
        }
        tracing::debug!(client, kind = ?c.kind, "client closed");
        c.kind
    }
}
