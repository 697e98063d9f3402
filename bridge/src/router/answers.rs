//! A permission answered over HTTP (`POST /sessions/{sid}/permissions/{requestId}`, what a
//! notification's Allow and Deny send through the hub): the first answer wins, like any
//! client's; a request already answered is a 409 naming the winner, remembered for the last
//! [`REMEMBERED`] answers however they came (a client, a hook, this route).

use super::Router;
use serde_json::{Value, json};
use std::collections::VecDeque;
use tokio::sync::oneshot;
use zcode_shared::jsonrpc;

/// How many answers are remembered for the 409.
pub const REMEMBERED: usize = 256;

/// Who answered a request, and with what.
#[derive(Clone, Debug)]
pub struct Answered {
    /// The request's key (the id clients got it under).
    pub key: u64,
    /// Its session.
    pub session: String,
    /// `editor`, `hook`, `device <id>`, `machine` (the machine's token), `http`.
    pub by: String,
    /// The option chosen (or the outcome, for a cancel).
    pub option: String,
}

/// The last answers, newest last.
#[derive(Default)]
pub struct AnswerLog(VecDeque<Answered>);

impl AnswerLog {
    /// Notes an answer (the oldest goes past [`REMEMBERED`]).
    pub fn note(&mut self, a: Answered) {
        if self.0.len() == REMEMBERED {
            self.0.pop_front();
        }
        self.0.push_back(a);
    }

    /// The answer to request `key` of `session`, if it is remembered.
    pub fn find(&self, key: u64, session: &str) -> Option<&Answered> {
        self.0.iter().rev().find(|a| a.key == key && a.session == session)
    }
}

/// The HTTP answer: a status and a JSON body.
pub type AnswerReply = oneshot::Sender<(u16, Value)>;

impl Router {
    /// Answers permission `key` of `session` with `option` on behalf of `by` (the device the
    /// hub named, or `machine`), recorded in the audit trail here when `audit`.
    pub(super) fn on_http_answer(
        &mut self,
        session: &str,
        key: u64,
        option: &str,
        (by, audit): (String, bool),
        reply: AnswerReply,
    ) {
        let (status, body) = self.http_answer(session, key, option, by);
        if audit {
            let option: String = zcode_shared::text::strip_controls(option).chars().take(64).collect();
            let row = zcode_shared::store::devices::AuditRow {
                id: 0,
                at: i64::try_from(zcode_shared::time::now_ms()).unwrap_or(i64::MAX),
                device_id: "machine".to_owned(),
                device_name: String::new(),
                action: "permission.answer".to_owned(),
                target: format!("session {session} request {key}: {option}"),
                status: Some(i64::from(status)),
            };
            self.journal.audit(row, "machine token");
        }
        let _ = reply.send((status, body));
    }

    fn http_answer(&mut self, session: &str, key: u64, option: &str, by: String) -> (u16, Value) {
        let pending =
            self.requests.get(&key).filter(|r| r.session.as_deref() == Some(session) && r.broadcast);
        let Some(req) = pending else {
            return match self.requests.answers.find(key, session) {
                Some(a) => (
                    409,
                    json!({"error": format!("this request was already answered ({}, by {})", a.option, a.by),
                           "answeredBy": a.by, "optionId": a.option}),
                ),
                None => {
                    (404, json!({"error": format!("no permission request {key} waits on session {session}")}))
                }
            };
        };
        if req.msg.method() != "session/request_permission" {
            return (
                400,
                json!({"error": "this request is a question, not a permission: answer it in the app"}),
            );
        }
        let options = req.msg.params_value()["options"].as_array().cloned().unwrap_or_default();
        if !options.iter().any(|o| o["optionId"].as_str() == Some(option)) {
            let known: Vec<&str> = options.iter().filter_map(|o| o["optionId"].as_str()).collect();
            return (
                400,
                json!({"error": format!("unknown optionId {option:?}: one of {known:?} expected")}),
            );
        }
        let Some(req) = self.withdraw(key, None) else { return (404, json!({"error": "gone"})) };
        if req.generation == self.agent.generation {
            let answer = json!({"outcome": {"outcome": "selected", "optionId": option}});
            self.agent.answer(&req.upstream_id, Ok(&jsonrpc::raw(&answer)));
        }
        self.requests.answers.note(Answered {
            key,
            session: session.to_owned(),
            by,
            option: option.to_owned(),
        });
        (200, json!({"ok": true, "optionId": option}))
    }
}
