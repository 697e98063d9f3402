//! The router's side of hooks ([`crate::hooks`]): which ACP traffic fires which event, and
//! what the answers of the deciding events do. Hooks run in tasks of their own and report back
//! as [`Event::Hook`]; the router never waits for one. Observing events (SessionStart,
//! PreToolUse, PostToolUse, PostToolUseFailure, Stop) only journal their runs; a
//! UserPromptSubmit holds its prompt (the session counts as running) until its hooks answer;
//! a PermissionRequest races its hooks against the clients that got the request.

use super::session::{QueuedPrompt, prompt_text};
use super::{ClientId, EDITOR, Event, Router};
use crate::hooks::decide::{self, PromptVerdict};
use crate::hooks::payload::{self, Tool};
use crate::hooks::{HookEvent, Job, Record, Tree};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use zcode_shared::jsonrpc::{self, Id, RawMessage, RpcError};

/// Observing runs in flight per session past which new ones are dropped (and logged): an agent
/// streaming tool calls faster than hooks finish must not pile up processes.
const OBSERVE_LIMIT: usize = 32;
/// Tool calls remembered until they complete.
const TOOLS_LIMIT: usize = 4096;

/// Hooks' results, back on the router.
pub enum HookReport {
    /// An observing event's runs.
    Observed {
        /// The session.
        session: String,
        /// The runs.
        records: Vec<Record>,
    },
    /// A UserPromptSubmit's runs: the held prompt goes on or is refused.
    Prompt {
        /// The session.
        session: String,
        /// The runs.
        records: Vec<Record>,
    },
    /// A PermissionRequest's runs, for agent request `key`.
    Permission {
        /// The router's key of the request.
        key: u64,
        /// The agent process that asked.
        generation: u64,
        /// The session.
        session: String,
        /// The request's options.
        options: Value,
        /// The runs.
        records: Vec<Record>,
    },
}

/// The hooks state the router owns.
#[derive(Default)]
pub struct Gate {
    /// `config.json` (`None`: hooks are off for this router).
    config_file: Option<PathBuf>,
    tree: Arc<Tree>,
    /// Tool calls seen, by (session, toolCallId), until they complete.
    tools: HashMap<(String, String), Tool>,
    /// Prompts held while their UserPromptSubmit hooks run, by session.
    checking: HashMap<String, QueuedPrompt>,
    /// Prompts their hooks let through, back in the queue (not checked twice), with the params
    /// the agent gets when hooks added context.
    approved: HashMap<(String, ClientId, Id), Option<Box<serde_json::value::RawValue>>>,
    /// Observing runs in flight per session.
    observing: HashMap<String, Arc<AtomicUsize>>,
}

impl Gate {
    /// Hooks read from `config_file` at every agent start.
    pub fn new(config_file: Option<PathBuf>) -> Gate {
        Gate { config_file, ..Gate::default() }
    }
}

impl Gate {
    /// Where the tree is read from at an agent start (`None`: hooks are off).
    pub fn config_file(&self) -> Option<PathBuf> {
        self.config_file.clone()
    }

    /// The tree read at an agent start (off the router: [`super::startup`]).
    pub fn set_tree(&mut self, tree: Tree) {
        self.tree = Arc::new(tree);
    }
}

impl Router {
    fn job(
        &self,
        event: HookEvent,
        sid: &str,
        subjects: &[&str],
        fill: impl FnOnce(&mut Map<String, Value>),
    ) -> Option<Job> {
        let commands = self.hooks.tree.commands(event, subjects);
        if commands.is_empty() {
            return None;
        }
        let cwd = self.sessions.get(sid)?.cwd.clone();
        let mut input = payload::base(event, sid, &cwd);
        fill(&mut input);
        let (session, max_output) = (sid.to_owned(), self.hooks.tree.max_output);
        Some(Job { event, session, cwd, input: Value::Object(input), commands, max_output })
    }

    fn observe(&mut self, job: Option<Job>) {
        let Some(job) = job else { return };
        let count = self.hooks.observing.entry(job.session.clone()).or_default().clone();
        if count.fetch_add(1, Ordering::SeqCst) >= OBSERVE_LIMIT {
            count.fetch_sub(1, Ordering::SeqCst);
            return tracing::warn!(session = %job.session, event = job.event.name(), "too many hooks running for this session: skipped");
        }
        self.tasks.spawn(async move {
            let session = job.session.clone();
            let records = job.run().await;
            count.fetch_sub(1, Ordering::SeqCst);
            Event::Hook(HookReport::Observed { session, records })
        });
    }

    /// session/new, load or resume answered by the agent.
    pub(super) fn hook_session_start(&mut self, sid: &str, method: &str) {
        let source = method.rsplit('/').next().unwrap_or(method).to_owned();
        let job = self.job(HookEvent::SessionStart, sid, &[&source], |m| {
            m.insert("source".into(), json!(source));
        });
        self.observe(job);
    }

    /// A live session's update: a `tool_call` fires PreToolUse, a completion PostToolUse or
    /// PostToolUseFailure.
    pub(super) fn hook_update(&mut self, sid: &str, msg: &RawMessage, line: &Bytes) {
        let t = &self.hooks.tree;
        let tools = [
            HookEvent::PreToolUse,
            HookEvent::PermissionRequest,
            HookEvent::PostToolUse,
            HookEvent::PostToolUseFailure,
        ];
        if !tools.iter().any(|e| t.wants(*e)) || !line.windows(9).any(|w| w == b"tool_call") {
            return;
        }
        let params = msg.params_value();
        let u = &params["update"];
        let id = u["toolCallId"].as_str().unwrap_or_default().to_owned();
        let key = (sid.to_owned(), id);
        let status = u["status"].as_str();
        let done = match status {
            Some("completed") => Some(HookEvent::PostToolUse),
            Some("failed") => Some(HookEvent::PostToolUseFailure),
            _ => None,
        };
        match u["sessionUpdate"].as_str() {
            Some("tool_call") => {
                let tool = Tool::from_call(u, None);
                let job = self.job(HookEvent::PreToolUse, sid, &tool.subjects(), |m| tool.fill(m));
                self.observe(job);
                if done.is_none() {
                    if self.hooks.tools.len() >= TOOLS_LIMIT {
                        self.hooks.tools.clear();
                    }
                    self.hooks.tools.insert(key.clone(), tool);
                    return;
                }
            }
            Some("tool_call_update") if done.is_some() => {}
            _ => return,
        }
        let Some(event) = done else { return };
        let known = self.hooks.tools.remove(&key);
        if known.is_none() && u["sessionUpdate"] == "tool_call_update" {
            return; // never seen, or already completed: fired once at most
        }
        let tool = Tool::from_call(u, known.as_ref());
        let job = self.job(event, sid, &tool.subjects(), |m| {
            tool.fill(m);
            m.insert("tool_response".into(), payload::tool_response(u));
            m.insert("tool_status".into(), json!(status));
        });
        self.observe(job);
    }

    /// The prompt's response: Stop.
    pub(super) fn hook_stop(&mut self, sid: &str, msg: &RawMessage) {
        let result = msg.result_as::<Value>();
        let job = self.job(HookEvent::Stop, sid, &[], |m| {
            m.insert("stop_reason".into(), result.as_ref().map_or(Value::Null, |r| r["stopReason"].clone()));
            if let Some(e) = msg.error.as_ref() {
                m.insert("error".into(), serde_json::from_str(e.get()).unwrap_or(Value::Null));
            }
        });
        self.observe(job);
    }

    /// A prompt about to start: returned to go on now (with the message the agent gets, when
    /// hooks added context to it; the prompt itself is what clients and the journal see), or
    /// held while its UserPromptSubmit hooks run (the session counts as running meanwhile).
    pub(super) fn hook_prompt(
        &mut self,
        sid: &str,
        p: QueuedPrompt,
    ) -> Option<(QueuedPrompt, Option<RawMessage>)> {
        if let Some(params) = self.hooks.approved.remove(&(sid.to_owned(), p.client, p.id.clone())) {
            let upstream = params.map(|params| RawMessage { params: Some(params), ..p.msg.clone() });
            return Some((p, upstream));
        }
        let text = prompt_text(&p.msg.params_value());
        let Some(job) = self.job(HookEvent::UserPromptSubmit, sid, &[], |m| {
            m.insert("prompt".into(), json!(text));
        }) else {
            return Some((p, None));
        };
        if let Some(s) = self.sessions.get_mut(sid) {
            s.running = true;
        }
        self.hooks.checking.insert(sid.to_owned(), p);
        self.tasks.spawn(async move {
            let session = job.session.clone();
            let records = job.run().await;
            Event::Hook(HookReport::Prompt { session, records })
        });
        None
    }

    /// `session/cancel` while a prompt is held: it ends cancelled, as a turn would.
    pub(super) fn hook_cancel(&mut self, sid: &str) {
        let Some(p) = self.hooks.checking.remove(sid) else { return };
        self.clients.reply(p.client, &p.id, Ok(json!({"stopReason": "cancelled"})));
        if let Some(s) = self.sessions.get_mut(sid) {
            s.running = false;
        }
        self.pump(sid);
    }

    /// A permission request delivered to the clients: its hooks race them.
    pub(super) fn hook_permission(&mut self, key: u64) {
        let Some(req) = self.requests.get(&key) else { return };
        let (Some(sid), generation) = (req.session.clone(), req.generation) else { return };
        let params = req.msg.params_value();
        let known = self
            .hooks
            .tools
            .get(&(sid.clone(), params["toolCall"]["toolCallId"].as_str().unwrap_or_default().to_owned()));
        let tool = Tool::from_call(&params["toolCall"], known);
        let options = params["options"].clone();
        let Some(job) = self.job(HookEvent::PermissionRequest, &sid, &tool.subjects(), |m| {
            tool.fill(m);
            m.insert("permission_options".into(), options.clone());
        }) else {
            return;
        };
        self.tasks.spawn(async move {
            let records = job.run().await;
            Event::Hook(HookReport::Permission { key, generation, session: sid, options, records })
        });
    }

    pub(super) fn on_hook(&mut self, report: HookReport) {
        match report {
            HookReport::Observed { session, records } => self.journal_runs(&session, records, &Map::new()),
            HookReport::Prompt { session, records } => self.on_prompt_checked(&session, records),
            HookReport::Permission { key, generation, session, options, records } => {
                let mut extra = Map::new();
                if let Some((decision, option)) = decide::permission(&records, &options) {
                    let live = self.requests.get(&key).is_some_and(|r| r.generation == generation)
                        && generation == self.agent.generation;
                    if let Some(req) = live.then(|| self.withdraw(key, None)).flatten() {
                        let answer = json!({"outcome": {"outcome": "selected", "optionId": option}});
                        self.agent.answer(&req.upstream_id, Ok(&jsonrpc::raw(&answer)));
                        let (session, by, option) = (session.clone(), "hook".to_owned(), option.to_string());
                        self.requests.answers.note(super::answers::Answered { key, session, by, option });
                    }
                    extra.insert("decision".into(), json!(decision));
                    extra.insert("optionId".into(), json!(option));
                    extra.insert("answeredBy".into(), json!(if live { "hook" } else { "client" }));
                }
                self.journal_runs(&session, records, &extra);
            }
        }
    }

    fn on_prompt_checked(&mut self, sid: &str, records: Vec<Record>) {
        let verdict = decide::prompt(&records);
        let mut extra = Map::new();
        if let PromptVerdict::Block(reason) = &verdict {
            extra.insert("decision".into(), json!("block"));
            extra.insert("reason".into(), json!(reason));
        }
        self.journal_runs(sid, records, &extra);
        let Some(p) = self.hooks.checking.remove(sid) else { return }; // cancelled meanwhile
        if let Some(s) = self.sessions.get_mut(sid) {
            s.running = false;
        }
        match verdict {
            PromptVerdict::Block(reason) => {
                let err = RpcError {
                    data: Some(json!({"hook": "UserPromptSubmit", "reason": reason})),
                    ..RpcError::new(
                        jsonrpc::INVALID_REQUEST,
                        format!("prompt refused by a UserPromptSubmit hook: {reason}"),
                    )
                };
                self.clients.reply(p.client, &p.id, Err(err));
            }
            PromptVerdict::Pass(context) => {
                let upstream = (!context.is_empty()).then(|| {
                    let mut params = p.msg.params_value();
                    let mut blocks: Vec<Value> =
                        context.into_iter().map(|c| json!({"type": "text", "text": c})).collect();
                    blocks.extend(params["prompt"].as_array().cloned().unwrap_or_default());
                    params["prompt"] = Value::Array(blocks);
                    jsonrpc::raw(&params)
                });
                self.hooks.approved.insert((sid.to_owned(), p.client, p.id.clone()), upstream);
                if let Some(s) = self.sessions.get_mut(sid) {
                    s.queue.push_front(p);
                }
            }
        }
        self.pump(sid);
    }

    /// Journals each run and shows it to the session's remote clients (an editor's ACP SDK
    /// would refuse the unknown update kind).
    fn journal_runs(&mut self, sid: &str, records: Vec<Record>, extra: &Map<String, Value>) {
        for r in records {
            let mut update = r.update();
            for (k, v) in extra {
                update[k] = v.clone();
            }
            let line = Bytes::from(
                jsonrpc::notification("session/update", json!({"sessionId": sid, "update": update}))
                    .to_string(),
            );
            if !self.sessions.contains_key(sid) {
                continue;
            }
            self.record(sid, &line);
            let targets = self.sessions.attached(sid, Some(EDITOR));
            self.emit(sid, &line, targets);
        }
    }
}
