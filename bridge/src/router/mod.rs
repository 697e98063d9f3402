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
mod answers;
mod backlog;
pub mod client;
mod clients;
mod from_agent;
mod from_client;
mod glance;
mod hooks;
mod lifecycle;
mod lifetime;
mod listing;
mod replay;
mod requests;
mod session;
pub mod settings;
mod startup;
pub mod trace;
mod turns;
mod usage_hook;
mod watch;

pub use agent::{AgentHealth, AgentSpec};
pub use answers::AnswerReply;
pub use client::{ClientId, ClientKind, EDITOR, Killer, Outbox, OutboxReader, REMOTE_QUEUE_LIMIT};
pub use glance::{Glance, PendingRow, TurnRow};
pub use hooks::HookReport;
pub use lifecycle::{Lifecycle, LifecycleReply};

use crate::journal::{Journal, ReadError, Slice};
use agent::AgentLink;
use bytes::Bytes;
use client::Client;
use clients::Clients;
use lifetime::Lifetime;
use requests::{AgentRequest, Requests};
use serde_json::{Value, json};
use session::Sessions;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use zcode_shared::jsonrpc::{self, Id, ParseError, RawMessage, RpcError};
use zcode_shared::scope::Scope;

/// Everything the router reacts to.
pub enum Event {
    /// A client connected (the editor once, remotes any number of times).
    Connected {
        /// Its id.
        client: ClientId,
        /// Editor or remote.
        kind: ClientKind,
        /// What it may do (the hub's word, for a remote; the editor's is full).
        scope: Scope,
        /// Whose it is, as the hub said (a paired device's id, `machine`); `None`: the editor's,
        /// or a local tool's straight to the bridge. For the audit trail only.
        device: Option<Box<str>>,
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
        /// Fields `replayMeta` gets besides the journal's (numbering, a resume's fallback).
        extra: serde_json::Map<String, Value>,
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
    /// A permission answered over HTTP (`POST /sessions/{sid}/permissions/{requestId}`).
    HttpAnswer {
        /// The session.
        session: String,
        /// The request's key (the id clients got it under).
        request: u64,
        /// The option chosen.
        option: String,
        /// Who answers: the device the hub named, or `machine`.
        by: String,
        /// Record it in the audit trail (the hub did not: the request came straight here).
        audit: bool,
        /// Where the answer goes.
        reply: AnswerReply,
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
    /// `config.json` was read for an agent start ([`startup`]).
    AgentConfig(Box<startup::AgentConfig>),
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
    /// How many of those wait (the hub's count for the app badge).
    #[serde(skip)]
    pub pending: usize,
}

/// Work done off the router (a journal read, a hook, a quota fetch, a file read) whose
/// result comes back as an [`Event`].
struct Tasks {
    events: mpsc::Sender<Event>,
    /// Where `account/usage_stats` gets its payload.
    quota: Arc<crate::quota::QuotaSource>,
}

impl Tasks {
    /// Runs `work` on a task of its own; its event is handled like any other, in turn.
    fn spawn(&self, work: impl std::future::Future<Output = Event> + Send + 'static) {
        let events = self.events.clone();
        tokio::spawn(async move {
            let event = work.await;
            let _ = events.send(event).await;
        });
    }

    /// Runs blocking `work` (file reads) on the blocking pool, never on the router.
    fn spawn_blocking(&self, work: impl FnOnce() -> Event + Send + 'static) {
        let events = self.events.clone();
        tokio::spawn(async move {
            if let Ok(event) = tokio::task::spawn_blocking(work).await {
                let _ = events.send(event).await;
            }
        });
    }
}

/// The router: one task, its state in sub-states that own their data. Handlers take the
/// sub-states they need; this struct only dispatches events to them.
pub struct Router {
    events: mpsc::Receiver<Event>,
    /// Work off the router, answered as events.
    tasks: Tasks,
    /// Connected clients and their outboxes.
    clients: Clients,
    /// Sessions, and updates waiting for theirs.
    sessions: Sessions,
    /// The agent's requests held for clients or served locally.
    requests: Requests,
    /// The upstream agent: process, handshake, bridge requests in flight, health.
    agent: AgentLink,
    /// Sessions' history and the tasks index.
    journal: Journal,
    /// Idle exit, exit after the last close, registration's nudge.
    life: Lifetime,
    /// Token usage recording ([`crate::usage`]).
    usage: crate::usage::Tracker,
    /// Hooks: the tree read at agent start, prompts and tool calls they follow.
    hooks: hooks::Gate,
    /// MCP servers and default model from the settings, pending restarts, backend restart.
    settings: settings::SettingsState,
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
            tasks: Tasks { events: events_tx.clone(), quota: opts.quota },
            clients: Clients::default(),
            sessions: Sessions::new(opts.origin.to_owned(), opts.pin_cwd),
            requests: Requests::new(),
            agent: AgentLink::new(spec, health, opts.start_agent),
            journal,
            life: Lifetime::new(opts.idle_exit),
            usage: crate::usage::Tracker::new(opts.usage),
            hooks: hooks::Gate::new(opts.hooks_config),
            settings: settings::SettingsState::new(opts.settings),
        };
        (router, events_tx)
    }

    /// Notified whenever the listed sessions or their status (running, idle, title) change:
    /// registration sends a heartbeat then instead of at its next period.
    pub fn status_nudge(&self) -> Arc<tokio::sync::Notify> {
        self.life.nudge()
    }

    /// Whether the agent is up, or why not (registration's `agentError`).
    pub fn agent_health(&self) -> tokio::sync::watch::Receiver<AgentHealth> {
        self.agent.health()
    }

    /// What the loopback settings mount reads (the agent's report, pending restarts).
    pub fn settings_handle(&self) -> settings::SettingsHandle {
        self.settings.handle()
    }

    /// Runs until [`Event::Shutdown`] (or every sender is gone), then kills the agent and
    /// drops every client.
    pub async fn run(mut self) {
        if self.agent.eager {
            self.start_agent();
        }
        let mut health = self.agent.health();
        let mut spans = trace::Spans::default();
        loop {
            let idle = self.clients.is_empty() && !self.sessions.any_busy();
            let deadline = self.life.deadline(idle, self.sessions.any_listed());
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
            if let Event::Frame { msg, .. } | Event::Agent { msg, .. } = &event {
                crate::bounds::ROUTER.message_taken(msg);
            }
            // Handled inside its client's, session's or agent's span; synchronously: the guard
            // is never held across an await.
            let span = spans.of(&event);
            let _in = span.enter();
            match event {
                Event::Shutdown => break,
                Event::Connected { client, kind, scope, device, outbox } => {
                    self.clients.connect(client, kind, scope, device, outbox);
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
                Event::Replay { client, id, session, base, extra, result } => {
                    self.on_replay(client, &id, &session, base, extra, result);
                }
                Event::Listed { client, id, result } => self.clients.reply(client, &id, Ok(result)),
                Event::Answer { client, id, result } => self.clients.reply(client, &id, result),
                Event::Status(reply) => {
                    let _ = reply.send(self.sessions.status());
                }
                Event::Hook(report) => self.on_hook(report),
                Event::Glance(reply) => {
                    let _ = reply.send(glance::glance(&self.requests, &self.sessions, &self.clients));
                }
                Event::Lifecycle { session, op, reply } => self.on_lifecycle(&session, op, reply),
                Event::HttpAnswer { session, request, option, by, audit, reply } => {
                    self.on_http_answer(&session, request, &option, (by, audit), reply)
                }
                Event::Settings(ev) => self.on_settings(ev),
                Event::AgentConfig(read) => self.on_agent_config(*read),
                Event::SessionRoot { session, reply } => {
                    let _ = reply.send(self.sessions.root(&session));
                }
            }
            for (client, c) in self.clients.take_dropped() {
                self.detach(client, &c);
            }
            self.settings_restart_progress();
            let changed = health.has_changed().unwrap_or(false);
            health.mark_unchanged();
            self.life.note_status(self.sessions.status_signature(), changed);
        }
        self.clients.kill_all();
        self.requests.kill_local();
        self.agent.terminate().await;
        let journal = self.journal.clone();
        let _ = tokio::task::spawn_blocking(move || journal.flush()).await;
    }

    /// Sends `line` to every client attached to `session` except `except` ([`Router::emit`]).
    fn fan_out(&mut self, session: &str, line: &Bytes, except: Option<ClientId>) {
        let targets = self.sessions.attached(session, except);
        self.emit(session, line, targets);
    }

    /// Numbers a message of `session` (held in its backlog, whoever gets it) and sends it to
    /// `targets`: the original to the editor, the numbered form to remote clients.
    fn emit(&mut self, session: &str, line: &Bytes, targets: Vec<ClientId>) {
        let Some(s) = self.sessions.get_mut(session) else {
            return self.clients.send_all(targets, line);
        };
        let remote = s.backlog.number(line, None);
        for c in targets {
            let form = if self.clients.is_editor(c) { line } else { &remote };
            self.clients.send_to(c, form.clone());
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
        let revive = revive && client.is_some_and(|c| self.clients.is_editor(c));
        let Some(s) = self.sessions.get(session) else { return };
        let cwd = s.cwd.display().to_string();
        // The journal thread resolves the workspace (symlinks): no path lookup on the router.
        self.journal.meta(
            zcode_shared::store::SessionMeta {
                session_id: session.to_owned(),
                workspace: cwd.clone(),
                cwd,
                origin: self.sessions.origin.clone(),
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

    /// Sends a copy of agent request `key` to `client` (if it has none yet): a remote client
    /// gets its numbered form.
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
        let line = match &req.numbered {
            Some(n) if !self.clients.is_editor(client) => n.clone(),
            _ => Bytes::from(req.msg.line_with_id(Some(&Id::from(key)))),
        };
        if let Some(c) = self.clients.get_mut(&client) {
            c.copies.insert(key);
        }
        self.clients.send_to(client, line);
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
                self.clients.send_msg(c, &cancel);
            }
        }
        Some(req)
    }

    /// A client's connection ended: it is detached from everything.
    fn on_closed(&mut self, client: ClientId) -> ClientKind {
        let Some(c) = self.clients.remove(&client) else { return ClientKind::Remote };
        self.detach(client, &c);
        c.kind
    }

    /// Detaches a client that is gone from its sessions. Requests it held stay pending on
    /// their sessions: the next client to attach gets them.
    fn detach(&mut self, client: ClientId, c: &Client) {
        for sid in &c.sessions {
            if let Some(s) = self.sessions.get_mut(sid) {
                s.attached.remove(&client);
            }
        }
        for key in &c.copies {
            if let Some(req) = self.requests.get_mut(key) {
                req.copies.retain(|x| *x != client);
            }
        }
        tracing::debug!(client, kind = ?c.kind, "client closed");
    }
}
