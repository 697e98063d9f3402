//! `POST /api/register` (also the heartbeat) and `POST /api/unregister`: what bridges send.
//! The token travels in the JSON body (a Bearer header is accepted too); the body is read
//! under the 1 MiB cap first, so a bad token and a bad body are both answered cheaply.

use crate::Hub;
use crate::auth;
use crate::http::{Resp, json, read_json, text};
use crate::registry::Registration;
use hyper::Request;
use hyper::StatusCode;
use hyper::body::Incoming;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Reads the body and checks the token in it (unless the header already carried the right
/// one): the body, or the answer refusing it.
async fn authorized_body(req: Request<Incoming>, hub: &Hub, peer: SocketAddr) -> Result<Value, Box<Resp>> {
    let header_ok = auth::valid(hub, auth::presented(req.headers(), req.uri()).as_deref());
    let addr = auth::client_addr(req.headers(), peer);
    let body = read_json(req).await.map_err(|e| Box::new(e.response()))?;
    if !header_ok {
        auth::check(hub, body.get("token").and_then(Value::as_str), addr)
            .map_err(|r| Box::new(r.response()))?;
    }
    Ok(body)
}

/// `POST /api/register`: records (or refreshes) an instance; `{ok: true}`.
pub async fn register(req: Request<Incoming>, hub: &Arc<Hub>, peer: SocketAddr) -> Resp {
    let body = match authorized_body(req, hub, peer).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let reg = match Registration::parse(&body) {
        Ok(r) => r,
        Err(why) => return text(StatusCode::BAD_REQUEST, why),
    };
    let (id, port, origin, sessions) = (reg.id.clone(), reg.port, reg.origin, reg.sessions.len());
    if hub.registry().register(reg, Instant::now()) {
        tracing::info!(instance = %id, port, origin, sessions, "instance registered");
    } else {
        tracing::trace!(instance = %id, sessions, "heartbeat");
    }
    json(StatusCode::OK, &serde_json::json!({"ok": true}))
}

/// `POST /api/unregister {token, id}`: forgets an instance; `{ok: true}` (also when unknown).
pub async fn unregister(req: Request<Incoming>, hub: &Arc<Hub>, peer: SocketAddr) -> Resp {
    let body = match authorized_body(req, hub, peer).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let id = match body.get("id") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return text(StatusCode::BAD_REQUEST, "id required"),
    };
    if hub.registry().unregister(&id) {
        tracing::info!(instance = %id, "instance unregistered");
    }
    json(StatusCode::OK, &serde_json::json!({"ok": true}))
}
