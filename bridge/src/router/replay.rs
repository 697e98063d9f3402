//! Replays from the journal: `session/load` (full, tail, or metadata only) and
//! `session/load_earlier`. While a replay is read, the client's queue is held, so its live
//! updates land after the replay batch: never lost, never duplicated, never above it. The
//! batch (the lines and the answer) is queued as one outbox item the client's writer feeds to
//! the socket as it drains, so a slow client takes a big replay at its own pace; live updates
//! queue behind it under the live limit.
//!
//! A remote client's load that asks to resume by number (`_meta.zcode.afterSeq`, see
//! [`super::backlog`]) is served from the session's backlog instead, at once, when it holds
//! what follows; otherwise it gets the tail replay with `resumed: false` and the reason.

use super::backlog;
use super::client::ClientKind;
use super::{ClientId, Event, Router};
use crate::journal::{MAX_LIMIT, ReadError, ReadMode, Slice};
use bytes::Bytes;
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

/// A load's result with its `replayMeta`: top level per the contract, mirrored under
/// `_meta.zcode` because an SDK's typed result keeps `_meta` and drops unknown top-level keys.
fn with_replay_meta(base: Option<Value>, meta: Value) -> Value {
    let mut result = base.unwrap_or_else(|| json!({}));
    if !result.is_object() {
        result = json!({});
    }
    if !result["_meta"].is_object() {
        result["_meta"] = json!({});
    }
    if !result["_meta"]["zcode"].is_object() {
        result["_meta"]["zcode"] = json!({});
    }
    result["_meta"]["zcode"]["replayMeta"] = meta.clone();
    result["replayMeta"] = meta;
    result
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
        let ask = match c.resumes.iter().position(|(i, _)| *i == id) {
            Some(at) if base.is_some() => Some(c.resumes.swap_remove(at).1),
            _ => None,
        };
        let mut extra = serde_json::Map::new();
        if let (Some(s), ClientKind::Remote, true) = (self.sessions.get(sid), c.kind, base.is_some()) {
            let why = match ask.map(|r| s.backlog.after(&r)) {
                Some(Ok(lines)) => {
                    return self.resume(client, &id, sid, lines, base.unwrap_or_default());
                }
                Some(Err(why)) => Some(why),
                None => None,
            };
            extra = backlog::meta(&s.backlog);
            if let Some(why) = why {
                extra.insert("resumed".into(), Value::Bool(false));
                extra.insert("reason".into(), Value::from(why.reason()));
            }
        }
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
            Event::Replay { client, id, session, base, extra, result }
        });
    }

    /// A resume the backlog can serve: the messages after the client's number in order (an
    /// agent request only while it is still pending: it then counts as delivered), the
    /// answer, then the session's other pending requests and the live stream.
    fn resume(
        &mut self,
        client: ClientId,
        id: &Id,
        sid: &str,
        lines: Vec<(Bytes, Option<u64>)>,
        base: Value,
    ) {
        let mut batch = Vec::with_capacity(lines.len() + 1);
        for (line, request) in lines {
            let Some(key) = request else {
                batch.push(line);
                continue;
            };
            let Some(req) = self.requests.get_mut(&key) else { continue };
            let Some(c) = self.clients.get_mut(&client) else { return };
            if !c.caps.accepts(req.msg.method(), &req.msg.params_value()) {
                continue;
            }
            if !req.copies.contains(&client) {
                req.copies.push(client);
            }
            c.copies.insert(key);
            batch.push(line);
        }
        self.attach(client, sid);
        let mut meta = self.sessions.get(sid).map(|s| backlog::meta(&s.backlog)).unwrap_or_default();
        meta.insert("resumed".into(), Value::Bool(true));
        let answer = jsonrpc::response(id, with_replay_meta(Some(base), Value::Object(meta)));
        batch.push(Bytes::from(answer.to_string()));
        self.clients.push_batch(client, batch);
        self.clients.release_hold(client);
    }

    /// A replay slice is ready: send it, then the answer, then whatever was held meanwhile.
    pub(super) fn on_replay(
        &mut self,
        client: ClientId,
        id: &Id,
        sid: &str,
        base: Option<Value>,
        extra: serde_json::Map<String, Value>,
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
                let mut meta = slice.meta;
                if let Some(m) = meta.as_object_mut() {
                    m.extend(extra);
                }
                Ok(with_replay_meta(base, meta))
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
