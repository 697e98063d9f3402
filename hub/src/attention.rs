//! `GET /api/attention`: every permission request and elicitation waiting for a person, across
//! every live bridge, newest last: the inbox a phone opens first. Each bridge answers from its
//! router's memory (`GET /attention` on its loopback server, no agent RPC, at most 100 rows);
//! all bridges are asked at once within one 8 s budget, and a bridge that fails (dead, busy,
//! too slow, garbage) becomes an entry of `errors`, never a failed request.
//!
//! Answering stays on the session's WebSocket: a client attaches (a metadata-only
//! `session/load`, `_meta.zcode.limit` 0, is enough: the bridge hands an attaching client
//! every request pending on the session) and answers the id it receives, which is the
//! row's `requestId`.

use crate::Hub;
use crate::http::{Resp, json};
use crate::upstream;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zcode_shared::registration::Registration;

/// The whole read's budget.
pub const BUDGET: Duration = Duration::from_secs(8);
/// The largest answer read from one bridge.
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// `GET {path}` on the bridge at `port`, read as JSON by `deadline`; the error says why not,
/// for a person.
pub async fn fetch(
    hub: &Hub,
    port: u16,
    path: &'static str,
    deadline: tokio::time::Instant,
) -> Result<Value, String> {
    let ask = async {
        let mut req = Request::get(path).body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
        upstream::authorize(req.headers_mut(), port, &hub.auth.token.token());
        let resp = upstream::request(port, req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        if status == StatusCode::NOT_FOUND {
            return Err("the bridge is too old to answer this (restart it)".to_owned());
        }
        if !status.is_success() {
            return Err(format!("the bridge answered {}", status.as_u16()));
        }
        let body = Limited::new(resp.into_body(), MAX_ANSWER).collect().await.map_err(|e| e.to_string())?;
        serde_json::from_slice::<Value>(&body.to_bytes())
            .map_err(|_| "the bridge answered garbage".to_owned())
    };
    match tokio::time::timeout_at(deadline, ask).await {
        Ok(r) => r,
        Err(_) => Err("the bridge did not answer in time".to_owned()),
    }
}

/// Asks every live bridge for `path` at once, within [`BUDGET`]: each registration with its
/// answer.
pub async fn ask_all(hub: &Arc<Hub>, path: &'static str) -> Vec<(Registration, Result<Value, String>)> {
    let regs = hub.bridges.registry().registrations(Instant::now());
    let deadline = tokio::time::Instant::now() + BUDGET;
    let asks = regs.into_iter().map(|reg| async move {
        let answer = fetch(hub, reg.port, path, deadline).await;
        (reg, answer)
    });
    futures_util::future::join_all(asks).await
}

/// `GET /api/attention`: `{ok, pending: [...], errors: [...]}`.
pub async fn get(hub: &Arc<Hub>) -> Resp {
    json(StatusCode::OK, &body(hub).await)
}

/// The body of `GET /api/attention` (also part of `GET /api/home`).
pub async fn body(hub: &Arc<Hub>) -> Value {
    let answers = ask_all(hub, "/attention").await;
    let mut pending = Vec::new();
    let mut errors = Vec::new();
    for (reg, answer) in answers {
        let rows = answer.and_then(|v| match v["pending"].as_array() {
            Some(rows) => Ok(rows.clone()),
            None => Err("the bridge answered garbage".to_owned()),
        });
        match rows {
            Ok(rows) => pending.extend(rows.into_iter().filter(Value::is_object).map(|row| entry(&reg, row))),
            Err(error) => {
                tracing::debug!(instance = %reg.id, %error, "attention: a bridge did not answer");
                errors.push(json!({"instanceId": reg.id, "workspace": reg.workspace, "error": error}));
            }
        }
    }
    pending.sort_by_key(|p| p["since"].as_u64().unwrap_or(0));
    json!({"ok": true, "pending": pending, "errors": errors})
}

/// One inbox row: the bridge's, with where it lives (and the heartbeat's title as fallback).
fn entry(reg: &Registration, row: Value) -> Value {
    let sid = row["sessionId"].as_str().unwrap_or_default();
    let title = row["title"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| reg.sessions.iter().find(|s| s.session_id == sid).and_then(|s| s.title.clone()));
    json!({
        "instanceId": reg.id,
        "workspace": reg.workspace,
        "origin": reg.origin,
        "sessionId": sid,
        "title": title,
        "requestId": row["requestId"],
        "method": row["method"],
        "params": row["params"],
        "since": row["since"],
    })
}
