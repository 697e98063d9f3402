//! The router's side of usage recording ([`crate::usage`]): what it passes the tracker, each
//! from a one-line hook where requests go upstream, answers come back and updates fan out.

use super::Router;
use super::agent::{Pending, Purpose};
use zcode_shared::jsonrpc::RawMessage;

impl Router {
    /// A client request forwarded upstream under bridge id `id`.
    pub(super) fn usage_sent(&mut self, id: u64, msg: &RawMessage) {
        self.usage.sent(id, msg);
    }

    /// The agent answered bridge request `id`.
    pub(super) fn usage_answered(&mut self, id: Option<u64>, pending: &Pending, msg: &RawMessage) {
        let Some(id) = id else { return };
        let (session, prompt) = match &pending.purpose {
            Purpose::Load { session, .. } | Purpose::Reattach { session } => (Some(session.as_str()), false),
            Purpose::Prompt { session } => (Some(session.as_str()), true),
            Purpose::NewSession { .. } | Purpose::Forward => (None, false),
            Purpose::Initialize | Purpose::List => return,
        };
        self.usage.answered(id, session, prompt, msg);
    }

    /// A live `session/update` of `sid`.
    pub(super) fn usage_update(&mut self, sid: &str, msg: &RawMessage) {
        let running = self.sessions.get(sid).is_some_and(|s| s.running);
        self.usage.update(sid, msg, running);
    }
}
