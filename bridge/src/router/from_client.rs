//! Messages from clients: the handshake, session creation and loading, prompts, cancels,
//! answers to the agent's requests, and everything else forwarded with only its id rewritten.

use super::agent::{Pending, Purpose};
use super::client::Init;
use super::session::{QueuedPrompt, Session, Upstream, prompt_text, title_of};
use super::{ClientId, Router};
use crate::journal::ReadMode;
use bytes::Bytes;
use serde_json::{Value, json};
use std::path::PathBuf;
use zcode_shared::jsonrpc::{self, Id, ParseError, RawKind, RawMessage, RpcError};

impl Router {
    pub(super) fn on_frame(&mut self, client: ClientId, msg: Result<RawMessage, ParseError>) {
        let msg = match msg {
            Ok(m) => m,
            Err(e) => {
                let err = jsonrpc::error_response(None, &RpcError::new(e.code(), e.to_string()));
                return self.clients.send_msg(client, &err);
            }
        };
        if self.watch_refuses(client, &msg) {
            return;
        }
        match msg.kind() {
            RawKind::Request => self.on_request(client, msg),
            RawKind::Notification => self.on_notification(client, msg),
            RawKind::Response => self.on_response(client, msg),
        }
    }

    fn on_request(&mut self, client: ClientId, msg: RawMessage) {
        let Some(id) = msg.id.clone() else { return };
        let Some(c) = self.clients.get(&client) else { return };
        if msg.method() == "initialize" {
            return self.on_initialize(client, &id, &msg);
        }
        // A remote client's liveness check: answered here at once, whatever the agent does.
        if msg.method() == "$/ping" {
            return self.clients.reply(client, &id, Ok(json!({})));
        }
        if c.init != Init::Done {
            let err = RpcError::new(
                jsonrpc::INVALID_REQUEST,
                "send `initialize` first: nothing else is accepted before it",
            );
            return self.clients.reply(client, &id, Err(err));
        }
        match contract_method(msg.method()) {
            "session/new" => self.on_new_session(client, id, msg),
            "session/load" | "session/resume" => self.on_load(client, id, msg),
            "session/prompt" => self.on_prompt(client, id, msg),
            "session/load_earlier" => self.on_load_earlier(client, id, &msg),
            "account/usage_stats" => self.on_usage_stats(client, id),
            _ => self.forward_scoped(client, id, msg),
        }
    }

    fn on_initialize(&mut self, client: ClientId, id: &Id, msg: &RawMessage) {
        let params = msg.params_value();
        match params.get("protocolVersion") {
            // ACP: an agent that does not speak the requested version answers with the latest
            // it does (1: the result always says so) and the client decides.
            Some(v) if v.is_u64() || v.is_i64() => {}
            Some(v) => {
                let e = RpcError::invalid_params(format!(
                    "`protocolVersion` must be an integer (this bridge speaks {PROTOCOL_VERSION}), got {v}"
                ));
                return self.clients.reply(client, id, Err(e));
            }
            None => {
                return self.clients.reply(
                    client,
                    id,
                    Err(RpcError::invalid_params("missing required field `protocolVersion`")),
                );
            }
        }
        let Some(c) = self.clients.get_mut(&client) else { return };
        c.caps = super::client::Caps::from_params(&params);
        c.name = params["clientInfo"]["name"].as_str().map(zcode_shared::text::title);
        if let super::agent::LinkState::Ready { for_clients, .. } = &self.agent.state {
            c.init = Init::Done;
            // Serialised once when the agent became ready: only the id is spliced in.
            let line = Bytes::from(jsonrpc::response_line(id, Ok(for_clients)));
            return self.clients.send_to(client, line);
        }
        c.init = Init::Waiting(Box::new(id.clone()));
        self.start_agent();
    }

    fn on_load(&mut self, client: ClientId, id: Id, msg: RawMessage) {
        let params = msg.params_value();
        let Some(sid) = params["sessionId"].as_str().map(str::to_owned) else {
            return self.clients.reply(
                client,
                &id,
                Err(RpcError::invalid_params("missing required field `sessionId`")),
            );
        };
        // session/resume attaches without replay: metadata only.
        let limit = match (msg.method(), super::replay::tail_limit(&params)) {
            ("session/resume", _) => Some(0),
            (_, Ok(limit)) => limit,
            (_, Err(e)) => return self.clients.reply(client, &id, Err(e)),
        };
        let mode = ReadMode::Load { limit };
        let resume = match super::backlog::resume_of(&params) {
            Ok(r) => r.filter(|_| msg.method() == "session/load"),
            Err(e) => return self.clients.reply(client, &id, Err(e)),
        };
        // Taken by the replay this load ends in (`begin_replay`); a remote's only (the editor
        // gets no numbers). A load that fails leaves its ask: a few are kept, the oldest go.
        let remote = self.clients.get(&client).is_some_and(|c| c.kind == super::ClientKind::Remote);
        if let (Some(r), Some(c), true) = (resume, self.clients.get_mut(&client), remote) {
            c.resumes.retain(|(i, _)| *i != id);
            if c.resumes.len() >= RESUME_ASKS {
                c.resumes.remove(0);
            }
            c.resumes.push((id.clone(), r));
        }
        // A metadata-only attach (a client watching for its pending requests) is not use: it
        // never lifts a tombstone. A resume or a load with history is (an editor's or CLI's).
        let real_use = contract_method(msg.method()) == "session/resume" || limit != Some(0);
        if let Some(s) = self.sessions.get_mut(&sid) {
            if s.upstream == Upstream::Loading {
                s.waiting_loads.push((client, id, mode));
                return;
            }
            // Live here: never goes upstream; the client is served from the journal. A load
            // with history is real use: a closed session comes back.
            if limit != Some(0) {
                s.closed = false;
            }
            let base = attach_base(s.attach_result.as_deref());
            if real_use && self.clients.is_editor(client) {
                self.record_meta(&sid, Some(client), true);
            }
            return self.begin_replay(client, id, &sid, mode, Some(base));
        }
        if !self.agent.ready() {
            return self.defer(client, msg);
        }
        let method = self.agent.reload_method().unwrap_or(msg.method()).to_owned();
        let msg = self.sessions.pinned(msg);
        let params = msg.params_value();
        let cwd = params["cwd"].as_str().map(PathBuf::from).unwrap_or_default();
        let mut session = Session::new(sid.clone(), cwd, dirs_of(&params), Upstream::Loading);
        session.loader = Some(client);
        self.sessions.insert(sid.clone(), session);
        self.record_meta(&sid, Some(client), real_use);
        let mut upstream_msg = self.settings.with_mcp(msg);
        if method == "session/load" {
            upstream_msg = with_mcp_servers(upstream_msg);
        }
        upstream_msg.method = Some(method.clone());
        let pending =
            Pending { client: Some((client, id)), method, purpose: Purpose::Load { session: sid, mode } };
        self.agent.forward(&upstream_msg, pending);
    }

    fn on_prompt(&mut self, client: ClientId, id: Id, msg: RawMessage) {
        let Some(sid) = msg.session_id() else {
            return self.clients.reply(
                client,
                &id,
                Err(RpcError::invalid_params("missing required field `sessionId`")),
            );
        };
        if !self.sessions.contains_key(&sid) {
            // Not ours: the agent decides (and most likely says it does not know it).
            return self.forward_scoped(client, id, msg);
        }
        if let Some(full) = self.sessions.get(&sid).and_then(|s| s.queue_refusal(&msg)) {
            return self.clients.reply(client, &id, Err(RpcError::new(jsonrpc::INVALID_REQUEST, full)));
        }
        if !self.clients.get(&client).is_some_and(|c| c.sessions.contains(&sid)) {
            self.attach(client, &sid);
        }
        self.audit(client, "prompt", format!("session {sid}"));
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.queue.push_back(QueuedPrompt { client, id, msg, queued_at: zcode_shared::time::now_ms() });
        }
        self.pump(&sid);
    }

    /// Starts the session's next queued prompt if nothing runs and the agent can take it.
    pub(super) fn pump(&mut self, sid: &str) {
        let Some(s) = self.sessions.get(sid) else { return };
        if s.running || s.queue.is_empty() {
            return;
        }
        if !self.agent.ready() {
            return self.start_agent();
        }
        if !self.session_ready(sid) {
            return;
        }
        let generation = self.agent.generation;
        let Some(p) = self.sessions.get_mut(sid).and_then(|s| s.queue.pop_front()) else { return };
        let Some((p, upstream)) = self.hook_prompt(sid, p) else { return };
        let start = self.clients.turn_start(p.client);
        let Some(s) = self.sessions.get_mut(sid) else { return };
        self.agent.forward(
            upstream.as_ref().unwrap_or(&p.msg),
            Pending {
                client: Some((p.client, p.id.clone())),
                method: "session/prompt".into(),
                purpose: Purpose::Prompt { session: sid.to_owned() },
            },
        );
        debug_assert_eq!(s.upstream, Upstream::Live(generation));
        s.running = true;
        s.turn_start = Some(start);
        s.closed = false;
        s.turns += 1;
        s.updated_at = zcode_shared::time::now_ms();
        let first_fresh_turn = s.fresh && s.turns == 1 && s.title.is_none();
        let params = p.msg.params_value();
        // A prompt is real use: an editor's or CLI's revives a tombstoned session.
        self.record_meta(sid, Some(p.client), true);
        self.echo_prompt(sid, p.client, &p.msg);
        if first_fresh_turn {
            let title = title_of(&prompt_text(&params));
            if !title.is_empty() {
                self.set_title(sid, title, false);
            }
        }
    }

    /// Sends the prompt to every OTHER attached client as `user_message_chunk`s (`uprompt_`
    /// messageId) and records it as the start of a turn. Each block goes as the text it
    /// arrived as (never re-encoded), so the echo and its replay keep `_meta`, unknown fields
    /// and number spellings byte for byte.
    fn echo_prompt(&mut self, sid: &str, sender: ClientId, msg: &RawMessage) {
        #[derive(serde::Deserialize)]
        struct Blocks<'a> {
            #[serde(borrow, default)]
            prompt: Vec<&'a serde_json::value::RawValue>,
        }
        let message_id = self.sessions.echo_id();
        let raw = msg.params.as_deref().map_or("{}", serde_json::value::RawValue::get);
        // A prompt that is not an array of blocks was refused by the agent; nothing to echo.
        let Ok(blocks) = serde_json::from_str::<Blocks<'_>>(raw) else { return };
        let head = format!(
            r#"{{"sessionId":{},"update":{{"sessionUpdate":"user_message_chunk","messageId":{},"content":"#,
            Value::from(sid),
            Value::from(message_id)
        );
        for block in blocks.prompt {
            let params = format!("{head}{}}}}}", block.get());
            let line = Bytes::from(jsonrpc::notification_line("session/update", &params));
            self.record(sid, &line);
            self.fan_out(sid, &line, Some(sender));
        }
    }

    /// Sets a session's title and tells every attached client (`session_info_update`).
    /// `overridden`: a rename, which no automatic title replaces.
    pub(super) fn set_title(&mut self, sid: &str, title: String, overridden: bool) {
        let Some(s) = self.sessions.get_mut(sid) else { return };
        s.title = Some(title.clone());
        self.journal.title(sid, &title, overridden);
        let now = zcode_shared::time::now_ms();
        s.updated_at = now;
        let update = json!({"sessionUpdate": "session_info_update", "title": title,
            "updatedAt": zcode_shared::time::iso8601(now)});
        let line = Bytes::from(
            jsonrpc::notification("session/update", json!({"sessionId": sid, "update": update})).to_string(),
        );
        self.record(sid, &line);
        self.fan_out(sid, &line, None);
    }

    /// Whether a session can take requests now; if not, starts what makes it ready (a reload
    /// into a restarted agent) and returns `false`.
    fn session_ready(&mut self, sid: &str) -> bool {
        let generation = self.agent.generation;
        let servers = self.settings_reload_servers();
        let Some(s) = self.sessions.get_mut(sid) else { return true };
        match s.upstream {
            Upstream::Live(g) if g == generation => true,
            Upstream::Loading | Upstream::Reattaching => false,
            Upstream::Live(_) => {
                let Some(method) = self.agent.reload_method() else {
                    let err = RpcError::internal(
                        "the agent restarted and cannot reload sessions; start a new session",
                    );
                    self.fail_session_requests(sid, &err);
                    return false;
                };
                s.upstream = Upstream::Reattaching;
                let params = json!({"sessionId": sid, "cwd": s.cwd, "mcpServers": servers});
                tracing::info!(session = sid, method, "reloading the session into the restarted agent");
                self.agent.request_value(
                    method,
                    &params,
                    Pending {
                        client: None,
                        method: method.to_owned(),
                        purpose: Purpose::Reattach { session: sid.to_owned() },
                    },
                );
                false
            }
        }
    }

    /// Forwards a request upstream, first making sure the agent (and the session it names,
    /// if it is ours) is ready; held until then otherwise.
    fn forward_scoped(&mut self, client: ClientId, id: Id, msg: RawMessage) {
        if !self.agent.ready() {
            return self.defer(client, msg);
        }
        if let Some(sid) = msg.session_id().filter(|s| self.sessions.contains_key(s)) {
            if !self.session_ready(&sid) {
                if let Some(s) = self.sessions.get_mut(&sid) {
                    s.deferred.push((client, msg));
                }
                return;
            }
        }
        let method = msg.method().to_owned();
        let purpose = if method == "session/list" { Purpose::List } else { Purpose::Forward };
        let n = self.agent.forward(&msg, Pending { client: Some((client, id)), method, purpose });
        self.usage_sent(n, &msg);
    }

    /// Holds a message until the agent is ready, starting it if needed.
    pub(super) fn defer(&mut self, client: ClientId, msg: RawMessage) {
        self.agent.deferred.push((client, msg));
        self.start_agent();
    }

    fn on_notification(&mut self, client: ClientId, msg: RawMessage) {
        if self.clients.get(&client).is_none_or(|c| c.init != Init::Done) {
            return;
        }
        match msg.method() {
            "session/cancel" => self.on_cancel(client, msg),
            "$/cancel_request" => self.on_client_cancel_request(client, &msg),
            _ => {
                if self.agent.ready() {
                    self.agent.write(msg.to_line());
                } else {
                    self.defer(client, msg);
                }
            }
        }
    }

    /// `session/cancel`: forwarded, and the session's pending permissions and elicitations are
    /// answered `cancelled` / `cancel` upstream (as ACP requires of the client) and withdrawn
    /// from every client.
    fn on_cancel(&mut self, _client: ClientId, msg: RawMessage) {
        let Some(sid) = msg.session_id() else { return };
        let live =
            self.sessions.get(&sid).is_some_and(|s| s.upstream == Upstream::Live(self.agent.generation));
        if self.agent.ready() && (live || !self.sessions.contains_key(&sid)) {
            self.agent.write(msg.to_line());
        }
        self.hook_cancel(&sid);
        let keys: Vec<u64> = self.sessions.get(&sid).map(|s| s.requests.clone()).unwrap_or_default();
        for key in keys {
            let answer = match self.requests.get(&key).map(|r| r.msg.method()) {
                Some("session/request_permission") => json!({"outcome": {"outcome": "cancelled"}}),
                Some("elicitation/create") => json!({"action": "cancel"}),
                _ => continue,
            };
            if let Some(req) = self.withdraw(key, None) {
                if req.generation == self.agent.generation {
                    self.agent.answer(&req.upstream_id, Ok(&jsonrpc::raw(&answer)));
                }
            }
        }
    }

    /// A client cancels one of its own requests: a queued prompt is dropped here; a request
    /// in flight is cancelled upstream under the bridge's id.
    fn on_client_cancel_request(&mut self, client: ClientId, msg: &RawMessage) {
        let params = msg.params_value();
        let Some(target) = params.get("requestId").and_then(Id::from_value) else { return };
        for s in self.sessions.values_mut() {
            if let Some(pos) = s.queue.iter().position(|p| p.client == client && p.id == target) {
                s.queue.remove(pos);
                let err = RpcError::new(jsonrpc::REQUEST_CANCELLED, "request cancelled before it started");
                return self.clients.reply(client, &target, Err(err));
            }
        }
        let upstream = self
            .agent
            .pending
            .iter()
            .find(|(_, p)| p.client.as_ref().is_some_and(|(c, i)| *c == client && *i == target))
            .map(|(n, _)| *n);
        if let Some(n) = upstream {
            let line = jsonrpc::notification("$/cancel_request", json!({"requestId": n}));
            self.agent.write(line.to_string());
        }
    }

    /// A client answers one of the agent's requests: the first answer goes upstream, every
    /// other holder of a copy gets `$/cancel_request`, a late answer is dropped.
    fn on_response(&mut self, client: ClientId, msg: RawMessage) {
        let key = match &msg.id {
            Some(Id::Number(n)) => n.parse::<u64>().ok(),
            _ => None,
        };
        let held = key.is_some_and(|k| self.clients.get(&client).is_some_and(|c| c.copies.contains(&k)));
        let (Some(key), true) = (key, held) else {
            tracing::debug!(client, id = ?msg.id, "answer to a request this client was not sent (or already answered): dropped");
            return;
        };
        let Some(req) = self.withdraw(key, Some(client)) else { return };
        if req.generation != self.agent.generation {
            return;
        }
        if matches!(req.msg.method(), "session/request_permission" | "elicitation/create") {
            let result = msg.result_as::<Value>().unwrap_or(Value::Null);
            let outcome = &result["outcome"];
            let answer =
                outcome["optionId"].as_str().or(outcome["outcome"].as_str()).or(result["action"].as_str());
            let session = req.session.as_deref().unwrap_or("-");
            let answer: String =
                zcode_shared::text::strip_controls(answer.unwrap_or("answered")).chars().take(64).collect();
            self.audit(client, "permission.answer", format!("session {session}: {answer}"));
            let by = match self.clients.get(&client) {
                Some(c) => match (&c.device, c.kind) {
                    (Some(d), _) => format!("device {d}"),
                    (None, super::ClientKind::Editor) => "editor".to_owned(),
                    (None, _) => "machine".to_owned(),
                },
                None => "a client".to_owned(),
            };
            let session = session.to_owned();
            self.requests.answers.note(super::answers::Answered { key, session, by, option: answer });
        }
        if req.msg.method() == "terminal/create" && self.clients.is_editor(client) {
            if let Some(tid) =
                msg.result_as::<Value>().and_then(|r| r["terminalId"].as_str().map(str::to_owned))
            {
                self.requests.set_terminal(tid, super::requests::TerminalOwner::Editor);
            }
        }
        self.agent.write(msg.line_with_id(Some(&req.upstream_id)));
    }

    /// Records in the audit trail that `client` did `action` on `target`: who, as the hub said
    /// (a paired device's id), else `editor` or `machine` (a local tool with the token).
    fn audit(&self, client: ClientId, action: &str, target: String) {
        let Some(c) = self.clients.get(&client) else { return };
        let (device, name): (&str, &'static str) = match (&c.device, c.kind) {
            (Some(d), _) => (d, "machine token"),
            (None, super::ClientKind::Editor) => ("editor", "editor"),
            (None, _) => ("machine", "machine token"),
        };
        let row = zcode_shared::store::devices::AuditRow {
            id: 0,
            at: i64::try_from(zcode_shared::time::now_ms()).unwrap_or(i64::MAX),
            device_id: device.to_owned(),
            device_name: String::new(),
            action: action.to_owned(),
            target,
            status: None,
        };
        self.journal.audit(row, name);
    }

    /// Fails every request held for a session (prompts queued, messages deferred).
    pub(super) fn fail_session_requests(&mut self, sid: &str, err: &RpcError) {
        let Some(s) = self.sessions.get_mut(sid) else { return };
        let queued: Vec<(ClientId, Id)> = s.queue.drain(..).map(|p| (p.client, p.id)).collect();
        let deferred: Vec<(ClientId, Option<Id>)> = s.deferred.drain(..).map(|(c, m)| (c, m.id)).collect();
        for (c, id) in queued {
            self.clients.reply(c, &id, Err(err.clone()));
        }
        for (c, id) in deferred {
            if let Some(id) = id {
                self.clients.reply(c, &id, Err(err.clone()));
            }
        }
    }

    /// Re-dispatches messages that were held (the agent or a session became ready).
    pub(super) fn redispatch(&mut self, held: Vec<(ClientId, RawMessage)>) {
        for (client, msg) in held {
            if self.clients.contains_key(&client) {
                self.on_frame(client, Ok(msg));
            }
        }
    }
}

/// Resume asks one client may have in flight (loads waiting for the agent).
const RESUME_ASKS: usize = 16;

/// The ACP protocol version the bridge speaks, to clients and to the agent.
pub(super) const PROTOCOL_VERSION: u64 = 1;

/// The contract's extension methods (REMOTE-CLIENTS.md). Each is also answered under its
/// `_`-prefixed spelling, the only one an ACP SDK's extension call can send.
const CONTRACT_EXTENSIONS: &[&str] = &["session/load_earlier", "account/usage_stats"];

/// The method a request names, with a contract extension's `_` spelling mapped to its
/// contract name; any other method as is (other `_` methods go to the agent untouched).
pub(super) fn contract_method(method: &str) -> &str {
    match method.strip_prefix('_') {
        Some(plain) if CONTRACT_EXTENSIONS.contains(&plain) => plain,
        _ => method,
    }
}

/// `session/load` requires `mcpServers` where `session/resume` does not (ACP v1): a resume
/// forwarded as a load (the agent offers only that) carries `[]` when the client sent none.
fn with_mcp_servers(msg: RawMessage) -> RawMessage {
    let mut params = msg.params_value();
    if !params.is_object() || !params["mcpServers"].is_null() {
        return msg;
    }
    params["mcpServers"] = json!([]);
    RawMessage { params: Some(jsonrpc::raw(&params)), ..msg }
}

/// A live session's `session/load` result: the agent's answer to new/load without its id.
pub(super) fn attach_base(attach_result: Option<&serde_json::value::RawValue>) -> Value {
    attach_result.and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or_else(|| json!({}))
}

pub(super) fn dirs_of(params: &Value) -> Vec<PathBuf> {
    params["additionalDirectories"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(PathBuf::from).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_extensions_answer_under_their_underscore_spelling_too() {
        assert_eq!(contract_method("session/load_earlier"), "session/load_earlier");
        assert_eq!(contract_method("_session/load_earlier"), "session/load_earlier");
        assert_eq!(contract_method("_account/usage_stats"), "account/usage_stats");
        // Other extensions stay extensions (the agent's), and only one `_` is taken.
        assert_eq!(contract_method("_demo/echo"), "_demo/echo");
        assert_eq!(contract_method("__session/load_earlier"), "__session/load_earlier");
        assert_eq!(contract_method("_session/new"), "_session/new");
    }
}
