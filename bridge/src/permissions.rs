//! `POST /sessions/{sessionId}/permissions/{requestId}` `{"optionId"}` on the loopback server
//! (relayed by the hub as `/api/instances/{id}/sessions/…`): a permission answered without a
//! session attached, as a notification's Allow and Deny do. 200 `{ok, optionId}`; 409 `{error,
//! answeredBy, optionId}` when it was already answered; 404 when no such request waits; 400
//! for a bad body or an option the request does not offer. A watcher never gets here (the
//! server refuses its writes).

use crate::http::{Resp, full, text};
use crate::router::Event;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The largest body.
const BODY_MAX: usize = 4 * 1024;

/// The route, or `None` when `req` is not for it.
pub async fn route(req: Request<Incoming>, events: &mpsc::Sender<Event>) -> Result<Resp, Request<Incoming>> {
    let Some((sid, request)) = parse_path(req.uri().path()) else { return Err(req) };
    if req.method() != hyper::Method::POST {
        return Ok(answer(405, &json!({"error": "POST {\"optionId\"} answers a permission"})));
    }
    if !crate::files::valid_session_id(&sid) {
        return Ok(answer(400, &json!({"error": "invalid sessionId: a session id expected"})));
    }
    let Ok(request) = request.parse::<u64>() else {
        return Ok(answer(404, &json!({"error": format!("no permission request {request:?} here")})));
    };
    // The hub names the device and records the answer in the audit trail itself; a request
    // straight to this server (a local tool with the token) is recorded by the router.
    let device = zcode_shared::scope::device_from_headers(req.headers());
    let audit = device.is_none();
    let by = device
        .map_or_else(|| "machine".to_owned(), |d| if d == "machine" { d } else { format!("device {d}") });
    let option = match option_of(req).await {
        Ok(o) => o,
        Err(why) => return Ok(answer(400, &json!({"error": why}))),
    };
    let (tx, rx) = oneshot::channel();
    let ev = Event::HttpAnswer { session: sid, request, option, by, audit, reply: tx };
    if events.send(ev).await.is_err() {
        return Ok(text(StatusCode::SERVICE_UNAVAILABLE, "bridge shutting down"));
    }
    Ok(match tokio::time::timeout(Duration::from_secs(10), rx).await {
        Ok(Ok((status, body))) => answer(status, &body),
        _ => text(StatusCode::SERVICE_UNAVAILABLE, "bridge busy"),
    })
}

/// `(sessionId, requestId)` of `/sessions/{sessionId}/permissions/{requestId}`.
fn parse_path(path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix("/sessions/")?;
    let (sid, rest) = rest.split_once('/')?;
    let request = rest.strip_prefix("permissions/")?;
    (!request.is_empty() && !request.contains('/')).then(|| (sid.to_owned(), request.to_owned()))
}

/// The body's `optionId`; the error is the 400's text.
async fn option_of(req: Request<Incoming>) -> Result<String, String> {
    let body = http_body_util::Limited::new(req.into_body(), BODY_MAX)
        .collect()
        .await
        .map_err(|_| "body too large (4 KiB at most)".to_owned())?
        .to_bytes();
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("invalid JSON body: {e}"))?;
    match v.get("optionId").and_then(Value::as_str) {
        Some(o) if !o.is_empty() => Ok(o.to_owned()),
        _ => Err("optionId (one of the request's options) required".to_owned()),
    }
}

fn answer(status: u16, body: &Value) -> Resp {
    let mut r = Response::new(full(body.to_string()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_permission_path_is_taken() {
        assert_eq!(parse_path("/sessions/s1/permissions/7"), Some(("s1".into(), "7".into())));
        for other in ["/sessions/s1/close", "/sessions/s1/permissions/", "/sessions/s1/permissions/7/x", "/x"]
        {
            assert_eq!(parse_path(other), None, "{other}");
        }
    }
}
