//! What a watch-scoped client ([`zcode_shared::scope::Scope::Watch`], the hub's word when it
//! dialled) may send: the reads in [`READS`] and `$/cancel_request` of its own requests. Any
//! other request, and any answer to one of the agent's requests (a permission, an
//! elicitation), gets the JSON-RPC error [`WATCH_ONLY_CODE`]; any other notification
//! (`session/cancel` among them) is dropped, and logged. An allowlist: a method added later
//! is refused to watchers until it is named here.

use super::from_client::contract_method;
use super::{ClientId, Router};
use zcode_shared::jsonrpc::{RawKind, RawMessage, RpcError};
use zcode_shared::scope::{Scope, WATCH_ONLY, WATCH_ONLY_CODE};

/// The requests a watcher may make (under their contract names: `_session/load_earlier`
/// counts as `session/load_earlier`).
const READS: &[&str] =
    &["initialize", "$/ping", "session/list", "session/load", "session/load_earlier", "account/usage_stats"];

/// What becomes of a watcher's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Handled as anyone's.
    Pass,
    /// Answered with the watch-only error.
    Refuse,
    /// A notification: dropped.
    Drop,
}

fn judge(msg: &RawMessage) -> Verdict {
    match msg.kind() {
        RawKind::Request if READS.contains(&contract_method(msg.method())) => Verdict::Pass,
        RawKind::Request | RawKind::Response => Verdict::Refuse,
        // Its own requests only (the router matches them by client).
        RawKind::Notification if msg.method() == "$/cancel_request" => Verdict::Pass,
        RawKind::Notification => Verdict::Drop,
    }
}

impl Router {
    /// Whether `msg` from `client` was refused (answered or dropped here) because the client
    /// may only watch; `false` for a full client, or a message a watcher may send.
    pub(super) fn watch_refuses(&mut self, client: ClientId, msg: &RawMessage) -> bool {
        if self.clients.get(&client).is_none_or(|c| c.scope != Scope::Watch) {
            return false;
        }
        let verdict = judge(msg);
        let (method, id) = (msg.method(), msg.id.as_ref().map(ToString::to_string));
        match (verdict, msg.kind()) {
            (Verdict::Pass, _) => return false,
            (_, RawKind::Response) => tracing::info!(id, "a watch-only client's answer to the agent refused"),
            (Verdict::Drop, _) => tracing::info!(method, "a watch-only client's notification dropped"),
            (Verdict::Refuse, _) => tracing::info!(method, "a watch-only client's request refused"),
        }
        if let (Verdict::Refuse, Some(id)) = (verdict, &msg.id) {
            self.clients.reply(client, id, Err(RpcError::new(WATCH_ONLY_CODE, WATCH_ONLY)));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(line: &str) -> RawMessage {
        RawMessage::parse(line).expect("a message")
    }

    #[test]
    fn reads_pass_writes_are_refused_and_notifications_but_own_cancels_dropped() {
        for m in READS.iter().chain(&["_session/load_earlier", "_account/usage_stats"]) {
            let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}","params":{{}}}}"#);
            assert_eq!(judge(&msg(&line)), Verdict::Pass, "{m}");
        }
        let writes = [
            "session/prompt",
            "session/new",
            "session/resume",
            "session/close",
            "session/set_mode",
            "session/set_model",
            "session/set_config_option",
            "authenticate",
            "_zcode/rename",
            "_demo/echo",
        ];
        for m in writes {
            let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{m}","params":{{}}}}"#);
            assert_eq!(judge(&msg(&line)), Verdict::Refuse, "{m}");
        }
        let answer =
            r#"{"jsonrpc":"2.0","id":3,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}"#;
        assert_eq!(judge(&msg(answer)), Verdict::Refuse);
        let cancel = r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#;
        assert_eq!(judge(&msg(cancel)), Verdict::Drop);
        let own = r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}"#;
        assert_eq!(judge(&msg(own)), Verdict::Pass);
    }
}
