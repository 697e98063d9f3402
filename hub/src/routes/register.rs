//! `POST /api/register` (also the heartbeat) and `POST /api/unregister`: what bridges send.
//!
//! The token is checked before a byte of body is read whenever the request head carries one
//! (`Authorization: Bearer`, the usual places): a wrong one is a 401 at once, the right one
//! allows a body of up to 1 MiB. A bridge may also carry the token in the JSON body (`token`):
//! then the body is read first, but at most 8 KiB of it (announced larger: 413 before reading,
//! telling the caller to use the header), so an unauthenticated caller never costs more.

use crate::Hub;
use crate::auth;
use crate::http::{Resp, json, read_json, read_preauth_json, text};
use crate::registry::Registration;
use hyper::Request;
use hyper::StatusCode;
use hyper::body::Incoming;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use zcode_shared::slots::Slot;

/// The body of an authorized request, or the answer refusing it: the head's token is checked
/// first; without one, the body's token after a bounded read.
async fn authorized_body(
    req: Request<Incoming>,
    hub: &Hub,
    peer: SocketAddr,
    slot: &Slot,
) -> Result<Value, Box<Resp>> {
    let addr = auth::client_addr(req.headers(), peer, hub.cfg.remote.client_address_header.as_deref());
    let head_token = auth::presented(req.headers(), req.uri()).map(|t| t.into_owned());
    if let Some(t) = head_token {
        hub.auth.check(Some(&t), addr).map_err(|r| Box::new(r.response()))?;
        super::admit(slot)?;
        return read_json(req).await.map_err(|e| Box::new(e.response()));
    }
    let body = read_preauth_json(req).await.map_err(|e| Box::new(e.response()))?;
    hub.auth.check(body.get("token").and_then(Value::as_str), addr).map_err(|r| Box::new(r.response()))?;
    super::admit(slot)?;
    Ok(body)
}

/// `POST /api/register`: records (or refreshes) an instance; `{ok: true}`.
pub async fn register(req: Request<Incoming>, hub: &Arc<Hub>, peer: SocketAddr, slot: &Slot) -> Resp {
    let body = match authorized_body(req, hub, peer, slot).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let reg = match Registration::parse(&body) {
        Ok(r) => r,
        Err(why) => return text(StatusCode::BAD_REQUEST, why),
    };
    let (id, port, origin, sessions) = (reg.id.clone(), reg.port, reg.origin, reg.sessions.len());
    let version = reg.version.clone();
    // Diffed under the same lock as the update, so two heartbeats racing cannot both see the
    // old status; the pushes are only queued.
    let (new, events) = {
        let mut registry = hub.bridges.registry();
        let before = registry.statuses(&id);
        let mut events = crate::push::transitions(&id, &reg.workspace, &before, &reg.sessions);
        let counts = registry.pending_counts(&id);
        events.extend(crate::push::asked_again(&id, &reg.workspace, &before, &counts, &reg.sessions));
        let new = registry.register(reg, Instant::now());
        let pending = registry.pending_requests(Instant::now());
        for e in &mut events {
            (e.port, e.pending) = (port, pending);
        }
        (new, hub.account.push.note(events))
    };
    for event in events {
        queue_push(hub, event);
    }
    if new {
        tracing::info!(instance = %id, port, origin, sessions, version = version.as_deref().unwrap_or("?"), "instance registered");
    } else {
        tracing::trace!(instance = %id, sessions, "heartbeat");
    }
    // A newer bridge means a newer binary was installed: the hub checks its own.
    let restarting = crate::upgrade::on_registration(hub, version.as_deref()).await;
    // `restarting` only when true: an older bridge (and the notes' shape) expects `{ok: true}`.
    match restarting {
        true => json(StatusCode::OK, &serde_json::json!({"ok": true, "restarting": true})),
        false => json(StatusCode::OK, &serde_json::json!({"ok": true})),
    }
}

/// Queues a push; a wait once its request is read from the bridge (for the notification's
/// details and its Allow and Deny). A bridge that lists nothing waiting on the session had it
/// answered meanwhile: the wait is dropped. One that does not answer gets the plain wait.
fn queue_push(hub: &Arc<Hub>, mut event: crate::push::Event) {
    if event.kind != crate::push::Kind::Waiting {
        return hub.account.push.enqueue(event);
    }
    let hub = hub.clone();
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + PUSH_DETAIL_BUDGET;
        match crate::attention::fetch(&hub, event.port, "/attention", deadline).await {
            Ok(v) => {
                let rows = v["pending"].as_array().map(Vec::as_slice).unwrap_or_default();
                let row = rows.iter().find(|r| r["sessionId"].as_str() == Some(event.session.as_str()));
                let Some(row) = row else {
                    return tracing::debug!(session = %event.session, "answered before its push: none sent");
                };
                event.request = Some(row.clone());
            }
            Err(e) => tracing::debug!(session = %event.session, "a wait pushed without its details: {e}"),
        }
        hub.account.push.enqueue(event);
    });
}

/// How long a wait's push waits for the bridge to say what is asked.
const PUSH_DETAIL_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// `POST /api/unregister {token, id}`: forgets an instance; `{ok: true}` (also when unknown).
pub async fn unregister(req: Request<Incoming>, hub: &Arc<Hub>, peer: SocketAddr, slot: &Slot) -> Resp {
    let body = match authorized_body(req, hub, peer, slot).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let id = match body.get("id") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return text(StatusCode::BAD_REQUEST, "id required"),
    };
    if hub.bridges.registry().unregister(&id, std::time::Instant::now()) {
        tracing::info!(instance = %id, "instance unregistered");
    }
    json(StatusCode::OK, &serde_json::json!({"ok": true}))
}
