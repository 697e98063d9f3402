//! Messages from the agent: answers to the bridge's requests, its own requests (permissions
//! and elicitations fanned out, fs/terminal routed to the editor or served locally), session
//! updates fanned out and recorded, and its death.

use super::agent::{Failure, LinkState, Pending, Purpose};
use super::client::{EDITOR, Init};
use super::requests::TerminalOwner;
use super::session::{Session, Upstream};
use super::{ClientId, Event, Router};
use crate::journal::ReadMode;
use bytes::Bytes;
use serde_json::{Value, json};
use zcode_shared::jsonrpc::{self, Id, ParseError, RawKind, RawMessage, RpcError};

impl Router {
    pub(super) fn on_agent_frame(&mut self, generation: u64, msg: Result<RawMessage, ParseError>) {
        if generation != self.agent.generation {
            return;
        }
        let msg = match msg {
            Ok(m) => m,
            Err(e) => return tracing::warn!("the agent wrote something that is not JSON-RPC: {e}"),
        };
        match msg.kind() {
            RawKind::Response => self.on_agent_response(msg),
            RawKind::Request => self.on_agent_request(msg),
            RawKind::Notification => self.on_agent_notification(msg),
        }
    }

    fn on_agent_response(&mut self, msg: RawMessage) {
        let n = match &msg.id {
            Some(Id::Number(n)) => n.parse::<u64>().ok(),
            _ => None,
        };
        let Some(pending) = n.and_then(|n| self.agent.pending.remove(&n)) else {
            return tracing::debug!(id = ?msg.id, "agent answered a request the bridge did not send: dropped");
        };
        let ok = msg.error.is_none();
        self.usage_answered(n, &pending, &msg);
        match pending.purpose {
            Purpose::Initialize => self.on_agent_initialized(&msg),
            Purpose::Forward => self.answer_client(pending.client, &msg),
            Purpose::List => self.on_listed(pending.client, msg),
            Purpose::NewSession { cwd, dirs, config } => {
                let sid = msg.result_as::<Value>().and_then(|r| r["sessionId"].as_str().map(str::to_owned));
                if let (true, Some(sid)) = (ok, sid) {
                    let mut s = Session::new(sid.clone(), cwd, dirs, Upstream::Live(self.agent.generation));
                    s.fresh = true;
                    s.attach_result = attach_result(&msg);
                    self.sessions.insert(sid.clone(), s);
                    self.record_meta(&sid, pending.client.as_ref().map(|(c, _)| *c), true);
                    if let Some((c, _)) = &pending.client {
                        self.attach(*c, &sid);
                    }
                    self.answer_client(pending.client, &msg);
                    let result = msg.result_as::<Value>().unwrap_or_default();
                    self.settings_session_started(&sid, &result, &config);
                    self.flush_orphans(&sid);
                    self.hook_session_start(&sid, &pending.method);
                } else {
                    self.answer_client(pending.client, &msg);
                }
            }
            Purpose::Load { session, mode } => {
                self.on_loaded(&session, pending.client, mode, &msg);
                if ok {
                    self.hook_session_start(&session, &pending.method);
                }
            }
            Purpose::Reattach { session } => self.on_reattached(&session, &msg),
            Purpose::Prompt { session } => {
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.running = false;
                    s.updated_at = zcode_shared::time::now_ms();
                }
                let (why, error) = match &msg.error {
                    None => {
                        let r = msg.result_as::<Value>().unwrap_or_default();
                        (r["stopReason"].as_str().unwrap_or("unknown").to_owned(), None)
                    }
                    Some(e) => {
                        let e: Value = serde_json::from_str(e.get()).unwrap_or_default();
                        ("error".to_owned(), Some(e["message"].as_str().unwrap_or("error").to_owned()))
                    }
                };
                // The record first: a client that prompted may start its next turn on the
                // answer, and the record must not land on that one.
                self.turn_ended(&session, why, error);
                self.answer_client(pending.client, &msg);
                self.hook_stop(&session, &msg);
                self.pump(&session);
            }
        }
    }

    /// Sends the agent's answer to the client that asked, under the client's own id.
    pub(super) fn answer_client(&mut self, client: Option<(ClientId, Id)>, msg: &RawMessage) {
        if let Some((c, id)) = client {
            self.clients.send_to(c, Bytes::from(msg.line_with_id(Some(&id))));
        }
    }

    fn on_agent_initialized(&mut self, msg: &RawMessage) {
        let Some(agent) = msg.result_as::<Value>().filter(|_| msg.error.is_none()) else {
            let detail =
                RpcError::from_response(&serde_json::from_str(&msg.to_line()).unwrap_or(Value::Null))
                    .map_or_else(
                        || "an unreadable answer".to_owned(),
                        |e| zcode_shared::text::strip_controls(&e.message),
                    );
            let failure = self.agent.fail(&format!("refused initialize: {detail}"));
            let pending = self.agent.kill();
            self.fail_pending(pending, &failure);
            return self.agent_down(&failure);
        };
        if agent["protocolVersion"].as_u64() != Some(super::from_client::PROTOCOL_VERSION) {
            let reason = format!(
                "answered initialize with protocolVersion {}, but this bridge speaks only protocolVersion {}",
                agent["protocolVersion"],
                super::from_client::PROTOCOL_VERSION
            );
            let failure = self.agent.fail(&reason);
            let pending = self.agent.kill();
            self.fail_pending(pending, &failure);
            return self.agent_down(&failure);
        }
        let mut for_clients = agent.clone();
        let caps = &mut for_clients["agentCapabilities"];
        if !caps.is_object() {
            *caps = json!({});
        }
        caps["loadSession"] = json!(true);
        if !caps["_meta"].is_object() {
            caps["_meta"] = json!({});
        }
        if !caps["_meta"]["zcode"].is_object() {
            caps["_meta"]["zcode"] = json!({});
        }
        caps["_meta"]["zcode"]["fs"] = json!(true);
        self.agent.set_ready();
        self.settings_agent_ready(&agent);
        let for_clients = jsonrpc::raw(&for_clients);
        for (c, id) in self.clients.take_waiting_inits(Init::Done) {
            self.clients.reply_raw(c, &id, &for_clients);
        }
        self.agent.state = LinkState::Ready { for_clients, agent };
        let held = std::mem::take(&mut self.agent.deferred);
        self.redispatch(held);
        let busy: Vec<String> =
            self.sessions.values().filter(|s| !s.queue.is_empty()).map(|s| s.id.clone()).collect();
        for sid in busy {
            self.pump(&sid);
        }
    }

    fn on_loaded(&mut self, sid: &str, client: Option<(ClientId, Id)>, mode: ReadMode, msg: &RawMessage) {
        self.journal.end_seed(sid);
        if msg.error.is_some() {
            // Not loadable: forget it, and pass the agent's error on to everyone who asked.
            let s = self.sessions.remove(sid);
            self.answer_client(client, msg);
            if let Some(s) = s {
                for (c, id, _) in s.waiting_loads {
                    self.clients.send_to(c, Bytes::from(msg.line_with_id(Some(&id))));
                }
                let err =
                    RpcError::new(jsonrpc::RESOURCE_NOT_FOUND, format!("session {sid} could not be loaded"));
                for (c, m) in s.deferred {
                    if let Some(id) = m.id {
                        self.clients.reply(c, &id, Err(err.clone()));
                    }
                }
            }
            return;
        }
        let generation = self.agent.generation;
        let Some(s) = self.sessions.get_mut(sid) else { return };
        s.upstream = Upstream::Live(generation);
        s.loader = None;
        s.attach_result = attach_result(msg);
        let waiting = std::mem::take(&mut s.waiting_loads);
        let held = std::mem::take(&mut s.deferred);
        let base = super::from_client::attach_base(s.attach_result.as_deref());
        // Everyone who asked is served from the journal: the agent's replay seeded it (or was
        // dropped because the journal already had the history).
        if let Some((c, id)) = client {
            self.begin_replay(c, id, sid, mode, Some(base.clone()));
        }
        for (c, id, mode) in waiting {
            self.begin_replay(c, id, sid, mode, Some(base.clone()));
        }
        self.flush_orphans(sid);
        self.redispatch(held);
        self.pump(sid);
    }

    fn on_reattached(&mut self, sid: &str, msg: &RawMessage) {
        let generation = self.agent.generation;
        let Some(s) = self.sessions.get_mut(sid) else { return };
        if msg.error.is_some() {
            s.upstream = Upstream::Live(0);
            let detail = msg.error.as_ref().map_or("", |e| e.get()).to_owned();
            let err = RpcError::internal(format!(
                "the agent restarted and could not reload session {sid}: {detail}"
            ));
            return self.fail_session_requests(sid, &err);
        }
        s.upstream = Upstream::Live(generation);
        let held = std::mem::take(&mut s.deferred);
        self.redispatch(held);
        self.pump(sid);
    }

    fn on_agent_request(&mut self, msg: RawMessage) {
        let Some(upstream_id) = msg.id.clone() else { return };
        let method = msg.method().to_owned();
        let session = msg.session_id();
        if method.starts_with("fs/") || method.starts_with("terminal/") {
            return self.route_client_service(upstream_id, session, msg);
        }
        let params = msg.params_value();
        let elicitation = method.starts_with("elicitation/");
        // Who may be sent it: an elicitation only to clients that advertised its mode.
        let accepts =
            |r: &Router, c: &ClientId| r.clients.get(c).is_some_and(|c| c.caps.accepts(&method, &params));
        let known = session.as_ref().filter(|s| self.sessions.contains_key(*s));
        let targets: Vec<ClientId> = match known.and_then(|s| self.sessions.get(s)) {
            Some(s) => s.attached.iter().copied().filter(|c| accepts(self, c)).collect(),
            // Not about a session we know: the editor if it is there, else nobody can answer.
            None if self.clients.get(&EDITOR).is_some_and(|c| c.init == Init::Done) => {
                [EDITOR].into_iter().filter(|c| accepts(self, c)).collect()
            }
            None if !elicitation => {
                let err = RpcError::method_not_found(&method);
                return self.agent.answer(&upstream_id, Err(error_value(&err)));
            }
            None => Vec::new(),
        };
        if elicitation && targets.is_empty() {
            // No attached client can show it: answered as ACP has a client that does not
            // take it up answer, never left waiting.
            tracing::debug!(?session, "no attached client advertised this elicitation's mode: declined");
            return self.agent.answer(&upstream_id, Ok(&jsonrpc::raw(&json!({"action": "decline"}))));
        }
        let key = self.requests.insert(upstream_id, self.agent.generation, session.clone(), msg, true);
        if let Some(s) = known.and_then(|s| self.sessions.get_mut(s)) {
            s.requests.push(key);
            if let Some(req) = self.requests.get_mut(&key) {
                let line = req.msg.line_with_id(Some(&Id::from(key)));
                req.numbered = Some(s.backlog.number(line.as_bytes(), Some(key)));
            }
        }
        // Nobody attached: it waits on the session for the next client that attaches.
        for c in targets {
            self.deliver_copy(key, c);
        }
        if method == "session/request_permission" {
            self.hook_permission(key);
        }
    }

    /// fs/* and terminal/*: the editor serves them when it advertised the capability and is
    /// attached to the session; otherwise the bridge does, confined to the session's roots.
    fn route_client_service(&mut self, upstream_id: Id, session: Option<String>, msg: RawMessage) {
        let method = msg.method().to_owned();
        let params = msg.params_value();
        let owner = match params["terminalId"].as_str() {
            Some(tid) if method != "terminal/create" => self.requests.terminal(tid),
            _ => None,
        };
        let editor_can = self.clients.get(&EDITOR).is_some_and(|c| {
            c.init == Init::Done
                && c.caps.serves(&method)
                && session.as_ref().is_some_and(|s| c.sessions.contains(s))
        });
        let to_editor = match owner {
            Some(TerminalOwner::Editor) => true,
            Some(TerminalOwner::Local) => false,
            None => editor_can,
        };
        if to_editor && self.clients.contains_key(&EDITOR) {
            let key = self.requests.insert(upstream_id, self.agent.generation, session, msg, false);
            let line = Bytes::from(self.requests[&key].msg.line_with_id(Some(&Id::from(key))));
            if let Some(req) = self.requests.get_mut(&key) {
                req.copies.push(EDITOR);
            }
            if let Some(c) = self.clients.get_mut(&EDITOR) {
                c.copies.insert(key);
            }
            return self.clients.send_to(EDITOR, line);
        }
        let Some(roots) = session.as_ref().and_then(|s| self.sessions.get(s)).map(Session::roots) else {
            let err = RpcError::new(jsonrpc::RESOURCE_NOT_FOUND, format!("{method}: unknown session"));
            return self.agent.answer(&upstream_id, Err(error_value(&err)));
        };
        let generation = self.agent.generation;
        let local = self.requests.serve_locally(upstream_id.clone());
        self.tasks.spawn(async move {
            let result = local.handle(&method, params, roots).await;
            Event::Local { generation, id: upstream_id, method, result }
        });
    }

    pub(super) fn on_local_done(
        &mut self,
        generation: u64,
        id: &Id,
        method: &str,
        result: Result<Value, RpcError>,
    ) {
        if generation != self.agent.generation || !self.requests.local_done(id) {
            return;
        }
        if let (Ok(r), "terminal/create") = (&result, method) {
            if let Some(tid) = r["terminalId"].as_str() {
                self.requests.set_terminal(tid.to_owned(), TerminalOwner::Local);
            }
        }
        match result {
            Ok(v) => {
                let raw = jsonrpc::raw(&v);
                self.agent.answer(id, Ok(&raw));
            }
            Err(e) => self.agent.answer(id, Err(error_value(&e))),
        }
    }

    fn on_agent_notification(&mut self, msg: RawMessage) {
        match msg.method() {
            "session/update" => self.on_session_update(msg),
            "$/cancel_request" => {
                let Some(target) = msg.params_value().get("requestId").and_then(Id::from_value) else {
                    return;
                };
                let key = self.requests.find(&target, self.agent.generation);
                let withdrawn = key.and_then(|k| self.withdraw(k, None)).is_some();
                let local = self.requests.local_done(&target);
                if withdrawn || local {
                    let err = RpcError::new(jsonrpc::REQUEST_CANCELLED, "request cancelled");
                    self.agent.answer(&target, Err(error_value(&err)));
                }
            }
            _ => {
                // Anything else (elicitation/complete, extensions): to the session's clients, or
                // to every initialized client when it names no session we know.
                // An elicitation notification only to clients that advertised elicitations.
                let line = Bytes::from(msg.to_line());
                let (method, params) = (msg.method(), msg.params_value());
                let sid = msg.session_id().filter(|s| self.sessions.contains_key(s));
                let targets: Vec<ClientId> = match sid.as_ref().and_then(|s| self.sessions.get(s)) {
                    Some(s) => s.attached.iter().copied().collect(),
                    None => {
                        self.clients.iter().filter(|(_, c)| c.init == Init::Done).map(|(id, _)| *id).collect()
                    }
                };
                let targets: Vec<ClientId> = targets
                    .into_iter()
                    .filter(|c| self.clients.get(c).is_some_and(|c| c.caps.accepts(method, &params)))
                    .collect();
                match sid {
                    Some(sid) => self.emit(&sid, &line, targets),
                    None => self.clients.send_all(targets, &line),
                }
            }
        }
    }

    fn on_session_update(&mut self, msg: RawMessage) {
        let Some(sid) = msg.session_id() else { return };
        let line = Bytes::from(msg.to_line());
        let Some(s) = self.sessions.get_mut(&sid) else {
            // Updates can arrive before the answer that tells us the session (e.g. commands
            // sent right after session/new): hold a bounded number until it appears.
            return self.sessions.hold_orphan(sid, line);
        };
        match s.upstream {
            // The agent replays a session we already hold: we have it, drop the copy.
            Upstream::Reattaching => {}
            // The agent's replay of a session being loaded seeds the journal (when it has
            // nothing yet); the loader is then served from the journal.
            Upstream::Loading => {
                self.sessions.note_title(&sid, &msg);
                self.journal.update(&sid, line, true);
            }
            Upstream::Live(_) => {
                self.sessions.note_title(&sid, &msg);
                self.usage_update(&sid, &msg);
                self.record(&sid, &line);
                self.fan_out(&sid, &line, None);
                self.hook_update(&sid, &msg, &line);
            }
        }
    }

    fn flush_orphans(&mut self, sid: &str) {
        for line in self.sessions.take_orphans(sid) {
            self.record(sid, &line);
            self.fan_out(sid, &line, None);
        }
    }

    pub(super) fn on_agent_exited(&mut self, generation: u64, reason: &str) {
        if generation != self.agent.generation {
            return;
        }
        let failure = self.agent.fail(reason);
        let pending = self.agent.exited();
        self.fail_pending(pending, &failure);
        self.agent_down(&failure);
    }

    /// Answers every request that was in flight with an error naming the cause.
    pub(super) fn fail_pending(&mut self, pending: Vec<Pending>, failure: &Failure) {
        for p in pending {
            if let Purpose::Prompt { session } = &p.purpose {
                if let Some(s) = self.sessions.get_mut(session) {
                    s.running = false;
                }
                let why = failure.with(" during the turn");
                self.turn_ended(session, "error".into(), Some(why));
            }
            if let Some((c, id)) = p.client {
                let err = RpcError::internal(
                    failure.with(&format!(" while handling {}; it restarts on the next request", p.method)),
                );
                self.clients.reply(c, &id, Err(err));
            }
        }
    }

    /// The agent is gone (or never came up): fail what waited for it, withdraw its requests,
    /// and mark every session for a reload into the next agent.
    pub(super) fn agent_down(&mut self, failure: &Failure) {
        let err = RpcError::internal(failure.with("; it restarts on the next request"));
        for (c, id) in self.clients.take_waiting_inits(Init::No) {
            self.clients.reply(c, &id, Err(err.clone()));
        }
        let held = std::mem::take(&mut self.agent.deferred);
        for (c, m) in held {
            if let Some(id) = m.id {
                self.clients.reply(c, &id, Err(err.clone()));
            }
        }
        let keys: Vec<u64> = self.requests.keys().copied().collect();
        for key in keys {
            self.withdraw(key, None);
        }
        self.requests.agent_gone();
        let sids: Vec<String> = self.sessions.keys().cloned().collect();
        for sid in sids {
            self.fail_session_requests(&sid, &err);
            let Some(s) = self.sessions.get_mut(&sid) else { continue };
            s.running = false;
            match s.upstream {
                Upstream::Loading => {
                    let s = self.sessions.remove(&sid);
                    for (c, id, _) in s.map(|s| s.waiting_loads).unwrap_or_default() {
                        self.clients.reply(c, &id, Err(err.clone()));
                    }
                }
                Upstream::Reattaching => s.upstream = Upstream::Live(0),
                Upstream::Live(_) => {}
            }
        }
    }
}

/// The answer to session/new or session/load without its `sessionId`: what a later client
/// attaching to the live session gets as its `session/load` result.
fn attach_result(msg: &RawMessage) -> Option<Box<serde_json::value::RawValue>> {
    let mut v = msg.result_as::<Value>()?;
    if let Some(o) = v.as_object_mut() {
        o.remove("sessionId");
    }
    Some(jsonrpc::raw(&v))
}

fn error_value(e: &RpcError) -> Value {
    let mut v = json!({"code": e.code, "message": e.message});
    if let Some(d) = &e.data {
        v["data"] = d.clone();
    }
    v
}
