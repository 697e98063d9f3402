//! What the settings API changes in the router: the MCP servers of `config.json` added to every
//! session start (read when the agent starts: `needs-restart`), the default model applied at
//! each `session/new` (read then: `immediate`), the models the agent reports (published for
//! the loopback `/settings/*` mount), the count of `needs-restart` writes, and the backend
//! restart (`POST /backend/restart`): cancel the running turns, stop the agent's process
//! group, and let the next request start a new one, sessions re-loaded as after a crash.

use super::ClientId;
use super::Router;
use super::agent::{Pending, Purpose};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use zcode_shared::jsonrpc::{self, Id, RawMessage};
use zcode_shared::ordered::Ordered;
use zcode_shared::settings::{ReportedAgent, Settings, mcp, models};

/// How long running turns get to end cancelled before the agent is stopped anyway.
const CANCEL_GRACE: Duration = Duration::from_secs(3);

/// What a restart answers: `{ok, cancelledTurns, closed}`.
#[derive(Clone, Copy, Debug)]
pub struct RestartOutcome {
    /// Turns that were running and were cancelled.
    pub cancelled_turns: usize,
    /// Whether the old agent's process group is gone (`false`: it refused to die).
    pub closed: bool,
}

/// Reads `config.json` (blocking: call it off the router); unreadable or missing is empty.
pub fn read_config(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_default()
}

/// A client's `session/new`, held while `config.json` is read for its default model.
pub struct NewSession {
    /// Who asked.
    pub client: ClientId,
    /// Its request id.
    pub id: Id,
    /// The request (cwd pinned).
    pub msg: RawMessage,
    /// The session's directory.
    pub cwd: PathBuf,
    /// `additionalDirectories`.
    pub dirs: Vec<PathBuf>,
    /// `config.json` as read.
    pub config: String,
}

/// Settings events for the router.
pub enum SettingsEvent {
    /// `config.json` was read for a client's `session/new`.
    NewSession(Box<NewSession>),
    /// `POST /backend/restart`.
    Restart(oneshot::Sender<Result<RestartOutcome, String>>),
    /// The cancelled turns had their time: stop the agent now.
    CancelGraceOver(u64),
    /// The old agent's group was stopped (`closed`: it is gone).
    Stopped {
        /// Whether it is gone.
        closed: bool,
        /// The `needs-restart` writes this restart applies.
        applied: u64,
        /// Turns cancelled.
        cancelled_turns: usize,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<RestartOutcome, String>>,
    },
}

/// What the loopback mount reads: the agent's report and the pending-restart count.
#[derive(Clone)]
pub struct SettingsHandle {
    /// The agent's key, models and transports, once it is initialized.
    pub report: watch::Receiver<Option<ReportedAgent>>,
    /// `needs-restart` writes since the last successful restart.
    pub pending: Arc<AtomicU64>,
}

struct Restarting {
    reply: oneshot::Sender<Result<RestartOutcome, String>>,
    cancelled: usize,
    running: HashSet<String>,
    seq: u64,
}

/// The router's settings state.
pub struct SettingsState {
    settings: Option<Settings>,
    pending: Arc<AtomicU64>,
    report: watch::Sender<Option<ReportedAgent>>,
    /// `config.json` as it was when the agent started.
    config_at_start: String,
    /// The agent's MCP servers (ACP shapes), fixed when it initialized.
    mcp: Vec<Value>,
    restart: Option<Restarting>,
    restart_seq: u64,
}

impl SettingsState {
    /// State for a bridge whose settings live in `settings` (`None`: no settings at all).
    pub fn new(settings: Option<Settings>) -> SettingsState {
        SettingsState {
            settings,
            pending: Arc::new(AtomicU64::new(0)),
            report: watch::channel(None).0,
            config_at_start: String::new(),
            mcp: Vec::new(),
            restart: None,
            restart_seq: 0,
        }
    }

    /// The mount's view.
    pub fn handle(&self) -> SettingsHandle {
        SettingsHandle { report: self.report.subscribe(), pending: self.pending.clone() }
    }

    /// `config.json`, when this bridge has settings. Read it off the router ([`read_config`]).
    pub fn config_file(&self) -> Option<PathBuf> {
        self.settings.as_ref().map(|s| s.paths.config_file.clone())
    }

    /// The agent was just spawned, with `config.json` as `text` (read just before).
    pub fn agent_spawned(&mut self, text: String) {
        self.config_at_start = text;
    }

    /// `params` of a session start with the configured servers added (the client's win on a
    /// name clash); other messages as they are.
    pub fn with_mcp(&self, msg: RawMessage) -> RawMessage {
        if self.mcp.is_empty() || !matches!(msg.method(), "session/new" | "session/load" | "session/resume") {
            return msg;
        }
        let mut params = msg.params_value();
        if !params.is_object() {
            return msg;
        }
        params["mcpServers"] = Value::Array(self.merged(&params["mcpServers"]));
        RawMessage { params: Some(jsonrpc::raw(&params)), ..msg }
    }

    /// The client's servers, then each configured one whose name they do not use.
    pub fn merged(&self, client: &Value) -> Vec<Value> {
        let mut out = client.as_array().cloned().unwrap_or_default();
        let taken: HashSet<String> =
            out.iter().filter_map(|s| s["name"].as_str().map(str::to_owned)).collect();
        out.extend(
            self.mcp.iter().filter(|s| !s["name"].as_str().is_some_and(|n| taken.contains(n))).cloned(),
        );
        out
    }
}

/// The agent's key: `agentInfo.name`, else its command's file name.
fn agent_key(init: &Value, command: &str) -> (String, String) {
    let file = std::path::Path::new(command)
        .file_name()
        .map_or(command.to_owned(), |f| f.to_string_lossy().into_owned());
    let key = init["agentInfo"]["name"]
        .as_str()
        .filter(|n| zcode_shared::settings::valid_key(n))
        .map_or(file, str::to_owned);
    let name = init["agentInfo"]["title"].as_str().map_or_else(|| key.clone(), str::to_owned);
    (key, name)
}

/// `(config option id, (id, name) of each model, current model)`.
type Choices = (Option<String>, Vec<(String, String)>, Option<String>);

/// The model choices a session start reported: `(config option id, models, current)` from a
/// `model`-category config option, else `(None, …)` from the session's model state.
fn model_choices(result: &Value) -> Option<Choices> {
    if let Some(opt) =
        result["configOptions"].as_array().and_then(|a| a.iter().find(|o| o["category"] == "model"))
    {
        let mut models = Vec::new();
        for o in opt["options"].as_array().into_iter().flatten() {
            // Grouped options carry their own `options`.
            let group = o["options"].as_array().cloned().unwrap_or_else(|| vec![o.clone()]);
            for m in group {
                if let Some(v) = m["value"].as_str() {
                    models.push((v.to_owned(), m["name"].as_str().unwrap_or(v).to_owned()));
                }
            }
        }
        let id = opt["id"].as_str().map(str::to_owned);
        return Some((id, models, opt["currentValue"].as_str().map(str::to_owned)));
    }
    let state = &result["models"];
    let models: Vec<(String, String)> = state["availableModels"]
        .as_array()?
        .iter()
        .filter_map(|m| {
            let id = m["modelId"].as_str()?;
            Some((id.to_owned(), m["name"].as_str().unwrap_or(id).to_owned()))
        })
        .collect();
    Some((None, models, state["currentModelId"].as_str().map(str::to_owned)))
}

impl Router {
    /// The agent answered `initialize`: fix its MCP servers, publish who it is.
    pub(super) fn settings_agent_ready(&mut self, init: &Value) {
        let takes = mcp::transports(&init["agentCapabilities"]);
        let (servers, skipped) = mcp::for_agent(&self.settings.config_at_start, &takes);
        for (name, why) in &skipped {
            tracing::warn!(server = %name, "MCP server not given to the agent: {why}");
        }
        self.settings.mcp = servers;
        let (key, name) = agent_key(init, self.agent.command());
        let previous = self.settings.report.borrow().clone().filter(|r| r.key == key);
        let report = ReportedAgent { key, name, transports: takes, ..previous.unwrap_or_default() };
        self.settings.report.send_replace(Some(report));
    }

    /// A session started (`session/new` answered): note the models it reports and apply the
    /// agent's default model through the agent's own call.
    pub(super) fn settings_session_started(&mut self, sid: &str, result: &Value, config: &str) {
        let Some((option, models, current)) = model_choices(result) else { return };
        let key = self.settings.report.borrow().as_ref().map(|r| r.key.clone());
        self.settings.report.send_modify(|r| {
            if let Some(r) = r {
                r.models = models.clone();
                r.current = current.clone();
            }
        });
        let Some(key) = key else { return };
        let root = Ordered::parse(config).unwrap_or_default();
        let Some(default) = models::default_for(&root, &key) else { return };
        if current.as_deref() == Some(default.as_str()) {
            return;
        }
        if !models.iter().any(|(id, _)| *id == default) {
            return tracing::warn!(agent = %key, model = %default, "the default model is not one the agent offers");
        }
        let (method, params) = match option {
            Some(config_id) => (
                "session/set_config_option",
                json!({"sessionId": sid, "configId": config_id, "value": default}),
            ),
            None => ("session/set_model", json!({"sessionId": sid, "modelId": default})),
        };
        tracing::info!(session = sid, model = %default, method, "applying the default model");
        let pending = Pending { client: None, method: method.to_owned(), purpose: Purpose::Forward };
        self.agent.request_value(method, &params, pending);
        self.settings.report.send_modify(|r| {
            if let Some(r) = r {
                r.current = Some(default.clone());
            }
        });
    }

    /// The servers a reload into a restarted agent carries.
    pub(super) fn settings_reload_servers(&self) -> Value {
        Value::Array(self.settings.merged(&json!([])))
    }

    pub(super) fn on_settings(&mut self, ev: SettingsEvent) {
        match ev {
            SettingsEvent::Restart(reply) => self.begin_restart(reply),
            SettingsEvent::NewSession(new) => self.forward_new_session(*new),
            SettingsEvent::CancelGraceOver(seq) => {
                if self.settings.restart.as_ref().is_some_and(|r| r.seq == seq) {
                    self.stop_agent_for_restart();
                }
            }
            SettingsEvent::Stopped { closed, applied, cancelled_turns, reply } => {
                if closed {
                    self.settings.pending.fetch_sub(
                        applied.min(self.settings.pending.load(Ordering::SeqCst)),
                        Ordering::SeqCst,
                    );
                }
                tracing::info!(closed, cancelled_turns, "backend restart done");
                let _ = reply.send(Ok(RestartOutcome { cancelled_turns, closed }));
            }
        }
    }

    fn begin_restart(&mut self, reply: oneshot::Sender<Result<RestartOutcome, String>>) {
        if self.settings.restart.is_some() {
            let _ = reply.send(Err("a backend restart is already under way".to_owned()));
            return;
        }
        let running: HashSet<String> =
            self.sessions.values().filter(|s| s.running).map(|s| s.id.clone()).collect();
        for sid in &running {
            self.agent.write(jsonrpc::notification("session/cancel", json!({"sessionId": sid})).to_string());
        }
        self.settings.restart_seq += 1;
        let seq = self.settings.restart_seq;
        tracing::info!(turns = running.len(), "backend restart: cancelling running turns");
        self.settings.restart = Some(Restarting { reply, cancelled: running.len(), running, seq });
        self.tasks.spawn(async move {
            tokio::time::sleep(CANCEL_GRACE).await;
            super::Event::Settings(SettingsEvent::CancelGraceOver(seq))
        });
        self.settings_restart_progress();
    }

    /// After every event: once the cancelled turns have ended, stop the agent.
    pub(super) fn settings_restart_progress(&mut self) {
        let Some(r) = &self.settings.restart else { return };
        if r.running.iter().any(|sid| self.sessions.get(sid).is_some_and(|s| s.running)) {
            return;
        }
        self.stop_agent_for_restart();
    }

    fn stop_agent_for_restart(&mut self) {
        let Some(r) = self.settings.restart.take() else { return };
        let applied = self.settings.pending.load(Ordering::SeqCst);
        let (process, pending) = self.agent.take_for_restart();
        let restart = self.agent.note("was restarted to apply new settings");
        self.fail_pending(pending, &restart);
        self.agent_down(&restart);
        self.tasks.spawn(async move {
            let closed = match process {
                Some(p) => p.stop().await,
                None => true,
            };
            let ev = SettingsEvent::Stopped { closed, applied, cancelled_turns: r.cancelled, reply: r.reply };
            super::Event::Settings(ev)
        });
    }
}
