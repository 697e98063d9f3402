//! The router's link to the upstream agent: its process, generation, handshake state, the
//! bridge-side ids of requests in flight, the messages held while it (re)starts, and why it is
//! down ([`Failure`], published as [`AgentHealth`] for registration and `up`).

use super::Event;
use super::client::ClientId;
use crate::upstream::{AgentProcess, StderrTail};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};
use zcode_shared::jsonrpc::{Id, RawMessage};

pub use crate::upstream::AgentSpec;

/// Why the bridge sent a request upstream: decides what its answer does.
#[derive(Debug)]
pub enum Purpose {
    /// The bridge's own `initialize`.
    Initialize,
    /// A client's request, answered back to it as is.
    Forward,
    /// A client's `session/list`: answered as the tasks index sees it ([`super::listing`]).
    List,
    /// A client's `session/new`: the answer creates the session.
    NewSession {
        /// The session's directory.
        cwd: PathBuf,
        /// `additionalDirectories`.
        dirs: Vec<PathBuf>,
        /// `config.json` as it was when the client asked (its default model).
        config: String,
    },
    /// A client's `session/load` of a session not live here.
    Load {
        /// The session.
        session: String,
        /// What the client asked to be replayed once it is loaded.
        mode: crate::journal::ReadMode,
    },
    /// The bridge re-loading a session into a restarted agent.
    Reattach {
        /// The session.
        session: String,
    },
    /// A `session/prompt`: its answer ends the session's turn.
    Prompt {
        /// The session.
        session: String,
    },
}

/// A request the agent has not answered yet.
#[derive(Debug)]
pub struct Pending {
    /// The client that asked, and its id, if a client asked.
    pub client: Option<(ClientId, Id)>,
    /// The method, for error messages.
    pub method: String,
    /// What the answer does.
    pub purpose: Purpose,
}

/// Where the agent is.
#[derive(Debug)]
pub enum LinkState {
    /// No process (never started, or exited).
    Down,
    /// Spawned; the bridge's `initialize` is in flight.
    Starting,
    /// Initialized: the agent's `initialize` result (patched for clients).
    Ready {
        /// What clients get as their `initialize` result, serialised once: every client's
        /// `initialize` is answered from it with only its id spliced in.
        for_clients: Box<serde_json::value::RawValue>,
        /// The agent's own result, to read its capabilities.
        agent: Value,
    },
}

/// Whether the agent came up, as registration (`agentError`) and `zcode-acp up` see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentHealth {
    /// Not started yet, or starting: nothing known.
    Unknown,
    /// Its `initialize` succeeded.
    Ready,
    /// It could not be started, refused `initialize`, or exited: the error clients are given.
    Failed(String),
}

/// Why the agent is down, worded for a person: "NAME: WHAT", then its last stderr lines.
#[derive(Clone, Debug)]
pub struct Failure {
    /// "claude: command not found: claude-code-acp".
    pub head: String,
    /// Its last stderr lines, if any.
    pub tail: String,
}

impl Failure {
    /// The head, `middle` (context such as "; it restarts on the next request"), then the tail.
    pub fn with(&self, middle: &str) -> String {
        if self.tail.is_empty() {
            format!("{}{middle}", self.head)
        } else {
            format!("{}{middle}\nits last lines on stderr:\n{}", self.head, self.tail)
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.with(""))
    }
}

/// The link to the upstream agent.
pub struct AgentLink {
    spec: AgentSpec,
    /// Incremented on every spawn; events of an older generation are stale.
    pub generation: u64,
    /// Handshake state.
    pub state: LinkState,
    process: Option<AgentProcess>,
    next_id: u64,
    /// Requests in flight, by bridge id.
    pub pending: HashMap<u64, Pending>,
    /// Client messages held until the agent is ready.
    pub deferred: Vec<(ClientId, RawMessage)>,
    /// The current (or last) process's stderr tail.
    tail: Arc<Mutex<StderrTail>>,
    /// Published on every change of readiness.
    health: watch::Sender<AgentHealth>,
    /// Started before any client asks.
    pub eager: bool,
    /// Down, its configuration being read for a start ([`super::startup`]).
    pub preparing: bool,
}

impl AgentLink {
    /// A link that starts the agent on first need.
    pub fn new(spec: AgentSpec, health: watch::Sender<AgentHealth>, eager: bool) -> AgentLink {
        AgentLink {
            tail: Arc::default(),
            health,
            eager,
            preparing: false,
            spec,
            generation: 0,
            state: LinkState::Down,
            process: None,
            next_id: 1,
            pending: HashMap::new(),
            deferred: Vec::new(),
        }
    }

    /// Whether the agent is up, or why not.
    pub fn health(&self) -> watch::Receiver<AgentHealth> {
        self.health.subscribe()
    }

    /// What the tasks index calls this agent ([`AgentSpec::name`]).
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether the agent is initialized.
    pub fn ready(&self) -> bool {
        matches!(self.state, LinkState::Ready { .. })
    }

    /// The agent's own `initialize` result, once ready.
    pub fn capabilities(&self) -> Option<&Value> {
        match &self.state {
            LinkState::Ready { agent, .. } => Some(&agent["agentCapabilities"]),
            _ => None,
        }
    }

    /// The method that loads a session not live in the agent: `session/load` when it can
    /// replay, else `session/resume` when it offers that, else `None`.
    pub fn reload_method(&self) -> Option<&'static str> {
        let caps = self.capabilities()?;
        if caps["loadSession"] == true {
            Some("session/load")
        } else if caps["sessionCapabilities"].get("resume").is_some() {
            Some("session/resume")
        } else {
            None
        }
    }

    /// Spawns the agent and sends the bridge's `initialize`, if it is down. An error means
    /// it could not be spawned at all.
    pub fn ensure_started(&mut self, events: &mpsc::Sender<Event>) -> Result<(), String> {
        if !matches!(self.state, LinkState::Down) {
            return Ok(());
        }
        self.generation += 1;
        let process = AgentProcess::spawn(&self.spec, self.generation, events.clone())
            .map_err(|e| spawn_failure(&self.spec, &e))?;
        self.tail = process.tail();
        tracing::info!(agent = %self.spec.display, pid = process.pid(), generation = self.generation, "agent started");
        self.process = Some(process);
        self.state = LinkState::Starting;
        let params = json!({
            "protocolVersion": 1,
            // Everything the bridge can serve for SOME client: fs and terminals locally,
            // elicitations through the clients that advertise them (and declined when no
            // attached one does). The agent is initialized once, so it must hear the union
            // up front: a phone that renders forms may attach at any time.
            "clientCapabilities": {
                "fs": {"readTextFile": true, "writeTextFile": true},
                "terminal": true,
                "elicitation": {"form": {}, "url": {}},
            },
            "clientInfo": {"name": "zcode-acp", "title": "zcode-acp bridge", "version": zcode_shared::VERSION},
        });
        self.request_value(
            "initialize",
            &params,
            Pending { client: None, method: "initialize".into(), purpose: Purpose::Initialize },
        );
        Ok(())
    }

    /// Sends `msg` upstream under a fresh bridge id; returns that id.
    pub fn forward(&mut self, msg: &RawMessage, pending: Pending) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.write(msg.line_with_id(Some(&Id::from(id))));
        self.pending.insert(id, pending);
        id
    }

    /// Sends a request the bridge builds itself; returns its bridge id.
    pub fn request_value(&mut self, method: &str, params: &Value, pending: Pending) -> u64 {
        let msg = RawMessage {
            id: None,
            method: Some(method.to_owned()),
            params: Some(zcode_shared::jsonrpc::raw(params)),
            result: None,
            error: None,
        };
        self.forward(&msg, pending)
    }

    /// Sends a line to the agent as is (notifications, answers to its requests).
    pub fn write(&mut self, line: String) {
        if let Some(p) = &self.process {
            p.send(line);
        }
    }

    /// Answers one of the agent's requests.
    pub fn answer(&mut self, id: &Id, result: Result<&RawValue, Value>) {
        self.write(zcode_shared::jsonrpc::response_line(id, result));
    }

    /// The agent process exited: forget it. Returns the requests that were in flight.
    pub fn exited(&mut self) -> Vec<Pending> {
        self.process = None;
        self.state = LinkState::Down;
        self.pending.drain().map(|(_, p)| p).collect()
    }

    /// Kills the agent's process group without waiting (an agent that failed its handshake).
    /// Returns the requests that were in flight; later events of this generation are stale.
    pub fn kill(&mut self) -> Vec<Pending> {
        if let Some(p) = self.process.take() {
            p.kill();
        }
        self.generation += 1;
        self.exited()
    }

    /// The agent failed (`what`: "exited with status 3"): the error named after it, with its
    /// last stderr lines, published until it is ready again.
    pub fn fail(&mut self, what: &str) -> Failure {
        let tail = self.tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner).text();
        let failure = Failure { tail, ..self.note(what) };
        tracing::error!(agent = %self.spec.display, "{failure}");
        self.health.send_replace(AgentHealth::Failed(failure.to_string()));
        failure
    }

    /// The agent went down for a reason that is no failure (a restart): worded like one,
    /// without the stderr tail, and not published.
    pub fn note(&self, what: &str) -> Failure {
        Failure { head: format!("{}: {what}", self.spec.label), tail: String::new() }
    }

    /// The agent answered `initialize`: any earlier failure is over.
    pub fn set_ready(&self) {
        self.health.send_replace(AgentHealth::Ready);
    }

    /// The agent's program (its key's fallback).
    pub fn command(&self) -> &str {
        &self.spec.command
    }

    /// Takes the process out for a restart: the link is down (later events of this
    /// generation are stale); returns the process to stop and the requests in flight.
    pub fn take_for_restart(&mut self) -> (Option<AgentProcess>, Vec<Pending>) {
        let process = self.process.take();
        self.generation += 1;
        (process, self.exited())
    }

    /// Terminates the agent's process group and waits for it (shutdown: the bridge must not
    /// exit before its agent's group is gone, nor wait out the kill grace once it is).
    pub async fn terminate(&mut self) {
        if let Some(p) = self.process.take() {
            if !p.stop().await {
                tracing::warn!("the agent's process group outlived SIGKILL by 2 s: exiting anyway");
            }
        }
        self.state = LinkState::Down;
    }
}

/// Why the agent could not be spawned, worded to follow its name ("claude: command not found:
/// claude-code-acp", see [`AgentLink::fail`]).
fn spawn_failure(spec: &AgentSpec, e: &std::io::Error) -> String {
    let command = &spec.command;
    match e.kind() {
        std::io::ErrorKind::NotFound if !command.contains('/') => {
            format!("command not found: {command}")
        }
        std::io::ErrorKind::NotFound => format!("no such file: {command}"),
        std::io::ErrorKind::PermissionDenied => format!("not executable (permission denied): {command}"),
        _ => format!("cannot be started ({e}): {command}"),
    }
}
