//! Replays from the journal: `session/load` (full, tail, or metadata only) and
//! `session/load_earlier`. While a replay is read, the client's queue is held, so its live
//! updates land after the replay batch: never lost, never duplicated, never above it. The
//! batch (the lines and the answer) is queued as one outbox item the client's writer feeds to
//! the socket as it drains, so a slow client takes a big replay at its own pace; live updates
//! queue behind it under the live limit.

use super::{ClientId, Event, Router};
use crate::journal::{MAX_LIMIT, ReadError, ReadMode, Slice};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use zcode_shared::jsonrpc::{self, Id, RawMessage, RpcError};

/// Default page size of `session/load_earlier`.
const EARLIER_DEFAULT: u64 = 50;

/// Reads `_meta.zcode.limit` of a `session/load`: absent → the full history; otherwise an
/// integer, clamped to [0, 500] (the contract: a negative or huge one is not an error).
pub fn tail_limit(params: &Value) -> Result<Option<u64>, RpcError> {
    let v = match params.pointer("/_meta/zcode/limit") {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let whole = v.as_f64().filter(|f| f.fract() == 0.0);
    match (v.as_u64(), v.as_i64(), whole) {
        (Some(n), _, _) => Ok(Some(n.min(MAX_LIMIT))),
        (None, Some(_), _) => Ok(Some(0)),
        (None, None, Some(f)) => Ok(Some(if f < 0.0 { 0 } else { MAX_LIMIT })),
        _ => Err(RpcError::invalid_params(format!("`_meta.zcode.limit` must be an integer, got {v}"))),
    }
}

impl Router {
    /// Attaches `client` to `sid` (for a load) and reads the slice; the answer comes back as
    /// [`Event::Replay`]. `base`: the load's result to add `replayMeta` to (`None`: load_earlier).
    pub(super) fn begin_replay(
        &mut self,
        client: ClientId,
        id: Id,
        sid: &str,
        mode: ReadMode,
        base: Option<Value>,
    ) {
        let Some(c) = self.clients.get_mut(&client) else { return };
        c.holds += 1;
        if base.is_some() {
            self.attach(client, sid);
        }
        let (tx, rx) = oneshot::channel();
        self.journal.read(
            sid,
            mode,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        let session = sid.to_owned();
        self.tasks.spawn(async move {
            let result = rx.await.unwrap_or(Err(ReadError::CursorExpired));
            Event::Replay { client, id, session, base, result }
        });
    }

    /// A replay slice is ready: send it, then the answer, then whatever was held meanwhile.
    pub(super) fn on_replay(
        &mut self,
        client: ClientId,
        id: &Id,
        sid: &str,
        base: Option<Value>,
        result: Result<Slice, ReadError>,
    ) {
        if !self.clients.contains_key(&client) {
            return;
        }
        let mut batch = Vec::new();
        let answer = match result {
            Ok(slice) => {
                if let (Some(title), Some(s)) = (slice.title, self.sessions.get_mut(sid)) {
                    s.title.get_or_insert(title);
                }
                let editor = self.clients.is_editor(client);
                batch = match editor {
                    true => slice
                        .lines
                        .into_iter()
                        .enumerate()
                        .filter(|(i, _)| !slice.remote_only.contains(i))
                        .map(|(_, line)| line)
                        .collect(),
                    false => slice.lines,
                };
                let mut result = base.unwrap_or_else(|| json!({}));
                if !result.is_object() {
                    result = json!({});
                }
                // Top level per the contract; mirrored under `_meta.zcode` because an SDK's
                // typed result keeps `_meta` and drops unknown top-level keys.
                if !result["_meta"].is_object() {
                    result["_meta"] = json!({});
                }
                if !result["_meta"]["zcode"].is_object() {
                    result["_meta"]["zcode"] = json!({});
                }
                result["_meta"]["zcode"]["replayMeta"] = slice.meta.clone();
                result["replayMeta"] = slice.meta;
                Ok(result)
            }
            Err(ReadError::CursorExpired) => Err(RpcError::invalid_params("cursor expired")),
            Err(ReadError::Store(e)) => {
                Err(RpcError::internal(format!("the journal could not be read: {e}")))
            }
        };
        let msg = match answer {
            Ok(v) => jsonrpc::response(id, v),
            Err(e) => jsonrpc::error_response(Some(id), &e),
        };
        batch.push(bytes::Bytes::from(msg.to_string()));
        self.clients.push_batch(client, batch);
        self.clients.release_hold(client);
    }

    /// `session/load_earlier {sessionId, before, limit}`: a page older than the cursor, for a
    /// session attached on this connection. Never goes to the agent.
    pub(super) fn on_load_earlier(&mut self, client: ClientId, id: Id, msg: &RawMessage) {
        let params = msg.params_value();
        let sid = match jsonrpc::required_str(&params, "sessionId") {
            Ok(s) => s.to_owned(),
            Err(e) => return self.clients.reply(client, &id, Err(e)),
        };
        let cursor = match jsonrpc::required_str(&params, "before") {
            Ok(c) => c.to_owned(),
            Err(e) => return self.clients.reply(client, &id, Err(e)),
        };
        let limit = match params.get("limit") {
            None | Some(Value::Null) => EARLIER_DEFAULT,
            Some(v) => match v.as_u64() {
                Some(n) => n.clamp(1, MAX_LIMIT),
                None => {
                    let e = RpcError::invalid_params(format!("`limit` must be a positive integer, got {v}"));
                    return self.clients.reply(client, &id, Err(e));
                }
            },
        };
        if !self.clients.get(&client).is_some_and(|c| c.sessions.contains(&sid)) {
            let e = RpcError::invalid_params(format!(
                "session {sid} is not attached on this connection: session/load it first"
            ));
            return self.clients.reply(client, &id, Err(e));
        }
        self.begin_replay(client, id, &sid, ReadMode::Earlier { cursor, limit }, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_limits_are_validated_and_clamped() {
        assert_eq!(tail_limit(&json!({})).unwrap(), None);
        assert_eq!(tail_limit(&json!({"_meta": {"zcode": {"limit": 7}}})).unwrap(), Some(7));
        assert_eq!(tail_limit(&json!({"_meta": {"zcode": {"limit": 9000}}})).unwrap(), Some(500));
        assert_eq!(tail_limit(&json!({"_meta": {"zcode": {"limit": 0}}})).unwrap(), Some(0));
        // Out of range is clamped, not refused.
        assert_eq!(tail_limit(&json!({"_meta": {"zcode": {"limit": -5}}})).unwrap(), Some(0));
        assert_eq!(tail_limit(&json!({"_meta": {"zcode": {"limit": i64::MIN}}})).unwrap(), Some(0));
        assert_eq!(tail_limit(&json!({"_meta": {"zcode": {"limit": u64::MAX}}})).unwrap(), Some(500));
        assert_eq!(tail_limit(&json!({"_meta": {"zcode": {"limit": 1e300}}})).unwrap(), Some(500));
        assert_eq!(tail_limit(&json!({"_meta": {"zcode": {"limit": -1e300}}})).unwrap(), Some(0));
        for bad in [json!("5"), json!(2.5), json!([1]), json!(true), json!({})] {
            assert!(tail_limit(&json!({"_meta": {"zcode": {"limit": bad}}})).is_err(), "{bad}");
        }
    }
}
