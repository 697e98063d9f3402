//! A turn's end: when the agent answers a `session/prompt` (or fails it, or dies under it),
//! the router journals how the turn ended and tells every remote client attached to the
//! session at once (`_zcode/turn_end`, see `journal::turn_end`), so another device's Stop
//! button goes away without asking the status route, and a reload anywhere shows the stop.
//! The stdio editor gets it only when it asked (`Caps::turn_end`: the `chat` client).

use super::client::ClientKind;
use super::{ClientId, Router};
use crate::journal::turn_end;
use zcode_shared::store::TurnRecord;

/// A turn in flight: when its prompt went to the agent, and who sent it.
#[derive(Clone, Debug)]
pub struct TurnStart {
    /// Epoch ms.
    pub at: u64,
    /// `editor` or `remote:<client id>`.
    pub by: String,
}

impl Router {
    /// The session's running turn ended with `stop_reason` (`error`: with its message).
    pub(super) fn turn_ended(&mut self, sid: &str, stop_reason: String, error: Option<String>) {
        let Some(s) = self.sessions.get_mut(sid) else { return };
        let Some(start) = s.turn_start.take() else { return };
        let rec = TurnRecord {
            session_id: sid.to_owned(),
            turn: 0,
            stop_reason,
            error,
            started_at: start.at as i64,
            ended_at: zcode_shared::time::now_ms() as i64,
            prompted_by: start.by,
        };
        let line = turn_end::line(&rec, None);
        let told: Vec<ClientId> = s
            .attached
            .iter()
            .copied()
            .filter(|c| self.clients.get(c).is_some_and(|c| c.kind == ClientKind::Remote || c.caps.turn_end))
            .collect();
        self.journal.turn_end(rec);
        self.emit(sid, &line, told);
    }
}
