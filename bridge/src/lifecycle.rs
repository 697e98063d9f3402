//! The session lifecycle routes of the loopback server (relayed by the hub as
//! `/api/instances/{id}/sessions/{sessionId}/{close,rename,delete}`): parse and bound the
//! request here, let the router decide.

use crate::http::{Resp, full, text};
use crate::router::{Event, Lifecycle};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The largest rename body.
const RENAME_BODY_MAX: usize = 4 * 1024;

/// `POST /sessions/{sessionId}/{action}`; `None` when the path is not a lifecycle route.
pub async fn route(req: Request<Incoming>, events: &mpsc::Sender<Event>) -> Option<Resp> {
    let path = req.uri().path().to_owned();
    let rest = path.strip_prefix("/sessions/")?;
    let (sid, action) = rest.split_once('/')?;
    if !["close", "rename", "delete"].contains(&action) {
        return None;
    }
    if req.method() != hyper::Method::POST {
        return Some(text(StatusCode::NOT_FOUND, "not found"));
    }
    if !crate::files::valid_session_id(sid) {
        return Some(text(StatusCode::BAD_REQUEST, "invalid sessionId — session id expected"));
    }
    let op = match action {
        "close" => Lifecycle::Close,
        "delete" => Lifecycle::Delete,
        _ => match rename_title(req).await {
            Ok(t) => Lifecycle::Rename(t),
            Err(resp) => return Some(resp),
        },
    };
    let (tx, rx) = oneshot::channel();
    if events.send(Event::Lifecycle { session: sid.to_owned(), op, reply: tx }).await.is_err() {
        return Some(text(StatusCode::SERVICE_UNAVAILABLE, "bridge shutting down"));
    }
    Some(match tokio::time::timeout(Duration::from_secs(10), rx).await {
        Ok(Ok(Ok(v))) => {
            let mut r = Response::new(full(v.to_string()));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        Ok(Ok(Err((status, msg)))) => {
            text(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), msg)
        }
        _ => text(StatusCode::SERVICE_UNAVAILABLE, "bridge busy"),
    })
}

/// Reads `{"title": …}`, at most 4 KiB.
async fn rename_title(req: Request<Incoming>) -> Result<String, Resp> {
    let too_big = || text(StatusCode::BAD_REQUEST, "body too large (4 KiB at most)");
    if req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .is_some_and(|n| n > RENAME_BODY_MAX)
    {
        return Err(too_big());
    }
    let limited = http_body_util::Limited::new(req.into_body(), RENAME_BODY_MAX);
    let body = match limited.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Err(too_big()),
    };
    let v: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| text(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}")))?;
    match v.get("title").and_then(serde_json::Value::as_str) {
        Some(t) if !t.trim().is_empty() => Ok(t.to_owned()),
        _ => Err(text(StatusCode::BAD_REQUEST, "title required")),
    }
}
