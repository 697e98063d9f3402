//! The turn-end record on the wire: `_zcode/turn_end`, an ACP extension notification (a
//! `_`-prefixed method, which ACP peers ignore when they do not know it) that tells a remote
//! client how a turn of a session ended, whoever prompted it. Sent live to every remote client
//! attached to the session when the agent answers (or fails) the prompt, and replayed by
//! `session/load` / `load_earlier` right after the last message of each finished turn, so a
//! reloading device sees "stopped: cancelled" under a turn another device cancelled.
//!
//! Not sent to the editor on stdio unless it asks (`_meta.zcode.turnEnd` in its client
//! capabilities, as `zcode-acp chat` does, to end another device's turn on screen): it has its
//! own prompts' answers, and an editor that logs unknown notifications (or an older SDK that
//! answers them with an error) would gain nothing from it. Replays never carry it to stdio.

use bytes::Bytes;
use serde_json::{Value, json};
use zcode_shared::store::TurnRecord;

/// The notification's method.
pub const METHOD: &str = "_zcode/turn_end";

/// The notification for `rec`; `turn` (the journal's absolute turn number) only when known
/// (a replay; the live one is sent before the journal numbered it).
pub fn line(rec: &TurnRecord, turn: Option<i64>) -> Bytes {
    let mut params = json!({
        "sessionId": rec.session_id,
        "stopReason": rec.stop_reason,
        "startedAt": rec.started_at,
        "endedAt": rec.ended_at,
        "promptedBy": rec.prompted_by,
    });
    if let Some(e) = &rec.error {
        params["error"] = Value::from(e.as_str());
    }
    if let Some(t) = turn {
        params["turn"] = Value::from(t);
    }
    Bytes::from(zcode_shared::jsonrpc::notification_line(METHOD, &params.to_string()))
}
