//! The Web Push routes (token-gated, like every `/api` route but registration):
//!
//! - `GET /api/push/vapid-public-key` → `{publicKey}`: the hub's VAPID public key, base64url
//!   (the uncompressed P-256 point), for `pushManager.subscribe({applicationServerKey})`.
//! - `POST /api/push/subscriptions` with `PushSubscription.toJSON()` (`{endpoint, keys:
//!   {p256dh, auth}}`) and an optional `notifyTurnEnd: bool` → 201 for a new device, 200 when
//!   the endpoint was known (its keys and flag are replaced); `{ok, notifyTurnEnd}`. The
//!   endpoint must be `https://`, or `http://` to a loopback address (a local push service).
//! - `DELETE /api/push/subscriptions` with `{endpoint}` → 200 `{ok, removed}`.
//! - `POST /api/push/mute` with `{endpoint, sessionId?, muted?}` → 200 `{ok, muted: [ids]}`: a
//!   session muted (`muted: true`) or followed again (`false`) on that device, or, without
//!   `sessionId`, the list only; 404 when the endpoint has no subscription here.
//!
//! A bad shape is a 400 whose text says what is wrong.

use crate::Hub;
use crate::http::{Resp, json, read_json, text};
use crate::push::subs::Subscription;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::{Value, json};

/// `GET /api/push/vapid-public-key`.
pub async fn vapid_public_key(hub: &Hub) -> Resp {
    match hub.account.push.public_key().await {
        Ok(k) => json(StatusCode::OK, &json!({"publicKey": k})),
        Err(e) => {
            tracing::error!("Web Push keys unavailable: {e}");
            text(StatusCode::INTERNAL_SERVER_ERROR, "Web Push keys unavailable: see the hub's log")
        }
    }
}

/// `POST /api/push/subscriptions` (a paired device's subscription is noted as its own: revoking
/// the device removes it).
pub async fn subscribe(req: Request<Incoming>, hub: &Hub, who: &crate::auth::Principal) -> Resp {
    let body = match read_json(req).await {
        Ok(b) => b,
        Err(e) => return e.response(),
    };
    let sub = match Subscription::parse(&body, zcode_shared::time::now_ms()) {
        Ok(s) => s,
        Err(why) => return text(StatusCode::BAD_REQUEST, why),
    };
    let (origin, turn_end) = (crate::push::subs::origin_of(&sub.endpoint), sub.notify_turn_end);
    let endpoint = sub.endpoint.clone();
    match hub.account.push.subscribe(sub).await {
        Ok(new) => {
            crate::devices::push_registered(hub, who, endpoint).await;
            tracing::info!(endpoint = %origin, notify_turn_end = turn_end, new, "push subscription stored");
            let status = if new { StatusCode::CREATED } else { StatusCode::OK };
            json(status, &json!({"ok": true, "notifyTurnEnd": turn_end}))
        }
        Err(e) => {
            tracing::error!("cannot store a push subscription: {e}");
            text(StatusCode::INTERNAL_SERVER_ERROR, "cannot store the subscription: see the hub's log")
        }
    }
}

/// `DELETE /api/push/subscriptions`.
pub async fn unsubscribe(req: Request<Incoming>, hub: &Hub) -> Resp {
    let body = match read_json(req).await {
        Ok(b) => b,
        Err(e) => return e.response(),
    };
    let Some(endpoint) = body.get("endpoint").and_then(Value::as_str).filter(|e| !e.is_empty()) else {
        return text(StatusCode::BAD_REQUEST, "endpoint (the subscription's URL) required");
    };
    match hub.account.push.unsubscribe(endpoint).await {
        Ok(removed) => json(StatusCode::OK, &json!({"ok": true, "removed": removed})),
        Err(e) => {
            tracing::error!("cannot remove a push subscription: {e}");
            text(StatusCode::INTERNAL_SERVER_ERROR, "cannot remove the subscription: see the hub's log")
        }
    }
}

/// `POST /api/push/mute`.
pub async fn mute(req: Request<Incoming>, hub: &Hub) -> Resp {
    let body = match read_json(req).await {
        Ok(b) => b,
        Err(e) => return e.response(),
    };
    let Some(endpoint) = body.get("endpoint").and_then(Value::as_str).filter(|e| !e.is_empty()) else {
        return text(StatusCode::BAD_REQUEST, "endpoint (the subscription's URL) required");
    };
    let change = match (body.get("sessionId"), body.get("muted")) {
        (None | Some(Value::Null), _) => None,
        (Some(Value::String(s)), Some(Value::Bool(m))) if zcode_shared::registration::valid_id(s) => {
            Some((s, *m))
        }
        (Some(Value::String(_)), Some(Value::Bool(_))) => {
            return text(StatusCode::BAD_REQUEST, "sessionId must be a session id");
        }
        _ => return text(StatusCode::BAD_REQUEST, "sessionId (a string) and muted (true or false) required"),
    };
    let push = &hub.account.push;
    let answer = match change {
        Some((sid, muted)) => push.mute(endpoint, sid, muted).await,
        None => push.muted(endpoint).await,
    };
    match answer {
        Ok(Some(list)) => json(StatusCode::OK, &json!({"ok": true, "muted": list})),
        Ok(None) => {
            text(StatusCode::NOT_FOUND, "no subscription for this endpoint: turn notifications on first")
        }
        Err(e) => {
            tracing::error!("cannot store a push mute: {e}");
            text(StatusCode::INTERNAL_SERVER_ERROR, "cannot store the mute: see the hub's log")
        }
    }
}
